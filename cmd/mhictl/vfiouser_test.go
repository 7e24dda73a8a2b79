package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gomhi/gomhi/cmd/mhictl/internal/sweep"
	"github.com/gomhi/gomhi/mhi/testenv/poll"
	"github.com/gomhi/gomhi/pcigeneric/vfiouser/client"
	"github.com/gomhi/gomhi/pcigeneric/vfiouser/protocol"
)

// The tests below run `mhictl modem serve` in one process and the host
// stack (`up`, `loopback`, `bench` with --vfio-user) in others.

// procLog collects a child's stderr and waits for the child: one
// goroutine reads stderr to the end and only then calls cmd.Wait (which
// closes the pipe, so it must not run while the pipe is read), records
// its error and closes exited. Nobody else calls cmd.Wait or reads
// cmd.ProcessState.
type procLog struct {
	mu  sync.Mutex
	buf bytes.Buffer

	exited chan struct{} // closed once the child has exited and been waited for
	err    error         // cmd.Wait's, set before exited is closed
}

func (l *procLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// wait waits up to d for the child to exit: ok is false if it still
// runs, else err is cmd.Wait's error.
func (l *procLog) wait(d time.Duration) (ok bool, err error) {
	select {
	case <-l.exited:
		return true, l.err
	default:
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-l.exited:
		return true, l.err
	case <-timer.C:
		return false, nil
	}
}

// startProc starts cmd and waits until its stderr has a line containing
// ready; the process is killed and waited for at cleanup if still
// running. Wait for it with the procLog's wait, never with cmd.Wait.
func startProc(t *testing.T, cmd *exec.Cmd, ready string) *procLog {
	t.Helper()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	l := &procLog{exited: make(chan struct{})}
	t.Cleanup(func() {
		if ok, _ := l.wait(0); !ok {
			_ = cmd.Process.Kill()
			if ok, _ := l.wait(15 * time.Second); !ok {
				t.Errorf("%v: not gone 15 s after SIGKILL", cmd.Args[1:])
			}
		}
	})
	seen := make(chan struct{})
	go func() {
		var once sync.Once
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			l.mu.Lock()
			l.buf.WriteString(sc.Text() + "\n")
			l.mu.Unlock()
			if strings.Contains(sc.Text(), ready) {
				once.Do(func() { close(seen) })
			}
		}
		_, _ = io.Copy(io.Discard, stderr) // after a line too long: read to EOF
		l.err = cmd.Wait()
		close(l.exited)
	}()
	select {
	case <-seen:
	case <-l.exited:
		t.Fatalf("%v exited (%v) without a %q line:\n%s", cmd.Args[1:], l.err, ready, l)
	case <-time.After(15 * time.Second):
		t.Fatalf("%v: no %q line:\n%s", cmd.Args[1:], ready, l)
	}
	return l
}

// serveModem starts `mhictl modem serve` on a fresh socket with args.
func serveModem(t *testing.T, args ...string) (*exec.Cmd, string, *procLog) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "modem.sock")
	cmd := mhictl(append([]string{"modem", "serve", "--socket", sock}, args...)...)
	l := startProc(t, cmd, "msg=listen")
	return cmd, sock, l
}

// sigterm stops a child started by startProc with SIGTERM and fails
// unless it exits 0 in time; one that does not is killed and waited for.
func sigterm(t *testing.T, cmd *exec.Cmd, l *procLog) {
	t.Helper()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	ok, err := l.wait(15 * time.Second)
	if !ok {
		_ = cmd.Process.Kill()
		_, _ = l.wait(15 * time.Second)
		t.Fatalf("%v did not exit after SIGTERM:\n%s", cmd.Args[1:3], l)
	}
	if err != nil {
		t.Fatalf("%v exited with %v after SIGTERM:\n%s", cmd.Args[1:3], err, l)
	}
}

