package main

import (
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhi/testenv/poll"
)

// These tests are issue 23's "done when" for gomhi's host: `mhictl up`
// with --require-connect and no --tun-addr, two sessions connected with
// `mhictl connect --session N` on two interfaces (mhi0, mhi0.1), pings to
// each session's gateway through each interface at once, per-session
// counters that match them, and `mhictl disconnect --session 1` ending
// session 1 alone — over MBIM (telit-fn990, NDP per session) and over QMI
// with QMAP mux ids (telit-fn920c04 --format qmap).

// sessionOut is `mhictl connect --json` with the session number.
type sessionOut struct {
	connectOut
	Session int `json:"session"`
}

// pingFrom sends one ICMP echo request from src to dst (the route picks
// the interface) with identifier id, and waits for its reply.
func pingFrom(t *testing.T, src, dst string, id, seq uint16) bool {
	t.Helper()
	c, err := net.ListenPacket("ip4:icmp", src)
	if err != nil {
		t.Error(err)
		return false
	}
	defer c.Close()
	req := []byte{8, 0, 0, 0, byte(id >> 8), byte(id), byte(seq >> 8), byte(seq), 'g', 'o', 'm', 'h', 'i'}
	binary.BigEndian.PutUint16(req[2:], icmpChecksum(req))
	if _, err := c.WriteTo(req, &net.IPAddr{IP: net.ParseIP(dst)}); err != nil {
		return false
	}
	buf := make([]byte, 1500)
	deadline := time.Now().Add(2 * time.Second)
	for {
		_ = c.SetReadDeadline(deadline)
		n, from, err := c.ReadFrom(buf)
		if err != nil {
			return false
		}
		if n >= 8 && buf[0] == 0 && binary.BigEndian.Uint16(buf[4:]) == id && binary.BigEndian.Uint16(buf[6:]) == seq && from.String() == dst {
			return true
		}
	}
}

// pingsFrom sends n pings from src to dst and returns how many were
// answered.
func pingsFrom(t *testing.T, src, dst string, id uint16, n int) int {
	got := 0
	for i := range n {
		if pingFrom(t, src, dst, id, uint16(i)) {
			got++
		}
	}
	return got
}

// noIPv6 turns IPv6 off on an interface, so that the kernel sends
// nothing on it of its own (router solicitations, MLD) and its counters
// count the test's packets only.
func noIPv6(t *testing.T, ifc string) {
	t.Helper()
	if err := os.WriteFile("/proc/sys/net/ipv6/conf/"+ifc+"/disable_ipv6", []byte("1"), 0o644); err != nil {
		t.Logf("disable_ipv6 on %s: %v", ifc, err)
	}
}

// hasAddr reports whether interface name exists and has address a.
func hasAddr(name, a string) (exists, has bool) {
	ifc, err := net.InterfaceByName(name)
	if err != nil {
		return false, false
	}
	addrs, _ := ifc.Addrs()
	for _, x := range addrs {
		if x.String() == a {
			return true, true
		}
	}
	return true, false
}

// mhictlFails runs mhictl and wants it to fail with want in its output.
func mhictlFails(t *testing.T, want string, args ...string) {
	t.Helper()
	out, err := runCmd(t, mhictl(args...))
	if err == nil || !strings.Contains(out, want) {
		t.Errorf("mhictl %s: %v, want a failure with %q:\n%s", strings.Join(args, " "), err, want, out)
	}
}

// sessionCounters returns the per-session counters of session n from
// `mhictl stats`.
func sessionCounters(st map[string]uint64, n int) (rx, tx, rxDrop, txDrop uint64) {
	p := fmt.Sprintf("sessions/%d/", n)
	return st[p+"rx_packets"], st[p+"tx_packets"], st[p+"rx_dropped"], st[p+"tx_dropped"]
}

