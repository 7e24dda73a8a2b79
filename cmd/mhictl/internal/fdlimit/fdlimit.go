// Package fdlimit makes mhictl refuse, with one clear line, an open-file
// limit (RLIMIT_NOFILE) too low for it to start, instead of panicking.
//
// The reason is go-fuse: github.com/hanwen/go-fuse/v2/splice creates a
// pipe in its init function and panics (log.Panicf, a goroutine dump) when
// it cannot, so under `ulimit -n 8` every mhictl command died before main
// ran. mhictl's main package imports this package for its init, which
// runs before splice's: since Go 1.21 packages are initialized in the
// order of their import paths among those whose imports are initialized
// (the spec, "Package initialization"), this package imports only
// standard packages that splice imports too (os, strconv, syscall; splice
// imports fmt, log, os, sync, syscall), so it is ready whenever splice is,
// and its path (github.com/gomhi/…) sorts before splice's
// (github.com/hanwen/…). TestLowFileLimit checks the order by running
// mhictl under `ulimit -n 8`.
//
// It must keep importing nothing but the standard library.
package fdlimit

import (
	"os"
	"strconv"
	"syscall"
)

// Min is the lowest open-file limit mhictl starts with: the runtime,
// go-fuse's init and the smallest commands (mhictl models, bench --quick,
// loopback on the embedded mock) need about ten descriptors (measured:
// they run with a hard limit of 9), and the rest is margin. Commands that
// need more (up with its TUN interface, FUSE mount and ports) report
// "too many open files" like any other error.
const Min = 16

// headroom is how many descriptors beyond those already open when the
// check runs (standard streams, the runtime's, any a parent left open)
// mhictl needs at the least.
const headroom = 8

// countBelow is the limit under which Check counts the descriptors in
// use (one fcntl per possible descriptor); above it there is room enough.
const countBelow = 256

// TooLowError says the open-file limit is below what mhictl needs and
// cannot be raised (the hard limit is lower).
type TooLowError struct {
	// Limit is the open-file limit (the soft limit, raised as far as the
	// hard limit allows).
	Limit uint64
	// Need is the limit mhictl needs at the least.
	Need uint64
}

// Error says "open-file limit L is too low: need at least N (ulimit -n)".
func (e *TooLowError) Error() string {
	return "open-file limit " + strconv.FormatUint(e.Limit, 10) + " is too low: need at least " +
		strconv.FormatUint(e.Need, 10) + " (ulimit -n)"
}

// Check makes sure the open-file limit is at least min and leaves room for
// headroom more descriptors than are open now. A soft limit below that is
// raised to the hard limit (Go's runtime has usually done so already); if
// the hard limit is too low as well, Check returns a *TooLowError. A limit
// that cannot be read is not checked.
func Check(min uint64) error {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return nil // nothing to go by: let the program try
	}
	need := min
	if lim.Cur < countBelow {
		need = max(need, openBelow(lim.Cur)+headroom)
	}
	if lim.Cur >= need {
		return nil
	}
	if lim.Max > lim.Cur {
		raised := syscall.Rlimit{Cur: lim.Max, Max: lim.Max}
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &raised); err == nil {
			lim = raised
		}
	}
	if lim.Cur >= need {
		return nil
	}
	return &TooLowError{Limit: lim.Cur, Need: need}
}

// openBelow counts the open descriptors below n.
func openBelow(n uint64) uint64 {
	var open uint64
	for fd := range uintptr(n) {
		if _, _, errno := syscall.Syscall(syscall.SYS_FCNTL, fd, syscall.F_GETFD, 0); errno == 0 {
			open++
		}
	}
	return open
}

// init runs Check(Min) before go-fuse's init can panic; on failure it
// prints "mhictl: open-file limit L is too low: need at least N (ulimit
// -n)" and exits with status 1, as mhictl does for any error.
func init() {
	if err := Check(Min); err != nil {
		_, _ = os.Stderr.WriteString("mhictl: " + err.Error() + "\n")
		os.Exit(1)
	}
}
