package vfio

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/gomhi/gomhi/pcigeneric/pciaddr"
)

// Options configure Open. The zero value is usable.
type Options struct {
	// SysfsRoot is the sysfs mount point (default "/sys").
	SysfsRoot string
	// DevDir holds the VFIO nodes: vfio (the container), N or noiommu-N
	// (the groups). Default "/dev/vfio".
	DevDir string
	// DMAWidth is the number of IOVA bits the device can address (default
	// 32, at most 64). AllocDMA hands out IOVAs below 1<<DMAWidth only.
	DMAWidth int
	// IOVABase is the lowest IOVA AllocDMA hands out (default 0x100000;
	// 0 means the default).
	IOVABase uint64
	// Logger receives debug logs of each step (nil: discard).
	Logger *slog.Logger
}

// Defaults of Options.
const (
	DefaultSysfsRoot = "/sys"
	DefaultDevDir    = "/dev/vfio"
	DefaultDMAWidth  = 32
	DefaultIOVABase  = 0x100000
)

// Info is the decoded struct vfio_device_info.
type Info struct {
	Flags      uint32 // DeviceFlag* bits
	NumRegions uint32 // number of region indices (9 for vfio-pci)
	NumIRQs    uint32 // number of IRQ indices (5 for vfio-pci)
}

// Region is the decoded struct vfio_region_info.
type Region struct {
	Index  int    // RegionBAR0…RegionVGA
	Flags  uint32 // RegionFlag* bits
	Size   uint64 // bytes; 0 when the BAR is not implemented
	Offset uint64 // offset of the region in the device fd (index<<40 on vfio-pci)
}

// IRQ is the decoded struct vfio_irq_info.
type IRQ struct {
	Index int    // IRQIndexINTx, IRQIndexMSI, IRQIndexMSIX, …
	Flags uint32 // IRQFlag* bits
	Count uint32 // number of vectors the index supports (0: none)
}

// Device is a PCI function opened through VFIO: its container, its group
// and the device fd, plus the DMA mappings, BAR mappings and interrupt
// eventfds made through it. Its methods are safe for concurrent use,
// except that Close, BAR.Unmap and DisableIRQs must not race with accesses
// to what they tear down.
type Device struct {
	addr string
	sys  sysCalls
	opts Options
	log  *slog.Logger

	group     string // IOMMU group number
	groupPath string // /dev/vfio/N or /dev/vfio/noiommu-N
	noIOMMU   bool
	iommuType int

	container, groupFD, deviceFD int
	info                         Info
	pageSize                     uint64

	mu       sync.Mutex
	closed   bool
	regions  map[int]Region
	iova     *iovaAllocator
	mappings map[uint64]*dmaMapping // by IOVA
	bars     map[int]*BAR
	irqs     map[int][]*Vector
}

// dmaMapping is one VFIO_IOMMU_MAP_DMA (or, in no-IOMMU mode, one locked
// buffer).
type dmaMapping struct {
	iova, size uint64
	mem        []byte      // the whole mapping
	owned      bool        // allocated by AllocDMA (munmap on free)
	reserved   []iovaRange // parts taken out of the allocator by MapDMAAt
}

// Open opens the PCI function at addr ("0000:01:00.0"; the domain may be
// left out) through VFIO. It checks, in order: the device exists in sysfs,
// it has an iommu_group, it is bound to vfio-pci; then opens the container
// (DevDir/vfio), checks the API version and the IOMMU type (TYPE1v2,
// falling back to TYPE1; VFIO_NOIOMMU_IOMMU for a noiommu-N group), opens
// the group node, checks that the group is viable, attaches it to the
// container, sets the IOMMU, reads the IOMMU's page sizes and valid IOVA
// ranges, gets the device fd and its info. On any failure everything
// opened so far is closed again, in reverse order.
//
// Errors wrap ErrNoDevice, ErrNoIOMMUGroup, ErrNotBound, ErrNoVFIO,
// ErrPermission, ErrDeviceBusy, ErrGroupNotViable or ErrNoIOMMU, and the
// errno of the failed call.
func Open(addr string, opts Options) (*Device, error) {
	return open(realSys{}, addr, opts)
}

