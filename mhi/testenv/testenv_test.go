package testenv_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/gomhi/gomhi/mhi/testenv"
)

// recorder is a testing.TB that records Skip and Fatal instead of ending
// the goroutine, so Need's decision can be checked in-process.
type recorder struct {
	testing.TB
	skipped, failed bool
	msg             string
}

func (r *recorder) Helper() {}
func (r *recorder) Skip(args ...any) {
	r.skipped, r.msg = true, fmt.Sprint(args...)
}
func (r *recorder) Fatalf(format string, args ...any) {
	r.failed, r.msg = true, fmt.Sprintf(format, args...)
}

// Need skips outside CI, fails under CI=true, and does nothing when the
// requirement is met; the message names what is missing.
func TestNeed(t *testing.T) {
	missing := errors.New("not found in $PATH")
	for _, tc := range []struct {
		name         string
		ci           string
		err          error
		skip, fail   bool
		wantInMsg    string
		wantNotInMsg string
	}{
		{name: "present, outside CI", ci: "", err: nil},
		{name: "present, CI", ci: "true", err: nil},
		{name: "missing, outside CI", ci: "", err: missing, skip: true, wantInMsg: "needs the frob tool: not found"},
		{name: "missing, CI=false", ci: "false", err: missing, skip: true, wantInMsg: "needs the frob tool"},
		{name: "missing, CI", ci: "true", err: missing, fail: true, wantInMsg: "CI=true and a requirement is missing: needs the frob tool: not found", wantNotInMsg: "skipped"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("CI", tc.ci)
			r := &recorder{TB: t}
			testenv.Need(r, "the frob tool", tc.err)
			if r.skipped != tc.skip || r.failed != tc.fail {
				t.Fatalf("skipped %v failed %v, want %v %v (message %q)", r.skipped, r.failed, tc.skip, tc.fail, r.msg)
			}
			if !strings.Contains(r.msg, tc.wantInMsg) {
				t.Errorf("message %q lacks %q", r.msg, tc.wantInMsg)
			}
			if tc.wantNotInMsg != "" && strings.Contains(r.msg, tc.wantNotInMsg) {
				t.Errorf("message %q has %q", r.msg, tc.wantNotInMsg)
			}
		})
	}
}

// LookPath names the command and its package, and returns the path when
// the command exists.
func TestLookPath(t *testing.T) {
	t.Setenv("CI", "true")
	r := &recorder{TB: t}
	testenv.LookPath(r, "gomhi-no-such-command", "gomhi-pkg")
	if !r.failed || !strings.Contains(r.msg, "the gomhi-no-such-command command (gomhi-pkg)") {
		t.Fatalf("failed %v, message %q", r.failed, r.msg)
	}
	want, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command runs this test but is not in $PATH: %v", err)
	}
	r = &recorder{TB: t}
	if got := testenv.LookPath(r, "go", "golang"); got != want || r.failed || r.skipped {
		t.Fatalf("LookPath(go) = %q (failed %v skipped %v), want %q", got, r.failed, r.skipped, want)
	}
}

// NeedPath and NeedRoot fail under CI for a missing path and a non-root
// uid.
func TestNeedPathAndRoot(t *testing.T) {
	t.Setenv("CI", "true")
	r := &recorder{TB: t}
	testenv.NeedPath(r, "/nonexistent/gomhi")
	if !r.failed || !strings.Contains(r.msg, "needs /nonexistent/gomhi") {
		t.Fatalf("NeedPath: failed %v, message %q", r.failed, r.msg)
	}
	r = &recorder{TB: t}
	testenv.NeedRoot(r, "TUN")
	if root := os.Geteuid() == 0; r.failed == root || (!root && !strings.Contains(r.msg, "needs root (TUN)")) {
		t.Fatalf("NeedRoot as uid %d: failed %v, message %q", os.Geteuid(), r.failed, r.msg)
	}
}