// testPort is a netlink port of this test process's own, so that parallel
// test binaries do not collide on the default port.
func testPort(i int) string {
	return fmt.Sprintf("%#x", 0x6d680000|uint32(os.Getpid()&0xfff)<<4|uint32(i))
}

// statsOf reads the counters of mhi0 from the `up` on port.
func statsOf(t *testing.T, port string) map[string]uint64 {
	t.Helper()
	out, err := mhictl("stats", "mhi0", "--json", "--netlink-port", port).Output()
	if err != nil {
		t.Fatalf("stats: %v\n%s", err, out)
	}
	var m map[string]uint64
	if err := json.Unmarshal(out, &m); err != nil {
		t.Fatalf("stats: %v: %s", err, out)
	}
	return m
}

// TestVFIOUserAcrossProcesses: a served modem in loopback mode drives the
// LOOPBACK check, the MRU sweep in loopback mode and `up` from other
// processes, one client after another, then both sides stop on SIGTERM.
func TestVFIOUserAcrossProcesses(t *testing.T) {
	srv, sock, srvLog := serveModem(t, "--model", "telit-fn990", "--ip-mode", "loopback")

	out, err := mhictl("loopback", "--vfio-user", sock, "--count", "300", "--json").Output()
	if err != nil {
		t.Fatalf("loopback: %v\n%s", err, out)
	}
	var lres struct{ Sent, Received, Mismatched, Timeouts int }
	if err := json.Unmarshal(out, &lres); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if lres.Sent != 300 || lres.Received != 300 || lres.Mismatched != 0 || lres.Timeouts != 0 {
		t.Fatalf("loopback across vfio-user: %+v", lres)
	}

	out, err = mhictl("bench", "--vfio-user", sock, "--quick", "--mode", "loopback", "--json").Output()
	if err != nil {
		t.Fatalf("bench: %v\n%s", err, out)
	}
	var rep sweep.Report
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if rep.Model != "telit-fn990" || rep.Mode != sweep.Loopback || rep.Format != "mbim" {
		t.Errorf("bench report: model %s, mode %s, format %s; want telit-fn990, loopback, mbim", rep.Model, rep.Mode, rep.Format)
	}
	if want := len(sweep.QuickSizes) * len(sweep.QuickMRUs); len(rep.Points) != want {
		t.Fatalf("bench: %d points, want %d", len(rep.Points), want)
	}
	for _, p := range rep.Points {
		if !p.Conserved || p.Sent != uint64(sweep.QuickPackets*sweep.QuickIterations) || p.Delivered != p.Sent {
			t.Errorf("bench point MRU %d size %d: sent %d delivered %d dropped %d conserved %v",
				p.MRU, p.Size, p.Sent, p.Delivered, p.Dropped, p.Conserved)
		}
	}

	// `up` on the same server: powers up, serves netlink, changes the MRU.
	port := testPort(1)
	up := mhictl("up", "--vfio-user", sock, "--netlink-port", port)
	upLog := startProc(t, up, "ready")
	if !strings.Contains(upLog.String(), "telit-fn990 (IP_HW0_MBIM) in M0") {
		t.Errorf("up did not report M0:\n%s", upLog)
	}
	if out, err := mhictl("get", "mhi0", "state", "--netlink-port", port).CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "M0" {
		t.Fatalf("get state: %v %q", err, out)
	}
	if out, err := mhictl("set-mru", "mhi0", "16384", "--netlink-port", port).CombinedOutput(); err != nil {
		t.Fatalf("set-mru: %v %q", err, out)
	}
	st := statsOf(t, port)
	if st["net/mru"] != 16384 || st["net/mru_changes"] != 1 || st["mhi/sys_errs"] != 0 {
		t.Errorf("stats after set-mru: mru %d, mru_changes %d, sys_errs %d", st["net/mru"], st["net/mru_changes"], st["mhi/sys_errs"])
	}
	sigterm(t, up, upLog)

	// The server took every client in turn and stops cleanly.
	sigterm(t, srv, srvLog)
	if n := strings.Count(srvLog.String(), "msg=connect"); n != 3 {
		t.Errorf("server saw %d sessions, want 3:\n%s", n, srvLog)
	}
	if strings.Contains(srvLog.String(), "level=WARN") {
		t.Errorf("server warned:\n%s", srvLog)
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Errorf("socket left behind: %v", err)
	}
}

