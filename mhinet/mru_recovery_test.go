package mhinet_test

import (
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhi"
	"github.com/gomhi/gomhi/mhi/ep"
	"github.com/gomhi/gomhi/mhinet"
)

// TestMRUChangeDuringRecovery races MRU changes against SYS_ERR recovery
// (as FuzzWrite in sysfs/fusefs did through the attribute tree, with a SoC
// reset followed by an MRU write). A change that fails must leave the MRU
// as it was, and whatever happened, once the device has recovered the
// receive ring is refilled and traffic flows: a failed change must not
// leave the downlink stopped or refilling disabled.
func TestMRUChangeDuringRecovery(t *testing.T) {
	r := newIPRig(t, "telit-fn990", ep.IPDataConfig{Format: ep.FormatNTB16}, mhinet.Config{Format: mhinet.FormatMBIM, MRU: 3500})
	// A command the device loses to the SYS_ERR waits this long.
	if err := r.mock.Controller.SetTimeout(2 * time.Second); err != nil {
		t.Fatal(err)
	}
	recovered := make(chan struct{}, 16)
	r.mock.Controller.OnStatus(func(ev mhi.StatusEvent) {
		if ev.Kind == mhi.StatusRecovered {
			recovered <- struct{}{}
		}
	})
	failed := 0
	for i := range 40 {
		old := r.dev.MRU()
		mru := 3000 + 100*(i%2)
		go func() {
			time.Sleep(time.Duration(i%20) * 50 * time.Microsecond)
			r.mock.Transport.Device().InjectSysErr()
		}()
		if err := r.dev.SetMRU(mru); err != nil {
			failed++
			if got := r.dev.MRU(); got != old {
				t.Errorf("round %d: SetMRU(%d) failed (%v) but the MRU went from %d to %d", i, mru, err, old, got)
			}
		}
		select {
		case <-recovered:
		case <-time.After(10 * time.Second):
			r.dump(t)
			t.Fatalf("round %d: no recovery", i)
		}
	}
	t.Logf("%d of 40 MRU changes failed", failed)
	deadline := time.Now().Add(5 * time.Second)
	for r.dev.Stats().RxPosted == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if s := r.dev.Stats(); s.RxPosted == 0 {
		r.dump(t)
		t.Fatalf("no receive buffer posted after recovery: %+v", s)
	}
	base := r.rx.count()
	if err := r.mock.IPData.StartGenerator(ep.GeneratorConfig{Count: 500, Sizes: []int{700}}); err != nil {
		t.Fatal(err)
	}
	if !r.rx.waitFor(t, base+500) {
		r.dump(t)
	}
}
