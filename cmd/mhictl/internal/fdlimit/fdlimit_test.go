package fdlimit

import (
	"errors"
	"syscall"
	"testing"
)

// TestCheckEnough: the test's own limit (Go raises the soft limit to the
// hard one) passes Check(Min).
func TestCheckEnough(t *testing.T) {
	if err := Check(Min); err != nil {
		var lim syscall.Rlimit
		_ = syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim)
		t.Fatalf("Check(%d) with limits %d/%d: %v", Min, lim.Cur, lim.Max, err)
	}
}

// TestCheckTooLow: a need above the hard limit is a *TooLowError naming
// the limit and the need, in the one line mhictl prints.
func TestCheckTooLow(t *testing.T) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	if lim.Max == ^uint64(0) {
		t.Skip("no hard open-file limit")
	}
	err := Check(lim.Max + 1)
	var tl *TooLowError
	if !errors.As(err, &tl) || tl.Limit != lim.Max || tl.Need != lim.Max+1 {
		t.Fatalf("Check(%d) = %v, want a TooLowError with limit %d", lim.Max+1, err, lim.Max)
	}
	want := "open-file limit 8 is too low: need at least 16 (ulimit -n)"
	if got := (&TooLowError{Limit: 8, Need: 16}).Error(); got != want {
		t.Errorf("message %q, want %q", got, want)
	}
}

// TestOpenBelow: the standard streams are counted, and a descriptor
// opened more is counted too.
func TestOpenBelow(t *testing.T) {
	before := openBelow(countBelow)
	if before < 3 {
		t.Fatalf("%d descriptors open below %d, want at least the 3 standard streams", before, countBelow)
	}
	fds := make([]int, 2)
	if err := syscall.Pipe(fds); err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fds[0])
	defer syscall.Close(fds[1])
	if fds[1] < countBelow {
		if after := openBelow(countBelow); after != before+2 {
			t.Errorf("after a pipe: %d open, want %d", after, before+2)
		}
	}
}
