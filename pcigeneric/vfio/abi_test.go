package vfio

import (
	"encoding/binary"
	"testing"
)

// The layouts below are those of linux/vfio.h as recorded in
// shared/reference/vfio-qemu.md and go-ecosystem.md section 5 (checked
// there by compiling C against Debian's 6.1 headers). Each encoder is
// compared byte by byte with a buffer built field by field at those
// offsets.

type field struct {
	off, size int
	val       uint64
}

func layout(size int, fields ...field) []byte {
	b := make([]byte, size)
	for _, f := range fields {
		switch f.size {
		case 2:
			binary.NativeEndian.PutUint16(b[f.off:], uint16(f.val))
		case 4:
			binary.NativeEndian.PutUint32(b[f.off:], uint32(f.val))
		case 8:
			binary.NativeEndian.PutUint64(b[f.off:], f.val)
		}
	}
	return b
}

func TestIoctlNumbers(t *testing.T) {
	// _IO(';', nr) = ';'<<8 | nr, no size or direction bits.
	io := func(nr uint) uint { return uint(';')<<8 | nr }
	tests := []struct {
		name    string
		got, nr uint
		want    uint
	}{
		{"GET_API_VERSION", ioctlGetAPIVersion, 100, 0x3B64},
		{"CHECK_EXTENSION", ioctlCheckExtension, 101, 0x3B65},
		{"SET_IOMMU", ioctlSetIOMMU, 102, 0x3B66},
		{"GROUP_GET_STATUS", ioctlGroupGetStatus, 103, 0x3B67},
		{"GROUP_SET_CONTAINER", ioctlGroupSetContainer, 104, 0x3B68},
		{"GROUP_UNSET_CONTAINER", ioctlGroupUnsetContainer, 105, 0x3B69},
		{"GROUP_GET_DEVICE_FD", ioctlGroupGetDeviceFD, 106, 0x3B6A},
		{"DEVICE_GET_INFO", ioctlDeviceGetInfo, 107, 0x3B6B},
		{"DEVICE_GET_REGION_INFO", ioctlDeviceGetRegion, 108, 0x3B6C},
		{"DEVICE_GET_IRQ_INFO", ioctlDeviceGetIRQInfo, 109, 0x3B6D},
		{"DEVICE_SET_IRQS", ioctlDeviceSetIRQs, 110, 0x3B6E},
		{"DEVICE_RESET", ioctlDeviceReset, 111, 0x3B6F},
		{"IOMMU_GET_INFO", ioctlIOMMUGetInfo, 112, 0x3B70},
		{"IOMMU_MAP_DMA", ioctlIOMMUMapDMA, 113, 0x3B71},
		{"IOMMU_UNMAP_DMA", ioctlIOMMUUnmapDMA, 114, 0x3B72},
	}
	for _, tc := range tests {
		if tc.got != tc.want || io(tc.nr) != tc.want {
			t.Errorf("%s = %#x, _IO(';', %d) = %#x, want %#x", tc.name, tc.got, tc.nr, io(tc.nr), tc.want)
		}
	}
}

