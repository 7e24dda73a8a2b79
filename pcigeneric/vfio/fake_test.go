package vfio

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// fakeKernel is sysCalls emulating the VFIO container/group/device
// interface. It decodes every ioctl argument at the byte offsets of
// linux/vfio.h (independently of the package's decoders), keeps DMA
// mappings, mmaps and fds in tables, and uses real eventfds so that
// Poll/Read/Write are the kernel's. Every fd it hands out (fake or
// eventfd) is counted, so tests can check that nothing leaks.
type fakeKernel struct {
	devDir string

	mu sync.Mutex
	// configuration
	noVFIO     bool
	apiVersion int
	extensions map[uintptr]bool
	groups     map[string]*fakeGroup // by node name: "7" or "noiommu-7"
	devices    map[string]*fakeDevice
	openErr    map[string]error // by path
	failIoctl  map[uint]error   // by request
	pgsizes    uint64
	ranges     []iovaRange // end exclusive; encoded inclusive
	// pagemap: physical frame of a virtual page (no-IOMMU mode)
	pfn func(vpage uint64) (pfn uint64, present bool)
	// state
	nextFD   int
	fds      map[int]*fakeFile
	eventfds map[int]bool
	log      []string
	maps     map[uintptr]fakeMap
	dma      map[uint64]fakeDMA
	irqSets  [][]byte
	iommu    uintptr
	resets   int
	ioctls   map[uint]int
}

type fakeFile struct {
	kind  string // container, group, device
	path  string
	group *fakeGroup
	dev   *fakeDevice
}

type fakeGroup struct {
	name      string
	viable    bool
	devices   []string
	container int // fd, -1 if none
}

type fakeDevice struct {
	addr     string
	group    string
	flags    uint32
	regions  [9]*fakeRegion
	irqs     [5]IRQ
	irqFDs   map[int][]int32
	getFDErr error
	open     bool
}

type fakeRegion struct {
	flags uint32
	size  uint64
	data  []byte // page-rounded backing store
}

type fakeMap struct {
	mem  []byte
	anon bool
}

type fakeDMA struct {
	vaddr, size uint64
	flags       uint32
}

const fakeDevDir = "/fake/dev/vfio"

// newFakeKernel returns a kernel with one group "7" holding a device at
// addr: BAR0 16 KiB mmappable, BAR2 4 KiB read/write only, config 4 KiB
// (vendor 0x17cb, device 0x0306, command 0x0103), MSI 1 vector, MSI-X 4.
func newFakeKernel(addr string) *fakeKernel {
	k := &fakeKernel{
		devDir:     fakeDevDir,
		extensions: map[uintptr]bool{iommuType1: true, iommuType1v2: true},
		groups:     map[string]*fakeGroup{},
		devices:    map[string]*fakeDevice{},
		openErr:    map[string]error{},
		failIoctl:  map[uint]error{},
		pgsizes:    0x40201000,
		nextFD:     1 << 20,
		fds:        map[int]*fakeFile{},
		eventfds:   map[int]bool{},
		maps:       map[uintptr]fakeMap{},
		dma:        map[uint64]fakeDMA{},
		ioctls:     map[uint]int{},
	}
	k.addGroup("7", addr)
	k.addDevice(addr, "7")
	return k
}

func (k *fakeKernel) addGroup(name string, devs ...string) *fakeGroup {
	g := &fakeGroup{name: name, viable: true, devices: devs, container: -1}
	k.groups[name] = g
	return g
}

