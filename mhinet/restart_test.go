package mhinet_test

import (
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhi/ep/ipdata"
	"github.com/gomhi/gomhi/mhi/proto/framing"
	"github.com/gomhi/gomhi/mhi/testenv/poll"
	"github.com/gomhi/gomhi/mhinet"
)

// Taking the device down while the modem is sending must lose nothing it
// cannot name: every packet the modem put whole into host buffers is
// delivered, and the rest is counted by the modem (DLDroppedQueued).
// Down used to reset the downlink at once: the completions the modem had
// already posted met a disabled channel and were discarded as stale (the
// controller's StaleCompletion), with their packets.
func TestDownUpUnderTrafficConservesPackets(t *testing.T) {
	for _, tc := range []struct {
		name  string
		model string
		ipd   ipdata.Config
		cfg   mhinet.Config
	}{
		{"raw", "qcom-sdx55m", ipdata.Config{}, mhinet.Config{MRU: 2048}},
		{"mbim", "telit-fn990", ipdata.Config{Format: framing.NTB16}, mhinet.Config{Format: framing.NTB16, MRU: 3500}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newIPRig(t, tc.model, tc.ipd, tc.cfg)
			const n = 60000
			if err := r.mock.IPData.StartGenerator(ipdata.GeneratorConfig{Count: n, Sizes: []int{100, 1400, 600}}); err != nil {
				t.Fatal(err)
			}
			done := r.mock.IPData.GeneratorDone()
			restarts := 0
			for running := true; running; {
				select {
				case <-done:
					running = false
				case <-time.After(2 * time.Millisecond):
					if err := r.dev.Down(); err != nil {
						t.Fatalf("down: %v", err)
					}
					if err := r.dev.Up(); err != nil {
						t.Fatalf("up: %v", err)
					}
					restarts++
				}
			}
			var m ipdata.Stats
			var h mhinet.Stats
			if !poll.Until(10*time.Second, func() bool {
				m, h = r.mock.IPData.Stats(), r.dev.Stats()
				// Every generated packet sent or dropped too: the modem
				// takes an aggregate off Pending before it commits it
				// and counts it in DLPackets after.
				return m.Pending == 0 && m.DLPackets-m.DLDroppedQueued == h.RxPackets && m.DLPackets+m.Dropped() == n
			}) {
				r.dump(t)
				t.Fatalf("after %d restarts: the modem put %d packets whole into host buffers (%d sent, %d dropped in its queue; %d generated, %d sent or dropped of %d), the host delivered %d: %d lost without a packet counter (controller stale completions %d)",
					restarts, m.DLPackets-m.DLDroppedQueued, m.DLPackets, m.DLDroppedQueued, m.GenPackets, m.DLPackets+m.Dropped(), n, h.RxPackets,
					int64(m.DLPackets-m.DLDroppedQueued)-int64(h.RxPackets), r.mock.Controller.Stats().StaleCompletion)
			}
			if got := r.rx.count(); uint64(got) != h.RxPackets {
				t.Errorf("receiver got %d packets, the device counted %d", got, h.RxPackets)
			}
			if m.GenPackets != n || m.DLPackets+m.Dropped() != n {
				t.Errorf("modem: generated %d, sent %d, dropped %d; want %d in all", m.GenPackets, m.DLPackets, m.Dropped(), n)
			}
			t.Logf("%d restarts: %d packets delivered, %d dropped in the modem's queue", restarts, h.RxPackets, m.DLDroppedQueued)
		})
	}
}
