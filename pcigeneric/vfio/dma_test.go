package vfio

import (
	"errors"
	"sync"
	"testing"

	"github.com/gomhi/gomhi/mhi"
	"golang.org/x/sys/unix"
)

func TestIOVAAllocator(t *testing.T) {
	type step struct {
		op          string // "alloc" or "free"
		iova, size  uint64
		align       uint64
		want        uint64
		wantOK      bool
		checkFree   bool
		wantFreeSum uint64
	}
	tests := []struct {
		name    string
		base    uint64
		limit   uint64
		windows []iovaRange
		steps   []step
	}{
		{name: "first fit and reuse", base: 0x1000, limit: 0x10000, steps: []step{
			{op: "alloc", size: 0x1000, align: 0x1000, want: 0x1000, wantOK: true},
			{op: "alloc", size: 0x2000, align: 0x1000, want: 0x2000, wantOK: true},
			{op: "alloc", size: 0x1000, align: 0x1000, want: 0x4000, wantOK: true},
			{op: "free", iova: 0x2000, size: 0x2000, wantOK: true},
			{op: "alloc", size: 0x1000, align: 0x1000, want: 0x2000, wantOK: true},
			{op: "alloc", size: 0x1000, align: 0x1000, want: 0x3000, wantOK: true},
			{op: "free", iova: 0x3000, size: 0x1000, wantOK: true},
			{op: "free", iova: 0x3000, size: 0x1000, wantOK: false}, // double free
		}},
		{name: "alignment", base: 0x1000, limit: 0x100000, steps: []step{
			{op: "alloc", size: 0x1000, align: 0x1000, want: 0x1000, wantOK: true},
			{op: "alloc", size: 0x1000, align: 0x10000, want: 0x10000, wantOK: true},
			{op: "alloc", size: 0x1000, align: 0x1000, want: 0x2000, wantOK: true}, // the gap is used
			{op: "alloc", size: 0x1000, align: 3, wantOK: false},
		}},
		{name: "exhaustion", base: 0x1000, limit: 0x4000, steps: []step{
			{op: "alloc", size: 0x3000, align: 0x1000, want: 0x1000, wantOK: true, checkFree: true},
			{op: "alloc", size: 0x1000, align: 0x1000, wantOK: false},
			{op: "free", iova: 0x1000, size: 0x3000, wantOK: true, checkFree: true, wantFreeSum: 0x3000},
			{op: "alloc", size: 0x4000, align: 0x1000, wantOK: false},
		}},
		{name: "windows", base: 0x100000, limit: 1 << 32,
			windows: []iovaRange{{0xfef00000, 1<<64 - 1}, {0, 0xfee00000}}, steps: []step{
				{op: "alloc", size: 0xfed00000, align: 0x1000, want: 0x100000, wantOK: true},
				{op: "alloc", size: 0x2000, align: 0x1000, want: 0xfef00000, wantOK: true}, // skips the MSI window
			}},
		{name: "top of address space", base: 1 << 63, limit: ^uint64(0), steps: []step{
			{op: "alloc", size: 1 << 62, align: 1 << 62, want: 1 << 63, wantOK: true},
			{op: "alloc", size: 1 << 62, align: 1 << 62, wantOK: false}, // alignUp would overflow
			{op: "alloc", size: 0x1000, align: 0x1000, want: 1<<63 + 1<<62, wantOK: true},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := newIOVAAllocator(tc.base, tc.limit, tc.windows)
			for i, s := range tc.steps {
				switch s.op {
				case "alloc":
					got, ok := a.alloc(s.size, s.align)
					if ok != s.wantOK || (ok && got != s.want) {
						t.Fatalf("step %d: alloc(%#x, %#x) = %#x, %v; want %#x, %v", i, s.size, s.align, got, ok, s.want, s.wantOK)
					}
				case "free":
					if ok := a.release(s.iova, s.size); ok != s.wantOK {
						t.Fatalf("step %d: release(%#x, %#x) = %v", i, s.iova, s.size, ok)
					}
				}
				if s.checkFree {
					if got := a.freeBytes(); got != s.wantFreeSum {
						t.Fatalf("step %d: %#x bytes free, want %#x", i, got, s.wantFreeSum)
					}
				}
			}
		})
	}
}