func (k *fakeKernel) addDevice(addr, group string) *fakeDevice {
	d := &fakeDevice{addr: addr, group: group, flags: DeviceFlagPCI | DeviceFlagReset, irqFDs: map[int][]int32{}}
	d.regions[RegionBAR0] = newFakeRegion(RegionFlagRead|RegionFlagWrite|RegionFlagMmap, 16<<10)
	d.regions[RegionBAR2] = newFakeRegion(RegionFlagRead|RegionFlagWrite, 4<<10)
	cfg := newFakeRegion(RegionFlagRead|RegionFlagWrite, 4<<10)
	ne.PutUint16(cfg.data[0:], 0x17cb)
	ne.PutUint16(cfg.data[2:], 0x0306)
	ne.PutUint16(cfg.data[4:], 0x0103)
	d.regions[RegionConfig] = cfg
	d.irqs[IRQIndexINTx] = IRQ{Flags: IRQFlagEventfd | IRQFlagMaskable | IRQFlagAutomasked, Count: 1}
	d.irqs[IRQIndexMSI] = IRQ{Flags: IRQFlagEventfd | IRQFlagNoResize, Count: 1}
	d.irqs[IRQIndexMSIX] = IRQ{Flags: IRQFlagEventfd | IRQFlagNoResize, Count: 4}
	d.irqs[IRQIndexErr] = IRQ{Flags: IRQFlagEventfd, Count: 1}
	d.irqs[IRQIndexReq] = IRQ{Flags: IRQFlagEventfd, Count: 1}
	k.devices[addr] = d
	return d
}

func newFakeRegion(flags uint32, size uint64) *fakeRegion {
	page := uint64(os.Getpagesize())
	return &fakeRegion{flags: flags, size: size, data: make([]byte, (size+page-1)/page*page)}
}

func (k *fakeKernel) record(format string, args ...any) {
	k.log = append(k.log, fmt.Sprintf(format, args...))
}

// openFDs counts the fds handed out and not closed.
func (k *fakeKernel) openFDs() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.fds) + len(k.eventfds)
}

func (k *fakeKernel) liveMaps() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.maps)
}

func (k *fakeKernel) dmaCount() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.dma)
}

func (k *fakeKernel) logCopy() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]string(nil), k.log...)
}

// dmaBytes returns the memory the device would reach at iova (through the
// fake IOMMU), nil when unmapped.
func (k *fakeKernel) dmaBytes(iova, n uint64) []byte {
	k.mu.Lock()
	defer k.mu.Unlock()
	for base, m := range k.dma {
		if iova >= base && iova+n <= base+m.size {
			for addr, mp := range k.maps {
				if m.vaddr >= uint64(addr) && m.vaddr+m.size <= uint64(addr)+uint64(len(mp.mem)) {
					o := m.vaddr - uint64(addr) + (iova - base)
					return mp.mem[o : o+n]
				}
			}
		}
	}
	return nil
}

// fire signals vector vec of IRQ index of device addr, as the device would.
func (k *fakeKernel) fire(t testing.TB, addr string, index, vec int) {
	t.Helper()
	k.mu.Lock()
	fds := k.devices[addr].irqFDs[index]
	k.mu.Unlock()
	if vec >= len(fds) {
		t.Fatalf("fire: IRQ %d vector %d not set up (%d eventfds)", index, vec, len(fds))
	}
	var b [8]byte
	ne.PutUint64(b[:], 1)
	if _, err := unix.Write(int(fds[vec]), b[:]); err != nil {
		t.Fatalf("fire: %v", err)
	}
}

func (k *fakeKernel) newFD(f *fakeFile) int {
	fd := k.nextFD
	k.nextFD++
	k.fds[fd] = f
	return fd
}

func (k *fakeKernel) Open(path string, flags int) (int, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if err, ok := k.openErr[path]; ok {
		k.record("open %s: %v", path, err)
		return -1, err
	}
	if path == "/proc/self/pagemap" && k.pfn != nil {
		return k.newFD(&fakeFile{kind: "pagemap", path: path}), nil
	}
	dir, name := filepath.Dir(path), filepath.Base(path)
	if dir != k.devDir {
		return -1, unix.ENOENT
	}
	if name == "vfio" {
		if k.noVFIO {
			return -1, unix.ENOENT
		}
		k.record("open container")
		return k.newFD(&fakeFile{kind: "container", path: path}), nil
	}
	g, ok := k.groups[name]
	if !ok {
		return -1, unix.ENOENT
	}
	for _, f := range k.fds {
		if f.group == g && f.kind == "group" {
			return -1, unix.EBUSY
		}
	}
	k.record("open group %s", name)
	return k.newFD(&fakeFile{kind: "group", path: path, group: g}), nil
}

