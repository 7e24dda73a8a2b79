package loopback_test

import (
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"weak"

	"github.com/gomhi/gomhi/mhi"
	"github.com/gomhi/gomhi/mhi/ep"
	"github.com/gomhi/gomhi/mhi/inproc"
	"github.com/gomhi/gomhi/mhi/loopback"
	"github.com/gomhi/gomhi/mhi/testenv/poll"
	"github.com/gomhi/gomhi/pcigeneric"
	"github.com/gomhi/gomhi/pcigeneric/mock"
)

// Regression tests of two bugs 'mhictl soak' found in the LOOPBACK client
// (docs/RELIABILITY.md, "Soak").

// openMock opens a mock modem (telit-fn990: the soak's default; 16 MiB of
// DMA memory) with a host controller of the given options, powered up to
// M0. closeMock powers it down; the test's cleanup does it too.
func openMock(t *testing.T, opts mhi.Options) (ctrl *mhi.Controller, dev *ep.Device, closeMock func()) {
	t.Helper()
	es := pcigeneric.EntriesFor("telit-fn990")
	if len(es) == 0 {
		t.Fatal("telit-fn990 missing from the device table")
	}
	ec, _, err := mock.NewConfig(es[0], mock.ModemOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := inproc.New(ec, inproc.Options{Memory: 16 << 20})
	if err != nil {
		t.Fatal(err)
	}
	opts.Name = "mhi0"
	ctrl, err = mhi.NewController(tr, ec.MHI, opts)
	if err != nil {
		_ = tr.Close()
		t.Fatal(err)
	}
	closeMock = sync.OnceFunc(func() {
		_ = ctrl.PowerDown()
		_ = tr.Close()
	})
	t.Cleanup(closeMock)
	if err := ctrl.PowerUp(); err != nil {
		t.Fatal(err)
	}
	return ctrl, tr.Device(), closeMock
}

// waitRecoveries waits until the controller has recovered n times.
func waitRecoveries(c *mhi.Controller, n uint64) bool {
	return poll.Until(20*time.Second, func() bool { return c.Stats().Recoveries >= n })
}

// TestCloseReleasesTheClient opens, uses and closes clients on one
// controller and requires that the closed ones become garbage. Open used
// to add a status listener to the controller that nothing removed: every
// closed client stayed reachable with its 128 KiB payload pool (about
// 130 KB per reopen, 100 MiB in an hour of the soak).
func TestCloseReleasesTheClient(t *testing.T) {
	ctrl, _, _ := openMock(t, mhi.Options{})
	const n = 20
	var clients []weak.Pointer[loopback.Client]
	for range n {
		c, err := loopback.Open(ctrl, loopback.Options{DLBufferSize: 8192})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Run(loopback.RunOptions{Count: 4, MinSize: 1, MaxSize: 1000}); err != nil {
			t.Fatal(err)
		}
		c.Close()
		clients = append(clients, weak.Make(c))
	}
	runtime.GC()
	runtime.GC()
	alive := 0
	for _, w := range clients {
		if w.Value() != nil {
			alive++
		}
	}
	// The channels may keep the last client's handlers until they are
	// started again: one may stay.
	t.Logf("%d of %d closed clients still reachable", alive, n)
	if alive > 1 {
		t.Errorf("%d of %d closed clients are still reachable after a garbage collection: Close leaves them referenced (by the controller's status listeners?)", alive, n)
	}
}

// TestNoLateEchoAfterSysErr runs LOOPBACK traffic through SYS_ERRs and
// requires that no echo is counted as mismatched. The client forgets its
// transfers in flight when it hears of a SYS_ERR; completions the modem
// had posted before the error used to be handled after that, each
// counted as "an echo nobody sent". The recovery now resets the device
// and hands every completion it posted to its client before it notifies
// StatusSysErr. Echoes are compared byte for byte, so a mismatch is the
// client's bookkeeping or corrupted data; either fails.
func TestNoLateEchoAfterSysErr(t *testing.T) {
	// SYS_ERRs back to back at random moments of the traffic: no
	// recovery limit, a short backoff.
	const sysErrs = 150
	ctrl, dev, _ := openMock(t, mhi.Options{RecoveryLimit: -1, RecoveryBackoff: time.Millisecond, RecoveryBackoffMax: time.Millisecond})
	c, err := loopback.Open(ctrl, loopback.Options{DLBufferSize: 8192, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// The invariant behind it: when the clients hear of the SYS_ERR, the
	// host has handled every event the modem posted on the LOOPBACK
	// pair's event ring; nothing posted before the error is left to be
	// handled after the client forgot its transfers.
	_, dl, err := ctrl.ChannelPair(loopback.ChannelName)
	if err != nil {
		t.Fatal(err)
	}
	er := dl.Config().EventRing
	var unhandled, behind atomic.Int64
	ctrl.OnStatus(func(ev mhi.StatusEvent) {
		if ev.Kind != mhi.StatusSysErr {
			return
		}
		if n := int64(dev.Stats().EventsPosted[er]) - int64(dl.EventRingEvents()); n > 0 {
			unhandled.Add(n)
			behind.Add(1)
		}
	})
	done := make(chan bool, 1)
	go func() {
		rng := rand.New(rand.NewPCG(1, 2))
		for i := uint64(1); i <= sysErrs; i++ {
			time.Sleep(time.Duration(500+rng.IntN(3000)) * time.Microsecond)
			dev.InjectSysErr()
			if !waitRecoveries(ctrl, i) {
				done <- false
				return
			}
		}
		done <- true
	}()
	var mismatched, runs, aborted, received int
	for running := true; running; {
		select {
		case ok := <-done:
			if !ok {
				t.Fatalf("no recovery within 20 s (host PM %s)", ctrl.PMState())
			}
			running = false
		default:
		}
		res, _ := c.Run(loopback.RunOptions{Count: 32, MinSize: 1, MaxSize: 16 << 10, MaxTRE: 4})
		mismatched += res.Mismatched
		aborted += res.Aborted
		received += res.Received
		if res.Sent > 0 {
			runs++
		}
	}
	t.Logf("%d SYS_ERRs, %d runs: %d echoes received, %d transfers aborted, %d mismatched; at %d SYS_ERRs %d events posted on event ring %d were not handled yet",
		sysErrs, runs, received, aborted, mismatched, behind.Load(), unhandled.Load(), er)
	if aborted == 0 {
		t.Errorf("no transfer was in flight at any of %d SYS_ERRs: the test did not test", sysErrs)
	}
	if mismatched > 0 {
		t.Errorf("%d echoes counted as mismatched in %d runs around %d SYS_ERRs", mismatched, runs, sysErrs)
	}
	if behind.Load() > 0 {
		t.Errorf("at %d of %d SYS_ERRs the clients heard of it with %d events the modem posted on event ring %d before the error not handled yet",
			behind.Load(), sysErrs, unhandled.Load(), er)
	}
}

// TestDoorbellsPerRoundTrip: the client posts its downlink buffers back in
// batches, one doorbell per quarter of them, and queues as many payloads
// as it has free uplink buffers with one doorbell, not one doorbell per
// echo each way (under vfio-user every doorbell is a message to another
// process). Every echo still arrives and matches, with payloads that take
// several buffers each.
func TestDoorbellsPerRoundTrip(t *testing.T) {
	ctrl, _, _ := openMock(t, mhi.Options{})
	ul, dl, err := ctrl.ChannelPair(loopback.ChannelName)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		bufSz int
		size  int
	}{
		{"one buffer per echo", 32768, 1500},
		{"many buffers per echo", 1000, 20000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := loopback.Open(ctrl, loopback.Options{DLBufferSize: tc.bufSz})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			const n = 400
			db0, q0 := dl.Stats().Doorbells.Load(), dl.Stats().Queued.Load()
			uldb0 := ul.Stats().Doorbells.Load()
			res, err := c.Run(loopback.RunOptions{Count: n, MinSize: tc.size, MaxSize: tc.size})
			if err != nil || res.Received != n || res.Mismatched != 0 {
				t.Fatalf("run: %v %+v", err, res)
			}
			bufs := dl.Config().Elements - 1
			perEcho := (tc.size + tc.bufSz - 1) / tc.bufSz
			doorbells, queued := dl.Stats().Doorbells.Load()-db0, dl.Stats().Queued.Load()-q0
			// Buffers posted again: all those the echoes used, but for
			// fewer than one batch still held.
			if used := uint64(n * perEcho); queued > used || queued+uint64(bufs/4) < used {
				t.Errorf("%d buffers posted again for %d used", queued, used)
			}
			if max := queued/uint64(bufs/4) + 1; doorbells > max {
				t.Errorf("%d downlink doorbells for %d buffers posted again, want at most %d (batches of %d)", doorbells, queued, max, bufs/4)
			}
			// The uplink: one doorbell per batch of as many payloads as
			// buffers are free. How many are free later depends on the
			// scheduling, but the first batch of a new client takes the
			// whole window (Options.Window's default) with one doorbell.
			window := uint64(min(16, (ul.Config().Elements-1)/2))
			uldb := ul.Stats().Doorbells.Load() - uldb0
			if uldb > n-(window-1) {
				t.Errorf("%d uplink doorbells for %d payloads, want at most %d (the first %d with one)", uldb, n, n-(window-1), window)
			}
			t.Logf("%d echoes: %d downlink buffers posted again with %d doorbells; %d uplink doorbells", n, queued, doorbells, uldb)
		})
	}
}
