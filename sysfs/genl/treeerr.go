package genl

import (
	"errors"
	"strings"

	"github.com/gomhi/gomhi/sysfs"
	"golang.org/x/sys/unix"
)

// This file maps the tree's errors to the errnos and messages of the
// extended acknowledgement.

// sentinelTexts are stripped from tree errors for the extended ack, which
// already carries an errno.
var sentinelTexts = []string{
	sysfs.ErrInvalid.Error(), sysfs.ErrReadOnly.Error(), sysfs.ErrWriteOnly.Error(),
	sysfs.ErrNotFound.Error(), sysfs.ErrBusy.Error(),
}

func humanize(err error) string {
	s := err.Error()
	for _, t := range sentinelTexts {
		s = strings.ReplaceAll(s, ": "+t, "")
		s = strings.ReplaceAll(s, t+": ", "")
	}
	return s
}

// treeError maps a tree error to an errno: ErrInvalid → EINVAL,
// ErrReadOnly/ErrWriteOnly → EPERM, ErrBusy → EBUSY, ErrNotFound → ENODEV,
// anything else → EIO.
func treeError(err error, off int, dev string) *RequestError {
	e := &RequestError{Offset: off, Err: err, Msg: humanize(err)}
	switch {
	case errors.Is(err, sysfs.ErrInvalid):
		e.Errno = unix.EINVAL
	case errors.Is(err, sysfs.ErrReadOnly), errors.Is(err, sysfs.ErrWriteOnly):
		e.Errno = unix.EPERM
	case errors.Is(err, sysfs.ErrBusy):
		e.Errno = unix.EBUSY
		e.Msg = dev + ": " + e.Msg
	case errors.Is(err, sysfs.ErrNotFound):
		e.Errno = unix.ENODEV
	default:
		e.Errno = unix.EIO
		e.Msg = dev + ": " + e.Msg
	}
	return e
}
