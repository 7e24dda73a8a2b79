package ep

import (
	"testing"

	"github.com/gomhi/gomhi/mhi/proto/framing"
	"github.com/gomhi/gomhi/mhi/wire"
)

// The packets of aggregates the device drops from its downlink queue are
// counted (IPDataStats.DLDroppedQueued): all of them at an MHI reset, the
// partly written one at a channel reset, so that DLPackets −
// DLDroppedQueued is what reached the host's buffers whole.
func TestDLDroppedQueuedCountsPackets(t *testing.T) {
	for _, tc := range []struct {
		name        string
		reset       func(r *ipRig)
		wantDropped func(queued int) int // aggregates dropped, of those queued
	}{
		{"MHI reset", func(r *ipRig) {
			r.setReg(wire.RegMHICTRL, uint32(wire.StateM0)<<wire.MHICTRLStateShift|wire.MHICTRLReset)
			r.waitReady()
		}, func(q int) int { return q }},
		{"channel reset", func(r *ipRig) {
			if ev := r.commandPumping(wire.PktResetChanCmd, dlChan); ev.Code() != wire.CCSuccess {
				r.t.Fatalf("RESET = %s", ev.Code())
			}
		}, func(int) int { return 1 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// One 64-byte host buffer: the first aggregate is written in
			// part and the queue fills up behind it.
			r := newIPRig(t, ipRigConfig{ip: IPDataConfig{Format: framing.NTB16}, mru: 64, dlBuffers: 1})
			if err := r.ipd.StartGenerator(GeneratorConfig{Count: 1000, Sizes: []int{100}}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(r.ipd.StopGenerator)
			depth := DefaultDLQueueDepth
			r.waitFor("a full downlink queue", func() bool {
				// The OVERFLOW event of the one buffer says the head is
				// partly written.
				return pendingDL(r.testHost, dlChan) == depth && r.ipd.Stats().DLAggregates == uint64(depth) &&
					r.pendingEvents(1) > 0
			})
			before := r.ipd.Stats()
			if before.DLAggregates != uint64(depth) || before.DLPackets != uint64(depth*DefaultMaxDatagrams) {
				t.Fatalf("setup: %d aggregates, %d packets queued; want %d of %d", before.DLAggregates, before.DLPackets, depth, DefaultMaxDatagrams)
			}
			tc.reset(r)
			s, d := r.ipd.Stats(), r.dev.Stats()
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
