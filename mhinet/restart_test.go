package mhinet_test

import (
	"context"
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhi"
	"github.com/gomhi/gomhi/mhi/ep"
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
		ipd   ep.IPDataConfig
		cfg   mhinet.Config
	}{
		{"raw", "qcom-sdx55m", ep.IPDataConfig{}, mhinet.Config{MRU: 2048}},
		{"mbim", "telit-fn990", ep.IPDataConfig{Format: ep.FormatNTB16}, mhinet.Config{Format: mhinet.FormatMBIM, MRU: 3500}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newIPRig(t, tc.model, tc.ipd, tc.cfg)
			const n = 60000
			if err := r.mock.IPData.StartGenerator(ep.GeneratorConfig{Count: n, Sizes: []int{100, 1400, 600}}); err != nil {
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
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var m ep.IPDataStats
			var h mhinet.Stats
			for {
				m, h = r.mock.IPData.Stats(), r.dev.Stats()
				if m.Pending == 0 && m.DLPackets-m.DLDroppedQueued == h.RxPackets {
					break
				}
				if ctx.Err() != nil {
					r.dump(t)
					t.Fatalf("after %d restarts: the modem put %d packets whole into host buffers (%d sent, %d dropped in its queue), the host delivered %d: %d lost without a packet counter (controller stale completions %d)",
						restarts, m.DLPackets-m.DLDroppedQueued, m.DLPackets, m.DLDroppedQueued, h.RxPackets,
						int64(m.DLPackets-m.DLDroppedQueued)-int64(h.RxPackets), r.mock.Controller.Stats().StaleCompletion)
				}
				time.Sleep(5 * time.Millisecond)
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

// A channel that SYS_ERR recovery restarted behind the device's back must
// not keep the device down. Down during a recovery finds the channels
// disabled by it: its Reset is refused, the channels stay on the
// recovery's restart list and come back enabled; Up's Start then failed
// with mhi.ErrChannelState, and every later Up too. The recovery's
// restart is reproduced here by starting the channels after Down, as the
// recovery does.
func TestUpAfterRecoveryRestartedTheChannels(t *testing.T) {
	r := newRig(t, mhinet.Config{MRU: 2048})
	pushRaw(t, r, 5, 0)
	r.rx.waitFor(t, 5)
	if err := r.dev.Down(); err != nil {
		t.Fatal(err)
	}
	ul, dl, err := r.mock.Controller.ChannelPair(r.dev.Config().Pair)
	if err != nil {
		t.Fatal(err)
	}
	for _, ch := range []*mhi.Channel{ul, dl} {
		if err := ch.Start(nil); err != nil { // what recover() does with its restart list
			t.Fatal(err)
		}
	}
	if err := r.dev.Up(); err != nil {
		t.Fatalf("Up after the channels were restarted behind the device's back: %v", err)
	}
	pushRaw(t, r, 5, 5)
	if !r.rx.waitFor(t, 10) {
		r.dump(t)
	}
}
