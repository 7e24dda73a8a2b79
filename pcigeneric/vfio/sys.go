package vfio

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// sysCalls is the system-call layer under Device. The real implementation
// (realSys) calls the kernel through golang.org/x/sys/unix; the tests
// substitute a fake that emulates a VFIO container, groups and a device.
// Errors are the raw unix.Errno values (or wrap them), so callers can
// match EBUSY, EACCES and friends.
type sysCalls interface {
	Open(path string, flags int) (int, error)
	Close(fd int) error
	// IoctlPtr issues an ioctl whose argument is a pointer to arg (which
	// must not be empty); the kernel may write back into arg.
	IoctlPtr(fd int, req uint, arg []byte) (int, error)
	// IoctlVal issues an ioctl whose argument is passed by value.
	IoctlVal(fd int, req uint, val uintptr) (int, error)
	Pread(fd int, b []byte, off int64) (int, error)
	Pwrite(fd int, b []byte, off int64) (int, error)
	// Mmap maps length bytes of fd at off; fd -1 means anonymous memory.
	Mmap(fd int, off int64, length int, prot, flags int) ([]byte, error)
	Munmap(b []byte) error
	Eventfd(initval uint, flags int) (int, error)
	Read(fd int, b []byte) (int, error)
	Write(fd int, b []byte) (int, error)
	Poll(fds []unix.PollFd, timeoutMs int) (int, error)
}

// realSys is sysCalls on the running kernel.
type realSys struct{}

// Open opens path with O_CLOEXEC, retrying on EINTR.
func (realSys) Open(path string, flags int) (int, error) {
	for {
		fd, err := unix.Open(path, flags|unix.O_CLOEXEC, 0)
		if err != unix.EINTR {
			return fd, err
		}
	}
}

// Close closes fd.
func (realSys) Close(fd int) error { return unix.Close(fd) }

// IoctlPtr passes a pointer to arg's first byte.
func (realSys) IoctlPtr(fd int, req uint, arg []byte) (int, error) {
	if len(arg) == 0 {
		return -1, unix.EINVAL
	}
	r, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), uintptr(req), uintptr(unsafe.Pointer(&arg[0])))
	if e != 0 {
		return -1, e
	}
	return int(r), nil
}

// IoctlVal passes val as the argument.
func (realSys) IoctlVal(fd int, req uint, val uintptr) (int, error) {
	r, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), uintptr(req), val)
	if e != 0 {
		return -1, e
	}
	return int(r), nil
}

// Pread reads at off.
func (realSys) Pread(fd int, b []byte, off int64) (int, error) { return unix.Pread(fd, b, off) }

// Pwrite writes at off.
func (realSys) Pwrite(fd int, b []byte, off int64) (int, error) { return unix.Pwrite(fd, b, off) }

// Mmap maps fd (or anonymous memory for fd -1).
func (realSys) Mmap(fd int, off int64, length int, prot, flags int) ([]byte, error) {
	return unix.Mmap(fd, off, length, prot, flags)
}

// Munmap unmaps b.
func (realSys) Munmap(b []byte) error { return unix.Munmap(b) }

// Eventfd creates an eventfd.
func (realSys) Eventfd(initval uint, flags int) (int, error) { return unix.Eventfd(initval, flags) }

// Read reads from fd.
func (realSys) Read(fd int, b []byte) (int, error) { return unix.Read(fd, b) }

// Write writes to fd.
func (realSys) Write(fd int, b []byte) (int, error) { return unix.Write(fd, b) }

// Poll waits for events on fds.
func (realSys) Poll(fds []unix.PollFd, timeoutMs int) (int, error) { return unix.Poll(fds, timeoutMs) }

// sliceAddr is the user virtual address of b's first byte (the vaddr of
// VFIO_IOMMU_MAP_DMA). b must be memory the Go GC does not move: an mmap.
func sliceAddr(b []byte) uint64 {
	if len(b) == 0 {
		return 0
	}
	return uint64(uintptr(unsafe.Pointer(&b[0])))
}
