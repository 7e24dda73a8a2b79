package inproc_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/gomhi/gomhi/mhi"
	"github.com/gomhi/gomhi/mhi/loopback"
	"github.com/gomhi/gomhi/mhi/wire"
)

// TestLoopbackRoundTripAllocs holds the whole LOOPBACK round trip of
// BenchmarkLoopback to 0 allocations: the host copying the payload and
// ringing the doorbells, the mock modem reading it, its Function queueing
// the echo (waiting for room in the channel's downlink queue when the host
// has not posted buffers yet) and writing it into the host's buffers, the
// completions and the host posting the buffer again. Host and modem run in
// this process, so AllocsPerRun counts both. The payload sizes run on one
// connection, smallest first and then at random up to loopback.MaxPayload,
// so the modem's spare downlink buffers must grow with the transfers
// rather than allocate for every larger one.
//
// Each run makes rounds round trips, so an allocation in one of every
// rounds round trips (or more) fails the test.
func TestLoopbackRoundTripAllocs(t *testing.T) {
	const (
		rounds = 20
		runs   = 50
	)
	r := newRig(t, sdx55(), nil)
	c := openLoopback(t, r, loopback.Options{DLBufferSize: 32768})
	for _, tc := range []struct {
		name     string
		min, max int
	}{
		{"64B", 64, 64},
		{"1500B", 1500, 1500},
		{"random", 1, loopback.MaxPayload},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ro := loopback.RunOptions{Count: rounds, MinSize: tc.min, MaxSize: tc.max}
			var failed error
			run := func() {
				res, err := c.Run(ro)
				if failed == nil && (err != nil || res.Received != rounds || res.Mismatched != 0) {
					failed = fmt.Errorf("run: %v %+v", err, res)
				}
			}
			for range 10 { // warm: buffers grown, every waiter's channel made
				run()
			}
			waits := r.dev.Stats().DLQueueWaits
			allocs := testing.AllocsPerRun(runs, run)
			if failed != nil {
				t.Fatal(failed)
			}
			if allocs != 0 {
				t.Errorf("%v allocations per %d round trips of %d..%d bytes, want 0", allocs, rounds, tc.min, tc.max)
			}
			// The modem's echo must have waited for room at least once, or
			// the test did not cover that wait.
			if got := r.dev.Stats().DLQueueWaits - waits; got == 0 {
				t.Errorf("the modem's downlink never waited for room in its queue in %d round trips", (runs+1)*rounds)
			} else {
				t.Logf("the modem's downlink waited for room %d times in %d round trips", got, (runs+1)*rounds)
			}
		})
	}
}

// TestQueueOnFullRingAllocs: a sender that polls a full transfer ring (the
// loopback client retrying Queue, a transmitter after ErrBusy) gets
// wire.ErrRingFull without an allocation per try.
func TestQueueOnFullRingAllocs(t *testing.T) {
	r := newRig(t, sdx55(), nil)
	if err := r.ctrl.PowerUp(); err != nil {
		t.Fatal(err)
	}
	dl, err := r.ctrl.Channel(1) // LOOPBACK downlink: nothing fills it
	if err != nil {
		t.Fatal(err)
	}
	if err := dl.Start(nil); err != nil {
		t.Fatal(err)
	}
	buf, err := r.t.Alloc(4096, 4096)
	if err != nil {
		t.Fatal(err)
	}
	x := []mhi.Transfer{{IOVA: buf.IOVA, Len: 4096, Flags: mhi.FlagEOT}}
	for dl.Free() > 0 {
		if err := dl.Queue(x); err != nil {
			t.Fatal(err)
		}
	}
	var got error
	allocs := testing.AllocsPerRun(100, func() { got = dl.Queue(x) })
	if !errors.Is(got, wire.ErrRingFull) {
		t.Fatalf("Queue on a full ring: %v, want ErrRingFull", got)
	}
	if allocs != 0 {
		t.Errorf("%v allocations per Queue on a full ring, want 0", allocs)
	}
}
