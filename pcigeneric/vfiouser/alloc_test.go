package vfiouser

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhi/ep"
	"github.com/gomhi/gomhi/mhi/loopback"
	"github.com/gomhi/gomhi/pcigeneric/vfiouser/client"
	"github.com/gomhi/gomhi/pcigeneric/vfiouser/internal/vutest"
	"github.com/gomhi/gomhi/pcigeneric/vfiouser/protocol"
)

// TestRoundTripAllocs checks that the vfio-user part of a LOOPBACK round
// trip allocates nothing on a warm connection: the client's posted BAR0
// writes (a doorbell pair with WritePair32, as the controller rings it,
// and a single Write32), the server reading them, decoding them and
// writing the modem's registers, and an interrupt back from the server's
// interrupt table through the eventfd to the client's handler. Client and
// server run in this process, so AllocsPerRun counts both ends.
//
// Each run makes rounds round trips, so an allocation in one of every
// rounds round trips (or more) fails the test.
func TestRoundTripAllocs(t *testing.T) {
	const (
		rounds = 10
		vector = 1
	)
	lo := uint32(ep.ChannelDoorbellOffset + 8*3) // a channel doorbell the modem ignores (channel not started)
	// The server raises the vector when the low half is written, as the
	// modem does once a doorbell leads to a completion.
	var dev *ServerDevice
	dev, err := NewServerDevice(DeviceOptions{OnRegister: func(a RegisterAccess) {
		if a.Write && a.Offset == lo {
			dev.mu.Lock()
			irqs := dev.irqs
			dev.mu.Unlock()
			irqs.Raise(vector)
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	c, s := vutest.SocketPair(t)
	done := make(chan error, 1)
	go func() { done <- serveConn(context.Background(), s, dev) }()
	tr, err := client.New(c, client.Options{Memory: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan int, 64)
	tr.SetInterruptHandler(func(v int) { got <- v })
	defer func() {
		tr.SetInterruptHandler(nil)
		if err := tr.Close(); err != nil {
			t.Error(err)
		}
		if err := waitServe(t, done); err != nil {
			t.Error(err)
		}
	}()
	var failed error
	timeout := time.NewTimer(time.Hour)
	defer timeout.Stop()
	roundTrip := func() {
		for range rounds {
			if err := tr.Write32(lo+8, 1); err != nil { // another channel's doorbell, low half only
				failed = err
				return
			}
			if err := tr.WritePair32(lo+4, 0, lo, 0x1000); err != nil {
				failed = err
				return
			}
			timeout.Reset(5 * time.Second)
			select {
			case v := <-got:
				if v != vector {
					failed = errVector
					return
				}
			case <-timeout.C:
				failed = protocol.ErrTimeout
				return
			}
		}
	}
	for range 100 { // warm: buffers grown, goroutines parked in the poller
		roundTrip()
	}
	allocs := testing.AllocsPerRun(200, roundTrip)
	if failed != nil {
		t.Fatal(failed)
	}
	if allocs != 0 {
		t.Errorf("%v allocations per %d round trips (doorbell pair, a posted write, an interrupt back), want 0", allocs, rounds)
	}
	st := dev.Interrupts().Vectors[vector]
	if st.Signalled < 300*rounds {
		t.Errorf("vector %d signalled %d times, want at least %d", vector, st.Signalled, 300*rounds)
	}
}

var errVector = errors.New("interrupt on the wrong vector")

// TestLoopbackRoundTripAllocs holds the whole LOOPBACK round trip of
// BenchmarkLoopback across vfio-user to 0 allocations: the host stack,
// the client's messages and interrupts, the server, and the mock modem
// behind it (its echo waits for room in the downlink queue while the host
// has not posted buffers yet). Everything runs in this process, so
// AllocsPerRun counts every part; mhi/inproc's test of the same name holds
// the round trip without vfio-user. Each run makes rounds round trips.
func TestLoopbackRoundTripAllocs(t *testing.T) {
	const (
		rounds = 20
		runs   = 50
	)
	r := newRig(t, client.Options{}, 5*time.Second)
	if err := r.ctrl.PowerUp(); err != nil {
		t.Fatal(err)
	}
	c, err := loopback.Open(r.ctrl, loopback.Options{DLBufferSize: 32768})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, size := range []int{64, 1500} { // one connection: the modem's spare buffers grow
		ro := loopback.RunOptions{Count: rounds, MinSize: size, MaxSize: size}
		var failed error
		run := func() {
			if res, err := c.Run(ro); failed == nil && (err != nil || res.Received != rounds || res.Mismatched != 0) {
				failed = fmt.Errorf("run of %d-byte payloads: %v %+v", size, err, res)
			}
		}
		for range 10 {
			run()
		}
		waits := r.dev.Modem().Stats().DLQueueWaits
		allocs := testing.AllocsPerRun(runs, run)
		if failed != nil {
			t.Fatal(failed)
		}
		if allocs != 0 {
			t.Errorf("%v allocations per %d round trips of %d bytes, want 0", allocs, rounds, size)
		}
		if r.dev.Modem().Stats().DLQueueWaits == waits {
			t.Errorf("%d-byte payloads: the modem's downlink never waited for room in its queue: its wait went untested", size)
		}
	}
}
