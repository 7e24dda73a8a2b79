package vfio

import "encoding/binary"

// The VFIO user-space ABI (linux/vfio.h, legacy group/container interface).
// Every VFIO ioctl is _IO(';', 100+n): type ';' (0x3B) and no size or
// direction bits, so the request numbers are the same on every
// architecture. Argument structures are encoded into byte slices in the
// machine's byte order at the fixed offsets below; the tests check the
// offsets byte by byte against the layouts in the UAPI header.

// ioctl request numbers.
const (
	ioctlGetAPIVersion       = 0x3B64 // container, no argument, returns 0
	ioctlCheckExtension      = 0x3B65 // container, value argument
	ioctlSetIOMMU            = 0x3B66 // container, value argument
	ioctlGroupGetStatus      = 0x3B67 // group, *vfio_group_status
	ioctlGroupSetContainer   = 0x3B68 // group, *s32 container fd
	ioctlGroupUnsetContainer = 0x3B69 // group, no argument
	ioctlGroupGetDeviceFD    = 0x3B6A // group, *char (NUL-terminated name), returns fd
	ioctlDeviceGetInfo       = 0x3B6B // device, *vfio_device_info
	ioctlDeviceGetRegion     = 0x3B6C // device, *vfio_region_info
	ioctlDeviceGetIRQInfo    = 0x3B6D // device, *vfio_irq_info
	ioctlDeviceSetIRQs       = 0x3B6E // device, *vfio_irq_set + data
	ioctlDeviceReset         = 0x3B6F // device, no argument
	ioctlIOMMUGetInfo        = 0x3B70 // container, *vfio_iommu_type1_info
	ioctlIOMMUMapDMA         = 0x3B71 // container, *vfio_iommu_type1_dma_map
	ioctlIOMMUUnmapDMA       = 0x3B72 // container, *vfio_iommu_type1_dma_unmap
)

// apiVersion is VFIO_API_VERSION.
const apiVersion = 0

// IOMMU types (VFIO_CHECK_EXTENSION / VFIO_SET_IOMMU values).
const (
	iommuType1   = 1 // VFIO_TYPE1_IOMMU
	iommuType1v2 = 3 // VFIO_TYPE1v2_IOMMU
	iommuNoIOMMU = 8 // VFIO_NOIOMMU_IOMMU
)

// Group status flags.
const (
	groupFlagViable       = 1 << 0 // VFIO_GROUP_FLAGS_VIABLE
	groupFlagContainerSet = 1 << 1 // VFIO_GROUP_FLAGS_CONTAINER_SET
)

// Device info flags (Info.Flags).
const (
	DeviceFlagReset = 1 << 0 // VFIO_DEVICE_FLAGS_RESET: VFIO_DEVICE_RESET is supported
	DeviceFlagPCI   = 1 << 1 // VFIO_DEVICE_FLAGS_PCI: a vfio-pci device
	DeviceFlagCaps  = 1 << 7 // VFIO_DEVICE_FLAGS_CAPS: the info has a capability chain
)

// Region flags (Region.Flags).
const (
	RegionFlagRead  = 1 << 0 // VFIO_REGION_INFO_FLAG_READ: pread is allowed
	RegionFlagWrite = 1 << 1 // VFIO_REGION_INFO_FLAG_WRITE: pwrite is allowed
	RegionFlagMmap  = 1 << 2 // VFIO_REGION_INFO_FLAG_MMAP: the region can be mmapped
	RegionFlagCaps  = 1 << 3 // VFIO_REGION_INFO_FLAG_CAPS: the info has a capability chain
)

// vfio-pci region indices.
const (
	RegionBAR0   = 0 // BAR 0
	RegionBAR1   = 1 // BAR 1
	RegionBAR2   = 2 // BAR 2
	RegionBAR3   = 3 // BAR 3
	RegionBAR4   = 4 // BAR 4
	RegionBAR5   = 5 // BAR 5
	RegionROM    = 6 // expansion ROM
	RegionConfig = 7 // PCI configuration space
	RegionVGA    = 8 // legacy VGA ranges
)