func (k *fakeKernel) Close(fd int) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.eventfds[fd] {
		delete(k.eventfds, fd)
		return unix.Close(fd)
	}
	f, ok := k.fds[fd]
	if !ok {
		return unix.EBADF
	}
	delete(k.fds, fd)
	switch f.kind {
	case "group":
		if f.group.container >= 0 {
			f.group.container = -1
			k.iommu = 0 // the last group left the container
		}
		k.record("close group %s", f.group.name)
	case "device":
		f.dev.open = false
		k.record("close device")
	default:
		k.record("close %s", f.kind)
	}
	return nil
}

func (k *fakeKernel) file(fd int, kind string) (*fakeFile, error) {
	f, ok := k.fds[fd]
	if !ok {
		return nil, unix.EBADF
	}
	if f.kind != kind {
		return nil, unix.ENOTTY
	}
	return f, nil
}

func (k *fakeKernel) IoctlVal(fd int, req uint, val uintptr) (int, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.ioctls[req]++
	if err, ok := k.failIoctl[req]; ok {
		return -1, err
	}
	switch req {
	case ioctlGetAPIVersion, ioctlCheckExtension, ioctlSetIOMMU:
		if _, err := k.file(fd, "container"); err != nil {
			return -1, err
		}
	case ioctlDeviceReset:
		f, err := k.file(fd, "device")
		if err != nil {
			return -1, err
		}
		if f.dev.flags&DeviceFlagReset == 0 {
			return -1, unix.ENOTTY
		}
		k.resets++
		k.record("reset")
		return 0, nil
	default:
		return -1, unix.ENOTTY
	}
	switch req {
	case ioctlGetAPIVersion:
		return k.apiVersion, nil
	case ioctlCheckExtension:
		if k.extensions[val] {
			return 1, nil
		}
		return 0, nil
	default: // ioctlSetIOMMU
		attached := false
		for _, g := range k.groups {
			attached = attached || (g.container == fd)
		}
		if !attached || !k.extensions[val] || k.iommu != 0 {
			return -1, unix.EINVAL
		}
		k.iommu = val
		k.record("set iommu %d", val)
		return 0, nil
	}
}