// TestVFIOUserGenerator: a served modem in generator mode sends exactly
// --gen-count packets per session, and `up --vfio-user` receives them all.
func TestVFIOUserGenerator(t *testing.T) {
	srv, sock, srvLog := serveModem(t, "--ip-mode", "generator", "--gen-count", "3000", "--gen-rate", "20000", "--gen-size", "64,1500")
	port := testPort(2)
	up := mhictl("up", "--vfio-user", sock, "--netlink-port", port)
	upLog := startProc(t, up, "ready")
	poll.Until(10*time.Second, func() bool { return statsOf(t, port)["net/rx_packets"] >= 3000 })
	time.Sleep(100 * time.Millisecond) // anything beyond the count would show now
	st := statsOf(t, port)
	if st["net/rx_packets"] != 3000 || st["net/rx_errors"] != 0 {
		t.Fatalf("received %d packets, %d errors; want 3000, 0", st["net/rx_packets"], st["net/rx_errors"])
	}
	if want := uint64(1500 * (64 + 1500)); st["net/rx_bytes"] != want {
		t.Errorf("received %d bytes, want %d", st["net/rx_bytes"], want)
	}
	// The served modem is another process: not trusted, so every
	// transfer was copied out of DMA memory (--rx-copy auto).
	if !strings.Contains(upLog.String(), "receive copy on (--rx-copy auto)") || st["net/rx_copied"] != st["net/rx_transfers"] || st["net/rx_copied"] == 0 {
		t.Errorf("rx copy over vfio-user: copied %d of %d transfers:\n%s", st["net/rx_copied"], st["net/rx_transfers"], upLog)
	}
	sigterm(t, up, upLog)
	sigterm(t, srv, srvLog)
}

// TestVFIOUserMismatch: a sweep against a served modem that answers as a
// responder, generates, or frames differently fails at the probe with a
// clear error instead of reporting every packet lost. (A raw-framing modem
// in loopback echoes any transfer unchanged, so an aggregating host passes
// through it: that mismatch is not detectable and not tested.)
func TestVFIOUserMismatch(t *testing.T) {
	for _, tc := range []struct {
		serve, bench []string
		want         string
	}{
		{serve: nil, want: "the modem is a responder"},
		{serve: []string{"--ip-mode", "generator", "--gen-rate", "1000"}, want: "not the probe came back"},
		// An MBIM modem cannot parse raw IP or QMAP uplink transfers.
		{serve: []string{"--model", "telit-fn990", "--ip-mode", "loopback"}, bench: []string{"--format", "raw"}, want: "nothing came back"},
		{serve: []string{"--model", "telit-fn990", "--ip-mode", "loopback"}, bench: []string{"--format", "qmap"}, want: "nothing came back"},
		{serve: []string{"--model", "telit-fn990", "--ip-mode", "loopback", "--format", "qmap"}, want: "nothing came back"},
	} {
		srv, sock, srvLog := serveModem(t, tc.serve...)
		out, err := mhictl(append([]string{"bench", "--vfio-user", sock, "--quick"}, tc.bench...)...).CombinedOutput()
		if err == nil || !strings.Contains(string(out), tc.want) || !strings.Contains(string(out), "mhictl modem serve --ip-mode loopback") {
			t.Errorf("serve %v, bench %v: %v\n%s", tc.serve, tc.bench, err, out)
		}
		sigterm(t, srv, srvLog)
	}
}

