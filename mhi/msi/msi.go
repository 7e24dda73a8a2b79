// Package msi delivers the interrupts of a device that runs in the host's
// process (mhi/inproc's mock modem, mhi/hostile's scripted device, tests'
// transports) the way MSI does: raising a vector sets its pending bit and
// never blocks; a goroutine calls the host's handler for every pending
// vector, lowest first, so that vectors raised again before delivery are
// delivered once. It implements the interrupt half of mhi.Interrupts
// (SetInterruptHandler) for such transports.
package msi

import (
	"math/bits"
	"sync"
	"sync/atomic"
)

// MaxVectors is the number of vectors a Deliverer holds.
const MaxVectors = 64

// Deliverer holds raised vectors and delivers them to a handler on its own
// goroutine. Make one with New; Close stops it.
type Deliverer struct {
	pending atomic.Uint64 // raised, not yet delivered vectors
	wake    chan struct{}
	stop    chan struct{}
	done    chan struct{}

	mu      sync.RWMutex
	handler func(vector int)

	closeOnce sync.Once
}

// New starts a Deliverer without a handler.
func New() *Deliverer {
	d := &Deliverer{wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go d.deliver()
	return d
}

// Raise marks vector pending, like an MSI pending bit; it never blocks.
// vector must be in [0, MaxVectors): the caller maps what its device may
// not raise (Linux's pci_generic routes it to vector 0).
func (d *Deliverer) Raise(vector int) {
	d.pending.Or(1 << uint(vector))
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// SetHandler installs h (nil: pending vectors are dropped when
// delivered). It returns once no call of the previous handler is running,
// so that a host removing its handler may free what the handler uses.
func (d *Deliverer) SetHandler(h func(vector int)) {
	d.mu.Lock()
	d.handler = h
	d.mu.Unlock()
}

// Close stops the delivery and waits for a handler call in progress.
// Vectors raised afterwards stay pending. Calling it again does nothing.
func (d *Deliverer) Close() {
	d.closeOnce.Do(func() {
		close(d.stop)
		<-d.done
	})
}

// deliver calls the handler for every pending vector, lowest first.
func (d *Deliverer) deliver() {
	defer close(d.done)
	for {
		select {
		case <-d.stop:
			return
		case <-d.wake:
		}
		for p := d.pending.Swap(0); p != 0; p &= p - 1 {
			v := bits.TrailingZeros64(p)
			// The handler runs under the read lock, so that
			// SetHandler(nil) returns only once no call is running.
			d.mu.RLock()
			if d.handler != nil {
				d.handler(v)
			}
			d.mu.RUnlock()
		}
	}
}