func (k *fakeKernel) IoctlPtr(fd int, req uint, arg []byte) (int, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.ioctls[req]++
	if err, ok := k.failIoctl[req]; ok {
		return -1, err
	}
	u32 := func(off int) uint32 { return ne.Uint32(arg[off:]) }
	u64 := func(off int) uint64 { return ne.Uint64(arg[off:]) }
	argsz := func(min int) error {
		if len(arg) < min || int(u32(0)) < min || int(u32(0)) > len(arg) {
			return unix.EINVAL
		}
		return nil
	}
	switch req {
	case ioctlGroupGetStatus, ioctlGroupSetContainer, ioctlGroupGetDeviceFD:
		f, err := k.file(fd, "group")
		if err != nil {
			return -1, err
		}
		g := f.group
		switch req {
		case ioctlGroupGetStatus:
			if err := argsz(8); err != nil {
				return -1, err
			}
			var fl uint32
			if g.viable {
				fl |= groupFlagViable
			}
			if g.container >= 0 {
				fl |= groupFlagContainerSet
			}
			ne.PutUint32(arg[4:], fl)
			return 0, nil
		case ioctlGroupSetContainer:
			if len(arg) != 4 {
				return -1, unix.EINVAL
			}
			cfd := int(int32(u32(0)))
			if _, err := k.file(cfd, "container"); err != nil {
				return -1, unix.EBADF
			}
			if !g.viable || g.container >= 0 {
				return -1, unix.EPERM
			}
			g.container = cfd
			k.record("set container")
			return 0, nil
		default: // ioctlGroupGetDeviceFD
			i := bytes.IndexByte(arg, 0)
			if i < 0 {
				return -1, unix.EFAULT
			}
			name := string(arg[:i])
			if g.container < 0 || k.iommu == 0 {
				return -1, unix.EINVAL
			}
			d, ok := k.devices[name]
			if !ok || d.group != g.name && "noiommu-"+d.group != g.name {
				return -1, unix.ENODEV
			}
			if d.getFDErr != nil {
				return -1, d.getFDErr
			}
			if d.open {
				return -1, unix.EBUSY
			}
			d.open = true
			k.record("get device fd")
			return k.newFD(&fakeFile{kind: "device", dev: d}), nil
		}

	case ioctlDeviceGetInfo, ioctlDeviceGetRegion, ioctlDeviceGetIRQInfo, ioctlDeviceSetIRQs:
		f, err := k.file(fd, "device")
		if err != nil {
			return -1, err
		}
		d := f.dev
		switch req {
		case ioctlDeviceGetInfo:
			if err := argsz(16); err != nil {
				return -1, err
			}
			ne.PutUint32(arg[4:], d.flags)
			ne.PutUint32(arg[8:], uint32(len(d.regions)))
			ne.PutUint32(arg[12:], uint32(len(d.irqs)))
			return 0, nil
		case ioctlDeviceGetRegion:
			if err := argsz(32); err != nil {
				return -1, err
			}
			idx := u32(8)
			if idx >= uint32(len(d.regions)) {
				return -1, unix.EINVAL
			}
			var fl uint32
			var size uint64
			if r := d.regions[idx]; r != nil {
				fl, size = r.flags, r.size
			}
			ne.PutUint32(arg[4:], fl)
			ne.PutUint32(arg[12:], 0)
			ne.PutUint64(arg[16:], size)
			ne.PutUint64(arg[24:], uint64(idx)<<40)
			return 0, nil
		case ioctlDeviceGetIRQInfo:
			if err := argsz(16); err != nil {
				return -1, err
			}
			idx := u32(8)
			if idx >= uint32(len(d.irqs)) {
				return -1, unix.EINVAL
			}
			ne.PutUint32(arg[4:], d.irqs[idx].Flags)
			ne.PutUint32(arg[12:], d.irqs[idx].Count)
			return 0, nil
		default: // ioctlDeviceSetIRQs
			if err := argsz(20); err != nil {
				return -1, err
			}
			k.irqSets = append(k.irqSets, append([]byte(nil), arg...))
			fl, idx, start, count := u32(4), u32(8), u32(12), u32(16)
			if idx >= uint32(len(d.irqs)) || fl&irqSetActionTrigger == 0 {
				return -1, unix.EINVAL
			}
			switch {
			case fl&irqSetDataNone != 0 && count == 0:
				delete(d.irqFDs, int(idx))
				k.record("irqs off %d", idx)
				return 0, nil
			case fl&irqSetDataEventfd != 0:
				if start != 0 || count == 0 || count > d.irqs[idx].Count || int(u32(0)) != 20+4*int(count) {
					return -1, unix.EINVAL
				}
				fds := make([]int32, count)
				for i := range fds {
					fds[i] = int32(u32(20 + 4*i))
					if !k.eventfds[int(fds[i])] {
						return -1, unix.EBADF
					}
				}
				d.irqFDs[int(idx)] = fds
				k.record("irqs on %d x%d", idx, count)
				return 0, nil
			}
			return -1, unix.EINVAL
		}

	case ioctlIOMMUGetInfo, ioctlIOMMUMapDMA, ioctlIOMMUUnmapDMA:
		if _, err := k.file(fd, "container"); err != nil {
			return -1, err
		}
		if k.iommu == 0 || k.iommu == iommuNoIOMMU {
			return -1, unix.EINVAL
		}
		switch req {
		case ioctlIOMMUGetInfo:
			if err := argsz(16); err != nil {
				return -1, err
			}
			fl := uint32(iommuInfoPgsizes)
			ne.PutUint64(arg[8:], k.pgsizes)
			if k.ranges != nil {
				fl |= iommuInfoCaps
				need := 24 + 16 + 16*len(k.ranges)
				if int(u32(0)) < need {
					ne.PutUint32(arg[0:], uint32(need))
					ne.PutUint32(arg[16:], 0)
				} else {
					ne.PutUint32(arg[16:], 24)
					c := arg[24:]
					ne.PutUint16(c[0:], iommuCapIOVARange)
					ne.PutUint16(c[2:], 1)
					ne.PutUint32(c[4:], 0)
					ne.PutUint32(c[8:], uint32(len(k.ranges)))
					for i, r := range k.ranges {
						ne.PutUint64(c[16+16*i:], r.start)
						ne.PutUint64(c[24+16*i:], r.end-1)
					}
				}
			}
			ne.PutUint32(arg[4:], fl)
			return 0, nil
		case ioctlIOMMUMapDMA:
			if err := argsz(32); err != nil {
				return -1, err
			}
			fl, vaddr, iova, size := u32(4), u64(8), u64(16), u64(24)
			if size == 0 || size%4096 != 0 || iova%4096 != 0 || vaddr%4096 != 0 {
				return -1, unix.EINVAL
			}
			if k.ranges != nil {
				in := false
				for _, r := range k.ranges {
					in = in || (iova >= r.start && iova+size <= r.end)
				}
				if !in {
					return -1, unix.EINVAL
				}
			}
			backed := false
			for addr, m := range k.maps {
				backed = backed || (vaddr >= uint64(addr) && vaddr+size <= uint64(addr)+uint64(len(m.mem)))
			}
			if !backed {
				return -1, unix.EFAULT
			}
			for base, m := range k.dma {
				if iova < base+m.size && base < iova+size {
					return -1, unix.EEXIST
				}
			}
			k.dma[iova] = fakeDMA{vaddr: vaddr, size: size, flags: fl}
			k.record("map dma %#x+%#x", iova, size)
			return 0, nil
		default: // ioctlIOMMUUnmapDMA
			if err := argsz(24); err != nil {
				return -1, err
			}
			iova, size := u64(8), u64(16)
			m, ok := k.dma[iova]
			if !ok || m.size != size {
				ne.PutUint64(arg[16:], 0)
				return -1, unix.EINVAL
			}
			delete(k.dma, iova)
			k.record("unmap dma %#x+%#x", iova, size)
			return 0, nil
		}
	}
	return -1, unix.ENOTTY
}

