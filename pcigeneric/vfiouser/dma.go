package vfiouser

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime/debug"
	"sort"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/gomhi/gomhi/mhi/wire"
	"github.com/gomhi/gomhi/pcigeneric/vfiouser/protocol"
)

// errDMA: a DMA access falls outside every mapping.
var errDMA = errors.New("vfiouser: DMA outside any mapping")

// dmaRegion is one DMA_MAP: mem is the mapping of the client's fd, or nil
// when the client passed none (accesses then become DMA_READ/DMA_WRITE).
type dmaRegion struct {
	iova, size uint64
	flags      uint32
	mem        []byte
}

// dmaTable is the device's view of host memory: the client's DMA mappings,
// addressed by IOVA. It implements ep.HostMemory. Every access is checked
// against the mappings; one that misses is refused and counted.
type dmaTable struct {
	mu      sync.RWMutex
	regions []dmaRegion // sorted by iova, disjoint
	// indirect counts the regions mapped without fd (reached with
	// DMA_READ/DMA_WRITE messages).
	indirect atomic.Int64

	faults   *atomic.Uint64
	fallback func(write bool, iova uint64, p []byte) error
}

// add maps a region; fd < 0 means no fd. The fd is not kept.
func (t *dmaTable) add(d protocol.DMAMap, fd int) error {
	r := dmaRegion{iova: d.IOVA, size: d.Size, flags: d.Flags}
	if d.Size > 1<<40 {
		return fmt.Errorf("%w: DMA region of 0x%x bytes", protocol.ErrMalformed, d.Size)
	}
	if fd >= 0 {
		prot := unix.PROT_READ
		if d.Flags&protocol.DMAFlagWrite != 0 {
			prot |= unix.PROT_WRITE
		}
		if d.Offset > 1<<62 {
			return fmt.Errorf("%w: DMA offset 0x%x", protocol.ErrMalformed, d.Offset)
		}
		// Pages past the end of a file raise SIGBUS when touched: refuse
		// a mapping the file does not cover (faultGuard catches a file
		// shrunk afterwards).
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return fmt.Errorf("vfiouser: DMA region 0x%x+0x%x: fstat: %w", d.IOVA, d.Size, err)
		}
		if st.Mode&unix.S_IFMT == unix.S_IFREG && d.Offset+d.Size > uint64(st.Size) {
			return fmt.Errorf("%w: DMA region 0x%x+0x%x at offset 0x%x of a %d-byte file", protocol.ErrMalformed, d.IOVA, d.Size, d.Offset, st.Size)
		}
		mem, err := unix.Mmap(fd, int64(d.Offset), int(d.Size), prot, unix.MAP_SHARED)
		if err != nil {
			return fmt.Errorf("vfiouser: mmap of DMA region 0x%x+0x%x: %w", d.IOVA, d.Size, err)
		}
		r.mem = mem
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	i := sort.Search(len(t.regions), func(i int) bool { return t.regions[i].iova >= r.iova })
	if i > 0 && t.regions[i-1].iova+t.regions[i-1].size > r.iova || i < len(t.regions) && r.iova+r.size > t.regions[i].iova {
		if r.mem != nil {
			_ = unix.Munmap(r.mem)
		}
		return fmt.Errorf("%w: DMA region 0x%x+0x%x overlaps a mapping", protocol.ErrMalformed, d.IOVA, d.Size)
	}
	t.regions = append(t.regions[:i], append([]dmaRegion{r}, t.regions[i:]...)...)
	if r.mem == nil {
		t.indirect.Add(1)
	}
	return nil
}

// remove unmaps every region inside [iova, iova+size) (all with all) and
// returns how many it removed.
func (t *dmaTable) remove(iova, size uint64, all bool) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	kept, n := t.regions[:0], 0
	for _, r := range t.regions {
		// Inside [iova, iova+size), computed without iova+size, which is
		// 2^64 (0) for an unmap to the end of the address space.
		if all || r.iova >= iova && r.size <= size && r.iova-iova <= size-r.size {
			if r.mem != nil {
				_ = unix.Munmap(r.mem)
			} else {
				t.indirect.Add(-1)
			}
			n++
			continue
		}
		kept = append(kept, r)
	}
	clear(t.regions[len(kept):])
	t.regions = kept
	return n
}

// find returns the region holding [iova, iova+n) and the offset in it; the
// caller holds t.mu.
func (t *dmaTable) find(iova uint64, n int, write bool) (dmaRegion, uint64, error) {
	i := sort.Search(len(t.regions), func(i int) bool { return t.regions[i].iova+t.regions[i].size > iova })
	if n >= 0 && i < len(t.regions) {
		r := t.regions[i]
		if iova >= r.iova && uint64(n) <= r.size-(iova-r.iova) {
			if write && r.flags&protocol.DMAFlagWrite == 0 || !write && r.flags&protocol.DMAFlagRead == 0 {
				t.faults.Add(1)
				return r, 0, fmt.Errorf("vfiouser: %d bytes at 0x%x: access not permitted by the mapping: %w: %w", n, iova, errDMA, wire.ErrBounds)
			}
			return r, iova - r.iova, nil
		}
	}
	t.faults.Add(1)
	return dmaRegion{}, 0, fmt.Errorf("vfiouser: %d bytes at 0x%x: %w: %w", n, iova, errDMA, wire.ErrBounds)
}

// span is the part of an access that falls in one mapping.
type dmaSpan struct {
	r   dmaRegion
	off uint64 // offset in r
	n   int
}

