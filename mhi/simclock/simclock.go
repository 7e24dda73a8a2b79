// Package simclock is a discrete-event clock: virtual time that moves only
// from one scheduled event to the next. Modelled hardware that runs on it
// (the mock modem's data path, the cost model of a host) takes no wall-clock
// time at all: a millisecond of interrupt moderation is one event a
// millisecond of virtual time later, not a sleep. Events run one at a time,
// in order of their time and, at equal times, of their scheduling, so a
// program whose events are all scheduled from event callbacks runs the same
// way every time.
//
// A Scheduler is safe for concurrent use: code on other goroutines may
// schedule events (a control path setting things up), and one goroutine runs
// them (Serve, or Step and RunUntilIdle from a driver). The callbacks run on
// that goroutine, never concurrently with each other.
package simclock

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Scheduler is the virtual clock and its queue of events. The zero value is
// not usable; call New.
type Scheduler struct {
	mu      sync.Mutex
	now     time.Duration
	seq     uint64
	heap    []*Timer
	waiting bool // Serve waits for an event
	wake    chan struct{}
	running bool // an event callback is running
	events  uint64
}

// New returns a Scheduler at virtual time zero with nothing scheduled.
func New() *Scheduler {
	return &Scheduler{wake: make(chan struct{}, 1)}
}

// Timer is an event: a callback due at a virtual time. It can be re-armed
// any number of times (Reset, ResetAt) without allocating, and stopped.
type Timer struct {
	s   *Scheduler
	f   func()
	at  time.Duration
	seq uint64
	idx int // position in the heap; -1 when not scheduled
}

// Now returns the virtual time.
func (s *Scheduler) Now() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.now
}

// Events returns the number of event callbacks run so far.
func (s *Scheduler) Events() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.events
}

// NewTimer returns a stopped timer that runs f when it fires.
func (s *Scheduler) NewTimer(f func()) *Timer {
	return &Timer{s: s, f: f, idx: -1}
}

// AfterFunc schedules f to run d after the current virtual time and returns
// its timer.
func (s *Scheduler) AfterFunc(d time.Duration, f func()) *Timer {
	t := s.NewTimer(f)
	t.Reset(d)
	return t
}

// Reset (re)schedules the timer d after the current virtual time (d < 0
// counts as 0) and reports whether it was pending.
func (t *Timer) Reset(d time.Duration) bool {
	s := t.s
	s.mu.Lock()
	was := t.scheduleLocked(s.now + max(d, 0))
	w := s.waiting
	s.mu.Unlock()
	if w {
		s.signal()
	}
	return was
}

// ResetAt (re)schedules the timer at virtual time at, or now if at is in the
// past, and reports whether it was pending.
func (t *Timer) ResetAt(at time.Duration) bool {
	s := t.s
	s.mu.Lock()
	was := t.scheduleLocked(max(at, s.now))
	w := s.waiting
	s.mu.Unlock()
	if w {
		s.signal()
	}
	return was
}

// Stop cancels the timer and reports whether it was pending.
func (t *Timer) Stop() bool {
	s := t.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if t.idx < 0 {
		return false
	}
	s.remove(t.idx)
	return true
}

// Pending reports whether the timer is scheduled.
func (t *Timer) Pending() bool {
	t.s.mu.Lock()
	defer t.s.mu.Unlock()
	return t.idx >= 0
}

// When returns the virtual time the timer is due and whether it is pending.
func (t *Timer) When() (time.Duration, bool) {
	t.s.mu.Lock()
	defer t.s.mu.Unlock()
	return t.at, t.idx >= 0
}

// scheduleLocked puts t in the heap at time at with a fresh sequence
// number, so that of two events due at the same time the one scheduled
// first runs first. s.mu must be held.
func (t *Timer) scheduleLocked(at time.Duration) bool {
	s := t.s
	s.seq++
	t.at, t.seq = at, s.seq
	if t.idx >= 0 {
		s.fix(t.idx)
		return true
	}
	t.idx = len(s.heap)
	s.heap = append(s.heap, t)
	s.up(t.idx)
	return false
}

// signal wakes Serve, which waits for an event.
func (s *Scheduler) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// NextAt returns the time of the earliest pending event.
func (s *Scheduler) NextAt() (time.Duration, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.heap) == 0 {
		return 0, false
	}
	return s.heap[0].at, true
}

