package mhinet

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/gomhi/gomhi/mhi"
)

// rxBuffer is one receive buffer: DMA memory the device writes into, or a
// reassembly buffer in ordinary memory for aggregates that arrived over
// several elements. Packets delivered from it hold references; it goes back
// to its pool when the last one is released.
type rxBuffer struct {
	pool  *RxPool
	index int
	dma   mhi.DMABuffer
	data  []byte
	// private is host memory the device cannot reach, as large as data:
	// with copy-on-receive a transfer is copied here before it is parsed,
	// and the packets are views into it (nil without copy-on-receive and
	// for reassembly buffers, which are host memory already).
	private []byte
	refs    atomic.Int32
}

func (b *rxBuffer) release() {
	if b.refs.Add(-1) == 0 {
		b.pool.put(b)
	}
}

// RxPool is the set of receive buffers of one MRU, allocated once. Buffers
// are handed out for posting and come back when the device has filled them
// and every packet delivered from them has been released.
type RxPool struct {
	mru  int
	mem  mhi.DMAMemory // nil for a reassembly pool
	bufs []*rxBuffer
	// private is the host memory behind the buffers' private copies
	// (copy-on-receive), allocated once with the pool.
	private []byte
	// maxChain is the most elements a chained transfer may hold in
	// buffers of this pool; see chainLimit.
	maxChain int

	// mu guards free, retired and starved; nothing is taken while it is
	// held (onPut runs after it is released). After Device.rxMu in the
	// Device's lock order.
	mu      sync.Mutex
	free    []*rxBuffer
	retired bool // the pool was replaced; returning buffers are freed
	starved bool // a Get found the pool empty since the last put

	onPut func() // called (without the lock) when a starved pool gets a buffer back
}

// NewRxPool allocates n buffers of mru bytes from mem.
func NewRxPool(mem mhi.DMAMemory, n, mru int) (*RxPool, error) {
	return newRxPool(mem, n, mru, false)
}

// newRxPool allocates n buffers of mru bytes from mem and, with private,
// as much host memory again for their copies (copy-on-receive).
func newRxPool(mem mhi.DMAMemory, n, mru int, private bool) (*RxPool, error) {
	if err := ValidateMRU(mru); err != nil {
		return nil, err
	}
	p := &RxPool{mru: mru, mem: mem, maxChain: max(1, n/2)}
	if private {
		p.private = make([]byte, n*mru)
	}
	for i := 0; i < n; i++ {
		d, err := mem.Alloc(mru, 64)
		if err != nil {
			p.Free()
			return nil, fmt.Errorf("mhinet: receive pool of %d × %d bytes: %w", n, mru, err)
		}
		b := &rxBuffer{pool: p, index: i, dma: d, data: d.Bytes}
		if private {
			b.private = p.private[i*mru : (i+1)*mru : (i+1)*mru]
		}
		p.bufs = append(p.bufs, b)
		p.free = append(p.free, b)
	}
	return p, nil
}

// newReassemblyPool returns a pool of n heap buffers of size bytes.
func newReassemblyPool(n, size int) *RxPool {
	p := &RxPool{mru: size}
	for i := 0; i < n; i++ {
		b := &rxBuffer{pool: p, index: i, data: make([]byte, size)}
		p.bufs = append(p.bufs, b)
		p.free = append(p.free, b)
	}
	return p
}

// MRU returns the size of each buffer.
func (p *RxPool) MRU() int { return p.mru }

// Len returns the number of buffers.
func (p *RxPool) Len() int { return len(p.bufs) }

// Memory returns the bytes the pool holds (buffers × MRU).
func (p *RxPool) Memory() int { return len(p.bufs) * p.mru }

// PrivateMemory returns the host memory of the buffers' private copies
// (copy-on-receive; 0 without it).
func (p *RxPool) PrivateMemory() int { return len(p.private) }

// Available returns the number of free buffers.
func (p *RxPool) Available() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.free)
}

// get takes a free buffer, holding one reference; nil when none is free.
func (p *RxPool) get() *rxBuffer {
	p.mu.Lock()
	n := len(p.free)
	if n == 0 {
		p.starved = true
		p.mu.Unlock()
		return nil
	}
	b := p.free[n-1]
	p.free = p.free[:n-1]
	p.mu.Unlock()
	b.refs.Store(1)
	return b
}

// put returns a released buffer to the pool and wakes the refill if a get
// found the pool empty since the last wake-up.
func (p *RxPool) put(b *rxBuffer) { p.giveBack(b, true) }

// unget gives back a buffer taken with get and never used (its posting
// failed), without waking the refill: the caller holds the device's rxMu.
func (p *RxPool) unget(b *rxBuffer) {
	b.refs.Store(0)
	p.giveBack(b, false)
}

// giveBack puts b back on the free list or, once the pool is retired,
// frees its memory. With wake it runs onPut (outside p.mu) when a get
// found the list empty since the last wake-up.
func (p *RxPool) giveBack(b *rxBuffer, wake bool) {
	p.mu.Lock()
	if p.retired {
		p.mu.Unlock()
		if p.mem != nil {
			_ = p.mem.Free(b.dma)
		}
		return
	}
	p.free = append(p.free, b)
	if !wake {
		p.mu.Unlock()
		return
	}
	starved := p.starved
	p.starved = false
	f := p.onPut
	p.mu.Unlock()
	if starved && f != nil {
		f()
	}
}

// retire frees every buffer that is free now and marks the pool so that the
// others are freed as they come back.
func (p *RxPool) retire() {
	p.mu.Lock()
	p.retired = true
	free := p.free
	p.free = nil
	p.mu.Unlock()
	if p.mem != nil {
		for _, b := range free {
			_ = p.mem.Free(b.dma)
		}
	}
}

// Free releases every buffer's memory; the pool must not be in use.
func (p *RxPool) Free() {
	if p.mem != nil {
		for _, b := range p.bufs {
			_ = p.mem.Free(b.dma)
		}
	}
	p.bufs, p.free, p.private = nil, nil, nil
}

// grow adds a buffer to a reassembly pool of fewer than limit buffers and
// returns it held; nil at the limit.
func (p *RxPool) grow(limit int) *rxBuffer {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.bufs) >= limit || p.mem != nil {
		return nil
	}
	b := &rxBuffer{pool: p, index: len(p.bufs), data: make([]byte, p.mru)}
	p.bufs = append(p.bufs, b)
	b.refs.Store(1)
	return b
}
