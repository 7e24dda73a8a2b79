package ep

import (
	"sync"
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhi/testenv/poll"
)

// condition is a counter guarded by mu with a signal broadcast whenever it
// changes, the way the device uses signal.
type condition struct {
	mu  sync.Mutex
	n   int
	sig signal
}

func (c *condition) add(d int) {
	c.mu.Lock()
	c.n += d
	c.sig.broadcast()
	c.mu.Unlock()
}

// waitFor waits until n reaches want or done is closed, and reports
// whether n did.
func (c *condition) waitFor(want int, done <-chan struct{}) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.n < want {
		if !c.sig.waitLocked(&c.mu, done, nil) {
			return false
		}
	}
	return true
}

// waiters returns how many waiters are registered and how many channels
// are kept for reuse.
func (c *condition) waiters() (waiting, spare int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.sig.waiting), len(c.sig.spare)
}

// untilWaiting polls until n waiters are registered.
func (c *condition) untilWaiting(t *testing.T, n int) {
	t.Helper()
	if !poll.Until(5*time.Second, func() bool { w, _ := c.waiters(); return w == n }) {
		w, _ := c.waiters()
		t.Fatalf("%d waiters registered, want %d", w, n)
	}
}

// Every waiter registered before a broadcast is woken by it; a waiter
// that gives up (its done channel closed) leaves the list, and its
// channel, with no stale wakeup in it, is reused by the next waiter; a
// broadcast with nobody waiting does nothing.
func TestSignalWakesEveryWaiterAndRecyclesChannels(t *testing.T) {
	var c condition
	c.add(0) // a broadcast with nobody waiting
	const waiters = 5
	results := make(chan bool, waiters+1)
	for range waiters {
		go func() { results <- c.waitFor(1, nil) }()
	}
	giveUp := make(chan struct{})
	go func() { results <- c.waitFor(1, giveUp) }()
	c.untilWaiting(t, waiters+1)

	close(giveUp)
	if ok := <-results; ok {
		t.Fatal("the waiter that gave up reports the condition met")
	}
	if w, s := c.waiters(); w != waiters || s != 1 {
		t.Fatalf("after one waiter gave up: %d waiting, %d spare; want %d, 1", w, s, waiters)
	}

	c.add(1)
	for range waiters {
		select {
		case ok := <-results:
			if !ok {
				t.Fatal("a waiter woken by the broadcast reports the condition unmet")
			}
		case <-time.After(5 * time.Second):
			t.Fatal("a broadcast did not wake every waiter")
		}
	}
	if w, s := c.waiters(); w != 0 || s != waiters+1 {
		t.Fatalf("after the broadcast: %d waiting, %d spare; want 0, %d", w, s, waiters+1)
	}

	// The channels come back empty: a new waiter is not woken by an old
	// broadcast, only by the next one.
	go func() { results <- c.waitFor(2, nil) }()
	c.untilWaiting(t, 1)
	select {
	case <-results:
		t.Fatal("a waiter returned before the condition was met")
	case <-time.After(20 * time.Millisecond):
	}
	c.add(1)
	if ok := <-results; !ok {
		t.Fatal("the last waiter reports the condition unmet")
	}
}

// A waiter woken while it was giving up (the broadcast and its done
// channel both ready) leaves no value behind in its channel: the next
// waiter to reuse the channel is not woken until the next broadcast.
func TestSignalGiveUpAfterBroadcast(t *testing.T) {
	var s signal
	var mu sync.Mutex
	closed := make(chan struct{})
	close(closed)
	for range 100 {
		mu.Lock()
		wake := s.register()
		s.broadcast() // the value is sent; the waiter may take either case
		mu.Unlock()
		select {
		case <-wake:
		case <-closed:
		}
		mu.Lock()
		s.unregister(wake)
		mu.Unlock()
	}
	mu.Lock()
	defer mu.Unlock()
	if len(s.spare) != 1 || len(s.waiting) != 0 {
		t.Fatalf("%d spare, %d waiting; want 1, 0", len(s.spare), len(s.waiting))
	}
	if len(s.spare[0]) != 0 {
		t.Fatal("a channel given back holds a wakeup")
	}
}

// Producers and consumers of a bounded counter wait on one signal each
// way under the race detector; every wait ends (no lost wakeup) and the
// counter ends where it started.
func TestSignalProducersConsumers(t *testing.T) {
	const (
		limit  = 2
		each   = 2000
		pairs  = 4
		budget = 30 * time.Second
	)
	var (
		mu              sync.Mutex
		n               int
		notFull, filled signal
	)
	var wg sync.WaitGroup
	for range pairs {
		wg.Go(func() {
			for range each {
				mu.Lock()
				for n == limit {
					notFull.waitLocked(&mu, nil, nil)
				}
				n++
				filled.broadcast()
				mu.Unlock()
			}
		})
		wg.Go(func() {
			for range each {
				mu.Lock()
				for n == 0 {
					filled.waitLocked(&mu, nil, nil)
				}
				n--
				notFull.broadcast()
				mu.Unlock()
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(budget):
		t.Fatal("producers and consumers stuck: a wakeup was lost")
	}
	if n != 0 {
		t.Fatalf("counter ends at %d, want 0", n)
	}
}

// Waiting and being woken allocates nothing once the signal has a channel
// for each waiter.
func TestSignalWaitAllocs(t *testing.T) {
	var c condition
	woken := make(chan bool)
	next := make(chan int)
	go func() {
		for want := range next {
			woken <- c.waitFor(want, nil)
		}
	}()
	defer close(next)
	want := 0
	round := func() {
		want++
		next <- want
		c.untilWaitingQuiet()
		c.add(1)
		if !<-woken {
			panic("waiter not woken")
		}
	}
	round() // the signal makes its one channel
	if a := testing.AllocsPerRun(100, round); a != 0 {
		t.Errorf("%v allocations per wait and broadcast, want 0", a)
	}
}

// untilWaitingQuiet spins (without allocating) until one waiter is
// registered.
func (c *condition) untilWaitingQuiet() {
	for {
		if w, _ := c.waiters(); w == 1 {
			return
		}
		time.Sleep(50 * time.Microsecond)
	}
}