func open(sys sysCalls, address string, opts Options) (*Device, error) {
	addr, err := normalizeAddress(address)
	if err != nil {
		return nil, errf(address, ErrNoDevice, "%w", err)
	}
	if opts.SysfsRoot == "" {
		opts.SysfsRoot = DefaultSysfsRoot
	}
	if opts.DevDir == "" {
		opts.DevDir = DefaultDevDir
	}
	if opts.DMAWidth == 0 {
		opts.DMAWidth = DefaultDMAWidth
	}
	if opts.DMAWidth < 12 || opts.DMAWidth > 64 {
		return nil, errf(addr, ErrInvalid, "DMAWidth %d outside 12…64", opts.DMAWidth)
	}
	if opts.IOVABase == 0 {
		opts.IOVABase = DefaultIOVABase
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	d := &Device{
		addr: addr, sys: sys, opts: opts, log: log.With("pci", addr),
		container: -1, groupFD: -1, deviceFD: -1,
		pageSize: uint64(os.Getpagesize()),
		regions:  map[int]Region{},
		mappings: map[uint64]*dmaMapping{},
		bars:     map[int]*BAR{},
		irqs:     map[int][]*Vector{},
	}
	if err := d.open(); err != nil {
		d.mu.Lock()
		_ = d.closeLocked() // the Open error is the one that matters
		d.mu.Unlock()
		return nil, err
	}
	d.log.Info("vfio device open", "group", d.group, "iommu", d.iommuType,
		"regions", d.info.NumRegions, "irqs", d.info.NumIRQs, "flags", d.info.Flags)
	return d, nil
}

// open runs the steps Open lists, in order; the caller closes what they
// opened if one fails.
func (d *Device) open() error {
	devDir := filepath.Join(d.opts.SysfsRoot, "bus", "pci", "devices", d.addr)
	if err := d.checkSysfs(devDir); err != nil {
		return err
	}
	if err := d.openContainer(); err != nil {
		return err
	}
	if err := d.openGroup(); err != nil {
		return err
	}
	if err := d.chooseIOMMU(); err != nil {
		return err
	}
	if err := d.attachGroup(devDir); err != nil {
		return err
	}
	d.setUpIOVA()
	return d.openDevice()
}

// checkSysfs checks that the device exists in sysfs (devDir), has an IOMMU
// group and is bound to vfio-pci, and notes its group.
func (d *Device) checkSysfs(devDir string) error {
	if _, err := os.Stat(devDir); err != nil {
		return errf(d.addr, ErrNoDevice, "not in %s: %w", filepath.Dir(devDir), err)
	}
	grp, err := linkBase(devDir, "iommu_group")
	if err != nil {
		return errf(d.addr, ErrNoIOMMUGroup, "reading %s: %w", filepath.Join(devDir, "iommu_group"), err)
	}
	if grp == "" {
		return errf(d.addr, ErrNoIOMMUGroup,
			"no iommu_group link in %s: enable the IOMMU (intel_iommu=on / amd_iommu=on) or use no-IOMMU mode "+
				"(vfio.enable_unsafe_noiommu_mode=1)", devDir)
	}
	d.group = grp
	drv, err := linkBase(devDir, "driver")
	if err != nil {
		return errf(d.addr, ErrNotBound, "reading the driver link: %w", err)
	}
	if drv != vfioDriver {
		if drv == "" {
			drv = "no driver"
		}
		return errf(d.addr, ErrNotBound, "bound to %s, not %s: mhictl bind %s", drv, vfioDriver, d.addr)
	}
	return nil
}

// openContainer opens DevDir/vfio and checks the VFIO API version.
func (d *Device) openContainer() error {
	cpath := filepath.Join(d.opts.DevDir, "vfio")
	d.log.Debug("open container", "path", cpath)
	var err error
	if d.container, err = d.sys.Open(cpath, unix.O_RDWR); err != nil {
		d.container = -1
		return d.openErr(cpath, err)
	}
	v, err := d.sys.IoctlVal(d.container, ioctlGetAPIVersion, 0)
	if err != nil {
		return errf(d.addr, ErrNoVFIO, "VFIO_GET_API_VERSION on %s: %w", cpath, err)
	}
	if v != apiVersion {
		return errf(d.addr, ErrNoVFIO, "VFIO API version %d, want %d", v, apiVersion)
	}
	return nil
}

// openGroup opens the group node: N, or noiommu-N in no-IOMMU mode.
func (d *Device) openGroup() error {
	grp := d.group
	d.groupPath = filepath.Join(d.opts.DevDir, grp)
	d.log.Debug("open group", "path", d.groupPath)
	var err error
	d.groupFD, err = d.sys.Open(d.groupPath, unix.O_RDWR)
	if errors.Is(err, unix.ENOENT) {
		alt := filepath.Join(d.opts.DevDir, "noiommu-"+grp)
		if fd, aerr := d.sys.Open(alt, unix.O_RDWR); !errors.Is(aerr, unix.ENOENT) {
			d.groupPath, d.groupFD, err, d.noIOMMU = alt, fd, aerr, true
		}
	}
	if err != nil {
		d.groupFD = -1
		if errors.Is(err, unix.ENOENT) {
			return errf(d.addr, ErrNotBound, "no group node %s (nor noiommu-%s) although the device is on %s: %w",
				d.groupPath, grp, vfioDriver, err)
		}
		return d.openErr(d.groupPath, err)
	}
	return nil
}

// chooseIOMMU picks the IOMMU type, checked on the container before the
// group is attached: VFIO_NOIOMMU_IOMMU for a no-IOMMU group, otherwise
// TYPE1v2, falling back to TYPE1.
func (d *Device) chooseIOMMU() error {
	if d.noIOMMU {
		if n, err := d.sys.IoctlVal(d.container, ioctlCheckExtension, iommuNoIOMMU); err != nil || n <= 0 {
			return errf(d.addr, ErrNoIOMMU, "group node %s is a no-IOMMU group but the container lacks VFIO_NOIOMMU_IOMMU (%d, %v)",
				d.groupPath, n, err)
		}
		d.iommuType = iommuNoIOMMU
		return nil
	}
	for _, t := range []int{iommuType1v2, iommuType1} {
		if n, err := d.sys.IoctlVal(d.container, ioctlCheckExtension, uintptr(t)); err == nil && n > 0 {
			d.iommuType = t
			break
		}
	}
	if d.iommuType == 0 {
		return errf(d.addr, ErrNoVFIO, "the container supports neither VFIO_TYPE1v2_IOMMU nor VFIO_TYPE1_IOMMU: load vfio_iommu_type1")
	}
	return nil
}

// attachGroup checks that the group is viable (every device in it bound to
// vfio-pci; devDir names the culprits otherwise), attaches it to the
// container and sets the container's IOMMU.
func (d *Device) attachGroup(devDir string) error {
	st := groupStatusArg()
	if _, err := d.sys.IoctlPtr(d.groupFD, ioctlGroupGetStatus, st); err != nil {
		return opErr(d.addr, "VFIO_GROUP_GET_STATUS on "+d.groupPath, err)
	}
	if ne.Uint32(st[4:])&groupFlagViable == 0 {
		return errf(d.addr, ErrGroupNotViable, "not all devices in IOMMU group %s are bound to %s: %s",
			d.group, vfioDriver, d.groupCulprits(devDir))
	}
	if _, err := d.sys.IoctlPtr(d.groupFD, ioctlGroupSetContainer, int32Arg(d.container)); err != nil {
		return opErr(d.addr, "VFIO_GROUP_SET_CONTAINER", err)
	}
	if _, err := d.sys.IoctlVal(d.container, ioctlSetIOMMU, uintptr(d.iommuType)); err != nil {
		return opErr(d.addr, fmt.Sprintf("VFIO_SET_IOMMU(%d)", d.iommuType), err)
	}
	return nil
}

// setUpIOVA reads the IOMMU's page sizes and valid IOVA ranges (a failure
// is logged: 4 KiB pages and no reserved ranges are assumed) and makes the
// IOVA allocator: from IOVABase up to the DMA width, inside those ranges.
func (d *Device) setUpIOVA() {
	limit := ^uint64(0)
	if d.opts.DMAWidth < 64 {
		limit = 1 << d.opts.DMAWidth
	}
	var windows []iovaRange
	if !d.noIOMMU {
		in, err := d.iommuInfo()
		if err != nil {
			d.log.Warn("VFIO_IOMMU_GET_INFO failed; assuming 4 KiB pages and no reserved IOVA ranges", "err", err)
		} else {
			if in.flags&iommuInfoPgsizes != 0 && in.pgsizes != 0 {
				smallest := in.pgsizes & -in.pgsizes
				d.pageSize = max(d.pageSize, smallest)
			}
			if in.hasRange {
				windows = in.ranges
				if windows == nil {
					windows = []iovaRange{}
				}
			}
			d.log.Debug("iommu info", "pgsizes", fmt.Sprintf("%#x", in.pgsizes), "ranges", fmtRanges(in.ranges))
		}
	}
	d.iova = newIOVAAllocator(alignUp(d.opts.IOVABase, d.pageSize), limit, windows)
}

// openDevice gets the device fd from the group and reads the device info.
func (d *Device) openDevice() error {
	fd, err := d.sys.IoctlPtr(d.groupFD, ioctlGroupGetDeviceFD, cString(d.addr))
	if err != nil {
		if errors.Is(err, unix.EBUSY) {
			return errf(d.addr, ErrDeviceBusy, "VFIO_GROUP_GET_DEVICE_FD: %w", err)
		}
		return opErr(d.addr, "VFIO_GROUP_GET_DEVICE_FD", err)
	}
	d.deviceFD = fd
	di := deviceInfoArg()
	if _, err := d.sys.IoctlPtr(d.deviceFD, ioctlDeviceGetInfo, di); err != nil {
		return opErr(d.addr, "VFIO_DEVICE_GET_INFO", err)
	}
	d.info = decodeDeviceInfo(di)
	return nil
}

// openErr classifies the failure to open a node of DevDir.
func (d *Device) openErr(path string, err error) error {
	switch {
	case errors.Is(err, unix.ENOENT) && filepath.Base(path) == "vfio":
		return errf(d.addr, ErrNoVFIO, "%s missing — load vfio-pci or use a kernel with CONFIG_VFIO: %w", path, err)
	case errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM):
		return errf(d.addr, ErrPermission, "opening %s needs root or ownership of %s: %w", path, path, err)
	case errors.Is(err, unix.EBUSY):
		return errf(d.addr, ErrDeviceBusy, "open %s: %w", path, err)
	default:
		return opErr(d.addr, "open "+path, err)
	}
}

