package main

import (
	"encoding/binary"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhi/testenv"
	"github.com/gomhi/gomhi/mhi/testenv/poll"
)

// The issue's "done when" scenarios (issue 25, docs/QUIRKS.md): `mhictl
// up` with the embedded mock reproducing a field failure, in a network
// namespace of its own, and what a user then sees.

// dfPing sends one ICMP echo request of size bytes (IP header included)
// with don't-fragment set. It returns (answered, nil), or the error of a
// send the kernel refused (EMSGSIZE above the interface's MTU).
func dfPing(t *testing.T, size int, seq uint16) (bool, error) {
	t.Helper()
	pc, err := net.ListenPacket("ip4:icmp", "198.18.0.1")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	c := pc.(*net.IPConn)
	raw, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var serr error
	if err := raw.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_IP, syscall.IP_MTU_DISCOVER, syscall.IP_PMTUDISC_DO)
	}); err != nil || serr != nil {
		t.Fatalf("IP_MTU_DISCOVER: %v %v", err, serr)
	}
	req := make([]byte, size-20)
	req[0] = 8
	binary.BigEndian.PutUint16(req[4:], 0x474d)
	binary.BigEndian.PutUint16(req[6:], seq)
	binary.BigEndian.PutUint16(req[2:], icmpChecksum(req))
	if _, err := c.WriteTo(req, &net.IPAddr{IP: net.IPv4(198, 18, 0, 2)}); err != nil {
		return false, err
	}
	buf := make([]byte, 65536)
	// Not poll: blocking reads under one read deadline, nothing to poll.
	deadline := time.Now().Add(2 * time.Second)
	for {
		_ = c.SetReadDeadline(deadline)
		n, from, err := c.ReadFrom(buf)
		if err != nil {
			return false, nil
		}
		if n >= 8 && buf[0] == 0 && binary.BigEndian.Uint16(buf[6:]) == seq && from.String() == "198.18.0.2" {
			return n == size-20, nil
		}
	}
}

// TestQuirkUpMTU1400: the network's MTU is 1400: `mhictl connect` gives
// the interface MTU 1400; 1400-byte don't-fragment pings pass, 1401-byte
// ones are refused.
func TestQuirkUpMTU1400(t *testing.T) {
	if !inNetns(t) {
		return
	}
	u := startUp(t, "--model", "telit-fn990", "--require-connect", "--tun-addr", "", "--quirk", "mtu-1400")
	var c connectOut
	mhictlJSON(t, &c, "connect", "mhi0", "--apn", "internet")
	if c.State != "connected" || c.MTU != 1400 {
		t.Fatalf("connect printed %+v, want connected with MTU 1400", c)
	}
	ifc, err := net.InterfaceByName("mhi0")
	if err != nil || ifc.MTU != 1400 {
		t.Fatalf("mhi0: MTU %v, %v; want 1400", ifc, err)
	}
	for i := range 3 {
		if ok, err := dfPing(t, 1400, uint16(i)); !ok || err != nil {
			t.Fatalf("1400-byte DF ping %d: answered %v, %v\n%s", i, ok, err, u.logText())
		}
	}
	ok, err := dfPing(t, 1401, 10)
	if ok || !errors.Is(err, syscall.EMSGSIZE) {
		t.Fatalf("1401-byte DF ping: answered %v, %v; want refused (EMSGSIZE)", ok, err)
	}
	t.Logf("1400-byte DF pings pass; 1401: %v", err)
	st := localStats(t)
	if st["net/mtu"] != 1400 || st["modem/ip_dropped_over_mtu"] != 0 {
		t.Errorf("stats: net/mtu %d, modem/ip_dropped_over_mtu %d (the host sent what the network drops)", st["net/mtu"], st["modem/ip_dropped_over_mtu"])
	}
	u.stop(t)
}

// TestQuirkUpNoM3: `mhictl suspend` of a modem without M3 fails with a
// message that says so, the modem keeps running (pings pass); after a
// second ignored request suspends are refused at once.
func TestQuirkUpNoM3(t *testing.T) {
	if !inNetns(t) {
		return
	}
	u := startUp(t, "--model", "telit-fn990", "--quirk", "no-m3")
	// The M3 wait is the model's 20 s timeout: shorten it.
	if err := os.WriteFile(filepath.Join(u.mount, "devices/mhi0/timeout_ms"), []byte("1000"), 0); err != nil {
		t.Fatal(err)
	}
	if got := pings(t, 1, 3); got != 3 {
		t.Fatalf("%d of 3 pings before suspend", got)
	}
	for i, want := range []string{"may not support m3", "does not support m3"} {
		out, err := runCmd(t, mhictl("suspend", "mhi0"))
		if err == nil || !strings.Contains(strings.ToLower(out), want) || !strings.Contains(out, "back in M0") {
			t.Fatalf("suspend %d of a modem without M3: %v\n%s", i+1, err, out)
		}
		t.Logf("$ mhictl suspend mhi0\n%s", out)
		if got := pings(t, uint16(10+10*i), 5); got != 5 {
			t.Fatalf("%d of 5 pings after the refused suspend:\n%s", got, u.logText())
		}
	}
	start := time.Now()
	out, err := runCmd(t, mhictl("suspend", "mhi0"))
	if err == nil || !strings.Contains(strings.ToLower(out), "does not support m3") || time.Since(start) > 900*time.Millisecond {
		t.Fatalf("second suspend: %v after %v\n%s", err, time.Since(start), out)
	}
	var state string
	if b, err := os.ReadFile(filepath.Join(u.mount, "devices/mhi0/state")); err == nil {
		state = strings.TrimSpace(string(b))
	}
	st := localStats(t)
	if st["mhi/suspends"] != 0 || st["mhi/suspends_refused"] != 1 || !strings.Contains(state, "M0") {
		t.Errorf("suspends %d, refused %d, state %q", st["mhi/suspends"], st["mhi/suspends_refused"], state)
	}
	u.stop(t)
}

