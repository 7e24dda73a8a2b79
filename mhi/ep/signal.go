package ep

import "sync"

// signal is a broadcast condition that a waiter can give up on (a context
// ending, the device closing), without allocating per wait: each waiter
// borrows a channel of the signal's own, which the next broadcast sends one
// value on, and gives it back when it stops waiting.
//
// Its methods are not synchronised: the owner guards it with the mutex that
// also guards the condition it stands for, so that checking the condition
// and registering as a waiter happen atomically, and a broadcast (made with
// the mutex held, after changing the condition) reaches every waiter that
// saw the old condition. A waiter woken by a broadcast checks the condition
// again: it may have changed back since. The zero value is ready to use; a
// signal must not be copied once used.
type signal struct {
	waiting []chan struct{} // one per registered waiter; buffered (1)
	spare   []chan struct{} // given back, empty, for the next waiters
}

// waitLocked waits for the next broadcast or for done1 or done2 to be
// closed (a nil one never is), and reports whether the broadcast came. mu
// is the mutex guarding s: it must be held, it is released while waiting
// and held again on return, so the caller checks its condition again.
func (s *signal) waitLocked(mu *sync.Mutex, done1, done2 <-chan struct{}) (woken bool) {
	wake := s.register()
	mu.Unlock()
	select {
	case <-wake:
		woken = true
	case <-done1:
	case <-done2:
	}
	mu.Lock()
	s.unregister(wake)
	return woken
}

// register returns a channel the next broadcast sends one value on.
func (s *signal) register() chan struct{} {
	var wake chan struct{}
	if n := len(s.spare); n > 0 {
		wake = s.spare[n-1]
		s.spare[n-1] = nil
		s.spare = s.spare[:n-1]
	} else {
		wake = make(chan struct{}, 1) // only while more goroutines wait at once than ever before
	}
	s.waiting = append(s.waiting, wake)
	return wake
}

// unregister takes back a channel from register: out of the waiting list
// if no broadcast has come since (the waiter gave up), emptied if one came
// and the waiter chose another case of its select, kept for reuse.
func (s *signal) unregister(wake chan struct{}) {
	for i, w := range s.waiting {
		if w == wake {
			last := len(s.waiting) - 1
			s.waiting[i] = s.waiting[last]
			s.waiting[last] = nil
			s.waiting = s.waiting[:last]
			break
		}
	}
	select {
	case <-wake:
	default:
	}
	s.spare = append(s.spare, wake)
}

// broadcast wakes every waiter.
func (s *signal) broadcast() {
	for i, wake := range s.waiting {
		wake <- struct{}{} // never blocks: registered once, emptied before reuse
		s.waiting[i] = nil
	}
	s.waiting = s.waiting[:0]
}
