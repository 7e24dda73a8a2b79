package inproc

import (
	"fmt"
	"math/bits"
	"sync"
	"sync/atomic"

	"github.com/gomhi/gomhi/mhi"
	"github.com/gomhi/gomhi/mhi/ep"
)

// DefaultBase is the IOVA of the first byte of host memory, well away from
// zero so that a zero pointer from either side is always out of bounds.
const DefaultBase = 0x4000_0000

// DefaultMemory is the default size of the DMA slab.
const DefaultMemory = 64 << 20

// MaxVectors is the number of MSI vectors an in-process device offers.
const MaxVectors = 64

// Options configure an in-process transport.
type Options struct {
	// Memory is the slab size in bytes (default DefaultMemory).
	Memory int
	// Vectors is the number of MSI vectors (default 32, at most MaxVectors).
	Vectors int
	// InterruptSink, if set, receives every vector the device raises,
	// synchronously on the raising goroutine, instead of the handler the
	// host installs: for a driver that runs the host in virtual time
	// (mhi.Controller.ProcessInterrupt). It must not block.
	InterruptSink func(vector int)
}

// Transport is an mhi.Transport (and mhi.BARSizer) whose device is an
// ep.Device in the same process.
type Transport struct {
	slab    *Slab
	dev     *ep.Device
	vectors int
	barSize uint64

	pending atomic.Uint64 // raised, not yet delivered vectors
	wake    chan struct{}
	stop    chan struct{}
	done    chan struct{}

	mu      sync.RWMutex
	handler func(int)
	sink    func(int)

	closeOnce sync.Once
}

// New builds the slab, starts a mock modem configured by cfg on it and
// returns the transport joining them.
func New(cfg ep.Config, opts Options) (*Transport, error) {
	if opts.Memory == 0 {
		opts.Memory = DefaultMemory
	}
	if opts.Vectors == 0 {
		opts.Vectors = 32
	}
	if opts.Vectors < 1 || opts.Vectors > MaxVectors {
		return nil, fmt.Errorf("inproc: %d vectors, want 1..%d", opts.Vectors, MaxVectors)
	}
	bar := cfg.RegLen
	if bar == 0 {
		bar = ep.DefaultRegLen
	}
	t := &Transport{
		slab:    NewSlab(DefaultBase, opts.Memory),
		vectors: opts.Vectors,
		sink:    opts.InterruptSink,
		barSize: uint64(bar),
		wake:    make(chan struct{}, 1),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
	}
	dev, err := ep.New(cfg, t.slab, raiser{t})
	if err != nil {
		return nil, err
	}
	t.dev = dev
	go t.deliver()
	return t, nil
}

// Device returns the mock modem, for fault injection and statistics.
func (t *Transport) Device() *ep.Device { return t.dev }

// BARSize implements mhi.BARSizer: the mock's register space is its whole
// BAR.
func (t *Transport) BARSize() uint64 { return t.barSize }

// Slab returns the host memory shared with the device.
func (t *Transport) Slab() *Slab { return t.slab }

// DeviceTrusted reports true: the device is the project's own mock modem
// in the host's process, not a bus master that could write host memory
// behind the host's back (mhinet's RxCopyAuto delivers zero-copy for it).
func (t *Transport) DeviceTrusted() bool { return true }

// Read32 implements mhi.Registers.
func (t *Transport) Read32(off uint32) (uint32, error) { return t.dev.ReadRegister(off), nil }

// Write32 implements mhi.Registers.
func (t *Transport) Write32(off, v uint32) error {
	t.dev.WriteRegister(off, v)
	return nil
}

// Alloc implements mhi.DMAMemory.
func (t *Transport) Alloc(size, align int) (mhi.DMABuffer, error) { return t.slab.Alloc(size, align) }

// Free implements mhi.DMAMemory.
func (t *Transport) Free(b mhi.DMABuffer) error { return t.slab.Free(b) }

// Vectors implements mhi.Interrupts.
func (t *Transport) Vectors() int { return t.vectors }

// SetInterruptHandler implements mhi.Interrupts. It waits for a handler
// call in progress to return.
func (t *Transport) SetInterruptHandler(h func(int)) {
	t.mu.Lock()
	t.handler = h
	t.mu.Unlock()
}

// Reset implements mhi.Transport: a function-level reset of the mock modem.
func (t *Transport) Reset() error {
	t.dev.Reset()
	return nil
}

// Close stops the device and the interrupt delivery.
func (t *Transport) Close() error {
	var err error
	t.closeOnce.Do(func() {
		err = t.dev.Close()
		close(t.stop)
		<-t.done
	})
	return err
}

type raiser struct{ t *Transport }

// Raise marks vector pending, like an MSI pending bit; it never blocks.
func (r raiser) Raise(vector int) {
	if vector < 0 || vector >= r.t.vectors {
		vector = 0
	}
	if r.t.sink != nil {
		r.t.sink(vector)
		return
	}
	r.t.pending.Or(1 << uint(vector))
	select {
	case r.t.wake <- struct{}{}:
	default:
	}
}

// deliver calls the handler for every pending vector, lowest first.
func (t *Transport) deliver() {
	defer close(t.done)
	for {
		select {
		case <-t.stop:
			return
		case <-t.wake:
		}
		for p := t.pending.Swap(0); p != 0; p &= p - 1 {
			v := bits.TrailingZeros64(p)
			// The handler runs under the read lock, so that
			// SetInterruptHandler(nil) returns only once no call is
			// running: the host frees its rings right after it.
			t.mu.RLock()
			if t.handler != nil {
				t.handler(v)
			}
			t.mu.RUnlock()
		}
	}
}
