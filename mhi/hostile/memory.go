package hostile

import (
	"fmt"
	"sort"
	"sync"

	"github.com/gomhi/gomhi/mhi"
	"github.com/gomhi/gomhi/mhi/wire"
)

// Memory is DMA memory for a scripted device that never reuses an address:
// every allocation gets fresh IOVAs, separated from the next by an unmapped
// gap, and a freed buffer stays poisoned and known as freed. Device-side
// accesses (Slice) to freed memory are recorded as violations, and so is
// any change to a freed buffer's poison.
type Memory struct {
	mu         sync.Mutex
	next       uint64
	live       []region // sorted by iova
	freed      []region
	violations []string
	badAccess  uint64
}

type region struct {
	iova uint64
	b    []byte
}

func (r region) contains(iova uint64, n int) bool {
	return iova >= r.iova && n >= 0 && iova-r.iova <= uint64(len(r.b)) && uint64(n) <= uint64(len(r.b))-(iova-r.iova)
}

// MemoryBase is the IOVA of a Memory's first allocation.
const MemoryBase = 0x1_0000_0000

// memoryGap is the unmapped space after every allocation.
const memoryGap = 4096

// NewMemory returns an empty Memory.
func NewMemory() *Memory { return &Memory{next: MemoryBase} }

// Alloc implements mhi.DMAMemory.
func (m *Memory) Alloc(size, align int) (mhi.DMABuffer, error) {
	if size <= 0 || size > 1<<26 {
		return mhi.DMABuffer{}, fmt.Errorf("hostile: allocation of %d bytes: %w", size, wire.ErrBounds)
	}
	if align < 64 {
		align = 64
	}
	if align&(align-1) != 0 {
		return mhi.DMABuffer{}, fmt.Errorf("hostile: alignment %d is not a power of two: %w", align, wire.ErrBounds)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	iova := (m.next + uint64(align) - 1) &^ (uint64(align) - 1)
	m.next = iova + uint64(size) + memoryGap
	r := region{iova: iova, b: make([]byte, size)}
	m.live = append(m.live, r) // iovas only grow: stays sorted
	return mhi.DMABuffer{IOVA: iova, Bytes: r.b}, nil
}

// Free implements mhi.DMAMemory: the buffer is poisoned and remembered.
func (m *Memory) Free(b mhi.DMABuffer) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	i := sort.Search(len(m.live), func(i int) bool { return m.live[i].iova >= b.IOVA })
	if i == len(m.live) || m.live[i].iova != b.IOVA {
		m.violations = append(m.violations, fmt.Sprintf("free of 0x%x, which is not allocated (double free?)", b.IOVA))
		return fmt.Errorf("hostile: free of 0x%x, not allocated: %w", b.IOVA, wire.ErrBounds)
	}
	r := m.live[i]
	m.live = append(m.live[:i], m.live[i+1:]...)
	for j := range r.b {
		r.b[j] = Poison
	}
	m.freed = append(m.freed, r)
	return nil
}

// Slice returns the live memory [iova, iova+n) for a device access. An
// access outside every live buffer fails with ErrBounds (counted in
// BadAccesses); one that falls in freed memory is also a violation.
func (m *Memory) Slice(iova uint64, n int) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	i := sort.Search(len(m.live), func(i int) bool { return m.live[i].iova > iova }) - 1
	if i >= 0 && m.live[i].contains(iova, n) {
		r := m.live[i]
		off := int(iova - r.iova)
		return r.b[off : off+n : off+n], nil
	}
	m.badAccess++
	for _, r := range m.freed {
		if r.contains(iova, 1) {
			m.violations = append(m.violations, fmt.Sprintf("device access to %d bytes at 0x%x, in buffer 0x%x+%d freed by the host", n, iova, r.iova, len(r.b)))
			break
		}
	}
	return nil, fmt.Errorf("hostile: device access to %d bytes at 0x%x outside host memory: %w", n, iova, wire.ErrBounds)
}

// BadAccesses returns the number of device accesses outside live memory.
func (m *Memory) BadAccesses() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.badAccess
}

// Violations returns every device access to freed memory, every bad free
// and every freed buffer whose poison changed, since the last call.
func (m *Memory) Violations() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range m.freed {
		for i, c := range r.b {
			if c != Poison {
				m.violations = append(m.violations, fmt.Sprintf("freed buffer 0x%x+%d written after free: byte %d is 0x%02x", r.iova, len(r.b), i, c))
				for j := range r.b {
					r.b[j] = Poison
				}
				break
			}
		}
	}
	out := m.violations
	m.violations = nil
	return out
}

// InUse returns the number of bytes allocated and not freed.
func (m *Memory) InUse() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, r := range m.live {
		n += len(r.b)
	}
	return n
}
