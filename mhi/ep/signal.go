package ep

// signal is a broadcast condition usable in select statements. Its methods
// are not synchronised: the owner guards it with the mutex that also guards
// the condition it stands for, so that checking the condition and taking the
// wait channel happen atomically.
type signal struct {
	ch chan struct{}
}

// wait returns a channel closed by the next broadcast. The channel is made
// only when somebody waits, so broadcasts without waiters cost nothing.
func (s *signal) wait() <-chan struct{} {
	if s.ch == nil {
		s.ch = make(chan struct{})
	}
	return s.ch
}

// broadcast wakes every waiter.
func (s *signal) broadcast() {
	if s.ch != nil {
		close(s.ch)
		s.ch = nil
	}
}