func TestAllocDMA(t *testing.T) {
	f := newFixture(t)
	d := f.open(t)
	type alloc struct{ size, align int }
	var bufs []mhi.DMABuffer
	for _, a := range []alloc{{100, 0}, {4096, 4096}, {5000, 1}, {64, 1 << 16}, {1 << 20, 1 << 20}, {8192, 4096}} {
		b, err := d.AllocDMA(a.size, a.align)
		if err != nil {
			t.Fatalf("AllocDMA(%d, %d): %v", a.size, a.align, err)
		}
		if len(b.Bytes) != a.size {
			t.Errorf("len %d, want %d", len(b.Bytes), a.size)
		}
		if a.align > 1 && b.IOVA%uint64(a.align) != 0 || b.IOVA%4096 != 0 {
			t.Errorf("IOVA %#x not aligned to %d", b.IOVA, a.align)
		}
		if b.IOVA < DefaultIOVABase || b.IOVA+uint64(a.size) > 1<<32 {
			t.Errorf("IOVA %#x outside [IOVABase, 1<<32)", b.IOVA)
		}
		for _, o := range bufs {
			if b.IOVA < o.IOVA+uint64(len(o.Bytes)) && o.IOVA < b.IOVA+uint64(len(b.Bytes)) {
				t.Errorf("IOVA %#x+%d overlaps %#x+%d", b.IOVA, a.size, o.IOVA, len(o.Bytes))
			}
		}
		for _, x := range b.Bytes {
			if x != 0 {
				t.Fatal("memory not zeroed")
			}
		}
		// The fake IOMMU sees the same memory at the IOVA, mapped READ|WRITE.
		b.Bytes[a.size-1] = 0x5a
		if dev := f.k.dmaBytes(b.IOVA, uint64(a.size)); dev == nil || dev[a.size-1] != 0x5a {
			t.Errorf("device does not see the buffer at IOVA %#x", b.IOVA)
		}
		if m := f.k.dma[b.IOVA]; m.flags != dmaMapRead|dmaMapWrite || m.size%4096 != 0 || m.vaddr != sliceAddr(b.Bytes) {
			t.Errorf("MAP_DMA recorded %+v", m)
		}
		bufs = append(bufs, b)
	}
	if d.DMAMappings() != len(bufs) {
		t.Errorf("DMAMappings %d", d.DMAMappings())
	}

	// Freed ranges are reused first-fit.
	freed := bufs[1]
	if err := d.FreeDMA(freed); err != nil {
		t.Fatal(err)
	}
	if f.k.dmaBytes(freed.IOVA, 1) != nil {
		t.Error("IOVA still mapped after FreeDMA")
	}
	again, err := d.AllocDMA(4096, 0)
	if err != nil || again.IOVA != freed.IOVA {
		t.Errorf("realloc: IOVA %#x, %v; want %#x", again.IOVA, err, freed.IOVA)
	}
	if err := d.FreeDMA(mhi.DMABuffer{IOVA: again.IOVA, Bytes: bufs[0].Bytes}); !errors.Is(err, ErrInvalid) {
		t.Errorf("FreeDMA with another buffer's memory: %v", err)
	}
	if err := d.FreeDMA(mhi.DMABuffer{IOVA: 0x42}); !errors.Is(err, ErrInvalid) {
		t.Errorf("FreeDMA of an unknown IOVA: %v", err)
	}
	for _, tc := range []struct{ size, align int }{{0, 0}, {-1, 0}, {10, 3}, {10, -4}} {
		if _, err := d.AllocDMA(tc.size, tc.align); !errors.Is(err, ErrInvalid) {
			t.Errorf("AllocDMA(%d, %d) = %v, want ErrInvalid", tc.size, tc.align, err)
		}
	}

	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if f.k.dmaCount() != 0 || f.k.liveMaps() != 0 || f.k.openFDs() != 0 {
		t.Errorf("after Close: %d DMA mappings, %d mmaps, %d fds", f.k.dmaCount(), f.k.liveMaps(), f.k.openFDs())
	}
}