// Pending returns the number of scheduled events.
func (s *Scheduler) Pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.heap)
}

// AdvanceTo moves the virtual time forward to t from inside an event
// callback, for a callback that processes, in order, a run of moments that
// are not events of their own (packets arriving on a link, say): it may
// not move past the earliest pending event, nor backwards. It panics
// otherwise, since that would run events out of order.
func (s *Scheduler) AdvanceTo(t time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t < s.now {
		panic(fmt.Sprintf("simclock: AdvanceTo(%v) before now %v", t, s.now))
	}
	if len(s.heap) > 0 && t > s.heap[0].at {
		panic(fmt.Sprintf("simclock: AdvanceTo(%v) past the next event at %v", t, s.heap[0].at))
	}
	s.now = t
}

// AdvanceBefore moves the virtual time forward to t, as AdvanceTo does,
// if t comes before every pending event (and is not in the past), and
// reports whether it did; else it changes nothing. next is the time of the
// earliest pending event (ok false when there is none), for a caller that
// wants to skip what cannot happen before it.
func (s *Scheduler) AdvanceBefore(t time.Duration) (advanced bool, next time.Duration, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.heap) > 0 {
		next, ok = s.heap[0].at, true
	}
	if t < s.now || (ok && t >= next) {
		return false, next, ok
	}
	s.now = t
	return true, next, ok
}

// Step runs the earliest pending event, moving the virtual time to it, and
// reports whether there was one.
func (s *Scheduler) Step() bool {
	s.mu.Lock()
	if len(s.heap) == 0 {
		s.mu.Unlock()
		return false
	}
	t := s.heap[0]
	s.remove(0)
	if t.at > s.now {
		s.now = t.at
	}
	s.events++
	s.running = true
	s.mu.Unlock()
	t.f()
	s.mu.Lock()
	s.running = false
	s.mu.Unlock()
	return true
}

// RunUntilIdle runs events until none is pending.
func (s *Scheduler) RunUntilIdle() {
	for s.Step() {
	}
}

// RunUntil runs events until done reports true (checked after every event)
// or none is pending; it reports done's last answer.
func (s *Scheduler) RunUntil(done func() bool) bool {
	for !done() {
		if !s.Step() {
			return done()
		}
	}
	return true
}

// Serve runs events as they become due, on the calling goroutine, until ctx
// ends. When nothing is pending it waits for an event to be scheduled (from
// another goroutine); virtual time does not move while it waits.
func (s *Scheduler) Serve(ctx context.Context) {
	for ctx.Err() == nil {
		if s.Step() {
			continue
		}
		s.mu.Lock()
		if len(s.heap) > 0 {
			s.mu.Unlock()
			continue
		}
		s.waiting = true
		s.mu.Unlock()
		select {
		case <-s.wake:
		case <-ctx.Done():
		}
		s.mu.Lock()
		s.waiting = false
		s.mu.Unlock()
	}
}

// Call runs f as an event at the current virtual time on the goroutine that
// runs the events (Serve) and returns when f has returned or ctx ends.
func (s *Scheduler) Call(ctx context.Context, f func()) error {
	done := make(chan struct{})
	s.AfterFunc(0, func() {
		defer close(done)
		f()
	})
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// heap of timers ordered by (at, seq).

func (s *Scheduler) less(i, j int) bool {
	a, b := s.heap[i], s.heap[j]
	if a.at != b.at {
		return a.at < b.at
	}
	return a.seq < b.seq
}

func (s *Scheduler) swap(i, j int) {
	h := s.heap
	h[i], h[j] = h[j], h[i]
	h[i].idx, h[j].idx = i, j
}

func (s *Scheduler) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !s.less(i, p) {
			return
		}
		s.swap(i, p)
		i = p
	}
}

func (s *Scheduler) down(i int) bool {
	start := i
	n := len(s.heap)
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && s.less(r, l) {
			m = r
		}
		if !s.less(m, i) {
			break
		}
		s.swap(i, m)
		i = m
	}
	return i > start
}

func (s *Scheduler) fix(i int) {
	if !s.down(i) {
		s.up(i)
	}
}

func (s *Scheduler) remove(i int) {
	n := len(s.heap) - 1
	t := s.heap[i]
	if i != n {
		s.swap(i, n)
	}
	s.heap[n] = nil
	s.heap = s.heap[:n]
	if i != n {
		s.fix(i)
	}
	t.idx = -1
}
