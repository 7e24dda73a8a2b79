// Package testenv decides what a test does when the machine lacks something
// it needs — a tool (QEMU, ip, unshare, setpriv), a device node
// (/dev/net/tun, /dev/fuse), a kernel, or root: outside CI the test is
// skipped with a message naming what is missing; under CI (the environment
// variable CI=true, as .ci/run sets it) it fails with the same message, so
// a CI run can never pass by silently not running a test.
//
// It is a test helper, imported only by _test.go files and by test-support
// packages; it lives under mhi because every package of the module may
// import mhi's tree (docs/RELIABILITY.md lists the tests that use it).
package testenv

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// CI reports whether the tests run under CI (CI=true): then a missing
// requirement fails the test instead of skipping it.
func CI() bool { return os.Getenv("CI") == "true" }

// Need skips tb, or fails it under CI, when err is not nil. what names the
// requirement ("the ip command (iproute2)", "/dev/net/tun"); the message
// carries err.
func Need(tb testing.TB, what string, err error) {
	tb.Helper()
	if err == nil {
		return
	}
	msg := fmt.Sprintf("needs %s: %v", what, err)
	if CI() {
		tb.Fatalf("CI=true and a requirement is missing: %s", msg)
		return
	}
	tb.Skip(msg + " (skipped outside CI; with CI=true this fails)")
}

// NeedRoot requires an effective uid of 0; why says what root is for.
func NeedRoot(tb testing.TB, why string) {
	tb.Helper()
	if uid := os.Geteuid(); uid != 0 {
		Need(tb, "root ("+why+")", fmt.Errorf("running as uid %d", uid))
	}
}

// NeedPath requires that path exists (a device node such as /dev/net/tun).
func NeedPath(tb testing.TB, path string) {
	tb.Helper()
	_, err := os.Stat(path)
	Need(tb, path, err)
}

// LookPath returns the path of the command name, or skips tb (fails it
// under CI); pkg names the Debian package that provides it.
func LookPath(tb testing.TB, name, pkg string) string {
	tb.Helper()
	p, err := exec.LookPath(name)
	Need(tb, fmt.Sprintf("the %s command (%s)", name, pkg), err)
	return p
}

// RunHelpersOnlyWhenAsked keeps helper-process tests out of ordinary runs.
// A helper-process test is a Test function that a test re-executes the
// test binary to run (as another user, in another namespace…), with an
// environment variable telling it what to do; run on its own it has
// nothing to test. helpers maps each such test's name to its variable:
// every helper whose variable is unset is added to -test.skip, so it
// neither passes nor skips in an ordinary run. Call it from TestMain after
// flag.Parse and before m.Run.
func RunHelpersOnlyWhenAsked(helpers map[string]string) {
	var names []string
	for name, env := range helpers {
		if os.Getenv(env) == "" {
			names = append(names, "^"+name+"$")
		}
	}
	if len(names) == 0 {
		return
	}
	skip := strings.Join(names, "|")
	if f := flag.Lookup("test.skip"); f != nil {
		if prev := f.Value.String(); prev != "" {
			skip = prev + "|" + skip
		}
		if err := flag.Set("test.skip", skip); err != nil {
			panic(err)
		}
	}
}