// TestVFIOUserFlagErrors: no server, the wrong kind of file, and flags that
// pick or configure another modem are refused before anything runs.
func TestVFIOUserFlagErrors(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.sock")
	regular := filepath.Join(dir, "file")
	if err := os.WriteFile(regular, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A socket file nobody listens on (a server that was killed).
	stale := filepath.Join(dir, "stale.sock")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: stale, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	l.Close()

	for _, tc := range []struct {
		args []string
		want error
	}{
		{[]string{"up", "--vfio-user", missing, "--netlink-port", "1"}, client.ErrNoServer},
		{[]string{"up", "--vfio-user", stale, "--netlink-port", "1"}, client.ErrNoServer},
		{[]string{"up", "--vfio-user", regular, "--netlink-port", "1"}, protocol.ErrNotSocket},
		{[]string{"up", "--vfio-user", dir, "--netlink-port", "1"}, protocol.ErrNotSocket},
		{[]string{"loopback", "--vfio-user", missing}, client.ErrNoServer},
		{[]string{"loopback", "--vfio-user", regular}, protocol.ErrNotSocket},
		{[]string{"bench", "--vfio-user", missing, "--quick"}, client.ErrNoServer},
		{[]string{"bench", "--vfio-user", regular, "--quick"}, protocol.ErrNotSocket},
		{[]string{"up", "--vfio-user", missing, "--device", "0000:01:00.0"}, errExclusive},
		{[]string{"up", "--vfio-user", missing, "--model", "telit-fn990"}, errExclusive},
		{[]string{"up", "--vfio-user", missing, "--modem-mode", "loopback"}, errExclusive},
		{[]string{"up", "--device", "0000:01:00.0", "--model", "telit-fn990"}, errExclusive},
		{[]string{"loopback", "--vfio-user", missing, "--model", "telit-fn990"}, errExclusive},
		{[]string{"bench", "--vfio-user", missing, "--model", "telit-fn990"}, errExclusive},
		{[]string{"bench", "--vfio-user", missing, "--max-datagrams", "4"}, errExclusive},
		{[]string{"bench", "--vfio-user", missing, "--mode", "generator"}, sweep.ErrNoGenerator},
	} {
		out, err := run(t, tc.args...)
		if !errors.Is(err, tc.want) {
			t.Errorf("%v: %v, want %v\n%s", tc.args, err, tc.want, out)
		}
	}
}

// TestModemServeBadFlags: the IP data settings of `modem serve` are checked
// before the socket is made.
func TestModemServeBadFlags(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "m.sock")
	for _, args := range [][]string{
		{"--ip-mode", "echo"},
		{"--format", "ppp"},
		{"--max-datagrams", "-1"},
		{"--max-aggregate", "70000", "--format", "mbim"},
		{"--ip-mode", "generator", "--gen-size", "20"},
		{"--ip-mode", "generator", "--gen-size", "40000", "--format", "mbim"},
		{"--ip-mode", "generator", "--gen-rate", "-5"},
		{"--model", "no-such-modem"},
	} {
		// In a child: a serve that wrongly starts is killed, not waited for.
		out, exited, err := exitWithin(t, mhictl(append([]string{"modem", "serve", "--socket", sock}, args...)...), 10*time.Second)
		switch {
		case !exited:
			t.Errorf("%v: serve started:\n%s", args, out)
		case err == nil || !strings.Contains(out, "mhictl: "):
			t.Errorf("%v: %v\n%s", args, err, out)
		}
		if _, serr := os.Stat(sock); serr == nil {
			t.Errorf("%v: the socket was made", args)
		}
	}
}

