package vfiouser

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhi/ep"
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
	c, s := socketPair(t)
	done := make(chan error, 1)
	go func() { done <- Serve(context.Background(), s, dev) }()
	tr, err := NewClient(c, ClientOptions{Memory: 1 << 20})
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
				failed = ErrTimeout
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
