package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhi/testenv"
	"github.com/gomhi/gomhi/mhi/testenv/reexec"
)

// The integration tests run `mhictl up` with a TUN interface and a FUSE
// mount, as root, in a network namespace of their own: the test binary
// re-executes itself under `unshare --net`, so nothing touches the host's
// network. Traffic uses 198.18.0.0/24 inside that namespace only.

func needRootNetns(t *testing.T) {
	t.Helper()
	testenv.NeedRoot(t, "TUN, FUSE and network namespaces")
	for _, p := range []string{"/dev/net/tun", "/dev/fuse"} {
		testenv.NeedPath(t, p)
	}
	testenv.LookPath(t, "unshare", "util-linux")
}

// inNetns runs the test in a fresh network namespace and reports whether
// the caller is already there (then it runs the body).
func inNetns(t *testing.T) bool {
	t.Helper()
	return reexec.InNetns(t, needRootNetns)
}

// mhictl runs this binary as mhictl.
func mhictl(args ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "GOMHI_RUN_MHICTL=1")
	return cmd
}

// upProc is a running `mhictl up`.
type upProc struct {
	cmd   *exec.Cmd
	mount string
	log   *procLog // its stderr, and the one waiter (see startProc)
}

func startUp(t *testing.T, args ...string) *upProc {
	t.Helper()
	if err := exec.Command("ip", "link", "set", "lo", "up").Run(); err != nil {
		t.Fatalf("ip link set lo up: %v", err)
	}
	u := &upProc{mount: t.TempDir()}
	u.cmd = mhictl(append([]string{"up", "--tun", "mhi0", "--mount", u.mount, "--metrics", "127.0.0.1:0"}, args...)...)
	// Registered first, so run last: after startProc's cleanup has
	// killed and waited for the process.
	t.Cleanup(func() { _ = syscall.Unmount(u.mount, syscall.MNT_DETACH) })
	u.log = startProc(t, u.cmd, "ready (SIGINT")
	return u
}

func (u *upProc) logText() string { return u.log.String() }

// stop sends SIGTERM and checks the exit and the cleanup.
func (u *upProc) stop(t *testing.T) {
	t.Helper()
	sigterm(t, u.cmd, u.log)
	mounts, _ := os.ReadFile("/proc/self/mounts")
	if bytes.Contains(mounts, []byte(u.mount)) {
		t.Errorf("stale mount left at %s", u.mount)
	}
	if _, err := net.InterfaceByName("mhi0"); err == nil {
		t.Errorf("interface mhi0 left behind")
	}
}

func runCmd(t *testing.T, cmd *exec.Cmd) (string, error) {
	t.Helper()
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// udpEcho sends n datagrams to the modem's echo port and counts replies.
func udpEcho(t *testing.T, n int) (sent, got int) {
	t.Helper()
	c, err := net.DialUDP("udp4", &net.UDPAddr{IP: net.IPv4(198, 18, 0, 1)}, &net.UDPAddr{IP: net.IPv4(198, 18, 0, 2), Port: 7})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	buf := make([]byte, 2048)
	for i := 0; i < n; i++ {
		msg := fmt.Sprintf("echo %d", i)
		if _, err := c.Write([]byte(msg)); err != nil {
			t.Fatal(err)
		}
		sent++
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
		k, err := c.Read(buf)
		if err != nil {
			continue
		}
		if string(buf[:k]) == msg {
			got++
		}
	}
	return sent, got
}

// ping sends one ICMP echo request through a raw socket and waits for the reply.
func ping(t *testing.T, seq uint16) bool {
	t.Helper()
	return pingData(t, seq, []byte("gomhi"))
}

// pingData is ping with data as the request's payload.
func pingData(t *testing.T, seq uint16, data []byte) bool {
	t.Helper()
	c, err := net.ListenPacket("ip4:icmp", "198.18.0.1")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	req := append([]byte{8, 0, 0, 0, 0x47, 0x4d, byte(seq >> 8), byte(seq)}, data...)
	binary.BigEndian.PutUint16(req[2:], icmpChecksum(req))
	if _, err := c.WriteTo(req, &net.IPAddr{IP: net.IPv4(198, 18, 0, 2)}); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1500)
	// Not poll: blocking reads under one read deadline, nothing to poll.
	deadline := time.Now().Add(2 * time.Second)
	for {
		_ = c.SetReadDeadline(deadline)
		n, from, err := c.ReadFrom(buf)
		if err != nil {
			return false
		}
		if n >= 8 && buf[0] == 0 && binary.BigEndian.Uint16(buf[6:]) == seq && from.String() == "198.18.0.2" {
			return true
		}
	}
}

func icmpChecksum(b []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(b[i])<<8 | uint32(b[i+1])
	}
	if len(b)%2 == 1 {
		s += uint32(b[len(b)-1]) << 8
	}
	for s>>16 != 0 {
		s = s&0xFFFF + s>>16
	}
	return ^uint16(s)
}

