// Package poll waits, in tests, for a condition that another goroutine or
// process makes true: a state the device reaches, a counter that catches up,
// a file that appears. It replaces the hand-written
// "deadline := time.Now().Add(…); for … { time.Sleep(…) }" loops.
//
// Polling starts every millisecond and backs off to every 20 ms, so a
// condition that holds soon is seen soon and a long wait costs little.
//
// It is a test helper, imported only by _test.go files and test-support
// packages.
package poll

import (
	"fmt"
	"testing"
	"time"
)

// maxInterval is the longest pause between two calls of a condition.
const maxInterval = 20 * time.Millisecond

// Until calls cond until it returns true or timeout has passed, and reports
// whether it returned true. cond is called at least once, and once more
// after the timeout, so a condition that became true during the last pause
// is not missed.
func Until(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	interval := time.Millisecond
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return cond()
		}
		time.Sleep(interval)
		interval = min(2*interval, maxInterval)
	}
}

// UntilNil calls f until it returns nil or timeout has passed, and returns
// f's last error (nil when it succeeded).
func UntilNil(timeout time.Duration, f func() error) error {
	var err error
	Until(timeout, func() bool {
		err = f()
		return err == nil
	})
	return err
}

// Wait fails tb when cond has not returned true within timeout. The message
// is made by describe when the wait fails, so it can show the state at that
// moment; describe may be nil ("condition not met within …").
func Wait(tb testing.TB, timeout time.Duration, cond func() bool, describe func() string) {
	tb.Helper()
	if Until(timeout, cond) {
		return
	}
	msg := "condition not met"
	if describe != nil {
		msg = describe()
	}
	tb.Fatalf("%s (waited %v)", msg, timeout)
}

// WaitNil fails tb when f has not returned nil within timeout; the message
// names what (what was awaited) and f's last error.
func WaitNil(tb testing.TB, timeout time.Duration, what string, f func() error) {
	tb.Helper()
	if err := UntilNil(timeout, f); err != nil {
		tb.Fatal(fmt.Errorf("%s: not within %v: %w", what, timeout, err))
	}
}
