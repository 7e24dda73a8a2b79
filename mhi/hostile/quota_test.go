package hostile_test

import (
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhi"
	"github.com/gomhi/gomhi/mhi/hostile"
)

// TestEventQuotaBoundsOnePass posts more events on one event ring, with
// one interrupt, than Options.EventQuota lets one pass handle: completions
// for every queued element with events pointing at elements no longer
// queued between them. The ring is handled in ceil(events/quota) passes
// (the ring's goroutine comes back by itself, no other interrupt or poll),
// every completion arrives once, in order, with its length, and every bad
// event is counted as without the quota.
func TestEventQuotaBoundsOnePass(t *testing.T) {
	const (
		quota = 4
		elems = 7 // the DATA downlink ring of 8 elements
		bad   = 2 // bad events after each completion
	)
	r := newScriptRig(t, hostile.DeviceConfig{}, mhi.Options{EventQuota: quota, PollInterval: -1})
	defer r.close(t)
	mustPowerUp(t, r)
	_, k, _ := startDL(t, r, hostile.DataDL, elems, 64)
	var evs []mhi.Element
	for i := range elems {
		tre := treIOVA(t, r, hostile.DataDL, i)
		evs = append(evs, mhi.TransferEvent(tre, mhi.CCEOT, uint32(10+i), hostile.DataDL))
		for range bad {
			evs = append(evs, mhi.TransferEvent(tre, mhi.CCEOT, 1, hostile.DataDL))
		}
	}
	before := r.ctrl.Stats()
	if err := r.dev.Post(1, evs...); err != nil {
		t.Fatal(err)
	}
	n := uint64(len(evs))
	if !waitUntil(2*time.Second, func() bool { return r.ctrl.Stats().Events-before.Events >= n }) {
		t.Fatalf("%d of %d events handled (stats %+v)", r.ctrl.Stats().Events-before.Events, n, r.ctrl.Stats())
	}
	after := r.ctrl.Stats()
	passes := (n + quota - 1) / quota
	if got := after.EventPasses - before.EventPasses; got != passes {
		t.Errorf("%d passes for %d events with a quota of %d, want %d", got, n, quota, passes)
	}
	if got := after.EventQuotaReached - before.EventQuotaReached; got != passes-1 {
		t.Errorf("%d passes stopped at the quota, want %d", got, passes-1)
	}
	if got := after.Events - before.Events; got != n {
		t.Errorf("%d events handled, want %d", got, n)
	}
	if got := after.BadEventPtr - before.BadEventPtr; got != elems*bad {
		t.Errorf("BadEventPtr %d, want %d", got, elems*bad)
	}
	k.check(t)
	comps := k.completions()
	if len(comps) != elems {
		t.Fatalf("%d completions, want %d: %+v", len(comps), elems, comps)
	}
	for i, c := range comps {
		if c.Cookie != uint64(i) || c.Len != 10+i || c.Err != nil {
			t.Errorf("completion %d: %+v, want cookie %d, %d bytes", i, c, i, 10+i)
		}
	}
}