// multiSession runs the journey on `mhictl up` with args, the
// sessions over protocol.
func multiSession(t *testing.T, protocol string, args ...string) {
	u := startUp(t, append([]string{"--require-connect", "--tun-addr", ""}, args...)...)
	// Session 0 is configured on --tun's interface, no other.
	mhictlFails(t, "session 0 configures mhi0", "connect", "mhi0", "--apn", "internet", "--interface", "other0")
	var c [2]sessionOut
	mhictlJSON(t, &c[0], "connect", "mhi0", "--apn", "internet", "--session", "0")
	mhictlJSON(t, &c[1], "connect", "mhi0", "--apn", "ims", "--session", "1")
	for i, want := range []struct{ ifc, ipv4, gw, apn string }{
		{"mhi0", "198.18.0.1/24", "198.18.0.2", "internet"},
		{"mhi0.1", "198.18.1.1/24", "198.18.1.2", "ims"},
	} {
		if c[i].Session != i || c[i].State != "connected" || c[i].Protocol != protocol || c[i].Interface != want.ifc ||
			c[i].IPv4 != want.ipv4 || c[i].Gateway4 != want.gw || c[i].APN != want.apn || c[i].MTU != 1500 {
			t.Fatalf("connect --session %d printed %+v, want %s on %s with %s gw %s", i, c[i], protocol, want.ifc, want.ipv4, want.gw)
		}
		if _, has := hasAddr(want.ifc, want.ipv4); !has {
			t.Fatalf("%s lacks %s:\n%s", want.ifc, want.ipv4, u.logText())
		}
		noIPv6(t, want.ifc)
	}
	multiSessionErrors(t)

	pingBoth(t, u, c)

	// Disconnect session 1: its interface goes, session 0 stays.
	var d sessionOut
	mhictlJSON(t, &d, "disconnect", "mhi0", "--session", "1")
	if d.Session != 1 || d.State != "disconnected" || d.IPv4 != "" {
		t.Fatalf("disconnect --session 1 printed %+v", d)
	}
	if exists, _ := hasAddr("mhi0.1", ""); exists {
		t.Fatalf("mhi0.1 stays after disconnect --session 1")
	}
	if got := pingsFrom(t, "198.18.0.1", "198.18.0.2", 0x4d10, 5); got != 5 {
		t.Fatalf("session 0: %d of 5 pings answered after disconnecting session 1:\n%s", got, u.logText())
	}
	var all []sessionOut
	mhictlJSON(t, &all, "get", "mhi0", "sessions")
	if len(all) != 8 || all[0].State != "connected" || all[1].State != "disconnected" || all[1].Interface != "" {
		t.Fatalf("get sessions after disconnecting session 1: %+v", all)
	}
	// Session 1 again, on an interface of its own name.
	mhictlJSON(t, &c[1], "connect", "mhi0", "--apn", "ims", "--session", "1", "--interface", "ims0")
	noIPv6(t, "ims0")
	if c[1].Interface != "ims0" || pingsFrom(t, "198.18.1.1", "198.18.1.2", 0x4d11, 3) != 3 {
		t.Fatalf("session 1 on ims0: %+v:\n%s", c[1], u.logText())
	}
	u.stop(t)
	if exists, _ := hasAddr("ims0", ""); exists {
		t.Error("ims0 left behind by up's exit")
	}
}