// TestUpVFIOUserTUN: `up --vfio-user` with a TUN interface (root, own
// network namespace): pings and UDP echo cross the TUN, the host stack, the
// vfio-user socket and the served modem (a responder) and come back.
func TestUpVFIOUserTUN(t *testing.T) {
	if !inNetns(t) {
		return
	}
	srv, sock, srvLog := serveModem(t, "--model", "foxconn-sdx55")
	u := startUp(t, "--vfio-user", sock)
	for i := uint16(1); i <= 3; i++ {
		if !ping(t, i) {
			t.Fatalf("ping %d not answered:\n%s", i, u.logText())
		}
	}
	if sent, got := udpEcho(t, 50); got != sent {
		t.Fatalf("UDP echo: %d of %d answered", got, sent)
	}
	out, err := runCmd(t, mhictl("stats", "mhi0", "--json"))
	if err != nil {
		t.Fatalf("stats: %v %q", err, out)
	}
	var st map[string]uint64
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("stats: %v %q", err, out)
	}
	if st["net/rx_packets"] < 53 || st["net/rx_errors"] != 0 {
		t.Errorf("rx_packets %d (want ≥ 53), rx_errors %d", st["net/rx_packets"], st["net/rx_errors"])
	}
	u.stop(t)
	sigterm(t, srv, srvLog)
}

// TestUpVFIOUserServerGone: when the served modem's process dies, `up
// --vfio-user` notices, cleans up and exits non-zero.
func TestUpVFIOUserServerGone(t *testing.T) {
	srv, sock, srvLog := serveModem(t)
	up := mhictl("up", "--vfio-user", sock, "--netlink-port", testPort(3))
	upLog := startProc(t, up, "ready")
	if err := srv.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	if ok, _ := srvLog.wait(15 * time.Second); !ok {
		t.Fatal("the server still runs after SIGKILL")
	}
	if !poll.Until(15*time.Second, func() bool { return strings.Contains(upLog.String(), "went away") }) {
		t.Fatalf("up did not notice its modem died:\n%s", upLog)
	}
	ok, err := upLog.wait(15 * time.Second)
	if !ok {
		t.Fatalf("up still running after its modem died:\n%s", upLog)
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("up exited with %v, want exit status 1:\n%s", err, upLog)
	}
}

// TestBenchVFIOUserFlagsFirst: `bench --vfio-user` checks its flags before
// it connects, so a bad flag never takes the served modem's one client
// slot (nor powers it up); and a bench while another client is served
// fails at once with protocol.ErrBusy, not a timeout.
func TestBenchVFIOUserFlagsFirst(t *testing.T) {
	srv, sock, srvLog := serveModem(t, "--model", "telit-fn990", "--ip-mode", "loopback")
	plot := filepath.Join(t.TempDir(), "no-such-dir", "p.svg")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--json", "--csv"}, "--json and --csv are mutually exclusive"},
		{[]string{"--mode", "sideways"}, `--mode "sideways"`},
		{[]string{"--format", "ppp"}, "--format"},
		{[]string{"--packets", "0"}, "--packets 0"},
		{[]string{"--sizes", "10"}, "packet size 10"},
		{[]string{"--mrus", "100"}, "100"},
		{[]string{"--plot", plot}, "--plot"},
	} {
		out, err := run(t, append([]string{"bench", "--vfio-user", sock, "--quick"}, tc.args...)...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("bench %v: %v, want an error with %q\n%s", tc.args, err, tc.want, out)
		}
	}

	other, err := client.Dial(sock, client.Options{Memory: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	out, err := run(t, "bench", "--vfio-user", sock, "--quick")
	if !errors.Is(err, protocol.ErrBusy) || time.Since(start) >= client.DefaultTimeout {
		t.Errorf("bench while another client is served: %v after %v, want ErrBusy\n%s", err, time.Since(start), out)
	}
	if err := other.Close(); err != nil {
		t.Fatal(err)
	}

	sigterm(t, srv, srvLog) // then the log is complete
	if n := strings.Count(srvLog.String(), "msg=connect"); n != 1 {
		t.Errorf("server saw %d sessions, want 1 (the other client's):\n%s", n, srvLog)
	}
}
