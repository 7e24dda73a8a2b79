package vfio

import (
	"errors"
	"fmt"

	"github.com/gomhi/gomhi/mhi"
	"golang.org/x/sys/unix"
)

// AllocDMA returns size bytes of zeroed, device-visible memory whose IOVA
// is a multiple of align (a power of two; 0 or 1: page alignment, which
// is the minimum anyway). The memory is an anonymous mmap rounded up to
// the IOMMU page size, populated, and mapped READ|WRITE with
// VFIO_IOMMU_MAP_DMA at an IOVA chosen first-fit in [IOVABase,
// 1<<DMAWidth), inside the IOVA windows the kernel reports (so the x86 MSI
// window 0xfee00000 is never used). DMABuffer.Bytes has length size.
//
// In no-IOMMU mode there is no translation: the buffer is locked, its
// physical address (from /proc/self/pagemap; needs CAP_SYS_ADMIN) is the
// IOVA, and the allocation fails with ErrNoIOMMU unless the pages happen
// to be physically contiguous — only single-page buffers are certain to
// be.
//
// Errors wrap ErrInvalid, ErrIOVAExhausted, ErrNoIOMMU, ErrClosed or the
// errno of mmap/MAP_DMA (ENOMEM usually means RLIMIT_MEMLOCK is too low).
func (d *Device) AllocDMA(size, align int) (mhi.DMABuffer, error) {
	if size <= 0 {
		return mhi.DMABuffer{}, errf(d.addr, ErrInvalid, "DMA size %d", size)
	}
	if align < 0 || align&(align-1) != 0 {
		return mhi.DMABuffer{}, errf(d.addr, ErrInvalid, "DMA alignment %d is not a power of two", align)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.checkOpen(); err != nil {
		return mhi.DMABuffer{}, err
	}
	a := max(uint64(align), d.pageSize)
	n := alignUp(uint64(size), d.pageSize)
	if n < uint64(size) || n > 1<<40 {
		return mhi.DMABuffer{}, errf(d.addr, ErrInvalid, "DMA size %d too large", size)
	}
	flags := unix.MAP_PRIVATE | unix.MAP_ANONYMOUS | unix.MAP_POPULATE
	if d.noIOMMU {
		flags |= unix.MAP_LOCKED
	}
	mem, err := d.sys.Mmap(-1, 0, int(n), unix.PROT_READ|unix.PROT_WRITE, flags)
	if err != nil {
		return mhi.DMABuffer{}, opErr(d.addr, fmt.Sprintf("mmap %d bytes of DMA memory", n), err)
	}
	m := &dmaMapping{size: n, mem: mem, owned: true}
	if d.noIOMMU {
		phys, err := d.physAddr(mem)
		if err == nil && (phys%a != 0 || !d.belowLimit(phys, n)) {
			err = errf(d.addr, ErrNoIOMMU, "physical address %#x is not %#x-aligned or not below 1<<%d", phys, a, d.opts.DMAWidth)
		}
		if err != nil {
			_ = d.sys.Munmap(mem)
			return mhi.DMABuffer{}, err
		}
		m.iova = phys
	} else {
		iova, ok := d.iova.alloc(n, a)
		if !ok {
			_ = d.sys.Munmap(mem)
			return mhi.DMABuffer{}, errf(d.addr, ErrIOVAExhausted,
				"no free %#x-byte range aligned to %#x in [%#x, 1<<%d) (%#x bytes free)",
				n, a, d.opts.IOVABase, d.opts.DMAWidth, d.iova.freeBytes())
		}
		m.iova = iova
		if err := d.mapDMA(mem, iova); err != nil {
			d.iova.release(iova, n)
			_ = d.sys.Munmap(mem)
			return mhi.DMABuffer{}, err
		}
	}
	d.mappings[m.iova] = m
	return mhi.DMABuffer{IOVA: m.iova, Bytes: mem[:size:size]}, nil
}

func (d *Device) belowLimit(iova, n uint64) bool {
	if d.opts.DMAWidth >= 64 {
		return iova+n >= iova
	}
	return iova+n >= iova && iova+n <= 1<<d.opts.DMAWidth
}

// mapDMA issues VFIO_IOMMU_MAP_DMA (READ|WRITE) for mem at iova.
func (d *Device) mapDMA(mem []byte, iova uint64) error {
	if _, err := d.sys.IoctlPtr(d.container, ioctlIOMMUMapDMA, dmaMapArg(sliceAddr(mem), iova, uint64(len(mem)))); err != nil {
		hint := ""
		if errors.Is(err, unix.ENOMEM) {
			hint = " (raise RLIMIT_MEMLOCK: ulimit -l)"
		}
		return opErr(d.addr, fmt.Sprintf("VFIO_IOMMU_MAP_DMA %#x bytes at IOVA %#x%s", len(mem), iova, hint), err)
	}
	return nil
}

// FreeDMA unmaps a buffer returned by AllocDMA (VFIO_IOMMU_UNMAP_DMA),
// munmaps its memory and returns its IOVA range to the allocator. If the
// unmap fails the memory is kept (the device might still reach it).
func (d *Device) FreeDMA(b mhi.DMABuffer) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.checkOpen(); err != nil {
		return err
	}
	m, ok := d.mappings[b.IOVA]
	if !ok || !m.owned || len(b.Bytes) == 0 || &b.Bytes[0] != &m.mem[0] {
		return errf(d.addr, ErrInvalid, "IOVA %#x is not a buffer from AllocDMA", b.IOVA)
	}
	return d.unmapLocked(m)
}

