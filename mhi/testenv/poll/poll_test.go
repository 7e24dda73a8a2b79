package poll_test

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhi/testenv/poll"
)

// TestUntilSeesALateCondition: a condition another goroutine makes true
// after 30 ms is seen, well before the timeout.
func TestUntilSeesALateCondition(t *testing.T) {
	var done atomic.Bool
	time.AfterFunc(30*time.Millisecond, func() { done.Store(true) })
	start := time.Now()
	if !poll.Until(10*time.Second, done.Load) {
		t.Fatal("Until: false for a condition that became true")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Until returned after %v", d)
	}
}

// TestUntilGivesUp: a condition that never holds returns false after the
// timeout, having been called more than once and a last time at the end.
func TestUntilGivesUp(t *testing.T) {
	var calls int
	start := time.Now()
	if poll.Until(50*time.Millisecond, func() bool { calls++; return false }) {
		t.Fatal("Until: true for a condition that never held")
	}
	if d := time.Since(start); d < 50*time.Millisecond {
		t.Fatalf("gave up after %v, before the timeout", d)
	}
	if calls < 3 {
		t.Fatalf("condition called %d times", calls)
	}
}

// TestUntilNilReturnsTheLastError: the last error comes back; nil once f
// succeeds.
func TestUntilNilReturnsTheLastError(t *testing.T) {
	errNo := errors.New("not yet")
	if err := poll.UntilNil(20*time.Millisecond, func() error { return errNo }); !errors.Is(err, errNo) {
		t.Fatalf("UntilNil = %v, want %v", err, errNo)
	}
	n := 0
	if err := poll.UntilNil(time.Second, func() error {
		if n++; n < 3 {
			return errNo
		}
		return nil
	}); err != nil {
		t.Fatalf("UntilNil = %v after success", err)
	}
}

// recorder is a testing.TB that records Fatal instead of stopping.
type recorder struct {
	testing.TB
	failed string
}

func (r *recorder) Helper()                           {}
func (r *recorder) Fatalf(format string, args ...any) { r.failed = fmt.Sprintf(format, args...) }
func (r *recorder) Fatal(args ...any)                 { r.failed = fmt.Sprint(args...) }

// TestWaitFailsWithTheMomentsDescription: Wait fails with describe's text,
// made when it fails; WaitNil names what and the error.
func TestWaitFailsWithTheMomentsDescription(t *testing.T) {
	r := &recorder{TB: t}
	state := "M0"
	poll.Wait(r, 10*time.Millisecond, func() bool { state = "M3"; return false }, func() string { return "state " + state })
	if !strings.HasPrefix(r.failed, "state M3 (waited") {
		t.Fatalf("Wait failed with %q", r.failed)
	}
	r.failed = ""
	poll.Wait(r, time.Second, func() bool { return true }, nil)
	if r.failed != "" {
		t.Fatalf("Wait failed (%q) on a true condition", r.failed)
	}
	poll.WaitNil(r, 10*time.Millisecond, "the link", func() error { return errors.New("down") })
	if !strings.Contains(r.failed, "the link") || !strings.Contains(r.failed, "down") {
		t.Fatalf("WaitNil failed with %q", r.failed)
	}
}

// TestUntilLooksOnceMoreAtTheEnd: a condition that turns true while Until
// waits out its last pause is seen — after the timeout, cond is called once
// more before Until gives up (with timeout 0: the first call, then that one).
func TestUntilLooksOnceMoreAtTheEnd(t *testing.T) {
	calls := 0
	if !poll.Until(0, func() bool { calls++; return calls == 2 }) {
		t.Fatalf("Until(0) gave up after %d calls without the last look", calls)
	}
}