// spans splits [iova, iova+n) over adjacent mappings (QEMU announces guest
// RAM in sections) and checks the permission; the caller holds t.mu. It
// counts a fault and touches nothing when any byte is unreachable.
func (t *dmaTable) spans(iova uint64, n int, write bool, buf []dmaSpan) ([]dmaSpan, error) {
	if iova+uint64(n) < iova {
		t.faults.Add(1)
		return nil, fmt.Errorf("vfiouser: %d bytes at 0x%x: %w: %w", n, iova, errDMA, wire.ErrBounds)
	}
	a, rest := iova, n
	for first := true; first || rest > 0; first = false {
		i := sort.Search(len(t.regions), func(i int) bool { return t.regions[i].iova+t.regions[i].size > a })
		if i == len(t.regions) || t.regions[i].iova > a {
			t.faults.Add(1)
			return nil, fmt.Errorf("vfiouser: %d bytes at 0x%x: %w: %w", n, iova, errDMA, wire.ErrBounds)
		}
		r := t.regions[i]
		if write && r.flags&protocol.DMAFlagWrite == 0 || !write && r.flags&protocol.DMAFlagRead == 0 {
			t.faults.Add(1)
			return nil, fmt.Errorf("vfiouser: %d bytes at 0x%x: access not permitted by the mapping: %w: %w", n, iova, errDMA, wire.ErrBounds)
		}
		k := int(min(uint64(rest), r.size-(a-r.iova)))
		buf = append(buf, dmaSpan{r, a - r.iova, k})
		a, rest = a+uint64(k), rest-k
	}
	return buf, nil
}

// access copies between p and host memory at iova.
func (t *dmaTable) access(p []byte, iova uint64, write bool) error {
	var arr [2]dmaSpan
	t.mu.RLock()
	sp, err := t.spans(iova, len(p), write, arr[:0])
	if err != nil {
		t.mu.RUnlock()
		return err
	}
	direct := true
	for _, c := range sp {
		direct = direct && c.r.mem != nil
	}
	if direct {
		err := guarded(func() {
			pos := 0
			for _, c := range sp {
				if write {
					copy(c.r.mem[c.off:], p[pos:pos+c.n])
				} else {
					copy(p[pos:pos+c.n], c.r.mem[c.off:])
				}
				pos += c.n
			}
		})
		t.mu.RUnlock()
		if err != nil {
			t.faults.Add(1)
			return fmt.Errorf("vfiouser: %d bytes at 0x%x: %w", len(p), iova, err)
		}
		return nil
	}
	t.mu.RUnlock()
	// Some of it is mapped without fd: go piece by piece, messages for those.
	pos := 0
	for _, c := range sp {
		a, seg := c.r.iova+c.off, p[pos:pos+c.n]
		if c.r.mem != nil {
			err = t.access(seg, a, write)
		} else {
			err = t.fallback(write, a, seg)
		}
		if err != nil {
			return err
		}
		pos += c.n
	}
	return nil
}

// ReadAt implements ep.HostMemory.
func (t *dmaTable) ReadAt(p []byte, iova uint64) error { return t.access(p, iova, false) }

// WriteAt implements ep.HostMemory.
func (t *dmaTable) WriteAt(p []byte, iova uint64) error { return t.access(p, iova, true) }

// Load32 implements ep.HostMemory: an atomic load on a mapping with fd.
func (t *dmaTable) Load32(iova uint64) (uint32, error) {
	if iova%4 != 0 {
		t.faults.Add(1)
		return 0, fmt.Errorf("vfiouser: unaligned 32-bit load at 0x%x: %w", iova, wire.ErrBounds)
	}
	t.mu.RLock()
	r, off, err := t.find(iova, 4, false)
	if err == nil && r.mem != nil {
		var v uint32
		err := guarded(func() { v = wire.Load32(r.mem, int(off)) })
		t.mu.RUnlock()
		if err != nil {
			t.faults.Add(1)
			return 0, fmt.Errorf("vfiouser: 32-bit load at 0x%x: %w", iova, err)
		}
		return v, nil
	}
	t.mu.RUnlock()
	if err != nil {
		return 0, err
	}
	var b [4]byte
	if err := t.fallback(false, iova, b[:]); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint32(b[:]), nil
}

// Store32 implements ep.HostMemory: an atomic store on a mapping with fd.
func (t *dmaTable) Store32(iova uint64, v uint32) error {
	if iova%4 != 0 {
		t.faults.Add(1)
		return fmt.Errorf("vfiouser: unaligned 32-bit store at 0x%x: %w", iova, wire.ErrBounds)
	}
	t.mu.RLock()
	r, off, err := t.find(iova, 4, true)
	if err == nil && r.mem != nil {
		err := guarded(func() { wire.Store32(r.mem, int(off), v) })
		t.mu.RUnlock()
		if err != nil {
			t.faults.Add(1)
			return fmt.Errorf("vfiouser: 32-bit store at 0x%x: %w", iova, err)
		}
		return nil
	}
	t.mu.RUnlock()
	if err != nil {
		return err
	}
	var b [4]byte
	binary.LittleEndian.PutUint32(b[:], v)
	return t.fallback(true, iova, b[:])
}

// errPageFault: an access to a client mapping faulted, its file shrunk
// under it.
var errPageFault = fmt.Errorf("page fault on the client's memory (file truncated under the mapping?): %w: %w", errDMA, wire.ErrBounds)

// guarded runs an access to client-mapped memory and turns a memory fault
// (SIGBUS from a page past the end of a file the client truncated after
// DMA_MAP) into errPageFault instead of a crash. Any other panic goes on.
func guarded(access func()) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			if _, ok := r.(interface{ Addr() uintptr }); !ok {
				panic(r)
			}
			err = errPageFault
		}
	}()
	access()
	return nil
}
