// Package vfio drives a PCI function from user space through Linux VFIO
// (the legacy container/group interface, type1 IOMMU or no-IOMMU mode),
// and offers an mhi.Transport on top of it so that the gomhi host stack
// can run a real MHI modem (or any device, e.g. QEMU's edu in tests).
//
// # Preparing a real modem
//
//  1. Enable the IOMMU (intel_iommu=on or amd_iommu=on on the kernel
//     command line) so the device gets an IOMMU group
//     (/sys/bus/pci/devices/ADDR/iommu_group). Without one, VFIO only
//     works in the unsafe no-IOMMU mode (CONFIG_VFIO_NOIOMMU and
//     vfio.enable_unsafe_noiommu_mode=1), which this package supports
//     through the /dev/vfio/noiommu-N node, with DMA restricted to
//     physically contiguous buffers.
//  2. Load vfio-pci (modprobe vfio-pci) and bind the modem to it:
//     "mhictl bind 0000:01:00.0" (driver_override + unbind from
//     mhi-pci-generic + drivers_probe). Every other device of the same
//     IOMMU group must be bound to vfio-pci too, or to no driver.
//  3. Give the user access: /dev/vfio/vfio is world-accessible, the group
//     node /dev/vfio/N is root's; chown it (or run as root). DMA mappings
//     are pinned and count against RLIMIT_MEMLOCK: raise it (ulimit -l)
//     when not root.
//
// # What Open checks
//
// Open(addr, Options{}) checks, in this order, failing with a sentinel
// that says what to do: the device exists in sysfs (ErrNoDevice); it has
// an iommu_group link (ErrNoIOMMUGroup); its driver link is vfio-pci
// (ErrNotBound); /dev/vfio/vfio exists (ErrNoVFIO) and reports API
// version 0 and TYPE1v2 (or TYPE1; or NOIOMMU for a noiommu-N group);
// the group node opens (ErrPermission on EACCES/EPERM, ErrDeviceBusy on
// EBUSY); the group is VIABLE (ErrGroupNotViable, naming the devices
// bound elsewhere); SET_CONTAINER and SET_IOMMU succeed; the IOMMU's page
// sizes and valid IOVA ranges are read; GET_DEVICE_FD (ErrDeviceBusy when
// another process has the device) and GET_INFO succeed. Every error names
// the device address and wraps both the sentinel and the errno. On
// failure everything opened so far is closed in reverse order.
//
// # Using the device
//
//	d, err := vfio.Open("0000:01:00.0", vfio.Options{DMAWidth: 40})
//	defer d.Close()
//	err = d.EnableBusMaster()                    // PCI_COMMAND |= memory | bus master
//	bar, err := d.MapBAR(vfio.RegionBAR0)        // mmap of the BAR
//	id := bar.Read32(0)                          // one 32-bit load
//	buf, err := d.AllocDMA(4096, 4096)           // mmap + VFIO_IOMMU_MAP_DMA
//	vecs, err := d.EnableIRQs(vfio.IRQIndexMSI, 1) // eventfds via SET_IRQS
//	n, err := vecs[0].Wait(time.Second)          // interrupts since the last Wait
//
// or, for the MHI stack, NewTransport(d, bar, vectors), which maps the
// BAR, enables bus mastering and MSI-X (else MSI) vectors, and delivers
// interrupts from one goroutine polling the eventfds.
//
// BAR accesses go through non-inlined helpers that perform exactly one
// load or store of the access width; Read32 etc. never panic (out-of-range
// reads return all ones and are counted), CheckedRead32 etc. return
// errors. BARs that cannot be mmapped are reached with ReadBAR32 /
// WriteBAR32 (pread/pwrite on the device fd).
//
// AllocDMA picks IOVAs first-fit in [IOVABase, 1<<DMAWidth) intersected
// with the IOVA windows reported by VFIO_IOMMU_GET_INFO, aligned to the
// request and to the IOMMU page size; MapDMAAt maps at a fixed IOVA.
//
// # Limits
//
// Region capability chains are not read: a BAR with sparse mmap areas
// (VFIO_REGION_INFO_CAP_SPARSE_MMAP) is mapped whole or not at all, and
// device-specific regions beyond the nine vfio-pci ones are not decoded.
// The cdev/iommufd interface (/dev/vfio/devices, /dev/iommu) is not used.
// Close, BAR.Unmap and DisableIRQs must not run concurrently with accesses
// to what they tear down (a BAR load after munmap would fault).
//
// # Tests
//
// The system calls go through an internal interface; the package's tests
// run against a fake kernel (container, groups, a device with byte-slice
// regions, DMA bookkeeping, real eventfds), so they need no VFIO. The real
// path is exercised by a QEMU guest test with the edu device behind a
// virtual IOMMU.
package vfio
