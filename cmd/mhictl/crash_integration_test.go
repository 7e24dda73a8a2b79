package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestRestartAfterSIGKILL: `mhictl up` killed with SIGKILL — no cleanup of
// any kind — while it starts (its control ports made, its netlink family
// not yet), once more after its netlink family is up, with a `connect` in
// flight, and right after a `set-mru`, comes up again with the same flags,
// run directory and mount point: the new one is ready, connects, passes
// 5/5 pings, takes an MRU, and stops on SIGTERM leaving nothing behind.
// What a killed `up` leaves — a stale FUSE mount, the run file, the
// control ports' links — must never stop the next one (issue 27).
func TestRestartAfterSIGKILL(t *testing.T) {
	if !inNetns(t) {
		return
	}
	runDir := filepath.Join(t.TempDir(), "run")
	mount := t.TempDir()
	flags := []string{"up", "--tun", "mhi0", "--mount", mount, "--run-dir", runDir,
		"--model", "telit-fn990", "--require-connect", "--tun-addr", "198.18.0.1/24"}
	kill := func(what string, l *procLog, cmd func()) {
		t.Helper()
		cmd()
		if ok, _ := l.wait(15 * time.Second); !ok {
			t.Fatalf("%s: up not gone 15 s after SIGKILL", what)
		}
		t.Logf("%s: killed; left behind: %s", what, leftovers(runDir, mount))
	}
	upCmds := map[*procLog]func(){}
	startKillable := func(ready string) *procLog {
		t.Helper()
		cmd := mhictl(flags...)
		l := startProc(t, cmd, ready)
		upCmds[l] = func() { _ = cmd.Process.Kill() }
		return l
	}

	// While it starts, twice.
	for _, at := range []string{"control port wwan0mbim0", "netlink family"} {
		l := startKillable(at)
		kill("start at "+at, l, upCmds[l])
		restartWorks(t, flags, 0)
	}

	// With a connect in flight.
	l := startKillable("ready")
	conn := mhictl("connect", "mhi0", "--apn", "internet")
	if err := conn.Start(); err != nil {
		t.Fatal(err)
	}
	kill("connect in flight", l, upCmds[l])
	_ = conn.Wait() // either way: it connected or it lost its server
	restartWorks(t, flags, 100)

	// Right after a set-mru.
	l = startKillable("ready")
	if out, err := mhictl("set-mru", "mhi0", "16384").CombinedOutput(); err != nil {
		t.Fatalf("set-mru: %v\n%s", err, out)
	}
	kill("after set-mru", l, upCmds[l])
	restartWorks(t, flags, 200)
}

// restartWorks starts `up` with flags, checks that it serves a session
// (connect, 5/5 pings from seq, set-mru, get mru) and stops it on
// SIGTERM with nothing left behind.
func restartWorks(t *testing.T, flags []string, seq uint16) {
	t.Helper()
	cmd := mhictl(flags...)
	l := startProc(t, cmd, "ready")
	u := &upProc{cmd: cmd, log: l, mount: flagValue(flags, "--mount")}
	var c connectOut
	mhictlJSON(t, &c, "connect", "mhi0", "--apn", "internet")
	if c.State != "connected" {
		t.Fatalf("connect after a restart: %+v\n%s", c, l)
	}
	if got := pings(t, seq, 5); got != 5 {
		t.Fatalf("%d of 5 pings answered after a restart:\n%s", got, l)
	}
	if out, err := mhictl("set-mru", "mhi0", "4096").CombinedOutput(); err != nil {
		t.Fatalf("set-mru after a restart: %v\n%s", err, out)
	}
	b, err := os.ReadFile(filepath.Join(u.mount, "devices", "mhi0", "mru"))
	if err != nil || strings.TrimSpace(string(b)) != "4096" {
		t.Fatalf("the restarted up's tree says mru %q (%v), want 4096", b, err)
	}
	u.stop(t)
	if left := leftovers(flagValue(flags, "--run-dir"), ""); left != "nothing" {
		t.Errorf("after SIGTERM the run directory keeps %s", left)
	}
}

// flagValue is the value after name in args.
func flagValue(args []string, name string) string {
	for i, a := range args {
		if a == name && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

// leftovers names what is in the run directory and whether the mount
// point is still a (stale) mount.
func leftovers(runDir, mount string) string {
	var left []string
	ents, _ := os.ReadDir(runDir)
	for _, e := range ents {
		left = append(left, filepath.Join(runDir, e.Name()))
	}
	if mount != "" {
		mounts, _ := os.ReadFile("/proc/self/mounts")
		if strings.Contains(string(mounts), " "+mount+" ") {
			left = append(left, "a mount at "+mount)
		}
	}
	if len(left) == 0 {
		return "nothing"
	}
	return strings.Join(left, ", ")
}