// pingBoth pings each session's gateway through its interface, both at
// once, and checks the per-session counters against the pings, in
// `mhictl stats` and in the metrics.
func pingBoth(t *testing.T, u *upProc, c [2]sessionOut) {
	t.Helper()
	// Pings to each gateway through each interface, at once; a different
	// number on each, so that one session's counters cannot pass for the
	// other's.
	n := [2]int{20, 12}
	before := localStats(t)
	var wg sync.WaitGroup
	var got [2]int
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i] = pingsFrom(t, c[i].IPv4[:strings.IndexByte(c[i].IPv4, '/')], c[i].Gateway4, uint16(0x4d00+i), n[i])
		}()
	}
	wg.Wait()
	if got != n {
		t.Fatalf("pings answered: session 0 %d of %d, session 1 %d of %d:\n%s", got[0], n[0], got[1], n[1], u.logText())
	}
	after := localStats(t)
	for i := range 2 {
		rx0, tx0, _, _ := sessionCounters(before, i)
		rx1, tx1, rxd, txd := sessionCounters(after, i)
		if rx1-rx0 != uint64(n[i]) || tx1-tx0 != uint64(n[i]) || rxd != 0 || txd != 0 {
			t.Errorf("session %d: %d packets received, %d sent, %d and %d dropped; want %d and %d, none dropped",
				i, rx1-rx0, tx1-tx0, rxd, txd, n[i], n[i])
		}
		// The modem's own count of the session: what the host sent, and
		// what it answered.
		ul := fmt.Sprintf("modem_sessions/%d/ul_packets", i)
		dl := fmt.Sprintf("modem_sessions/%d/dl_packets", i)
		if after[ul]-before[ul] != tx1-tx0 || after[dl]-before[dl] != rx1-rx0 {
			t.Errorf("session %d: the modem counted %d uplink and %d downlink packets, the host %d sent and %d received",
				i, after[ul]-before[ul], after[dl]-before[dl], tx1-tx0, rx1-rx0)
		}
	}
	if u := after["sessions/rx_session_unknown"]; u != 0 {
		t.Errorf("%d packets of an unknown session", u)
	}
	// The host numbered its sessions from the model's base from the
	// start: it never had to follow the modem's.
	if f := after["net/tx_session_follows"]; f != 0 {
		t.Errorf("the uplink followed the modem's session numbering %d times (net/tx_session %d)", f, after["net/tx_session"])
	}
	m := scrape(t, u)
	for _, want := range []string{`mhi_sessions_up{device="mhi0",session="1"} 1`, `mhi_sessions_up{device="mhi0",session="0"} 1`,
		fmt.Sprintf(`mhi_sessions_rx_packets_total{device="mhi0",session="1"} %d`, after["sessions/1/rx_packets"])} {
		if !strings.Contains(m, want) {
			t.Errorf("the metrics lack %q", want)
		}
	}
}

// multiSessionErrors: bad requests fail clearly and make nothing.
func multiSessionErrors(t *testing.T) {
	t.Helper()
	mhictlFails(t, "is beyond the limit", "connect", "mhi0", "--apn", "x", "--session", "8")
	mhictlFails(t, `--session "x": want a session number 0..255`, "connect", "mhi0", "--apn", "x", "--session", "x")
	mhictlFails(t, `--session "256"`, "connect", "mhi0", "--apn", "x", "--session", "256")
	mhictlFails(t, "already connected", "connect", "mhi0", "--apn", "ims", "--session", "1")
	mhictlFails(t, "interface mhi0 exists", "connect", "mhi0", "--apn", "iot", "--session", "2", "--interface", "mhi0")
	mhictlFails(t, `interface name "a/b"`, "connect", "mhi0", "--apn", "iot", "--session", "2", "--interface", "a/b")
	mhictlFails(t, "not connected", "disconnect", "mhi0", "--session", "3")
	if exists, _ := hasAddr("mhi0.2", ""); exists {
		t.Error("a refused connect of session 2 left mhi0.2")
	}
	var s sessionOut
	mhictlJSON(t, &s, "get", "mhi0", "session")
	if s.State != "connected" || s.Session != 0 {
		t.Errorf("session 0 after the refused requests: %+v", s)
	}
}

// TestUpMultiSessionMBIM: the journey over MBIM on telit-fn990, sessions
// told apart by their NDPs' session ids.
func TestUpMultiSessionMBIM(t *testing.T) {
	if !inNetns(t) {
		return
	}
	multiSession(t, "mbim", "--model", "telit-fn990")
}

// TestUpMultiSessionQMAP: the journey over QMI on telit-fn920c04 with
// QMAP framing, session 1's WDS client bound to mux id 1 (Bind Mux Data
// Port).
func TestUpMultiSessionQMAP(t *testing.T) {
	if !inNetns(t) {
		return
	}
	multiSession(t, "qmi", "--model", "telit-fn920c04", "--format", "qmap")
}