func TestAllocDMAExhausted(t *testing.T) {
	f := newFixture(t)
	f.opts.DMAWidth = 21 // [1 MiB, 2 MiB): 256 pages
	d := f.open(t)
	var bufs []mhi.DMABuffer
	for i := 0; i < 256; i++ {
		b, err := d.AllocDMA(4096, 0)
		if err != nil {
			t.Fatalf("alloc %d: %v", i, err)
		}
		if b.IOVA+4096 > 1<<21 {
			t.Fatalf("IOVA %#x beyond the DMA width", b.IOVA)
		}
		bufs = append(bufs, b)
	}
	_, err := d.AllocDMA(1, 0)
	if !errors.Is(err, ErrIOVAExhausted) {
		t.Fatalf("err = %v, want ErrIOVAExhausted", err)
	}
	if f.k.liveMaps() != 256 {
		t.Errorf("%d mmaps: the failed allocation leaked its memory", f.k.liveMaps())
	}
	if err := d.FreeDMA(bufs[17]); err != nil {
		t.Fatal(err)
	}
	if b, err := d.AllocDMA(4096, 0); err != nil || b.IOVA != bufs[17].IOVA {
		t.Errorf("after free: %#x, %v", b.IOVA, err)
	}
}

func TestAllocDMAIOVAWindows(t *testing.T) {
	f := newFixture(t)
	// The kernel excludes [0x200000, 0x300000) (as it does the MSI window).
	f.k.ranges = []iovaRange{{0, 0x200000}, {0x300000, 1 << 48}}
	d := f.open(t)
	for i := 0; i < 3; i++ {
		b, err := d.AllocDMA(0x80000, 0)
		if err != nil {
			t.Fatal(err)
		}
		if b.IOVA < 0x300000 && b.IOVA+0x80000 > 0x200000 {
			t.Errorf("IOVA %#x in the reserved range", b.IOVA)
		}
	}
	if got := f.k.ioctls[ioctlIOMMUGetInfo]; got != 2 {
		t.Errorf("%d IOMMU_GET_INFO calls, want 2 (size probe, then with capabilities)", got)
	}
}

func TestAllocDMAMapFailure(t *testing.T) {
	f := newFixture(t)
	d := f.open(t)
	f.k.failIoctl[ioctlIOMMUMapDMA] = unix.ENOMEM
	_, err := d.AllocDMA(4096, 0)
	if !errors.Is(err, unix.ENOMEM) {
		t.Fatalf("err = %v", err)
	}
	if f.k.liveMaps() != 0 {
		t.Error("memory leaked after MAP_DMA failure")
	}
	delete(f.k.failIoctl, ioctlIOMMUMapDMA)
	if b, err := d.AllocDMA(4096, 0); err != nil || b.IOVA != DefaultIOVABase {
		t.Errorf("IOVA not returned after failure: %#x, %v", b.IOVA, err)
	}
}

