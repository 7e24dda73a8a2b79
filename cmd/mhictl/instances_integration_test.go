package main

import (
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestTwoModemsTwoInstances: two `mhictl up` in one network namespace, one
// per modem, as the shipped mhictl@.service runs them (--name, --tun and
// --run-dir of their own). Both come up (the second's netlink family beside
// the first's), `set-mru` and `get` reach the instance that serves the
// device named, a third instance for a device already served is refused
// naming it, and both stop clean.
func TestTwoModemsTwoInstances(t *testing.T) {
	if !inNetns(t) {
		return
	}
	dir := t.TempDir()
	start := func(name, addr string) *upProc {
		t.Helper()
		cmd := mhictl("up", "--name", name, "--tun", name, "--tun-addr", addr, "--run-dir", filepath.Join(dir, name))
		return &upProc{cmd: cmd, log: startProc(t, cmd, "ready")}
	}
	stop := func(u *upProc, name string) {
		t.Helper()
		sigterm(t, u.cmd, u.log)
		if _, err := net.InterfaceByName(name); err == nil {
			t.Errorf("interface %s left behind", name)
		}
	}
	a := start("mhi0", "198.18.0.1/24")
	b := start("mhi1", "198.19.0.1/24")
	if l := b.logText(); !strings.Contains(l, `netlink family "mhi" for mhi1 on port`) || !strings.Contains(l, "beside another instance") {
		t.Errorf("the second instance does not say it serves beside the first:\n%s", l)
	}
	for _, tc := range []struct{ dev, mru string }{{"mhi1", "16384"}, {"mhi0", "4096"}} {
		if out, err := mhictl("set-mru", tc.dev, tc.mru).CombinedOutput(); err != nil {
			t.Fatalf("set-mru %s %s: %v\n%s", tc.dev, tc.mru, err, out)
		}
	}
	for _, tc := range []struct{ dev, mru string }{{"mhi1", "16384"}, {"mhi0", "4096"}} {
		out, err := mhictl("get", tc.dev, "mru").CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != tc.mru {
			t.Errorf("get %s mru: %q, %v; want %s", tc.dev, out, err, tc.mru)
		}
	}
	third := mhictl("up", "--name", "mhi1", "--tun", "mhi2", "--tun-addr", "198.20.0.1/24", "--run-dir", filepath.Join(dir, "third"))
	out, exited, err := exitWithin(t, third, 30*time.Second)
	if !exited || err == nil || !strings.Contains(out, `serves device "mhi1"`) {
		t.Errorf("a third instance for mhi1: exited %v, %v:\n%s", exited, err, out)
	}
	stop(b, "mhi1")
	if out, err := mhictl("get", "mhi0", "mru").CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "4096" {
		t.Errorf("get mhi0 mru after mhi1's instance stopped: %q, %v", out, err)
	}
	stop(a, "mhi0")
}
