package main

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestUpTUNFlagsNeedTUN: the flags that configure the TUN interface are
// refused without --tun (they used to be silently ignored), and --gro is
// refused with --gso=false; before anything starts.
func TestUpTUNFlagsNeedTUN(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--gso=false"}, "--gso: flag needs --tun"},
		{[]string{"--gso"}, "--gso: flag needs --tun"},
		{[]string{"--gro=false"}, "--gro: flag needs --tun"},
		{[]string{"--tun-addr", "10.9.0.1/24"}, "--tun-addr: flag needs --tun"},
		{[]string{"--tun", "mhitest0", "--gso=false", "--gro"}, "--gro with --gso=false: mutually exclusive flags"},
	} {
		// In a child: an `up` that wrongly starts runs until killed.
		out, exited, err := exitWithin(t, mhictl(append([]string{"up", "--netlink-port", testPort(5)}, tc.args...)...), 10*time.Second)
		switch {
		case !exited:
			t.Errorf("up %v started:\n%s", tc.args, out)
		case err == nil || !strings.Contains(out, tc.want):
			t.Errorf("up %v: %v, want an error with %q:\n%s", tc.args, err, tc.want, out)
		}
	}
}

// TestQMAPCsumFlag: --qmap-csum is validated before anything starts, in
// up and in modem serve: a name it does not know, and checksum framing on
// a data channel that is not QMAP.
func TestQMAPCsumFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"up", "--netlink-port", testPort(5), "--qmap-csum", "v4"}, "--qmap-csum v4: flag needs --format qmap (the data channel uses raw)"},
		{[]string{"up", "--netlink-port", testPort(5), "--format", "mbim", "--qmap-csum", "v5"}, "--qmap-csum v5: flag needs --format qmap (the data channel uses mbim)"},
		{[]string{"up", "--netlink-port", testPort(5), "--format", "qmap", "--qmap-csum", "v6"}, `--qmap-csum: qmap: invalid configuration: checksum framing "v6" (none, v4 or v5)`},
		{[]string{"modem", "serve", "--socket", filepath.Join(t.TempDir(), "s"), "--qmap-csum", "v4"}, "--qmap-csum v4: flag needs --format qmap"},
	} {
		out, exited, err := exitWithin(t, mhictl(tc.args...), 10*time.Second)
		switch {
		case !exited:
			t.Errorf("%v started:\n%s", tc.args, out)
		case err == nil || !strings.Contains(out, tc.want):
			t.Errorf("%v: %v, want an error with %q:\n%s", tc.args, err, tc.want, out)
		}
	}
}

// TestUpRxCopy: --rx-copy is validated before anything starts, auto gives
// zero-copy for the in-process mock (its device is trusted), and on gives
// a device with private copy buffers (pool_private_memory_bytes). The
// vfio-user default (on) is checked by TestVFIOUserGenerator.
func TestUpRxCopy(t *testing.T) {
	out, err := mhictl("up", "--rx-copy", "maybe", "--netlink-port", testPort(6)).CombinedOutput()
	if err == nil || !strings.Contains(string(out), `--rx-copy: mhinet: unknown receive copy mode "maybe"`) {
		t.Errorf("up --rx-copy maybe: %v\n%s", err, out)
	}
	for _, tc := range []struct {
		args    []string
		line    string
		private bool
	}{
		{nil, "receive copy off (--rx-copy auto)", false},
		{[]string{"--rx-copy", "on"}, "receive copy on (--rx-copy on)", true},
		{[]string{"--rx-copy", "off"}, "receive copy off (--rx-copy off)", false},
	} {
		port := testPort(7)
		up := mhictl(append([]string{"up", "--netlink-port", port}, tc.args...)...)
		l := startProc(t, up, "ready")
		if !strings.Contains(l.String(), tc.line) {
			t.Errorf("up %v: no %q line:\n%s", tc.args, tc.line, l)
		}
		if st := statsOf(t, port); (st["net/pool_private_memory_bytes"] > 0) != tc.private {
			t.Errorf("up %v: pool_private_memory_bytes %d", tc.args, st["net/pool_private_memory_bytes"])
		}
		sigterm(t, up, l)
	}
}

// TestUpUndoesOnFailure: when a late step fails (--metrics on an address
// that cannot be listened on, after the modem, the network device, the
// control ports and the netlink server are up), up undoes what it made —
// here visibly: the run directory it created for the control ports'
// links is removed — and exits with the step's error.
func TestUpUndoesOnFailure(t *testing.T) {
	base := filepath.Join(t.TempDir(), "run")
	runDir := filepath.Join(base, "mhi0")
	out, exited, err := exitWithin(t, mhictl("up", "--netlink-port", testPort(8), "--run-dir", runDir, "--metrics", "256.0.0.1:0"), 30*time.Second)
	switch {
	case !exited:
		t.Fatalf("up --metrics 256.0.0.1:0 did not fail:\n%s", out)
	case err == nil || !strings.Contains(out, "--metrics: "):
		t.Fatalf("up --metrics 256.0.0.1:0: %v, want a --metrics error:\n%s", err, out)
	}
	// The steps before the failure ran: the ports' links were made.
	for _, line := range []string{"in M0, EE", "data channel IP_HW0", "wwan0mbim0", "netlink family"} {
		if !strings.Contains(out, line) {
			t.Errorf("no %q in the output: the failure came earlier than the test means it to\n%s", line, out)
		}
	}
	if _, err := os.Lstat(base); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("run directory %s left behind after the failure (Lstat: %v):\n%s", base, err, out)
	}
}

// TestCleanupsRunLastFirst: up's cleanups undo in reverse order of making.
func TestCleanupsRunLastFirst(t *testing.T) {
	var got []int
	var c cleanups
	for i := range 3 {
		c.add(func() { got = append(got, i) })
	}
	c.run()
	if want := []int{2, 1, 0}; !slices.Equal(got, want) {
		t.Errorf("cleanups ran %v, want %v", got, want)
	}
	// Deferred before anything is added, as runUp does: the cleanups
	// added afterwards run all the same.
	got = nil
	func() {
		var c cleanups
		defer c.run()
		c.add(func() { got = append(got, 0) })
		c.add(func() { got = append(got, 1) })
	}()
	if want := []int{1, 0}; !slices.Equal(got, want) {
		t.Errorf("deferred cleanups ran %v, want %v", got, want)
	}
}

// TestUpUndoesOnExit: on SIGTERM up undoes what it made — here visibly:
// the run directory it created for the control ports' links is removed.
func TestUpUndoesOnExit(t *testing.T) {
	base := filepath.Join(t.TempDir(), "run")
	up := mhictl("up", "--netlink-port", testPort(9), "--run-dir", filepath.Join(base, "mhi0"))
	l := startProc(t, up, "ready")
	if _, err := os.Lstat(filepath.Join(base, "mhi0", "wwan0mbim0")); err != nil {
		t.Fatalf("no control port link in the run directory: %v\n%s", err, l)
	}
	sigterm(t, up, l)
	if _, err := os.Lstat(base); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("run directory %s left behind after SIGTERM (Lstat: %v):\n%s", base, err, l)
	}
}

// exitWithin runs cmd, a child that must exit by itself (a command that
// fails on its arguments), and returns its combined output and exit
// error; one that is still running after timeout is killed and reported
// with exited false.
func exitWithin(t *testing.T, cmd *exec.Cmd, timeout time.Duration) (out string, exited bool, err error) {
	t.Helper()
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
		return buf.String(), true, err
	case <-time.After(timeout):
		_ = cmd.Process.Kill()
		<-done
		return buf.String(), false, nil
	}
}