func TestIoctlLayouts(t *testing.T) {
	tests := []struct {
		name string
		got  []byte
		want []byte
	}{
		{"vfio_group_status {argsz,flags} 8 B", groupStatusArg(),
			layout(8, field{0, 4, 8})},
		{"vfio_device_info {argsz,flags,num_regions,num_irqs} 16 B", deviceInfoArg(),
			layout(16, field{0, 4, 16})},
		{"vfio_region_info {argsz,flags,index,cap_offset,size@16,offset@24} 32 B", regionInfoArg(RegionConfig),
			layout(32, field{0, 4, 32}, field{8, 4, 7})},
		{"vfio_irq_info {argsz,flags,index,count} 16 B", irqInfoArg(IRQIndexMSI),
			layout(16, field{0, 4, 16}, field{8, 4, 1})},
		{"vfio_irq_set eventfd, one fd: argsz 24", irqSetArg(irqSetDataEventfd|irqSetActionTrigger, IRQIndexMSI, 0, 1, []int32{42}),
			layout(24, field{0, 4, 24}, field{4, 4, 4 | 32}, field{8, 4, 1}, field{12, 4, 0}, field{16, 4, 1}, field{20, 4, 42})},
		{"vfio_irq_set eventfd, three fds from 1", irqSetArg(irqSetDataEventfd|irqSetActionTrigger, IRQIndexMSIX, 1, 3, []int32{7, 8, 9}),
			layout(32, field{0, 4, 32}, field{4, 4, 0x24}, field{8, 4, 2}, field{12, 4, 1}, field{16, 4, 3},
				field{20, 4, 7}, field{24, 4, 8}, field{28, 4, 9})},
		{"vfio_irq_set disable: DATA_NONE|ACTION_TRIGGER, count 0, argsz 20", irqSetArg(irqSetDataNone|irqSetActionTrigger, IRQIndexMSI, 0, 0, nil),
			layout(20, field{0, 4, 20}, field{4, 4, 1 | 32}, field{8, 4, 1})},
		{"vfio_iommu_type1_info {argsz,flags,iova_pgsizes@8,cap_offset@16,pad} 24 B", iommuInfoArg(0),
			layout(24, field{0, 4, 24})},
		{"vfio_iommu_type1_dma_map {argsz,flags,vaddr@8,iova@16,size@24} 32 B", dmaMapArg(0x7f0000001000, 0x100000, 0x4000),
			layout(32, field{0, 4, 32}, field{4, 4, 3}, field{8, 8, 0x7f0000001000}, field{16, 8, 0x100000}, field{24, 8, 0x4000})},
		{"vfio_iommu_type1_dma_unmap {argsz,flags,iova@8,size@16} 24 B", dmaUnmapArg(0x100000, 0x4000),
			layout(24, field{0, 4, 24}, field{8, 8, 0x100000}, field{16, 8, 0x4000})},
		{"GROUP_SET_CONTAINER: s32 fd", int32Arg(5), layout(4, field{0, 4, 5})},
		{"GROUP_GET_DEVICE_FD: NUL-terminated name", cString("0000:01:00.0"), append([]byte("0000:01:00.0"), 0)},
	}
	for _, tc := range tests {
		if string(tc.got) != string(tc.want) {
			t.Errorf("%s:\n got % x\nwant % x", tc.name, tc.got, tc.want)
		}
	}
}

func TestDecoders(t *testing.T) {
	ri := layout(32, field{0, 4, 32}, field{4, 4, 7}, field{8, 4, 7}, field{16, 8, 0x1000}, field{24, 8, 0x70000000000})
	if got, want := decodeRegionInfo(ri), (Region{Index: 7, Flags: 7, Size: 0x1000, Offset: 0x70000000000}); got != want {
		t.Errorf("region %+v, want %+v", got, want)
	}
	di := layout(16, field{0, 4, 16}, field{4, 4, 3}, field{8, 4, 9}, field{12, 4, 5})
	if got, want := decodeDeviceInfo(di), (Info{Flags: 3, NumRegions: 9, NumIRQs: 5}); got != want {
		t.Errorf("device info %+v, want %+v", got, want)
	}
	ii := layout(16, field{0, 4, 16}, field{4, 4, 9}, field{8, 4, 2}, field{12, 4, 66})
	if got, want := decodeIRQInfo(ii), (IRQ{Index: 2, Flags: 9, Count: 66}); got != want {
		t.Errorf("irq info %+v, want %+v", got, want)
	}
}

func TestDecodeIOMMUInfo(t *testing.T) {
	// Header (24 B), an unknown capability at 24 (id 9, 16 B) pointing to
	// the IOVA-range capability at 40 with two ranges (inclusive ends).
	b := layout(40+16+32,
		field{0, 4, 88}, field{4, 4, iommuInfoPgsizes | iommuInfoCaps}, field{8, 8, 0x40201000}, field{16, 4, 24},
		field{24, 2, 9}, field{26, 2, 1}, field{28, 4, 40},
		field{40, 2, iommuCapIOVARange}, field{42, 2, 1}, field{44, 4, 0}, field{48, 4, 2},
		field{56, 8, 0}, field{64, 8, 0xfedfffff},
		field{72, 8, 0xfef00000}, field{80, 8, 0xffffffffffffffff},
	)
	in := decodeIOMMUInfo(b)
	if in.pgsizes != 0x40201000 || !in.hasRange {
		t.Fatalf("decoded %+v", in)
	}
	want := []iovaRange{{0, 0xfee00000}, {0xfef00000, ^uint64(0)}}
	if len(in.ranges) != 2 || in.ranges[0] != want[0] || in.ranges[1] != want[1] {
		t.Errorf("ranges %+v, want %+v", in.ranges, want)
	}
	// A capability chain pointing outside the buffer is ignored.
	bad := layout(24, field{0, 4, 24}, field{4, 4, iommuInfoCaps}, field{16, 4, 1000})
	if in := decodeIOMMUInfo(bad); in.hasRange {
		t.Errorf("bad chain decoded as %+v", in)
	}
}
