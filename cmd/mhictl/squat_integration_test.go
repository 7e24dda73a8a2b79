package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhi/testenv/reexec"
	"github.com/gomhi/gomhi/sysfs/genl"
	"github.com/gomhi/gomhi/sysfs/genl/genltest"
)

// TestHelperNetlinkSquatter is the squatter process of TestUpWithSquatter
// (genltest); it does nothing unless that test started it.
func TestHelperNetlinkSquatter(t *testing.T) {
	if os.Getenv(genltest.ModeEnv) == "" {
		return // run only by TestUpWithSquatter (TestMain keeps it out otherwise)
	}
	if err := genltest.RunSquatterFromEnv(); err != nil {
		t.Fatal(err)
	}
}

// inFreshNetns is inNetns without its TUN and FUSE requirements: it runs
// the calling test in a new network namespace (the test binary
// re-executed under `unshare --net`) and reports whether the caller is
// already there. Without root, setpriv or unshare it skips, or under
// CI=true fails.
func inFreshNetns(t *testing.T) bool {
	t.Helper()
	return reexec.InNetns(t, func(t *testing.T) { reexec.RequireSetpriv(t, "unshare") })
}

// TestUpWithSquatter: in a fresh network namespace uid 65534 binds the
// default netlink port first, and answers like the server would. `mhictl
// up` starts anyway, says who holds the port and where it serves instead;
// root's `set-mru` and `get` reach it through the run file, and the
// squatter receives nothing; a client sent to the default port refuses it,
// naming the squatter; uid 65534 may read but not change; a second `up`
// fails at once naming the first; SIGTERM removes the run file.
func TestUpWithSquatter(t *testing.T) {
	if !inFreshNetns(t) {
		return
	}
	bin := reexec.Binary(t)
	defer reexec.RemoveBinary()
	sq := genltest.StartSquatter(t, reexec.Nobody, genl.DefaultPort, "answer", bin,
		"-test.run=^TestHelperNetlinkSquatter$", "-test.v", "-test.count=1")

	var ns syscall.Stat_t
	if err := syscall.Stat("/proc/self/ns/net", &ns); err != nil {
		t.Fatal(err)
	}
	runFile := filepath.Join(genl.RunDir, fmt.Sprintf("genl-%d.json", ns.Ino))
	if got := genl.DefaultRunFile(); got != runFile {
		t.Fatalf("DefaultRunFile = %s, want %s", got, runFile)
	}

	up := mhictl("up", "--name", "mhi0")
	start := time.Now()
	log := startProc(t, up, "ready")
	t.Logf("`mhictl up` ready after %v:\n%s", time.Since(start), log)
	holder := fmt.Sprintf("pid %d (uid 65534", sq.PID)
	if l := log.String(); !strings.Contains(l, "is held by "+holder) || !strings.Contains(l, runFile) {
		t.Fatalf("`mhictl up` does not say who holds the port and where it serves instead:\n%s", l)
	}
	r, err := genl.ReadRunFile(runFile)
	if err != nil || r.PID != up.Process.Pid || r.Port == genl.DefaultPort || !r.Live() {
		t.Fatalf("run file: %+v, %v; want pid %d on another port", r, err, up.Process.Pid)
	}

	// Root's client commands: through the run file.
	if out, err := runCmd(t, mhictl("set-mru", "mhi0", "4096")); err != nil || !strings.Contains(out, "mru 4096") {
		t.Fatalf("set-mru with the port squatted: %v\n%s", err, out)
	}
	if out, err := runCmd(t, mhictl("get", "mhi0", "mru")); err != nil || strings.TrimSpace(out) != "4096" {
		t.Fatalf("get mru: %v %q", err, out)
	}
	// Sent to the default port: refused, naming the squatter.
	out, err := runCmd(t, mhictl("set-mru", "mhi0", "8192", "--netlink-port", strconv.Itoa(int(genl.DefaultPort))))
	if err == nil || !strings.Contains(out, "refusing netlink port 0x4d4849") || !strings.Contains(out, holder) {
		t.Fatalf("set-mru to the squatted port: %v %q; want a refusal naming %s", err, out, holder)
	}
	t.Logf("set-mru --netlink-port 0x4d4849: %s", out)

	// uid 65534 (the squatter's own user) through the run file: GET yes,
	// SET no.
	as := func(args ...string) (string, error) {
		cmd := reexec.Command(reexec.User{UID: reexec.Nobody}, bin, args...)
		cmd.Env = append(cmd.Env, "GOMHI_RUN_MHICTL=1")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := as("get", "mhi0", "mru"); err != nil || strings.TrimSpace(out) != "4096" {
		t.Fatalf("get as uid 65534: %v %q", err, out)
	}
	if out, err := as("set-mru", "mhi0", "2048"); err == nil || !strings.Contains(out, "needs root or CAP_NET_ADMIN") {
		t.Fatalf("set-mru as uid 65534: %v %q", err, out)
	}

	// A second `up` for the same device: fails at once, naming the first
	// (one for another device would serve beside it: TestTwoModemsTwoInstances).
	out, exited, err := exitWithin(t, mhictl("up", "--name", "mhi0", "--run-dir", t.TempDir()), 15*time.Second)
	if !exited {
		t.Fatalf("a second `mhictl up` for mhi0 did not fail within 15 s:\n%s", out)
	}
	if err == nil || !strings.Contains(out, fmt.Sprintf("pid %d", up.Process.Pid)) {
		t.Fatalf("second up: %v\n%s", err, out)
	}
	t.Logf("second up: %s", out)

	if out, err := runCmd(t, mhictl("get", "mhi0", "mru")); err != nil || strings.TrimSpace(out) != "4096" {
		t.Fatalf("get mru at the end: %v %q", err, out)
	}
	sigterm(t, up, log)
	if _, err := os.Stat(runFile); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("run file after SIGTERM: %v", err)
	}
	time.Sleep(50 * time.Millisecond)
	if got := sq.Received(); len(got) != 0 {
		t.Errorf("the squatter received %d datagrams:\n%s", len(got), strings.Join(got, "\n"))
	}
}
