package inproc_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhi"
	"github.com/gomhi/gomhi/mhi/wire"
)

// Every transfer ring and event ring of the SDX55 configuration wraps
// around at least twice, in both directions, including the burst-mode
// hardware channels and their 1024- and 2048-element event rings.
func TestEveryRingWraps(t *testing.T) {
	cfg := sdx55()
	r := newRig(t, cfg, nil)
	if err := r.ctrl.PowerUp(); err != nil {
		t.Fatal(err)
	}
	buf, err := r.t.Alloc(64, 64)
	if err != nil {
		t.Fatal(err)
	}
	for _, cc := range cfg.Channels {
		if cc.EE != wire.EEAMSS || cc.Name == "LOOPBACK" {
			continue
		}
		er := cfg.EventRings[cc.EventRing].Elements
		n := 2*max(cc.Elements, er) + 3
		t.Run(fmt.Sprintf("%d-%s-%s", cc.Num, cc.Name, cc.Dir), func(t *testing.T) {
			ch, _ := r.ctrl.Channel(cc.Num)
			done := make(chan mhi.Completion, cc.Elements)
			if err := ch.Start(func(c mhi.Completion) { done <- c }); err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := ch.Reset(); err != nil {
					t.Fatal(err)
				}
			}()
			// Keep the ring as full as it gets: queue up to its capacity,
			// then one more per completion.
			queued, completed := 0, 0
			payload := []byte("wrap")
			for completed < n {
				for queued < n && queued-completed < cc.Elements-1 {
					x := []mhi.Transfer{{IOVA: buf.IOVA, Len: 64, Flags: mhi.FlagEOT}}
					if err := ch.Queue(x); err != nil {
						t.Fatalf("queue %d: %v", queued, err)
					}
					queued++
					if cc.Dir == wire.Downlink {
						ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
						err := r.dev.QueueDL(ctx, cc.Num, payload)
						cancel()
						if err != nil {
							t.Fatalf("device queue %d: %v", queued, err)
						}
					}
				}
				select {
				case c := <-done:
					if c.Err != nil || c.Code != wire.CCEOT {
						t.Fatalf("completion %d: %+v", completed, c)
					}
					if cc.Dir == wire.Downlink && c.Len != len(payload) {
						t.Fatalf("completion %d: %d bytes, want %d", completed, c.Len, len(payload))
					}
					completed++
				case <-time.After(3 * time.Second):
					t.Fatalf("stalled after %d of %d completions (%d queued)", completed, n, queued)
				}
			}
		})
	}
	if s := r.ctrl.Stats(); s.DeviceErrors() != 0 {
		t.Fatalf("device errors: %+v", s)
	}
}

// The command ring wraps: start and stop one channel until more commands
// than the ring holds have completed.
func TestCommandRingWraps(t *testing.T) {
	cfg := sdx55()
	r := newRig(t, cfg, nil)
	if err := r.ctrl.PowerUp(); err != nil {
		t.Fatal(err)
	}
	ch, _ := r.ctrl.Channel(14)
	for i := 0; i < cfg.CommandElements+10; i++ {
		if err := ch.Start(nil); err != nil {
			t.Fatalf("start %d: %v", i, err)
		}
		if err := ch.Stop(); err != nil {
			t.Fatalf("stop %d: %v", i, err)
		}
	}
	if got, want := r.ctrl.Stats().Commands, uint64(2*(cfg.CommandElements+10)); got != want {
		t.Fatalf("%d commands, want %d", got, want)
	}
}