// iommuInfo reads VFIO_IOMMU_GET_INFO, growing the buffer once when the
// kernel asks for room for its capability chain.
func (d *Device) iommuInfo() (iommuInfo, error) {
	b := iommuInfoArg(sizeIOMMUInfo)
	if _, err := d.sys.IoctlPtr(d.container, ioctlIOMMUGetInfo, b); err != nil {
		return iommuInfo{}, err
	}
	in := decodeIOMMUInfo(b)
	if in.flags&iommuInfoCaps != 0 && in.argsz > sizeIOMMUInfo && in.argsz <= 1<<16 {
		b = iommuInfoArg(int(in.argsz))
		if _, err := d.sys.IoctlPtr(d.container, ioctlIOMMUGetInfo, b); err != nil {
			return iommuInfo{}, err
		}
		in = decodeIOMMUInfo(b)
	}
	return in, nil
}

// groupCulprits lists the devices of the group bound to another driver.
func (d *Device) groupCulprits(devDir string) string {
	ents, err := os.ReadDir(filepath.Join(devDir, "iommu_group", "devices"))
	if err != nil {
		return fmt.Sprintf("(cannot list the group: %v)", err)
	}
	var out []string
	for _, e := range ents {
		drv, _ := linkBase(filepath.Join(devDir, "iommu_group", "devices", e.Name()), "driver")
		if drv != "" && drv != vfioDriver {
			out = append(out, fmt.Sprintf("%s (bound to %s)", e.Name(), drv))
		}
	}
	if len(out) == 0 {
		return "(no other driver found in sysfs; a device may be in use by another process)"
	}
	return strings.Join(out, ", ") + "; bind them to vfio-pci or unbind them"
}