// IRQ info flags (IRQ.Flags).
const (
	IRQFlagEventfd    = 1 << 0 // VFIO_IRQ_INFO_EVENTFD: can signal an eventfd
	IRQFlagMaskable   = 1 << 1 // VFIO_IRQ_INFO_MASKABLE
	IRQFlagAutomasked = 1 << 2 // VFIO_IRQ_INFO_AUTOMASKED (INTx)
	IRQFlagNoResize   = 1 << 3 // VFIO_IRQ_INFO_NORESIZE: count cannot change while enabled
)

// vfio-pci IRQ indices.
const (
	IRQIndexINTx = 0 // legacy INTx
	IRQIndexMSI  = 1 // MSI
	IRQIndexMSIX = 2 // MSI-X
	IRQIndexErr  = 3 // AER error notification
	IRQIndexReq  = 4 // device release request
)

// SET_IRQS flags.
const (
	irqSetDataNone      = 1 << 0
	irqSetDataBool      = 1 << 1
	irqSetDataEventfd   = 1 << 2
	irqSetActionMask    = 1 << 3
	irqSetActionUnmask  = 1 << 4
	irqSetActionTrigger = 1 << 5
)

// DMA map flags.
const (
	dmaMapRead  = 1 << 0 // VFIO_DMA_MAP_FLAG_READ: the device may read
	dmaMapWrite = 1 << 1 // VFIO_DMA_MAP_FLAG_WRITE: the device may write
)

// IOMMU info flags and capability IDs.
const (
	iommuInfoPgsizes   = 1 << 0 // VFIO_IOMMU_INFO_PGSIZES
	iommuInfoCaps      = 1 << 1 // VFIO_IOMMU_INFO_CAPS
	iommuCapIOVARange  = 1      // VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE
	capHeaderSize      = 8      // struct vfio_info_cap_header {u16 id, version; u32 next}
	iovaRangeCapHeader = 16     // header + u32 nr_iovas + u32 reserved
)

// Structure sizes (argsz values).
const (
	sizeGroupStatus = 8  // {argsz, flags}
	sizeDeviceInfo  = 16 // {argsz, flags, num_regions, num_irqs}: the 6.1 minsz
	sizeRegionInfo  = 32 // {argsz, flags, index, cap_offset, size u64, offset u64}
	sizeIRQInfo     = 16 // {argsz, flags, index, count}
	sizeIRQSet      = 20 // {argsz, flags, index, start, count}, then data[]
	sizeIOMMUInfo   = 24 // {argsz, flags, iova_pgsizes u64, cap_offset, pad}
	sizeDMAMap      = 32 // {argsz, flags, vaddr u64, iova u64, size u64}
	sizeDMAUnmap    = 24 // {argsz, flags, iova u64, size u64}
)

var ne = binary.NativeEndian

func groupStatusArg() []byte {
	b := make([]byte, sizeGroupStatus)
	ne.PutUint32(b[0:], sizeGroupStatus)
	return b
}

func deviceInfoArg() []byte {
	b := make([]byte, sizeDeviceInfo)
	ne.PutUint32(b[0:], sizeDeviceInfo)
	return b
}

func decodeDeviceInfo(b []byte) Info {
	return Info{Flags: ne.Uint32(b[4:]), NumRegions: ne.Uint32(b[8:]), NumIRQs: ne.Uint32(b[12:])}
}

func regionInfoArg(index int) []byte {
	b := make([]byte, sizeRegionInfo)
	ne.PutUint32(b[0:], sizeRegionInfo)
	ne.PutUint32(b[8:], uint32(index))
	return b
}

func decodeRegionInfo(b []byte) Region {
	return Region{
		Index:  int(ne.Uint32(b[8:])),
		Flags:  ne.Uint32(b[4:]),
		Size:   ne.Uint64(b[16:]),
		Offset: ne.Uint64(b[24:]),
	}
}

func irqInfoArg(index int) []byte {
	b := make([]byte, sizeIRQInfo)
	ne.PutUint32(b[0:], sizeIRQInfo)
	ne.PutUint32(b[8:], uint32(index))
	return b
}

