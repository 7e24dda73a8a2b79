package inproc_test

import (
	"errors"
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhi"
	"github.com/gomhi/gomhi/mhi/ep"
	"github.com/gomhi/gomhi/mhi/inproc"
	"github.com/gomhi/gomhi/mhi/testenv/poll"
	"github.com/gomhi/gomhi/mhi/wire"
)

// TestLinkDown: a device that falls off the bus in M0, with buffers queued
// on the LOOPBACK channels, is noticed by the health check (all-ones reads,
// or failed reads): the host enters LINK_DOWN, listeners hear
// StatusLinkDown, every queued buffer comes back aborted, commands and
// queueing are refused with ErrLinkDown without waiting for the device,
// nothing more is written to it, and PowerDown skips the reset handshake a
// dead device cannot answer.
func TestLinkDown(t *testing.T) {
	for _, tc := range []struct {
		name    string
		readErr error
	}{
		{"all ones", nil},
		{"reads fail", errors.New("vfio: pread BAR0: no such device")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := sdx55()
			cfg.Timeout = 30 * time.Second // a wait for the device would show
			tr, err := inproc.New(ep.Config{MHI: cfg}, inproc.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Close()
			ctrl, err := mhi.NewController(tr, cfg, mhi.Options{Name: "mhi0", PollInterval: 20 * time.Millisecond, HealthInterval: 10 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			status := make(chan mhi.StatusEvent, 8)
			ctrl.OnStatus(func(ev mhi.StatusEvent) { status <- ev })
			if err := ctrl.PowerUp(); err != nil {
				t.Fatal(err)
			}
			buf, err := tr.Alloc(4096, 64)
			if err != nil {
				t.Fatal(err)
			}
			dl, _ := ctrl.Channel(1)
			completions := make(chan mhi.Completion, 8)
			if err := dl.Start(func(c mhi.Completion) { completions <- c }); err != nil {
				t.Fatal(err)
			}
			for range 4 {
				if err := dl.Queue([]mhi.Transfer{{IOVA: buf.IOVA, Len: 1024, Flags: mhi.FlagEOT}}); err != nil {
					t.Fatal(err)
				}
			}
			tr.Unplug(tc.readErr)
			var ev mhi.StatusEvent
			timeout := time.After(20 * time.Second)
			for ev.Kind != mhi.StatusLinkDown {
				select {
				case ev = <-status:
					if ev.Kind == mhi.StatusEE {
						continue // power-up's
					}
				case <-timeout:
					t.Fatalf("no StatusLinkDown 20 s after the device fell off the bus; host state %s", ctrl.PMState())
				}
				if ev.Kind != mhi.StatusLinkDown {
					t.Fatalf("status %+v before StatusLinkDown", ev)
				}
			}
			if !errors.Is(ev.Err, mhi.ErrLinkDown) {
				t.Fatalf("status %+v, want StatusLinkDown wrapping ErrLinkDown", ev)
			}
			t.Logf("status: %v", ev.Err)
			if pm := ctrl.PMState(); pm != mhi.PMLinkDown {
				t.Errorf("host state %s, want %s", pm, mhi.PMLinkDown)
			}
			if err := ctrl.LinkDown(); !errors.Is(err, mhi.ErrLinkDown) {
				t.Errorf("LinkDown() = %v", err)
			}
			if s := ctrl.Stats(); s.LinkDown != 1 {
				t.Errorf("stats link_down %d, want 1", s.LinkDown)
			}
			for i := range 4 {
				select {
				case c := <-completions:
					if !errors.Is(c.Err, wire.ErrAborted) {
						t.Errorf("completion %d: %+v, want ErrAborted", i, c)
					}
				case <-time.After(5 * time.Second):
					t.Fatalf("%d of 4 queued buffers came back", i)
				}
			}
			if err := dl.Queue([]mhi.Transfer{{IOVA: buf.IOVA, Len: 1024, Flags: mhi.FlagEOT}}); err == nil {
				t.Errorf("Queue on a device off the bus succeeded")
			}
			ul, _ := ctrl.Channel(0)
			if err := ul.Start(func(mhi.Completion) {}); !errors.Is(err, mhi.ErrLinkDown) {
				t.Errorf("Start = %v, want ErrLinkDown at once", err)
			}
			if err := ctrl.Suspend(); err == nil {
				t.Errorf("Suspend of a device off the bus succeeded")
			}
			reads, writes := tr.Unplugged()
			if writes != 0 {
				t.Errorf("%d register writes reached the device after it fell off the bus", writes)
			}
			if err := ctrl.PowerDown(); err != nil {
				t.Errorf("PowerDown: %v", err)
			}
			if r, w := tr.Unplugged(); r != reads || w != writes {
				t.Errorf("PowerDown made %d reads and %d writes: it waited for a reset the device cannot do", r-reads, w-writes)
			}
			t.Logf("after the cut: %d reads (health checks), %d writes", reads, writes)
		})
	}
}

// versionAllOnes is a device whose MHIVER alone reads as all ones.
type versionAllOnes struct{ *inproc.Transport }

func (d versionAllOnes) Read32(off uint32) (uint32, error) {
	if off == wire.RegMHIVER {
		return 0xFFFFFFFF, nil
	}
	return d.Transport.Read32(off)
}

// TestLinkCheckNeedsBothRegisters: one register that reads all ones is not
// a dead link (MHISTATUS still answers); the host stays in M0.
func TestLinkCheckNeedsBothRegisters(t *testing.T) {
	cfg := sdx55()
	tr, err := inproc.New(ep.Config{MHI: cfg}, inproc.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	ctrl, err := mhi.NewController(versionAllOnes{tr}, cfg, mhi.Options{Name: "mhi0", PollInterval: 20 * time.Millisecond, HealthInterval: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer ctrl.PowerDown()
	if err := ctrl.PowerUp(); err != nil {
		t.Fatal(err)
	}
	if !poll.Until(20*time.Second, func() bool { return ctrl.Stats().HealthChecks >= 5 }) {
		t.Fatalf("%d health checks in 20 s", ctrl.Stats().HealthChecks)
	}
	if pm := ctrl.PMState(); pm != "M0" {
		t.Fatalf("host state %s with only MHIVER reading all ones", pm)
	}
}