// Address returns the PCI address of the device ("0000:01:00.0").
func (d *Device) Address() string { return d.addr }

// Group returns the IOMMU group number, as named in sysfs.
func (d *Device) Group() string { return d.group }

// NoIOMMU reports whether the group is in VFIO no-IOMMU mode (no DMA
// translation: IOVAs are physical addresses).
func (d *Device) NoIOMMU() bool { return d.noIOMMU }

// PageSize returns the IOMMU page size DMA mappings are rounded to.
func (d *Device) PageSize() int { return int(d.pageSize) }

// Info returns the device info read by Open.
func (d *Device) Info() Info { return d.info }

// Close disables the interrupts, unmaps and frees the DMA mappings, unmaps
// the BARs and closes the device, group and container fds, in that order.
// Calling it again does nothing and returns nil.
func (d *Device) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil
	}
	if err := d.closeLocked(); err != nil {
		return opErr(d.addr, "close", err)
	}
	return nil
}

func (d *Device) closeLocked() error {
	d.closed = true
	var errs []error
	for _, idx := range slices.Sorted(mapKeys(d.irqs)) {
		if err := d.disableIRQsLocked(idx); err != nil {
			errs = append(errs, err)
		}
	}
	iovas := slices.Sorted(mapKeys(d.mappings))
	for _, iova := range iovas {
		if err := d.unmapLocked(d.mappings[iova]); err != nil {
			errs = append(errs, err)
		}
	}
	for _, idx := range slices.Sorted(mapKeys(d.bars)) {
		if err := d.unmapBARLocked(d.bars[idx]); err != nil {
			errs = append(errs, err)
		}
	}
	for _, fd := range []*int{&d.deviceFD, &d.groupFD, &d.container} {
		if *fd >= 0 {
			if err := d.sys.Close(*fd); err != nil {
				errs = append(errs, err)
			}
			*fd = -1
		}
	}
	return errors.Join(errs...)
}

