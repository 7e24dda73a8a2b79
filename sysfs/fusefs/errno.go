package fusefs

import (
	"context"
	"errors"
	"os"
	"syscall"

	"github.com/gomhi/gomhi/sysfs"
)

// Errno maps an error from the attribute tree to the errno a FUSE
// request returns:
//
//	nil                                  0
//	sysfs.ErrInvalid                     EINVAL
//	sysfs.ErrBusy                        EBUSY
//	sysfs.ErrReadOnly, sysfs.ErrWriteOnly EACCES
//	sysfs.ErrNotFound                    ENOENT
//	context deadline / os deadline       ETIMEDOUT
//	a wrapped syscall.Errno              that errno
//	anything else                        EIO
//
// ErrInvalid is tested before ErrBusy, so an error wrapping both (a
// validation failure reported by the data path) is EINVAL.
func Errno(err error) syscall.Errno {
	var errno syscall.Errno
	switch {
	case err == nil:
		return 0
	case errors.Is(err, sysfs.ErrInvalid):
		return syscall.EINVAL
	case errors.Is(err, sysfs.ErrBusy):
		return syscall.EBUSY
	case errors.Is(err, sysfs.ErrReadOnly), errors.Is(err, sysfs.ErrWriteOnly):
		return syscall.EACCES
	case errors.Is(err, sysfs.ErrNotFound):
		return syscall.ENOENT
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded):
		return syscall.ETIMEDOUT
	case errors.As(err, &errno) && errno != 0:
		return errno
	default:
		return syscall.EIO
	}
}
