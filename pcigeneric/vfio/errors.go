package vfio

import (
	"errors"
	"fmt"
)

// Sentinel errors. Every error returned by this package names the PCI
// address ("vfio 0000:01:00.0: …") and wraps one of these with %w, and,
// where a system call failed, the unix.Errno as well, so both
// errors.Is(err, ErrDeviceBusy) and errors.Is(err, unix.EBUSY) hold.
var (
	// ErrNoVFIO: the kernel has no VFIO: /dev/vfio/vfio is missing, or the
	// container offers no usable IOMMU type.
	ErrNoVFIO = errors.New("no VFIO in this kernel")
	// ErrNoIOMMUGroup: the device has no iommu_group link in sysfs.
	ErrNoIOMMUGroup = errors.New("device has no IOMMU group")
	// ErrGroupNotViable: some device of the IOMMU group is bound to a
	// driver other than vfio-pci (the group status lacks VIABLE).
	ErrGroupNotViable = errors.New("IOMMU group not viable")
	// ErrDeviceBusy: the group or the device is open in another process
	// (EBUSY).
	ErrDeviceBusy = errors.New("device in use by another process")
	// ErrPermission: opening the group node was refused (EACCES/EPERM).
	ErrPermission = errors.New("permission denied")
	// ErrNotBound: the device is not bound to vfio-pci.
	ErrNotBound = errors.New("device not bound to vfio-pci")
	// ErrNoDevice: there is no PCI device at the address, or the address is
	// malformed.
	ErrNoDevice = errors.New("no such PCI device")
	// ErrNoRegion: the region or IRQ index does not exist, or does not
	// allow the requested access (mmap, read, write, range).
	ErrNoRegion = errors.New("no such region")
	// ErrTimeout: Vector.Wait saw no interrupt within its timeout.
	ErrTimeout = errors.New("timed out")
	// ErrIOVAExhausted: no free IOVA range of the requested size and
	// alignment below 1<<DMAWidth.
	ErrIOVAExhausted = errors.New("IOVA space exhausted")
	// ErrNoReset: the device does not support VFIO_DEVICE_RESET.
	ErrNoReset = errors.New("device has no reset")
	// ErrClosed: the device, vector or BAR was closed.
	ErrClosed = errors.New("closed")
	// ErrNoIOMMU: the operation needs an IOMMU (type1) but the group is in
	// no-IOMMU mode, or no-IOMMU mode was required but is unavailable.
	ErrNoIOMMU = errors.New("no-IOMMU mode")
	// ErrInvalid: an argument is out of range (size, alignment, offset,
	// vector count).
	ErrInvalid = errors.New("invalid argument")
)

// errf formats "vfio ADDR: " + the sentinel + ": " + format. Use %w in
// format to wrap the underlying errno.
func errf(addr string, sentinel error, format string, args ...any) error {
	return fmt.Errorf("vfio %s: %w: "+format, append([]any{addr, sentinel}, args...)...)
}

// opErr is an error without a sentinel of its own: "vfio ADDR: op: err".
func opErr(addr, op string, err error) error {
	return fmt.Errorf("vfio %s: %s: %w", addr, op, err)
}
