package msi

import (
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhi/testenv/poll"
)

// TestDelivery raises vectors while the handler is blocked and checks
// that they are then delivered once each, lowest first.
func TestDelivery(t *testing.T) {
	d := New()
	t.Cleanup(d.Close)
	got := make(chan int, 16)
	release, free := gate(t)
	d.SetHandler(func(v int) {
		if v == 63 {
			<-release
		}
		got <- v
	})
	d.Raise(63) // held in the handler until the others are pending
	poll.Wait(t, 5*time.Second, func() bool { return d.pending.Load() == 0 }, func() string { return "condition not reached" })
	for _, v := range []int{9, 0, 9, 40, 0} {
		d.Raise(v)
	}
	free()
	var order []int
	for len(order) < 4 {
		select {
		case v := <-got:
			order = append(order, v)
		case <-time.After(5 * time.Second):
			t.Fatalf("delivered %v, want 4 vectors", order)
		}
	}
	if want := []int{63, 0, 9, 40}; !slices.Equal(order, want) {
		t.Fatalf("delivered %v, want %v", order, want)
	}
	select {
	case v := <-got:
		t.Fatalf("vector %d delivered twice", v)
	case <-time.After(50 * time.Millisecond):
	}
}

// TestSetHandlerWaits checks that replacing the handler waits for a call
// in progress, and that no call reaches a removed handler.
func TestSetHandlerWaits(t *testing.T) {
	d := New()
	t.Cleanup(d.Close)
	entered := make(chan struct{})
	release, free := gate(t)
	var calls atomic.Int32
	d.SetHandler(func(int) {
		calls.Add(1)
		close(entered)
		<-release
	})
	d.Raise(1)
	<-entered
	replaced := make(chan struct{})
	go func() {
		d.SetHandler(nil)
		close(replaced)
	}()
	select {
	case <-replaced:
		t.Fatal("SetHandler returned while the old handler ran")
	case <-time.After(50 * time.Millisecond):
	}
	free()
	<-replaced
	d.Raise(2)
	time.Sleep(50 * time.Millisecond)
	if n := calls.Load(); n != 1 {
		t.Fatalf("%d handler calls, want 1", n)
	}
}

// TestClose checks that Close stops delivery, that raising afterwards
// neither blocks nor delivers, and that a second Close returns.
func TestClose(t *testing.T) {
	d := New()
	var calls atomic.Int32
	d.SetHandler(func(int) { calls.Add(1) })
	d.Close()
	raised := make(chan struct{})
	go func() {
		for v := range MaxVectors {
			d.Raise(v)
			d.Raise(v)
		}
		d.Close()
		close(raised)
	}()
	select {
	case <-raised:
	case <-time.After(5 * time.Second):
		t.Fatal("Raise or a second Close blocked after Close")
	}
	time.Sleep(50 * time.Millisecond)
	if n := calls.Load(); n != 0 {
		t.Fatalf("%d handler calls after Close", n)
	}
}

// gate returns a channel a handler waits on and the function that opens
// it, which the test's cleanup also calls (before the Deliverer's Close),
// so that a failing test does not leave a handler blocked.
func gate(t *testing.T) (<-chan struct{}, func()) {
	c := make(chan struct{})
	var once sync.Once
	open := func() { once.Do(func() { close(c) }) }
	t.Cleanup(open)
	return c, open
}
