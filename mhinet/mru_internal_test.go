package mhinet

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhi"
	"github.com/gomhi/gomhi/mhi/ep/ipdata"
	"github.com/gomhi/gomhi/mhi/proto/framing"
	"github.com/gomhi/gomhi/mhi/testenv/poll"
	"github.com/gomhi/gomhi/pcigeneric/mock"
)

// counter is a Receiver that counts and releases.
type counter struct{ n atomic.Int64 }

func (c *counter) Receive(pkts []Packet) {
	for _, p := range pkts {
		p.Release()
	}
	c.n.Add(int64(len(pkts)))
}

// TestMRUChangeStartFails makes the downlink's restart fail in the middle
// of an MRU change, as a SYS_ERR arriving during the change does (found by
// FuzzWrite in sysfs/fusefs: a SoC reset followed by an MRU write). The
// change must fail without changing the MRU or the pool, and the downlink
// must not stay dead: the next recovery, or the next MRU change, starts it
// and refills its ring, and traffic flows.
func TestMRUChangeStartFails(t *testing.T) {
	m, err := mock.Open(mock.Options{Model: "telit-fn990", IPData: &ipdata.Config{Format: framing.NTB16}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	if err := m.Controller.PowerUp(); err != nil {
		t.Fatal(err)
	}
	rx := &counter{}
	d, err := New(m.Controller, Config{Pair: m.DataPair, Format: framing.NTB16, MRU: 3500}, rx)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Up(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Down() })

	traffic := func(step string) {
		t.Helper()
		start := time.Now() // 5 s for both waits
		if !poll.Until(5*time.Second, func() bool { return d.Stats().RxPosted != 0 }) {
			t.Fatalf("%s: no receive buffer posted: %+v", step, d.Stats())
		}
		base := rx.n.Load()
		if err := m.IPData.StartGenerator(ipdata.GeneratorConfig{Count: 200, Sizes: []int{700}}); err != nil {
			t.Fatal(err)
		}
		if !poll.Until(5*time.Second-time.Since(start), func() bool { return rx.n.Load() >= base+200 }) {
			t.Fatalf("%s: %d of 200 packets received", step, rx.n.Load()-base)
		}
	}
	injected := errors.New("injected: START_CHAN_CMD lost to a SYS_ERR")
	failStart := func() {
		startDownlink = func(*mhi.Channel) error { return injected }
	}
	restore := func() {
		startDownlink = func(ch *mhi.Channel) error { return ch.Start(nil) }
	}
	t.Cleanup(restore)
	failedChange := func(step string, mru int) {
		t.Helper()
		failStart()
		defer restore()
		old, pool := d.MRU(), d.pool
		if err := d.SetMRU(mru); !errors.Is(err, injected) {
			t.Fatalf("%s: SetMRU(%d) = %v, want the injected failure", step, mru, err)
		}
		if d.MRU() != old || d.pool != pool || d.pool.MRU() != old {
			t.Fatalf("%s: failed SetMRU(%d) changed the MRU %d -> %d (pool of %d)", step, mru, old, d.MRU(), d.pool.MRU())
		}
		if !d.dlStopped {
			t.Fatalf("%s: the stopped downlink is not marked for a restart", step)
		}
	}

	traffic("before")
	// A failure, then the controller's recovery starts the downlink.
	failedChange("recovery", 3000)
	d.onStatus(mhi.StatusEvent{Kind: mhi.StatusRecovered})
	if d.dlStopped || d.MRU() != 3500 {
		t.Fatalf("after recovery: stopped %v, MRU %d", d.dlStopped, d.MRU())
	}
	traffic("after recovery")
	// A failure, then the next MRU change starts it (with the new MRU).
	failedChange("next change", 3000)
	if err := d.SetMRU(3000); err != nil || d.MRU() != 3000 || d.dlStopped {
		t.Fatalf("next change: %v, MRU %d, stopped %v", err, d.MRU(), d.dlStopped)
	}
	traffic("after the next change")
	// A failure, then a change to the same MRU starts it.
	failedChange("same MRU", 3500)
	if err := d.SetMRU(3000); err != nil || d.dlStopped {
		t.Fatalf("same MRU: %v, stopped %v", err, d.dlStopped)
	}
	traffic("after the same MRU")
	// Down and Up from a stopped downlink.
	failedChange("down", 3500)
	if err := d.Down(); err != nil {
		t.Fatalf("down with the downlink stopped: %v", err)
	}
	if err := d.Up(); err != nil {
		t.Fatal(err)
	}
	traffic("after down and up")
}
