package vfiouser

import (
	"fmt"
	"sort"
	"sync"

	"github.com/gomhi/gomhi/mhi"
)

// memSlab is the client's DMA memory: one memfd mapping at a base IOVA,
// carved up first-fit like mhi/inproc's Slab (which owns Go memory and so
// cannot sit on a shared mapping).
type memSlab struct {
	base uint64
	mem  []byte

	mu   sync.Mutex
	free []span // sorted by offset, coalesced
	used map[uint64]int
}

type span struct{ off, size int }

func newMemSlab(base uint64, mem []byte) *memSlab {
	return &memSlab{base: base, mem: mem, free: []span{{0, len(mem)}}, used: map[uint64]int{}}
}

func (s *memSlab) alloc(size, align int) (mhi.DMABuffer, error) {
	if size <= 0 {
		return mhi.DMABuffer{}, fmt.Errorf("vfiouser: allocation of %d bytes: %w", size, mhi.ErrBounds)
	}
	if align <= 1 {
		align = 8
	}
	if align&(align-1) != 0 {
		return mhi.DMABuffer{}, fmt.Errorf("vfiouser: alignment %d is not a power of two: %w", align, mhi.ErrBounds)
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
		return mhi.DMABuffer{IOVA: iova + uint64(pad), Bytes: b}, nil
	}
	return mhi.DMABuffer{}, fmt.Errorf("vfiouser: no room for %d bytes aligned to %d in %d bytes of DMA memory: %w", size, align, len(s.mem), mhi.ErrBounds)
}

func (s *memSlab) release(b mhi.DMABuffer) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	off := b.IOVA - s.base
	size, ok := s.used[off]
	if b.IOVA < s.base || !ok {
		return fmt.Errorf("vfiouser: free of 0x%x, which is not allocated: %w", b.IOVA, mhi.ErrBounds)
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

// slice returns [iova, iova+n) of the slab, or false if it is outside.
func (s *memSlab) slice(iova, n uint64) ([]byte, bool) {
	if iova < s.base || iova-s.base > uint64(len(s.mem)) || n > uint64(len(s.mem))-(iova-s.base) {
		return nil, false
	}
	off := iova - s.base
	return s.mem[off : off+n : off+n], true
}