func TestMapDMAAt(t *testing.T) {
	f := newFixture(t)
	d := f.open(t)
	mem, err := unix.Mmap(-1, 0, 0x4000, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mem)
	// The fake checks that vaddr is backed: register the caller's mmap.
	f.k.maps[uintptr(sliceAddr(mem))] = fakeMap{mem: mem}

	if err := d.MapDMAAt(mem, DefaultIOVABase); err != nil {
		t.Fatal(err)
	}
	mem[5] = 9
	if dev := f.k.dmaBytes(DefaultIOVABase+5, 1); dev == nil || dev[0] != 9 {
		t.Error("device does not see the MapDMAAt buffer")
	}
	b, err := d.AllocDMA(4096, 0)
	if err != nil {
		t.Fatal(err)
	}
	if b.IOVA < DefaultIOVABase+0x4000 {
		t.Errorf("AllocDMA handed out %#x inside the fixed mapping", b.IOVA)
	}
	for _, tc := range []struct {
		name string
		buf  []byte
		iova uint64
	}{
		{"overlap", mem, DefaultIOVABase + 0x2000},
		{"misaligned IOVA", mem, 0x10000800},
		{"misaligned size", mem[:100], 0x10000000},
		{"empty", nil, 0x10000000},
	} {
		if err := d.MapDMAAt(tc.buf, tc.iova); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", tc.name, err)
		}
	}
	if err := d.UnmapDMA(DefaultIOVABase, 0x1000); !errors.Is(err, ErrInvalid) {
		t.Errorf("UnmapDMA of a partial range: %v", err)
	}
	if err := d.UnmapDMA(b.IOVA, 4096); !errors.Is(err, ErrInvalid) {
		t.Errorf("UnmapDMA of an AllocDMA buffer: %v", err)
	}
	if err := d.UnmapDMA(DefaultIOVABase, 0x4000); err != nil {
		t.Fatal(err)
	}
	if f.k.dmaBytes(DefaultIOVABase, 1) != nil {
		t.Error("still mapped after UnmapDMA")
	}
	// The fixed range is back in the allocator.
	if b2, err := d.AllocDMA(4096, 0); err != nil || b2.IOVA != DefaultIOVABase {
		t.Errorf("after UnmapDMA: %#x, %v", b2.IOVA, err)
	}
	delete(f.k.maps, uintptr(sliceAddr(mem)))
}

func TestAllocDMAConcurrent(t *testing.T) {
	f := newFixture(t)
	d := f.open(t)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				b, err := d.AllocDMA(4096*(1+i%3), 0)
				if err != nil {
					errs <- err
					return
				}
				b.Bytes[0] = byte(i)
				if err := d.FreeDMA(b); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if f.k.dmaCount() != 0 || d.DMAMappings() != 0 {
		t.Errorf("%d mappings left", f.k.dmaCount())
	}
}

func TestNoIOMMUDMA(t *testing.T) {
	contiguous := func(vpage uint64) (uint64, bool) { return vpage + 0x100, true }
	tests := []struct {
		name    string
		pfn     func(uint64) (uint64, bool)
		size    int
		wantErr error
	}{
		{"one page", contiguous, 4096, nil},
		{"two contiguous pages", contiguous, 8192, nil},
		{"scattered pages", func(v uint64) (uint64, bool) { return v * 2, true }, 8192, ErrNoIOMMU},
		{"no CAP_SYS_ADMIN (PFN 0)", func(uint64) (uint64, bool) { return 0, true }, 4096, ErrNoIOMMU},
		{"not present", func(uint64) (uint64, bool) { return 5, false }, 4096, ErrNoIOMMU},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			f.k.groups["noiommu-7"] = f.k.groups["7"]
			delete(f.k.groups, "7")
			f.k.extensions[iommuNoIOMMU] = true
			f.k.pfn = tc.pfn
			f.opts.DMAWidth = 64 // the fake's physical addresses follow the virtual ones
			d := f.open(t)
			if !d.NoIOMMU() {
				t.Fatal("not in no-IOMMU mode")
			}
			b, err := d.AllocDMA(tc.size, 0)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err = %v, want %v", err, tc.wantErr)
				}
				if f.k.liveMaps() != 0 {
					t.Error("memory leaked")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			vpage := sliceAddr(b.Bytes) / uint64(unix.Getpagesize())
			want, _ := tc.pfn(vpage)
			if b.IOVA != want*uint64(unix.Getpagesize()) {
				t.Errorf("IOVA %#x, want physical %#x", b.IOVA, want*uint64(unix.Getpagesize()))
			}
			if f.k.dmaCount() != 0 {
				t.Error("MAP_DMA issued in no-IOMMU mode")
			}
			if err := d.MapDMAAt(b.Bytes, 0x100000); !errors.Is(err, ErrNoIOMMU) {
				t.Errorf("MapDMAAt: %v", err)
			}
			if err := d.FreeDMA(b); err != nil {
				t.Fatal(err)
			}
			if f.k.liveMaps() != 0 || f.k.openFDs() != 3 {
				t.Errorf("after FreeDMA: %d mmaps, %d fds", f.k.liveMaps(), f.k.openFDs())
			}
		})
	}
}
