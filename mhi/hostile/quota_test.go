package hostile_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhi"
	"github.com/gomhi/gomhi/mhi/hostile"
	"github.com/gomhi/gomhi/mhi/testenv/poll"
	"github.com/gomhi/gomhi/mhi/wire"
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
	var evs []wire.Element
	for i := range elems {
		tre := treIOVA(t, r, hostile.DataDL, i)
		evs = append(evs, wire.TransferEvent(tre, wire.CCEOT, uint32(10+i), hostile.DataDL))
		for range bad {
			evs = append(evs, wire.TransferEvent(tre, wire.CCEOT, 1, hostile.DataDL))
		}
	}
	before := r.ctrl.Stats()
	if err := r.dev.Post(1, evs...); err != nil {
		t.Fatal(err)
	}
	n := uint64(len(evs))
	if !poll.Until(2*time.Second, func() bool { return r.ctrl.Stats().Events-before.Events >= n }) {
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

// refillingTransport is a device that posts two more events on event ring
// 1 whenever the host hands slots of that ring back (its doorbell), before
// the doorbell write returns: the ring fills up and stays full.
type refillingTransport struct {
	mhi.Transport
	dev     *hostile.Device
	ev      wire.Element
	on      atomic.Bool
	refills atomic.Uint64
}

func (t *refillingTransport) Write32(off, v uint32) error {
	err := t.Transport.Write32(off, v)
	// The low half is written last (mhi's write64).
	if off == hostile.ERDBOffset+wire.DoorbellStride && t.on.Load() {
		if t.dev.Post(1, t.ev) == nil {
			t.refills.Add(1)
		}
		_ = t.dev.Post(1, t.ev) // fails once the ring is full
	}
	return err
}

// TestEventDrainBounded: a channel Stop drains its event ring in passes of
// the quota, but a device that posts a new event each time the host hands
// slots back cannot hold it there: the drain ends after the passes the
// ring's size needs (what was posted when it began).
func TestEventDrainBounded(t *testing.T) {
	dev := hostile.NewDevice(hostile.DeviceConfig{})
	h := hostile.Wrap(dev, hostile.Options{PassFree: true})
	tr := &refillingTransport{Transport: h, dev: dev}
	ctrl, err := mhi.NewController(tr, hostile.Config(), mhi.Options{EventQuota: 1, PollInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	r := &scriptRig{dev: dev, h: h, ctrl: ctrl}
	defer r.close(t)
	mustPowerUp(t, r)
	ch, _, _ := startDL(t, r, hostile.DataDL, 1, 64)
	// Events for an element that is not queued: counted, otherwise ignored.
	tr.ev = wire.TransferEvent(treIOVA(t, r, hostile.DataDL, 5), wire.CCEOT, 1, hostile.DataDL)
	tr.on.Store(true)
	if err := dev.Post(1, tr.ev); err != nil {
		t.Fatal(err)
	}
	if !poll.Until(2*time.Second, func() bool { return tr.refills.Load() > 100 }) {
		t.Fatalf("the device does not refill: %+v", r.ctrl.Stats())
	}
	errc := make(chan error, 1)
	go func() { errc <- ch.Stop() }()
	select {
	case err := <-errc:
		if err != nil {
			t.Errorf("Stop: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Errorf("Stop still draining after 5 s of a device that keeps posting (%d refills)", tr.refills.Load())
	}
	tr.on.Store(false)
}
