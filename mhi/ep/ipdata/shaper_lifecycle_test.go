package ipdata

import (
	"errors"
	"testing"

	"github.com/gomhi/gomhi/mhi/ep"
	"github.com/gomhi/gomhi/mhi/ep/eptest"
	"github.com/gomhi/gomhi/mhi/proto/framing"
	"github.com/gomhi/gomhi/mhi/wire"
)

func (s *shaper) isRunning() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.running
}

// The shaper is one of the device's goroutines: Close stops it and waits
// for it, and drops what the closed device left queued; the same Function on
// a later device starts a new shaper that sends again.
func TestShaperFollowsDeviceLifecycle(t *testing.T) {
	ipd, err := New(Config{Format: framing.RawIP, Shape: ShapeConfig{UDPPort: 9, Rate: 1000}})
	if err != nil {
		t.Fatal(err)
	}
	pkt := udpTo(false, 9, false)
	open := func() (*eptest.Host, *ep.Pipe) {
		h := eptest.NewHost(t, func(c *ep.Config) { c.Functions = map[string]ep.Function{Name: ipd} })
		p, ok := h.Dev.Pipe(Name)
		if !ok {
			t.Fatal("no IP data pipe")
		}
		return h, p
	}
	h1, p1 := open()
	// The downlink never starts: the first packet blocks the shaper in
	// delivery, the second waits in its queue.
	for range 2 {
		ipd.enqueueShaped(p1, pkt, pkt, 0, false, 0, 0, 0, 0)
	}
	h1.WaitFor("shaper sends", func() bool { return ipd.Stats().ShapedSent == 1 })
	if err := h1.Dev.Close(); err != nil {
		t.Fatal(err)
	}
	if ipd.shp.isRunning() {
		t.Fatal("shaper still running after Close returned")
	}
	if st := ipd.Stats(); st.ShapedQueued != 0 || st.DroppedShaped != 1 {
		t.Fatalf("after Close: queued %d, dropped %d (want 0, 1)", st.ShapedQueued, st.DroppedShaped)
	}
	// A closed device's pipe queues nothing.
	if ipd.enqueueShaped(p1, pkt, pkt, 0, false, 0, 0, 0, 0) || ipd.shp.isRunning() || ipd.Stats().DroppedShaped != 2 {
		t.Fatalf("enqueue on a closed device: running %v, stats %+v", ipd.shp.isRunning(), ipd.Stats())
	}

	h2, p2 := open()
	ipd.enqueueShaped(p2, pkt, pkt, 0, false, 0, 0, 0, 0)
	h2.WaitFor("a new shaper sends", func() bool { return ipd.Stats().ShapedSent == 2 })
	_ = h2.Dev.Close()
	if ipd.shp.isRunning() {
		t.Fatal("second shaper still running after Close returned")
	}
}

// Shape.Queue and Shape.Rate are bounded: the queue is allocated whole,
// and the interval between packets must not overflow.
func TestShapeBounds(t *testing.T) {
	for _, tc := range []struct {
		sc ShapeConfig
		ok bool
	}{
		{ShapeConfig{UDPPort: 9, Rate: 1, Queue: MaxShapeQueue}, true},
		{ShapeConfig{UDPPort: 9, Rate: MinShapeRate}, true},
		{ShapeConfig{UDPPort: 9, Rate: 1, Queue: MaxShapeQueue + 1}, false},
		{ShapeConfig{UDPPort: 9, Rate: 1, Queue: 1 << 40}, false},
		{ShapeConfig{UDPPort: 9, Rate: 1e-300}, false},
		{ShapeConfig{UDPPort: 9, Rate: MinShapeRate / 2}, false},
	} {
		_, err := New(Config{Format: framing.RawIP, Shape: tc.sc})
		if tc.ok && err != nil {
			t.Errorf("%+v: %v", tc.sc, err)
		}
		if !tc.ok && !errors.Is(err, wire.ErrConfig) {
			t.Errorf("%+v: %v, want mhi.ErrConfig", tc.sc, err)
		}
	}
}