// unmapLocked undoes one mapping: UNMAP_DMA (not in no-IOMMU mode), then
// munmap if AllocDMA made the memory, then returns the IOVA range.
func (d *Device) unmapLocked(m *dmaMapping) error {
	if !d.noIOMMU {
		arg := dmaUnmapArg(m.iova, m.size)
		if _, err := d.sys.IoctlPtr(d.container, ioctlIOMMUUnmapDMA, arg); err != nil {
			return opErr(d.addr, fmt.Sprintf("VFIO_IOMMU_UNMAP_DMA %#x bytes at IOVA %#x", m.size, m.iova), err)
		}
		if got := ne.Uint64(arg[16:]); got != m.size {
			d.log.Warn("UNMAP_DMA unmapped a different size", "iova", m.iova, "size", m.size, "unmapped", got)
		}
	}
	delete(d.mappings, m.iova)
	var err error
	if m.owned {
		if !d.noIOMMU {
			d.iova.release(m.iova, m.size)
		}
		if err = d.sys.Munmap(m.mem); err != nil {
			err = opErr(d.addr, "munmap DMA buffer", err)
		}
	}
	for _, r := range m.reserved {
		d.iova.release(r.start, r.end-r.start)
	}
	return err
}

// MapDMAAt maps buf at a fixed iova (VFIO_IOMMU_MAP_DMA READ|WRITE). buf
// must be page-aligned memory that the Go runtime does not own — an mmap
// (unix.Mmap) — and iova and len(buf) multiples of the page size. The
// range is withdrawn from AllocDMA's allocator until UnmapDMA. Not
// available in no-IOMMU mode (ErrNoIOMMU).
func (d *Device) MapDMAAt(buf []byte, iova uint64) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.checkOpen(); err != nil {
		return err
	}
	if d.noIOMMU {
		return errf(d.addr, ErrNoIOMMU, "MapDMAAt needs an IOMMU")
	}
	n := uint64(len(buf))
	if n == 0 || n%d.pageSize != 0 || iova%d.pageSize != 0 || sliceAddr(buf)%d.pageSize != 0 || iova+n < iova {
		return errf(d.addr, ErrInvalid, "MapDMAAt: buffer of %#x bytes at IOVA %#x: address, IOVA and size must be multiples of %#x",
			n, iova, d.pageSize)
	}
	for _, m := range d.mappings {
		if iova < m.iova+m.size && m.iova < iova+n {
			return errf(d.addr, ErrInvalid, "MapDMAAt: IOVA range %#x+%#x overlaps the mapping at %#x+%#x", iova, n, m.iova, m.size)
		}
	}
	if err := d.mapDMA(buf, iova); err != nil {
		return err
	}
	d.mappings[iova] = &dmaMapping{iova: iova, size: n, mem: buf, reserved: d.iova.reserve(iova, n)}
	return nil
}

// UnmapDMA undoes a MapDMAAt of exactly [iova, iova+size)
// (VFIO_IOMMU_UNMAP_DMA). Buffers from AllocDMA are freed with FreeDMA.
func (d *Device) UnmapDMA(iova, size uint64) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.checkOpen(); err != nil {
		return err
	}
	if d.noIOMMU {
		return errf(d.addr, ErrNoIOMMU, "UnmapDMA needs an IOMMU")
	}
	m, ok := d.mappings[iova]
	if !ok || m.owned || m.size != size {
		return errf(d.addr, ErrInvalid, "UnmapDMA: no MapDMAAt mapping of %#x bytes at IOVA %#x", size, iova)
	}
	return d.unmapLocked(m)
}

// DMAMappings returns the number of live DMA mappings (AllocDMA and
// MapDMAAt).
func (d *Device) DMAMappings() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.mappings)
}

// physAddr returns the physical address of mem (no-IOMMU mode) from
// /proc/self/pagemap, failing unless all its pages are present and
// physically contiguous.
func (d *Device) physAddr(mem []byte) (uint64, error) {
	const pagemap = "/proc/self/pagemap"
	page := uint64(unix.Getpagesize())
	fd, err := d.sys.Open(pagemap, unix.O_RDONLY)
	if err != nil {
		return 0, opErr(d.addr, "open "+pagemap, err)
	}
	defer func() { _ = d.sys.Close(fd) }()
	va := sliceAddr(mem)
	var first uint64
	for i := uint64(0); i < uint64(len(mem)); i += page {
		var e [8]byte
		if n, err := d.sys.Pread(fd, e[:], int64((va+i)/page*8)); err != nil || n != 8 {
			return 0, opErr(d.addr, "read "+pagemap, fmt.Errorf("short read (%d bytes): %w", n, err))
		}
		v := ne.Uint64(e[:])
		pfn := v & (1<<55 - 1)
		if v&(1<<63) == 0 || pfn == 0 {
			return 0, errf(d.addr, ErrNoIOMMU, "no physical address for the DMA buffer in %s (page not present or no CAP_SYS_ADMIN)", pagemap)
		}
		if i == 0 {
			first = pfn * page
		} else if pfn*page != first+i {
			return 0, errf(d.addr, ErrNoIOMMU, "the %d-byte DMA buffer is not physically contiguous; no-IOMMU mode can only give single pages", len(mem))
		}
	}
	return first + va%page, nil
}
