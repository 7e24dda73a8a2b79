package vfio

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// BAR is a BAR region mmapped from the device fd. Every access is one load
// or store of its width (4 or 8 bytes) through a non-inlined helper, a
// plain pointer dereference: the compiler emits a single MOV, as MMIO
// requires. (sync/atomic is not used: its stores are XCHG, a locked
// read-modify-write that some devices mishandle.)
//
// Offsets are checked: an access must be naturally aligned and lie within
// the region. Read32/Read64 and Write32/Write64 never panic: an out-of-range
// or misaligned read returns all ones (what a PCI master abort reads) and a
// write is dropped; both are counted (BadAccesses). CheckedRead32 and
// friends return an error instead.
//
// Accesses may run concurrently with each other, but not with Unmap or
// Device.Close.
type BAR struct {
	dev      *Device
	index    int
	size     uint64
	mem      []byte // the mapping (page-rounded)
	bad      atomic.Uint64
	unmapped atomic.Bool
}

// MapBAR mmaps BAR index (RegionBAR0…RegionBAR5), read-write and shared.
// The region must have RegionFlagMmap (otherwise use ReadBAR32/WriteBAR32);
// it fails with ErrNoRegion when it has not or the BAR is absent. Mapping
// the same BAR twice returns the same *BAR.
func (d *Device) MapBAR(index int) (*BAR, error) {
	if err := checkBARIndex(d.addr, index); err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	r, err := d.regionLocked(index)
	if err != nil {
		return nil, err
	}
	if b, ok := d.bars[index]; ok {
		return b, nil
	}
	if r.Size == 0 {
		return nil, errf(d.addr, ErrNoRegion, "BAR%d is not implemented (size 0)", index)
	}
	if r.Flags&RegionFlagMmap == 0 {
		return nil, errf(d.addr, ErrNoRegion, "BAR%d cannot be mmapped (flags %#x): use ReadBAR32/WriteBAR32", index, r.Flags)
	}
	length := alignUp(r.Size, uint64(unix.Getpagesize()))
	if length > 1<<46 {
		return nil, errf(d.addr, ErrInvalid, "BAR%d size %#x too large to map", index, r.Size)
	}
	mem, err := d.sys.Mmap(d.deviceFD, int64(r.Offset), int(length), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, opErr(d.addr, fmt.Sprintf("mmap BAR%d (%#x bytes at %#x)", index, length, r.Offset), err)
	}
	b := &BAR{dev: d, index: index, size: r.Size, mem: mem}
	d.bars[index] = b
	d.log.Debug("BAR mapped", "bar", index, "size", r.Size)
	return b, nil
}

// Index returns the BAR number.
func (b *BAR) Index() int { return b.index }

// Size returns the size of the BAR in bytes.
func (b *BAR) Size() int { return int(b.size) }

// BadAccesses returns how many out-of-range, misaligned or after-Unmap
// accesses were absorbed by Read32/Write32/Read64/Write64.
func (b *BAR) BadAccesses() uint64 { return b.bad.Load() }

// ptr returns a pointer to the width bytes at off, nil when the access is
// out of range or misaligned.
func (b *BAR) ptr(off uint32, width uint64) unsafe.Pointer {
	o := uint64(off)
	if b.unmapped.Load() || o%width != 0 || o+width > b.size || o+width > uint64(len(b.mem)) {
		return nil
	}
	return unsafe.Pointer(&b.mem[o])
}

// Read32 loads 32 bits at off. Out of range or misaligned: 0xFFFFFFFF,
// counted.
func (b *BAR) Read32(off uint32) uint32 {
	p := b.ptr(off, 4)
	if p == nil {
		b.bad.Add(1)
		return 0xFFFFFFFF
	}
	return mmioLoad32((*uint32)(p))
}

// Write32 stores 32 bits at off. Out of range or misaligned: dropped,
// counted.
func (b *BAR) Write32(off uint32, v uint32) {
	p := b.ptr(off, 4)
	if p == nil {
		b.bad.Add(1)
		return
	}
	mmioStore32((*uint32)(p), v)
}

// Read64 loads 64 bits at off with one 8-byte load (not two 32-bit halves).
// Out of range or misaligned: all ones, counted.
func (b *BAR) Read64(off uint32) uint64 {
	p := b.ptr(off, 8)
	if p == nil {
		b.bad.Add(1)
		return ^uint64(0)
	}
	return mmioLoad64((*uint64)(p))
}

// Write64 stores 64 bits at off with one 8-byte store. Out of range or
// misaligned: dropped, counted.
func (b *BAR) Write64(off uint32, v uint64) {
	p := b.ptr(off, 8)
	if p == nil {
		b.bad.Add(1)
		return
	}
	mmioStore64((*uint64)(p), v)
}

func (b *BAR) rangeErr(off uint32, width int) error {
	if b.unmapped.Load() {
		return errf(b.dev.addr, ErrClosed, "BAR%d unmapped", b.index)
	}
	return errf(b.dev.addr, ErrInvalid, "BAR%d: %d-byte access at %#x outside its %#x bytes or misaligned",
		b.index, width, off, b.size)
}

// CheckedRead32 is Read32 returning an error (wrapping ErrInvalid or
// ErrClosed) instead of all ones.
func (b *BAR) CheckedRead32(off uint32) (uint32, error) {
	p := b.ptr(off, 4)
	if p == nil {
		return 0, b.rangeErr(off, 4)
	}
	return mmioLoad32((*uint32)(p)), nil
}

// CheckedWrite32 is Write32 returning an error instead of dropping.
func (b *BAR) CheckedWrite32(off uint32, v uint32) error {
	p := b.ptr(off, 4)
	if p == nil {
		return b.rangeErr(off, 4)
	}
	mmioStore32((*uint32)(p), v)
	return nil
}

// CheckedRead64 is Read64 returning an error instead of all ones.
func (b *BAR) CheckedRead64(off uint32) (uint64, error) {
	p := b.ptr(off, 8)
	if p == nil {
		return 0, b.rangeErr(off, 8)
	}
	return mmioLoad64((*uint64)(p)), nil
}

// CheckedWrite64 is Write64 returning an error instead of dropping.
func (b *BAR) CheckedWrite64(off uint32, v uint64) error {
	p := b.ptr(off, 8)
	if p == nil {
		return b.rangeErr(off, 8)
	}
	mmioStore64((*uint64)(p), v)
	return nil
}

// Unmap munmaps the BAR. Later accesses count as bad (Checked* return
// ErrClosed). Calling it again does nothing.
func (b *BAR) Unmap() error {
	d := b.dev
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.bars[b.index] != b {
		return nil
	}
	if err := d.unmapBARLocked(b); err != nil {
		return opErr(d.addr, fmt.Sprintf("munmap BAR%d", b.index), err)
	}
	return nil
}

func (d *Device) unmapBARLocked(b *BAR) error {
	delete(d.bars, b.index)
	b.unmapped.Store(true)
	return d.sys.Munmap(b.mem)
}

// The MMIO helpers. They must stay out of line so that each access is
// exactly one load or store of the given width, never merged, split or
// reordered with its neighbours by the inliner.

//go:noinline
func mmioLoad32(p *uint32) uint32 { return *p }

//go:noinline
func mmioStore32(p *uint32, v uint32) { *p = v }

//go:noinline
func mmioLoad64(p *uint64) uint64 { return *p }

//go:noinline
func mmioStore64(p *uint64, v uint64) { *p = v }