// TestUpMultiSessionNetworkDisconnect: the network ends session 1 alone
// (`mhictl modem inject disconnect-session=1` on a served telit-fn990:
// a CONNECT indication deactivating SessionId 1): up removes mhi0.1 and
// counts a network disconnect for session 1; session 0 is not even
// checked and still pings.
func TestUpMultiSessionNetworkDisconnect(t *testing.T) {
	if !inNetns(t) {
		return
	}
	srv, sock, srvLog := serveModem(t, "--model", "telit-fn990", "--require-connect")
	u := startUp(t, "--vfio-user", sock, "--tun-addr", "")
	var c [2]sessionOut
	mhictlJSON(t, &c[0], "connect", "mhi0", "--apn", "internet")
	mhictlJSON(t, &c[1], "connect", "mhi0", "--apn", "ims", "--session", "1")
	noIPv6(t, "mhi0.1")
	if c[1].Interface != "mhi0.1" || pingsFrom(t, "198.18.1.1", "198.18.1.2", 0x4d20, 3) != 3 {
		t.Fatalf("session 1 before the network ends it: %+v:\n%s", c[1], u.logText())
	}
	if out, err := runCmd(t, mhictl("modem", "inject", "--socket", sock, "disconnect-session=1")); err != nil {
		t.Fatalf("inject disconnect-session=1: %v\n%s", err, out)
	}
	var st map[string]uint64
	poll.Wait(t, 10*time.Second, func() bool {
		st = localStats(t)
		exists, _ := hasAddr("mhi0.1", "")
		return !exists && st["sessions/1/connected"] == 0
	}, func() string { return "mhi0.1 to go after the network ended session 1:\n" + u.logText() })
	if st["sessions/1/network_disconnects"] != 1 || st["sessions/1/connected"] != 0 || st["sessions/0/network_disconnects"] != 0 ||
		st["sessions/0/state_checks"] != 0 || st["sessions/0/connected"] != 1 {
		t.Errorf("after the network ended session 1: session 1 network_disconnects %d connected %d; session 0 network_disconnects %d state_checks %d connected %d",
			st["sessions/1/network_disconnects"], st["sessions/1/connected"], st["sessions/0/network_disconnects"],
			st["sessions/0/state_checks"], st["sessions/0/connected"])
	}
	if got := pingsFrom(t, "198.18.0.1", "198.18.0.2", 0x4d21, 5); got != 5 {
		t.Fatalf("session 0: %d of 5 pings answered after the network ended session 1:\n%s", got, u.logText())
	}
	u.stop(t)
	sigterm(t, srv, srvLog)
}

// TestUpMultiSessionBase112: the journey on foxconn-t99w640, an SDX72 in
// MBIM mode whose sessions are numbered from 112 on the wire (MuxIDBase):
// session N is SessionId N in CONNECT and 112+N in the NDPs.
func TestUpMultiSessionBase112(t *testing.T) {
	if !inNetns(t) {
		return
	}
	multiSession(t, "mbim", "--model", "foxconn-t99w640")
}

// TestUpMultiSessionNoTUN: without --tun, sessions connect all the same,
// with no interface (the modem's gate opens for each), and disconnect.
func TestUpMultiSessionNoTUN(t *testing.T) {
	if !inNetns(t) {
		return
	}
	cmd := mhictl("up", "--model", "telit-fn990", "--require-connect", "--run-dir", filepath.Join(t.TempDir(), "run"))
	l := startProc(t, cmd, "ready (SIGINT")
	var c [2]sessionOut
	mhictlJSON(t, &c[0], "connect", "mhi0", "--apn", "internet")
	mhictlJSON(t, &c[1], "connect", "mhi0", "--apn", "ims", "--session", "1")
	if c[0].Interface != "" || c[1].Interface != "" || c[1].Session != 1 || c[1].IPv4 != "198.18.1.1/24" || c[1].State != "connected" {
		t.Fatalf("connects without --tun printed %+v and %+v", c[0], c[1])
	}
	if exists, _ := hasAddr("mhi0.1", ""); exists {
		t.Fatal("an interface made without --tun")
	}
	mhictlFails(t, "configures no interface", "connect", "mhi0", "--apn", "iot", "--session", "2", "--interface", "iot0")
	st := localStats(t)
	if st["sessions/1/connected"] != 1 || st["sessions/0/connected"] != 1 {
		t.Errorf("after two connects: sessions/1/connected %d", st["sessions/1/connected"])
	}
	var d sessionOut
	mhictlJSON(t, &d, "disconnect", "mhi0", "--session", "1")
	if d.State != "disconnected" {
		t.Fatalf("disconnect --session 1 printed %+v", d)
	}
	sigterm(t, cmd, l)
}
