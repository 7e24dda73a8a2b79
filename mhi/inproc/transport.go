// Package inproc joins the host stack (package mhi) to the mock modem
// (package mhi/ep) in one process: one DMA slab addressed by IOVA, register
// accesses as function calls, and interrupts delivered asynchronously.
package inproc

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/gomhi/gomhi/mhi"
	"github.com/gomhi/gomhi/mhi/ep"
	"github.com/gomhi/gomhi/mhi/msi"
	"github.com/gomhi/gomhi/mhi/slab"
)

// DefaultBase is the IOVA of the first byte of host memory, well away from
// zero so that a zero pointer from either side is always out of bounds.
const DefaultBase = 0x4000_0000

// DefaultMemory is the default size of the DMA slab.
const DefaultMemory = 64 << 20

// MaxVectors is the number of MSI vectors an in-process device offers.
const MaxVectors = msi.MaxVectors

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
	slab    *slab.Slab
	dev     *ep.Device
	vectors int
	barSize uint64

	irq  *msi.Deliverer
	sink func(int)

	// Off the bus (Unplug): the read error (nil: all ones) is set before
	// the flag; the counters count the accesses made since.
	unplugged      atomic.Bool
	unplugErr      error
	unpluggedRead  atomic.Uint64
	unpluggedWrite atomic.Uint64

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
		slab:    slab.New(DefaultBase, opts.Memory),
		vectors: opts.Vectors,
		sink:    opts.InterruptSink,
		barSize: uint64(bar),
		irq:     msi.New(),
	}
	dev, err := ep.New(cfg, t.slab, raiser{t})
	if err != nil {
		t.irq.Close()
		return nil, err
	}
	t.dev = dev
	return t, nil
}

// Device returns the mock modem, for fault injection and statistics.
func (t *Transport) Device() *ep.Device { return t.dev }

// BARSize implements mhi.BARSizer: the mock's register space is its whole
// BAR.
func (t *Transport) BARSize() uint64 { return t.barSize }

// Slab returns the host memory shared with the device.
func (t *Transport) Slab() *slab.Slab { return t.slab }

// DeviceTrusted reports true: the device is the project's own mock modem
// in the host's process, not a bus master that could write host memory
// behind the host's back (mhinet's RxCopyAuto delivers zero-copy for it).
func (t *Transport) DeviceTrusted() bool { return true }

// Unplug takes the device off the bus, as a surprise removal or a PCIe
// link that went down after completion timeouts: from then on register
// reads return all ones (or fail with readErr when it is not nil), writes
// and function-level resets have no effect and no interrupt reaches the
// host. The device runs on, unheard. Call it once.
func (t *Transport) Unplug(readErr error) {
	t.unplugErr = readErr
	t.unplugged.Store(true)
}

// Unplugged returns the register reads and writes the host made since
// Unplug.
func (t *Transport) Unplugged() (reads, writes uint64) {
	return t.unpluggedRead.Load(), t.unpluggedWrite.Load()
}

// Read32 implements mhi.Registers.
func (t *Transport) Read32(off uint32) (uint32, error) {
	if t.unplugged.Load() {
		t.unpluggedRead.Add(1)
		if t.unplugErr != nil {
			return 0, fmt.Errorf("inproc: read register 0x%x: %w", off, t.unplugErr)
		}
		return 0xFFFFFFFF, nil
	}
	return t.dev.ReadRegister(off), nil
}

// Write32 implements mhi.Registers.
func (t *Transport) Write32(off, v uint32) error {
	if t.unplugged.Load() {
		t.unpluggedWrite.Add(1)
		return nil
	}
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
func (t *Transport) SetInterruptHandler(h func(int)) { t.irq.SetHandler(h) }

// Reset implements mhi.Transport: a function-level reset of the mock modem.
func (t *Transport) Reset() error {
	if t.unplugged.Load() {
		return nil
	}
	t.dev.Reset()
	return nil
}

// Close stops the device and the interrupt delivery.
func (t *Transport) Close() error {
	var err error
	t.closeOnce.Do(func() {
		err = t.dev.Close()
		t.irq.Close()
	})
	return err
}

type raiser struct{ t *Transport }

// Raise marks vector pending, like an MSI pending bit; it never blocks.
func (r raiser) Raise(vector int) {
	if vector < 0 || vector >= r.t.vectors {
		vector = 0
	}
	if r.t.unplugged.Load() {
		return // off the bus: the MSI write goes nowhere
	}
	if r.t.sink != nil {
		r.t.sink(vector)
		return
	}
	r.t.irq.Raise(vector)
}