// TestUpEndToEnd: `mhictl up` with a TUN and the FUSE tree; pings and UDP
// echo round-trip through the mock modem; the MRU changes over netlink and
// through the FUSE file while traffic flows, and nothing is lost; a non-root
// client may read but not change; SIGTERM mid-traffic leaves nothing behind.
func TestUpEndToEnd(t *testing.T) {
	if !inNetns(t) {
		return
	}
	u := startUp(t)
	for i := uint16(1); i <= 3; i++ {
		if !ping(t, i) {
			t.Fatalf("ping %d not answered:\n%s", i, u.logText())
		}
	}
	if sent, got := udpEcho(t, 20); got != sent {
		t.Fatalf("UDP echo: %d of %d answered", got, sent)
	}

	// Traffic in the background while the MRU changes both ways.
	var sent, got atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	trafficDone := make(chan struct{})
	go func() {
		defer close(trafficDone)
		for ctx.Err() == nil {
			s, g := udpEcho(t, 10)
			sent.Add(int64(s))
			got.Add(int64(g))
		}
	}()
	mruFile := filepath.Join(u.mount, "devices/mhi0/mru")
	for _, mru := range []string{"3500", "16384", "1024", "32768"} {
		if out, err := runCmd(t, mhictl("set-mru", "mhi0", mru)); err != nil {
			t.Fatalf("set-mru %s: %v\n%s", mru, err, out)
		}
		if b, _ := os.ReadFile(mruFile); strings.TrimSpace(string(b)) != mru {
			t.Fatalf("after set-mru %s the file says %q", mru, b)
		}
		time.Sleep(20 * time.Millisecond)
		if err := os.WriteFile(mruFile, []byte("2048\n"), 0o644); err != nil {
			t.Fatalf("writing the mru file: %v", err)
		}
		out, err := runCmd(t, mhictl("get", "mhi0", "mru"))
		if err != nil || strings.TrimSpace(out) != "2048" {
			t.Fatalf("get after the file write: %q %v", out, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	<-trafficDone
	if sent.Load() < 50 || got.Load() != sent.Load() {
		t.Fatalf("during MRU changes %d of %d echoes came back", got.Load(), sent.Load())
	}

	// Bad values and permissions.
	if out, err := runCmd(t, mhictl("set-mru", "mhi0", "70000")); err == nil || !strings.Contains(out, "256..65535") {
		t.Fatalf("set-mru 70000: %v %q", err, out)
	}
	if err := os.WriteFile(mruFile, []byte("7\n"), 0o644); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("writing 7 to the file: %v, want EINVAL", err)
	}
	if out, err := runCmd(t, mhictl("get", "mhi9")); err == nil || !strings.Contains(out, "no such device") && !strings.Contains(out, "mhi9") {
		t.Fatalf("get mhi9: %v %q", err, out)
	}
	nobodyChecks(t)

	// Counters agree with what went through.
	out, err := runCmd(t, mhictl("stats", "mhi0", "--json"))
	if err != nil || !strings.Contains(out, `"net/rx_packets"`) {
		t.Fatalf("stats: %v %q", err, out)
	}

	// SIGTERM mid-traffic.
	ctx2, cancel2 := context.WithCancel(context.Background())
	go func() {
		for ctx2.Err() == nil {
			udpEcho(t, 1)
		}
	}()
	time.Sleep(50 * time.Millisecond)
	u.stop(t)
	cancel2()
	if out, err := runCmd(t, mhictl("get", "mhi0")); err == nil || !strings.Contains(out, "mhictl up") {
		t.Fatalf("get with nothing running: %v %q", err, out)
	}
}

// nobodyChecks runs the client as uid 65534: GET works, SET is refused.
func nobodyChecks(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Log("setpriv missing: non-root checks skipped")
		return
	}
	// The test binary sits in a root-only build directory: copy it.
	dir, err := os.MkdirTemp("", "mhictl-nobody")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	_ = os.Chmod(dir, 0o755)
	bin := filepath.Join(dir, "mhictl.test")
	src, err := os.Open(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	dst, err := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(dst, src)
	src.Close()
	dst.Close()
	as := func(args ...string) (string, error) {
		cmd := exec.Command("setpriv", append([]string{"--reuid=65534", "--regid=65534", "--clear-groups", bin}, args...)...)
		cmd.Env = append(os.Environ(), "GOMHI_RUN_MHICTL=1")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := as("get", "mhi0", "mtu"); err != nil || strings.TrimSpace(out) != "1500" {
		t.Fatalf("GET as nobody: %v %q", err, out)
	}
	out, err := as("set-mru", "mhi0", "4096")
	if err == nil || !strings.Contains(out, "needs root or CAP_NET_ADMIN") {
		t.Fatalf("SET as nobody: %v %q", err, out)
	}
}

// TestUpQMAPChecksumFraming: `up --format qmap --qmap-csum v4|v5` frames
// the uplink as rmnet's MAP checksum egress does and the embedded mock
// parses it the same way: pings and UDP echo come back, and the modem's
// QMAP parser counted nothing malformed.
func TestUpQMAPChecksumFraming(t *testing.T) {
	if !inNetns(t) {
		return
	}
	for _, csum := range []string{"v4", "v5"} {
		u := startUp(t, "--format", "qmap", "--qmap-csum", csum)
		if line := "qmap framing (MAP checksum " + csum + ")"; !strings.Contains(u.logText(), line) {
			t.Errorf("no %q line:\n%s", line, u.logText())
		}
		for i := uint16(1); i <= 3; i++ {
			if !ping(t, i) {
				t.Fatalf("%s: ping %d not answered:\n%s", csum, i, u.logText())
			}
		}
		if sent, got := udpEcho(t, 20); got != sent {
			t.Fatalf("%s: UDP echo: %d of %d answered", csum, got, sent)
		}
		out, err := runCmd(t, mhictl("stats", "mhi0", "--json"))
		if err != nil || !strings.Contains(out, `"net/rx_packets"`) {
			t.Fatalf("%s: stats: %v %q", csum, err, out)
		}
		u.stop(t)
	}
}
