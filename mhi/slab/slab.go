// Package slab is host memory with device-visible addresses (IOVAs) carved
// up by a first-fit allocator: the DMA memory of the in-process transport
// (package mhi/inproc), shared with the mock modem, and of the vfio-user
// client (a memfd shared with the server). It links nothing but the host
// stack (package mhi).
package slab

import (
	"fmt"
	"sort"
	"sync"

	"github.com/gomhi/gomhi/mhi"
	"github.com/gomhi/gomhi/mhi/wire"
)

// Slab is host memory with device-visible addresses: one contiguous block
// starting at a base IOVA, carved up by a first-fit allocator. It implements
// mhi.DMAMemory for the host and ep.HostMemory for the device; device
// accesses are checked against the slab's bounds (the IOMMU mapping).
type Slab struct {
	base uint64
	mem  []byte

	mu   sync.Mutex
	free []span // sorted by offset, coalesced
	used map[uint64]int
}

type span struct{ off, size int }

// New returns a slab of size bytes whose first byte is at IOVA base.
func New(base uint64, size int) *Slab { return NewOn(base, make([]byte, size)) }

// NewOn returns a slab carved out of mem (for example a shared memfd
// mapping), whose first byte is at IOVA base.
func NewOn(base uint64, mem []byte) *Slab {
	return &Slab{base: base, mem: mem, free: []span{{0, len(mem)}}, used: map[uint64]int{}}
}

// Base returns the IOVA of the slab's first byte.
func (s *Slab) Base() uint64 { return s.base }

// Size returns the slab's size in bytes.
func (s *Slab) Size() int { return len(s.mem) }

// InUse returns the number of bytes currently allocated.
func (s *Slab) InUse() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, sz := range s.used {
		n += sz
	}
	return n
}

// Alloc implements mhi.DMAMemory.
func (s *Slab) Alloc(size, align int) (mhi.DMABuffer, error) {
	if size <= 0 {
		return mhi.DMABuffer{}, fmt.Errorf("slab: allocation of %d bytes", size)
	}
	if align <= 1 {
		align = 8
	}
	if align&(align-1) != 0 {
		return mhi.DMABuffer{}, fmt.Errorf("slab: alignment %d is not a power of two", align)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, f := range s.free {
		iova := s.base + uint64(f.off)
		pad := int((uint64(align) - iova%uint64(align)) % uint64(align))
		if f.size < pad+size {
			continue
		}
		off := f.off + pad
		// Split the free span into the padding before and the rest after.
		var repl []span
		if pad > 0 {
			repl = append(repl, span{f.off, pad})
		}
		if rest := f.size - pad - size; rest > 0 {
			repl = append(repl, span{off + size, rest})
		}
		s.free = append(s.free[:i], append(repl, s.free[i+1:]...)...)
		s.used[uint64(off)] = size
		b := s.mem[off : off+size : off+size]
		clear(b)
		return mhi.DMABuffer{IOVA: s.base + uint64(off), Bytes: b}, nil
	}
	return mhi.DMABuffer{}, fmt.Errorf("slab: no room for %d bytes aligned to %d in a slab of %d bytes", size, align, len(s.mem))
}

// Free implements mhi.DMAMemory.
func (s *Slab) Free(b mhi.DMABuffer) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if b.IOVA < s.base {
		return fmt.Errorf("slab: free of 0x%x below the slab: %w", b.IOVA, wire.ErrBounds)
	}
	off := b.IOVA - s.base
	size, ok := s.used[off]
	if !ok {
		return fmt.Errorf("slab: free of 0x%x, which is not allocated: %w", b.IOVA, wire.ErrBounds)
	}
	delete(s.used, off)
	s.free = append(s.free, span{int(off), size})
	sort.Slice(s.free, func(i, j int) bool { return s.free[i].off < s.free[j].off })
	merged := s.free[:1]
	for _, f := range s.free[1:] {
		last := &merged[len(merged)-1]
		if last.off+last.size == f.off {
			last.size += f.size
		} else {
			merged = append(merged, f)
		}
	}
	s.free = merged
	return nil
}

func (s *Slab) span(iova uint64, n int) (int, error) {
	if iova < s.base || n < 0 || iova-s.base > uint64(len(s.mem)) || uint64(n) > uint64(len(s.mem))-(iova-s.base) {
		return 0, fmt.Errorf("slab: %d bytes at 0x%x outside host memory [0x%x, 0x%x): %w",
			n, iova, s.base, s.base+uint64(len(s.mem)), wire.ErrBounds)
	}
	return int(iova - s.base), nil
}

// ReadAt implements ep.HostMemory.
func (s *Slab) ReadAt(p []byte, iova uint64) error {
	off, err := s.span(iova, len(p))
	if err != nil {
		return err
	}
	copy(p, s.mem[off:])
	return nil
}

// WriteAt implements ep.HostMemory.
func (s *Slab) WriteAt(p []byte, iova uint64) error {
	off, err := s.span(iova, len(p))
	if err != nil {
		return err
	}
	copy(s.mem[off:], p)
	return nil
}

// Slice returns the host memory [iova, iova+n) itself, for a device that
// fills buffers in place.
func (s *Slab) Slice(iova uint64, n int) ([]byte, error) {
	off, err := s.span(iova, n)
	if err != nil {
		return nil, err
	}
	return s.mem[off : off+n : off+n], nil
}

// Load32 implements ep.HostMemory.
func (s *Slab) Load32(iova uint64) (uint32, error) {
	off, err := s.span(iova, 4)
	if err != nil {
		return 0, err
	}
	if off%4 != 0 {
		return 0, fmt.Errorf("slab: unaligned 32-bit load at 0x%x: %w", iova, wire.ErrBounds)
	}
	return wire.Load32(s.mem, off), nil
}

// Store32 implements ep.HostMemory.
func (s *Slab) Store32(iova uint64, v uint32) error {
	off, err := s.span(iova, 4)
	if err != nil {
		return err
	}
	if off%4 != 0 {
		return fmt.Errorf("slab: unaligned 32-bit store at 0x%x: %w", iova, wire.ErrBounds)
	}
	wire.Store32(s.mem, off, v)
	return nil
}