func decodeIRQInfo(b []byte) IRQ {
	return IRQ{Index: int(ne.Uint32(b[8:])), Flags: ne.Uint32(b[4:]), Count: ne.Uint32(b[12:])}
}

// irqSetArg encodes struct vfio_irq_set followed by one s32 per fd.
func irqSetArg(flags uint32, index, start int, count int, fds []int32) []byte {
	b := make([]byte, sizeIRQSet+4*len(fds))
	ne.PutUint32(b[0:], uint32(len(b)))
	ne.PutUint32(b[4:], flags)
	ne.PutUint32(b[8:], uint32(index))
	ne.PutUint32(b[12:], uint32(start))
	ne.PutUint32(b[16:], uint32(count))
	for i, fd := range fds {
		ne.PutUint32(b[sizeIRQSet+4*i:], uint32(fd))
	}
	return b
}

func iommuInfoArg(argsz int) []byte {
	if argsz < sizeIOMMUInfo {
		argsz = sizeIOMMUInfo
	}
	b := make([]byte, argsz)
	ne.PutUint32(b[0:], uint32(argsz))
	return b
}

// iommuInfo is the decoded struct vfio_iommu_type1_info and its IOVA-range
// capability.
type iommuInfo struct {
	flags    uint32
	argsz    uint32 // as written back: the size needed for all capabilities
	pgsizes  uint64
	ranges   []iovaRange // valid IOVA windows; nil when the kernel reports none
	hasRange bool
}

// iovaRange is a window of valid IOVAs, end exclusive (the kernel's end is
// inclusive; decodeIOMMUInfo converts).
type iovaRange struct{ start, end uint64 }

func decodeIOMMUInfo(b []byte) iommuInfo {
	in := iommuInfo{argsz: ne.Uint32(b[0:]), flags: ne.Uint32(b[4:]), pgsizes: ne.Uint64(b[8:])}
	if in.flags&iommuInfoCaps == 0 {
		return in
	}
	off := ne.Uint32(b[16:])
	for hops := 0; off != 0 && hops < 64; hops++ {
		if uint64(off)+capHeaderSize > uint64(len(b)) {
			break
		}
		id, next := ne.Uint16(b[off:]), ne.Uint32(b[off+4:])
		if id == iommuCapIOVARange && uint64(off)+iovaRangeCapHeader <= uint64(len(b)) {
			n := ne.Uint32(b[off+8:])
			p := uint64(off) + iovaRangeCapHeader
			for i := uint32(0); i < n && p+16 <= uint64(len(b)); i++ {
				s, e := ne.Uint64(b[p:]), ne.Uint64(b[p+8:])
				if e >= s {
					end := e + 1
					if end == 0 { // inclusive end at the top of the address space
						end = ^uint64(0)
					}
					in.ranges = append(in.ranges, iovaRange{s, end})
				}
				p += 16
			}
			in.hasRange = true
		}
		off = next
	}
	return in
}

func dmaMapArg(vaddr, iova, size uint64) []byte {
	b := make([]byte, sizeDMAMap)
	ne.PutUint32(b[0:], sizeDMAMap)
	ne.PutUint32(b[4:], dmaMapRead|dmaMapWrite)
	ne.PutUint64(b[8:], vaddr)
	ne.PutUint64(b[16:], iova)
	ne.PutUint64(b[24:], size)
	return b
}

func dmaUnmapArg(iova, size uint64) []byte {
	b := make([]byte, sizeDMAUnmap)
	ne.PutUint32(b[0:], sizeDMAUnmap)
	ne.PutUint64(b[8:], iova)
	ne.PutUint64(b[16:], size)
	return b
}

// cString returns s NUL-terminated.
func cString(s string) []byte { return append([]byte(s), 0) }

// int32Arg encodes one s32 (the container fd of GROUP_SET_CONTAINER).
func int32Arg(v int) []byte {
	b := make([]byte, 4)
	ne.PutUint32(b, uint32(int32(v)))
	return b
}