func mapKeys[K comparable, V any](m map[K]V) func(func(K) bool) {
	return func(yield func(K) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// checkOpen returns ErrClosed after Close. Call with d.mu held.
func (d *Device) checkOpen() error {
	if d.closed {
		return errf(d.addr, ErrClosed, "device closed")
	}
	return nil
}

// Region returns the info of region index (RegionBAR0…RegionVGA). An index
// beyond the device's regions fails with ErrNoRegion. A BAR the device does
// not implement has Size 0.
func (d *Device) Region(index int) (Region, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.regionLocked(index)
}

func (d *Device) regionLocked(index int) (Region, error) {
	if err := d.checkOpen(); err != nil {
		return Region{}, err
	}
	if r, ok := d.regions[index]; ok {
		return r, nil
	}
	if index < 0 || uint32(index) >= d.info.NumRegions {
		return Region{}, errf(d.addr, ErrNoRegion, "region %d (the device has %d)", index, d.info.NumRegions)
	}
	b := regionInfoArg(index)
	if _, err := d.sys.IoctlPtr(d.deviceFD, ioctlDeviceGetRegion, b); err != nil {
		if errors.Is(err, unix.EINVAL) {
			return Region{}, errf(d.addr, ErrNoRegion, "region %d: %w", index, err)
		}
		return Region{}, opErr(d.addr, fmt.Sprintf("VFIO_DEVICE_GET_REGION_INFO(%d)", index), err)
	}
	r := decodeRegionInfo(b)
	r.Index = index
	d.regions[index] = r
	return r, nil
}

// accessRegion checks that [off, off+n) lies in region index and that the
// region allows the access (RegionFlagRead or RegionFlagWrite); it returns
// the fd offset.
func (d *Device) accessRegion(index int, off int64, n int, flag uint32) (int64, error) {
	d.mu.Lock()
	r, err := d.regionLocked(index)
	d.mu.Unlock()
	if err != nil {
		return 0, err
	}
	what := "read"
	if flag == RegionFlagWrite {
		what = "write"
	}
	if r.Flags&flag == 0 {
		return 0, errf(d.addr, ErrNoRegion, "region %d does not allow %s (flags %#x)", index, what, r.Flags)
	}
	if off < 0 || n < 0 || uint64(off)+uint64(n) > r.Size {
		return 0, errf(d.addr, ErrInvalid, "region %d: %s of %d bytes at %#x outside its %#x bytes", index, what, n, off, r.Size)
	}
	return int64(r.Offset) + off, nil
}

// pread reads all of b at the fd offset pos.
func (d *Device) pread(pos int64, b []byte) error {
	return fullIO(d.sys.Pread, d.deviceFD, pos, b, io.ErrUnexpectedEOF)
}

// pwrite writes all of b at the fd offset pos.
func (d *Device) pwrite(pos int64, b []byte) error {
	return fullIO(d.sys.Pwrite, d.deviceFD, pos, b, io.ErrShortWrite)
}

// fullIO calls op (pread or pwrite) until all of b is done, retrying on
// EINTR; an op that makes no progress fails with short.
func fullIO(op func(fd int, b []byte, off int64) (int, error), fd int, pos int64, b []byte, short error) error {
	for done := 0; done < len(b); {
		n, err := op(fd, b[done:], pos+int64(done))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		if n == 0 {
			return short
		}
		done += n
	}
	return nil
}

// ReadConfig reads len(b) bytes of PCI configuration space at off (pread
// on the config region). vfio-pci virtualizes parts of it (BARs, MSI
// capabilities).
func (d *Device) ReadConfig(off int64, b []byte) error {
	pos, err := d.accessRegion(RegionConfig, off, len(b), RegionFlagRead)
	if err != nil {
		return err
	}
	if err := d.pread(pos, b); err != nil {
		return opErr(d.addr, fmt.Sprintf("config read of %d bytes at %#x", len(b), off), err)
	}
	return nil
}

// WriteConfig writes b to PCI configuration space at off (pwrite on the
// config region).
func (d *Device) WriteConfig(off int64, b []byte) error {
	pos, err := d.accessRegion(RegionConfig, off, len(b), RegionFlagWrite)
	if err != nil {
		return err
	}
	if err := d.pwrite(pos, b); err != nil {
		return opErr(d.addr, fmt.Sprintf("config write of %d bytes at %#x", len(b), off), err)
	}
	return nil
}

// PCI command register.
const (
	pciCommand          = 0x04
	pciCommandMemory    = 1 << 1
	pciCommandBusMaster = 1 << 2
)

// EnableBusMaster sets Memory Space and Bus Master in the PCI command
// register (read-modify-write of the 16-bit register at 0x04). The device
// can do no DMA without it.
func (d *Device) EnableBusMaster() error {
	var b [2]byte
	if err := d.ReadConfig(pciCommand, b[:]); err != nil {
		return err
	}
	cmd := ne.Uint16(b[:]) | pciCommandMemory | pciCommandBusMaster
	ne.PutUint16(b[:], cmd)
	if err := d.WriteConfig(pciCommand, b[:]); err != nil {
		return err
	}
	d.log.Debug("bus master enabled", "command", fmt.Sprintf("%#04x", cmd))
	return nil
}

func checkBARIndex(addr string, index int) error {
	if index < RegionBAR0 || index > RegionBAR5 {
		return errf(addr, ErrNoRegion, "BAR index %d (want 0…5)", index)
	}
	return nil
}

// ReadBAR32 reads 32 bits at off of BAR index through pread on the device
// fd: one 4-byte access, for BARs that cannot be mmapped (or to compare
// with the mmap path).
func (d *Device) ReadBAR32(index int, off int64) (uint32, error) {
	var b [4]byte
	if err := d.readBAR(index, off, b[:]); err != nil {
		return 0, err
	}
	return ne.Uint32(b[:]), nil
}

// WriteBAR32 writes 32 bits at off of BAR index through pwrite.
func (d *Device) WriteBAR32(index int, off int64, v uint32) error {
	var b [4]byte
	ne.PutUint32(b[:], v)
	return d.writeBAR(index, off, b[:])
}

// ReadBAR64 reads 64 bits at off of BAR index with one 8-byte pread. The
// kernel decides how it reaches the device: Linux 6.1's vfio-pci splits it
// into two 4-byte accesses (seen on QEMU's edu device), so a register that
// needs one 8-byte access must be read through MapBAR's Read64 instead.
func (d *Device) ReadBAR64(index int, off int64) (uint64, error) {
	var b [8]byte
	if err := d.readBAR(index, off, b[:]); err != nil {
		return 0, err
	}
	return ne.Uint64(b[:]), nil
}

// WriteBAR64 writes 64 bits at off of BAR index with one 8-byte pwrite
// (split into two 4-byte accesses by Linux 6.1; see ReadBAR64).
func (d *Device) WriteBAR64(index int, off int64, v uint64) error {
	var b [8]byte
	ne.PutUint64(b[:], v)
	return d.writeBAR(index, off, b[:])
}

func (d *Device) readBAR(index int, off int64, b []byte) error {
	if err := checkBARIndex(d.addr, index); err != nil {
		return err
	}
	if off%int64(len(b)) != 0 {
		return errf(d.addr, ErrInvalid, "BAR%d offset %#x not aligned to %d", index, off, len(b))
	}
	pos, err := d.accessRegion(index, off, len(b), RegionFlagRead)
	if err != nil {
		return err
	}
	if err := d.pread(pos, b); err != nil {
		return opErr(d.addr, fmt.Sprintf("BAR%d read at %#x", index, off), err)
	}
	return nil
}

func (d *Device) writeBAR(index int, off int64, b []byte) error {
	if err := checkBARIndex(d.addr, index); err != nil {
		return err
	}
	if off%int64(len(b)) != 0 {
		return errf(d.addr, ErrInvalid, "BAR%d offset %#x not aligned to %d", index, off, len(b))
	}
	pos, err := d.accessRegion(index, off, len(b), RegionFlagWrite)
	if err != nil {
		return err
	}
	if err := d.pwrite(pos, b); err != nil {
		return opErr(d.addr, fmt.Sprintf("BAR%d write at %#x", index, off), err)
	}
	return nil
}

// Reset issues VFIO_DEVICE_RESET (a function-level or equivalent reset).
// It fails with ErrNoReset when the device info lacks DeviceFlagReset.
// vfio-pci restores the config space it virtualizes; bus mastering has to
// be enabled again (EnableBusMaster).
func (d *Device) Reset() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.checkOpen(); err != nil {
		return err
	}
	if d.info.Flags&DeviceFlagReset == 0 {
		return errf(d.addr, ErrNoReset, "VFIO_DEVICE_FLAGS_RESET not set (flags %#x)", d.info.Flags)
	}
	if _, err := d.sys.IoctlVal(d.deviceFD, ioctlDeviceReset, 0); err != nil {
		return opErr(d.addr, "VFIO_DEVICE_RESET", err)
	}
	d.log.Debug("device reset")
	return nil
}

// normalizeAddress checks a PCI address and returns it in sysfs form.
func normalizeAddress(s string) (string, error) { return pciaddr.Normalize(s) }

// vfioDriver is the name of the vfio-pci driver in sysfs.
const vfioDriver = "vfio-pci"

// linkBase returns the last element of the symlink dir/name, "" when the
// link does not exist.
func linkBase(dir, name string) (string, error) {
	t, err := os.Readlink(filepath.Join(dir, name))
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	return filepath.Base(t), nil
}

func alignUp(v, a uint64) uint64 { return (v + a - 1) &^ (a - 1) }

func fmtRanges(rs []iovaRange) string {
	var s []string
	for _, r := range rs {
		s = append(s, fmt.Sprintf("%#x-%#x", r.start, r.end))
	}
	return strings.Join(s, " ")
}