// region resolves a device-fd offset to a region and an offset in it.
func (k *fakeKernel) region(fd int, off int64, n int) (*fakeRegion, int64, error) {
	f, err := k.file(fd, "device")
	if err != nil {
		return nil, 0, err
	}
	idx := uint64(off) >> 40
	if idx >= uint64(len(f.dev.regions)) || f.dev.regions[idx] == nil {
		return nil, 0, unix.EINVAL
	}
	r := f.dev.regions[idx]
	o := off & (1<<40 - 1)
	if uint64(o)+uint64(n) > r.size {
		return nil, 0, unix.EINVAL
	}
	return r, o, nil
}

func (k *fakeKernel) Pread(fd int, b []byte, off int64) (int, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if f, ok := k.fds[fd]; ok && f.kind == "pagemap" {
		if len(b) != 8 || off%8 != 0 {
			return -1, unix.EINVAL
		}
		pfn, present := k.pfn(uint64(off) / 8)
		v := pfn & (1<<55 - 1)
		if present {
			v |= 1 << 63
		}
		ne.PutUint64(b, v)
		return 8, nil
	}
	r, o, err := k.region(fd, off, len(b))
	if err != nil {
		return -1, err
	}
	if r.flags&RegionFlagRead == 0 {
		return -1, unix.EINVAL
	}
	return copy(b, r.data[o:]), nil
}