// TestQuirkUpCrashOnConnect: the first `mhictl connect` crashes the modem;
// gomhi recovers it, the next connect succeeds and pings pass, and
// mhi/sys_errs counts the crash.
func TestQuirkUpCrashOnConnect(t *testing.T) {
	if !inNetns(t) {
		return
	}
	u := startUp(t, "--model", "telit-fn990", "--require-connect", "--tun-addr", "", "--quirk", "crash-on-connect")
	out, err := runCmd(t, mhictl("connect", "mhi0", "--apn", "internet"))
	if err == nil {
		t.Fatalf("the connect the modem crashed on succeeded:\n%s", out)
	}
	t.Logf("$ mhictl connect (the crash)\n%s", out)
	if !poll.Until(30*time.Second, func() bool { return strings.Contains(u.logText(), "recovered from SYS_ERR") }) {
		t.Fatalf("no recovery:\n%s", u.logText())
	}
	var c connectOut
	mhictlJSON(t, &c, "connect", "mhi0", "--apn", "internet")
	if c.State != "connected" {
		t.Fatalf("connect after the recovery: %+v", c)
	}
	if got := pings(t, 1, 5); got != 5 {
		t.Fatalf("%d of 5 pings after the recovery:\n%s", got, u.logText())
	}
	if st := localStats(t); st["mhi/sys_errs"] < 1 || st["modem/connects"] != 1 {
		t.Errorf("stats: mhi/sys_errs %d, modem/connects %d", st["mhi/sys_errs"], st["modem/connects"])
	}
	u.stop(t)
}

// TestQuirkUpFCCLocked: `mhictl connect` to an FCC-locked modem fails with
// a message that says FCC lock and what unlocks it; after Quectel's public
// unlock through the port ('mbimcli --quectel-set-radio-state=on', what
// ModemManager's Quectel fcc-unlock script runs) the connect succeeds and
// pings pass.
func TestQuirkUpFCCLocked(t *testing.T) {
	testenv.LookPath(t, "mbimcli", "libmbim-utils")
	if !inNetns(t) {
		return
	}
	runDir := filepath.Join(t.TempDir(), "run")
	u := startUp(t, "--model", "telit-fn990", "--require-connect", "--tun-addr", "", "--run-dir", runDir, "--quirk", "fcc-locked")
	out, err := runCmd(t, mhictl("connect", "mhi0", "--apn", "internet"))
	if err == nil || !strings.Contains(out, "FCC-locked") || !strings.Contains(out, "unlock") {
		t.Fatalf("connect of an FCC-locked modem: %v\n%s", err, out)
	}
	t.Logf("$ mhictl connect mhi0 --apn internet\n%s", out)
	link := filepath.Join(runDir, "wwan0mbim0")
	if out, err := mbimcli(t, "-d", link, "--quectel-query-radio-state"); err != nil || !strings.Contains(out, "fcc-locked") {
		t.Fatalf("mbimcli --quectel-query-radio-state: %v\n%s", err, out)
	}
	if out, err := mbimcli(t, "-d", link, "--quectel-set-radio-state=on"); err != nil {
		t.Fatalf("mbimcli --quectel-set-radio-state=on: %v\n%s", err, out)
	}
	var c connectOut
	mhictlJSON(t, &c, "connect", "mhi0", "--apn", "internet")
	if c.State != "connected" {
		t.Fatalf("connect after the unlock: %+v", c)
	}
	if got := pings(t, 1, 3); got != 3 {
		t.Fatalf("%d of 3 pings after the unlock:\n%s", got, u.logText())
	}
	u.stop(t)
}

// TestQuirkUpUnknown: an unknown quirk is refused naming the known ones.
func TestQuirkUpUnknown(t *testing.T) {
	out, err := runCmd(t, mhictl("up", "--quirk", "mtu-1400,no-such-quirk"))
	if err == nil || !strings.Contains(out, "no-such-quirk") || !strings.Contains(out, "crash-on-connect") {
		t.Fatalf("up --quirk no-such-quirk: %v\n%s", err, out)
	}
}

// TestQuirkUpSlowReady: `up` waits out a modem slow to become READY within
// its ready timeout and says so; with --ready-timeout shorter than the
// modem's delay it gives up saying what it waited for and how to wait
// longer.
func TestQuirkUpSlowReady(t *testing.T) {
	if !inNetns(t) {
		return
	}
	u := startUp(t, "--model", "telit-fn990", "--quirk", "slow-ready=3s")
	if !strings.Contains(u.logText(), "slow to reach READY") {
		t.Errorf("up did not say the modem was slow:\n%s", u.logText())
	}
	if got := pings(t, 1, 3); got != 3 {
		t.Fatalf("%d of 3 pings", got)
	}
	if st := localStats(t); st["mhi/slow_readies"] != 1 {
		t.Errorf("mhi/slow_readies %d, want 1", st["mhi/slow_readies"])
	}
	u.stop(t)

	out, err := runCmd(t, mhictl("up", "--model", "telit-fn990", "--quirk", "slow-ready=3s", "--ready-timeout", "1s"))
	if err == nil || !strings.Contains(out, "not READY") || !strings.Contains(out, "--ready-timeout") {
		t.Fatalf("up with a ready timeout shorter than the modem's delay: %v\n%s", err, out)
	}
	t.Logf("$ mhictl up --quirk slow-ready=3s --ready-timeout 1s\n%s", out)
}
