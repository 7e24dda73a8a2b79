package vfio

import "sort"

// iovaAllocator hands out IOVA ranges first-fit from a sorted list of free
// intervals (end exclusive). It is not safe for concurrent use; Device
// guards it with its mutex.
type iovaAllocator struct {
	free []iovaRange // sorted by start, non-overlapping, non-adjacent
}

// newIOVAAllocator covers [base, limit) intersected with the valid windows
// (nil windows: the whole of [base, limit)).
func newIOVAAllocator(base, limit uint64, windows []iovaRange) *iovaAllocator {
	a := &iovaAllocator{}
	if windows == nil {
		windows = []iovaRange{{0, ^uint64(0)}}
	}
	ws := append([]iovaRange(nil), windows...)
	sort.Slice(ws, func(i, j int) bool { return ws[i].start < ws[j].start })
	for _, w := range ws {
		s, e := max(w.start, base), min(w.end, limit)
		if s < e {
			a.release(s, e-s)
		}
	}
	return a
}

// alloc takes size bytes aligned to align (a power of two, at least 1) from
// the first free interval that fits. ok is false when nothing fits.
func (a *iovaAllocator) alloc(size, align uint64) (iova uint64, ok bool) {
	if size == 0 || align == 0 || align&(align-1) != 0 {
		return 0, false
	}
	for i, f := range a.free {
		s := (f.start + align - 1) &^ (align - 1)
		if s < f.start || s >= f.end || f.end-s < size { // overflow or no room
			continue
		}
		e := s + size
		var repl []iovaRange
		if s > f.start {
			repl = append(repl, iovaRange{f.start, s})
		}
		if e < f.end {
			repl = append(repl, iovaRange{e, f.end})
		}
		a.free = append(a.free[:i], append(repl, a.free[i+1:]...)...)
		return s, true
	}
	return 0, false
}

// release returns [iova, iova+size) to the free list, merging neighbours.
// It reports false (and changes nothing) when any part of the range is
// already free.
func (a *iovaAllocator) release(iova, size uint64) bool {
	end := iova + size
	if size == 0 || end < iova {
		return false
	}
	i := sort.Search(len(a.free), func(i int) bool { return a.free[i].start >= iova })
	if i > 0 && a.free[i-1].end > iova {
		return false
	}
	if i < len(a.free) && a.free[i].start < end {
		return false
	}
	r := iovaRange{iova, end}
	mergeLeft := i > 0 && a.free[i-1].end == iova
	mergeRight := i < len(a.free) && a.free[i].start == end
	switch {
	case mergeLeft && mergeRight:
		a.free[i-1].end = a.free[i].end
		a.free = append(a.free[:i], a.free[i+1:]...)
	case mergeLeft:
		a.free[i-1].end = end
	case mergeRight:
		a.free[i].start = iova
	default:
		a.free = append(a.free, iovaRange{})
		copy(a.free[i+1:], a.free[i:])
		a.free[i] = r
	}
	return true
}

// freeBytes is the total free space.
func (a *iovaAllocator) freeBytes() uint64 {
	var n uint64
	for _, f := range a.free {
		n += f.end - f.start
	}
	return n
}

// reserve takes [iova, iova+size) out of the free list wherever it is free
// and returns the parts it took (to give back with release).
func (a *iovaAllocator) reserve(iova, size uint64) []iovaRange {
	end := iova + size
	var taken []iovaRange
	var keep []iovaRange
	for _, f := range a.free {
		s, e := max(f.start, iova), min(f.end, end)
		if s >= e {
			keep = append(keep, f)
			continue
		}
		taken = append(taken, iovaRange{s, e})
		if f.start < s {
			keep = append(keep, iovaRange{f.start, s})
		}
		if e < f.end {
			keep = append(keep, iovaRange{e, f.end})
		}
	}
	a.free = keep
	return taken
}
