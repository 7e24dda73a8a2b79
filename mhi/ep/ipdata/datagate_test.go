package ipdata

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhi/proto/framing"
)

// testGate is a Gate a test opens and closes (the modem's, in
// mhi/ep/modem, opens while a session is connected).
type testGate struct{ atomic.Bool }

func (g *testGate) DataAllowed() bool { return g.Load() }

// TestIPDataGate: while the gate is closed every packet is dropped and
// counted; once it opens they flow.
func TestIPDataGate(t *testing.T) {
	var gate testGate // closed
	r := newIPRig(t, ipRigConfig{ip: Config{Format: framing.RawIP, Gate: &gate}})
	pkts := testPackets(3, 100)
	for _, p := range pkts {
		r.sendUL(p)
	}
	r.pumpUntil("gated uplink", func() bool { return r.ipd.Stats().DroppedGated == 3 })
	r.pumpFor(5 * time.Millisecond)
	if len(r.transfers) != 0 {
		t.Fatalf("%d DL transfers while gated", len(r.transfers))
	}
	gate.Store(true) // a session connected
	for _, p := range pkts {
		r.sendUL(p)
	}
	s := r.waitAggregates(6) // 3 gated + 3 delivered
	got, _ := decodeDL(t, r.ipd.Config(), r.transfers)
	samePackets(t, got, pkts)
	checkConservation(t, s)
	if s.ULPackets != 6 || s.DroppedGated != 3 || s.Dropped() != 3 {
		t.Fatalf("stats %+v", s)
	}
}