func (k *fakeKernel) Pwrite(fd int, b []byte, off int64) (int, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	r, o, err := k.region(fd, off, len(b))
	if err != nil {
		return -1, err
	}
	if r.flags&RegionFlagWrite == 0 {
		return -1, unix.EINVAL
	}
	return copy(r.data[o:], b), nil
}

func (k *fakeKernel) Mmap(fd int, off int64, length int, prot, flags int) ([]byte, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if fd == -1 {
		if flags&unix.MAP_ANONYMOUS == 0 {
			return nil, unix.EBADF
		}
		mem, err := unix.Mmap(-1, 0, length, prot, flags&^unix.MAP_LOCKED)
		if err != nil {
			return nil, err
		}
		k.maps[uintptr(unsafe.Pointer(&mem[0]))] = fakeMap{mem: mem, anon: true}
		return mem, nil
	}
	r, o, err := k.region(fd, off, 0)
	if err != nil {
		return nil, err
	}
	if r.flags&RegionFlagMmap == 0 || flags&unix.MAP_SHARED == 0 || o != 0 || length > len(r.data) {
		return nil, unix.EINVAL
	}
	mem := r.data[:length:length]
	k.maps[uintptr(unsafe.Pointer(&mem[0]))] = fakeMap{mem: mem}
	k.record("mmap bar")
	return mem, nil
}

func (k *fakeKernel) Munmap(b []byte) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(b) == 0 {
		return unix.EINVAL
	}
	a := uintptr(unsafe.Pointer(&b[0]))
	m, ok := k.maps[a]
	if !ok || len(m.mem) != len(b) {
		return unix.EINVAL
	}
	delete(k.maps, a)
	if m.anon {
		return unix.Munmap(m.mem)
	}
	k.record("munmap bar")
	return nil
}

func (k *fakeKernel) Eventfd(initval uint, flags int) (int, error) {
	fd, err := unix.Eventfd(initval, flags)
	if err != nil {
		return -1, err
	}
	k.mu.Lock()
	k.eventfds[fd] = true
	k.mu.Unlock()
	return fd, nil
}

func (k *fakeKernel) Read(fd int, b []byte) (int, error)  { return unix.Read(fd, b) }
func (k *fakeKernel) Write(fd int, b []byte) (int, error) { return unix.Write(fd, b) }
func (k *fakeKernel) Poll(fds []unix.PollFd, ms int) (int, error) {
	return unix.Poll(fds, ms)
}

// sysDev is one PCI function of a fake sysfs tree.
type sysDev struct {
	addr, driver, group string // "" driver: unbound; "" group: no iommu_group link
}

// makeSysfs builds bus/pci/devices/ADDR with driver and iommu_group links
// and kernel/iommu_groups/N/devices/ADDR under a temporary root.
func makeSysfs(t testing.TB, devs ...sysDev) string {
	t.Helper()
	root := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range devs {
		dir := filepath.Join(root, "bus", "pci", "devices", d.addr)
		must(os.MkdirAll(dir, 0o755))
		if d.driver != "" {
			drv := filepath.Join(root, "bus", "pci", "drivers", d.driver)
			must(os.MkdirAll(drv, 0o755))
			must(os.Symlink(drv, filepath.Join(dir, "driver")))
		}
		if d.group != "" {
			g := filepath.Join(root, "kernel", "iommu_groups", d.group)
			must(os.MkdirAll(filepath.Join(g, "devices"), 0o755))
			must(os.Symlink(g, filepath.Join(dir, "iommu_group")))
			must(os.Symlink(dir, filepath.Join(g, "devices", d.addr)))
		}
	}
	return root
}

func sortedKeys[V any](m map[uint64]V) []uint64 {
	var ks []uint64
	for k := range m {
		ks = append(ks, k)
	}
	sort.Slice(ks, func(i, j int) bool { return ks[i] < ks[j] })
	return ks
}
