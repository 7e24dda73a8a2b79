package simclock

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhi/testenv/poll"
)

// TestOrder: events run in order of time and, at equal times, of
// scheduling; the clock jumps from one to the next.
func TestOrder(t *testing.T) {
	s := New()
	var got []string
	at := func(name string, d time.Duration) {
		s.AfterFunc(d, func() { got = append(got, fmt.Sprintf("%s@%v", name, s.Now())) })
	}
	at("c", 3*time.Millisecond)
	at("a", time.Millisecond)
	at("b1", 2*time.Millisecond)
	at("b2", 2*time.Millisecond)
	at("z", 0)
	s.RunUntilIdle()
	want := []string{"z@0s", "a@1ms", "b1@2ms", "b2@2ms", "c@3ms"}
	if !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	if s.Events() != 5 || s.Pending() != 0 || s.Now() != 3*time.Millisecond {
		t.Errorf("events %d pending %d now %v", s.Events(), s.Pending(), s.Now())
	}
}

// TestTimerResetStop: a timer re-armed moves (and counts as scheduled
// anew for ties); a stopped one does not run.
func TestTimerResetStop(t *testing.T) {
	s := New()
	var got []string
	a := s.NewTimer(func() { got = append(got, "a") })
	b := s.NewTimer(func() { got = append(got, "b") })
	if a.Reset(time.Second) || b.Reset(time.Second) {
		t.Fatal("fresh timers reported pending")
	}
	if !a.Reset(time.Second) { // a now after b at the same time
		t.Fatal("Reset of a pending timer did not report it")
	}
	c := s.AfterFunc(time.Second, func() { got = append(got, "c") })
	if !c.Stop() || c.Stop() || c.Pending() {
		t.Fatal("Stop")
	}
	if when, ok := a.When(); !ok || when != time.Second {
		t.Fatalf("When %v %v", when, ok)
	}
	s.RunUntilIdle()
	if !slices.Equal(got, []string{"b", "a"}) {
		t.Fatalf("got %v", got)
	}
	// A timer in the past runs now.
	a.ResetAt(0)
	if when, _ := a.When(); when != time.Second {
		t.Fatalf("past ResetAt at %v, want now (1s)", when)
	}
	s.RunUntilIdle()
	if len(got) != 3 {
		t.Fatalf("got %v", got)
	}
}

// TestAdvance: a callback may move the clock forward up to the next event,
// never past it or backwards.
func TestAdvance(t *testing.T) {
	s := New()
	s.AfterFunc(10*time.Millisecond, func() {})
	s.AfterFunc(0, func() {
		s.AdvanceTo(4 * time.Millisecond)
		if ok, next, has := s.AdvanceBefore(7 * time.Millisecond); !ok || !has || next != 10*time.Millisecond {
			t.Errorf("AdvanceBefore(7ms) = %v %v %v", ok, next, has)
		}
		if ok, _, _ := s.AdvanceBefore(10 * time.Millisecond); ok {
			t.Error("AdvanceBefore onto the next event")
		}
		if ok, _, _ := s.AdvanceBefore(time.Millisecond); ok {
			t.Error("AdvanceBefore into the past")
		}
		for _, bad := range []time.Duration{time.Millisecond, 11 * time.Millisecond} {
			func() {
				defer func() {
					if recover() == nil {
						t.Errorf("AdvanceTo(%v) did not panic at %v", bad, s.Now())
					}
				}()
				s.AdvanceTo(bad)
			}()
		}
	})
	s.Step()
	if s.Now() != 7*time.Millisecond {
		t.Fatalf("now %v", s.Now())
	}
	s.RunUntilIdle()
	if s.Now() != 10*time.Millisecond {
		t.Fatalf("now %v", s.Now())
	}
}

// TestServe: Serve runs events scheduled from other goroutines, and Call
// runs a function on its goroutine.
func TestServe(t *testing.T) {
	s := New()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Serve(ctx)
	}()
	var ran []time.Duration
	for i := range 3 {
		if err := s.Call(ctx, func() {
			s.NewTimer(func() { ran = append(ran, s.Now()) }).ResetAt(time.Duration(i+1) * time.Hour)
		}); err != nil {
			t.Fatal(err)
		}
	}
	if !poll.Until(10*time.Second, func() bool {
		var n int
		if err := s.Call(ctx, func() { n = len(ran) }); err != nil {
			t.Fatal(err)
		}
		return n >= 3
	}) {
		t.Fatalf("events ran %v", ran)
	}
	cancel()
	<-done
	if len(ran) != 3 || ran[2] != 3*time.Hour {
		t.Fatalf("ran %v", ran)
	}
}

// TestRunUntil stops at the condition.
func TestRunUntil(t *testing.T) {
	s := New()
	n := 0
	for i := range 5 {
		s.AfterFunc(time.Duration(i), func() { n++ })
	}
	if !s.RunUntil(func() bool { return n == 3 }) || n != 3 || s.Pending() != 2 {
		t.Fatalf("n %d pending %d", n, s.Pending())
	}
	if s.RunUntil(func() bool { return n == 9 }) {
		t.Fatal("RunUntil reported an unmet condition")
	}
}

// BenchmarkTimer is the cost of re-arming a timer and running its event.
func BenchmarkTimer(b *testing.B) {
	s := New()
	var tm *Timer
	tm = s.NewTimer(func() {})
	others := make([]*Timer, 64)
	for i := range others {
		others[i] = s.AfterFunc(time.Duration(i+1)*time.Hour, func() {})
	}
	b.ReportAllocs()
	for b.Loop() {
		tm.Reset(time.Microsecond)
		s.Step()
	}
}
