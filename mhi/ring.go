package mhi

import (
	"fmt"

	"github.com/gomhi/gomhi/mhi/wire"
)

// ring is the host's view of a ring of 16-byte elements in DMA memory.
// Indices are element numbers; the device sees IOVAs.
type ring struct {
	mem DMABuffer
	n   int // elements, a power of two
	rp  int // host read index (next element to complete or consume)
	wp  int // host write index (next element to fill)
}

func newRing(dma DMAMemory, elements int) (ring, error) {
	size := elements * wire.ElementSize
	// Rings are aligned to their length, as Linux allocates them.
	mem, err := dma.Alloc(size, size)
	if err != nil {
		return ring{}, fmt.Errorf("allocating ring of %d elements: %w", elements, err)
	}
	return ring{mem: mem, n: elements}, nil
}

func (r *ring) reset() {
	r.rp, r.wp = 0, 0
	clear(r.mem.Bytes)
}

func (r *ring) base() uint64              { return r.mem.IOVA }
func (r *ring) length() uint64            { return uint64(r.n * wire.ElementSize) }
func (r *ring) iova(i int) uint64         { return r.mem.IOVA + uint64(i*wire.ElementSize) }
func (r *ring) next(i int) int            { return (i + 1) & (r.n - 1) }
func (r *ring) elem(i int) []byte         { return r.mem.Bytes[i*wire.ElementSize : (i+1)*wire.ElementSize] }
func (r *ring) put(i int, e wire.Element) { e.Put(r.elem(i)) }
func (r *ring) get(i int) wire.Element    { return wire.ParseElement(r.elem(i)) }
func (r *ring) used() int                 { return (r.wp - r.rp) & (r.n - 1) }
func (r *ring) free() int                 { return r.n - 1 - r.used() }
func (r *ring) inFlight(i int) bool       { return (i-r.rp)&(r.n-1) < r.used() }

// index converts a device-supplied IOVA into an element index, checking that
// it lies inside the ring and on an element boundary.
func (r *ring) index(iova uint64) (int, error) {
	if iova < r.mem.IOVA || iova >= r.mem.IOVA+r.length() {
		return 0, fmt.Errorf("%w: 0x%x outside ring [0x%x, 0x%x)", wire.ErrBounds, iova, r.mem.IOVA, r.mem.IOVA+r.length())
	}
	off := iova - r.mem.IOVA
	if off%wire.ElementSize != 0 {
		return 0, fmt.Errorf("%w: 0x%x not on an element boundary of ring at 0x%x", wire.ErrBounds, iova, r.mem.IOVA)
	}
	return int(off / wire.ElementSize), nil
}
