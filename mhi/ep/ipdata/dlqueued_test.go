package ipdata

import (
	"testing"

	"github.com/gomhi/gomhi/mhi/ep"
	"github.com/gomhi/gomhi/mhi/proto/framing"
	"github.com/gomhi/gomhi/mhi/wire"
)

// The packets of aggregates the device drops from its downlink queue are
// counted (Stats.DLDroppedQueued): all of them at an MHI reset, the
// partly written one at a channel reset, so that DLPackets −
// DLDroppedQueued is what reached the host's buffers whole.
func TestDLDroppedQueuedCountsPackets(t *testing.T) {
	for _, tc := range []struct {
		name        string
		reset       func(r *ipRig)
		wantDropped func(queued int) int // aggregates dropped, of those queued
	}{
		{"MHI reset", func(r *ipRig) {
			r.SetReg(wire.RegMHICTRL, uint32(wire.StateM0)<<wire.MHICTRLStateShift|wire.MHICTRLReset)
			r.WaitReady()
		}, func(q int) int { return q }},
		{"channel reset", func(r *ipRig) {
			if ev := r.commandPumping(wire.PktResetChanCmd, dlChan); ev.Code() != wire.CCSuccess {
				r.T.Fatalf("RESET = %s", ev.Code())
			}
		}, func(int) int { return 1 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// One 64-byte host buffer: the first aggregate is written in
			// part and the queue fills up behind it.
			r := newIPRig(t, ipRigConfig{ip: Config{Format: framing.NTB16}, mru: 64, dlBuffers: 1})
			if err := r.ipd.StartGenerator(GeneratorConfig{Count: 1000, Sizes: []int{100}}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(r.ipd.StopGenerator)
			depth := ep.DefaultDLQueueDepth
			r.WaitFor("a full downlink queue", func() bool {
				// The OVERFLOW event of the one buffer says the head is
				// partly written.
				return r.PendingDL(dlChan) == depth && r.ipd.Stats().DLAggregates == uint64(depth) &&
					r.PendingEvents(1) > 0
			})
			before := r.ipd.Stats()
			if before.DLAggregates != uint64(depth) || before.DLPackets != uint64(depth*DefaultMaxDatagrams) {
				t.Fatalf("setup: %d aggregates, %d packets queued; want %d of %d", before.DLAggregates, before.DLPackets, depth, DefaultMaxDatagrams)
			}
			tc.reset(r)
			s, d := r.ipd.Stats(), r.Dev.Stats()
			dropped := tc.wantDropped(depth)
			if want := uint64(dropped * DefaultMaxDatagrams); s.DLDroppedQueued != want {
				t.Errorf("DLDroppedQueued %d, want %d (%d aggregates of %d packets)", s.DLDroppedQueued, want, dropped, DefaultMaxDatagrams)
			}
			if got := d.DLDroppedOnReset + d.DLPartialDropped; got != uint64(dropped) {
				t.Errorf("device dropped %d transfers (on reset %d, partial %d), want %d", got, d.DLDroppedOnReset, d.DLPartialDropped, dropped)
			}
			if d.DLTransfers != 0 {
				t.Errorf("%d transfers reached the host, want 0", d.DLTransfers)
			}
		})
	}
}

// The host's MRU change on a running modem: STOP, RESET, START with new
// buffers, twice, in the middle of loopback traffic. Every packet arrives,
// in order, and nothing is dropped.
func TestIPDataDLRestartMidStream(t *testing.T) {
	r := newIPRig(t, ipRigConfig{ip: Config{Format: framing.NTB16}, mru: 32768, dlBuffers: 6, ulSize: 2048})
	cfg := r.ipd.Config()
	pkts := testPackets(600, 1500, 64, 1263, 576)
	ul := encodeUL(t, cfg, pkts, 1, r.ulSize)
	for i, x := range ul {
		switch i {
		case 200:
			r.restartDL(3500, 24) // Linux's old default: chains of OVERFLOW pieces
		case 400:
			r.restartDL(16384, 8)
		}
		r.sendUL(x)
	}
	s := r.waitAggregates(uint64(len(pkts)))
	got, _ := decodeDL(t, cfg, r.transfers)
	samePackets(t, got, pkts)
	checkConservation(t, s)
	d := r.Dev.Stats()
	if s.Dropped() != 0 || d.DLPartialDropped != 0 || d.DLDroppedOnReset != 0 || d.DLTransfers != s.DLAggregates {
		t.Fatalf("stats %+v, device %+v", s, d)
	}
	if r.overflows == 0 {
		t.Fatal("no OVERFLOW chains with 3500-byte buffers")
	}
	var sent, arrived int
	for _, p := range pkts {
		sent += len(p)
	}
	for _, p := range got {
		arrived += len(p)
	}
	if sent != arrived {
		t.Fatalf("%d bytes sent, %d arrived", sent, arrived)
	}
}
