package genl_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhi/testenv/logbuf"
	"github.com/gomhi/gomhi/mhi/testenv/reexec"
	"github.com/gomhi/gomhi/sysfs/genl"
	"github.com/gomhi/gomhi/sysfs/genl/genltest"
)

// The squatter tests run a process as uid 65534 (setpriv) that binds a
// NETLINK_USERSOCK port before the server does, and records every datagram
// it receives. They run in a network namespace of their own (the test
// binary re-executes itself under `unshare --net`), so that the squatter
// can take the real genl.DefaultPort without disturbing anything else on
// the machine: netlink port ids are per network namespace.

// requirePrivDrop: root and setpriv (and the tools named), or skip (fail
// under CI=true).
func requirePrivDrop(t *testing.T, tools ...string) {
	t.Helper()
	reexec.RequireSetpriv(t, tools...)
}

// inNetns runs the calling test in a fresh network namespace and reports
// whether the caller is already there (reexec.InNetns).
func inNetns(t *testing.T) bool {
	t.Helper()
	return reexec.InNetns(t, func(t *testing.T) { requirePrivDrop(t, "unshare") })
}

// startSquatter runs TestHelperSquatter as uid 65534 holding port.
func startSquatter(t *testing.T, port uint32, mode string) *genltest.Squatter {
	t.Helper()
	return genltest.StartSquatter(t, reexec.Nobody, port, mode, reexec.Binary(t),
		"-test.run=^TestHelperSquatter$", "-test.v", "-test.count=1")
}

// TestHelperSquatter is the squatter process (genltest); it does nothing
// unless startSquatter started it.
func TestHelperSquatter(t *testing.T) {
	if os.Getenv(genltest.ModeEnv) == "" {
		return // run only by startSquatter (TestMain keeps it out otherwise)
	}
	if err := genltest.RunSquatterFromEnv(); err != nil {
		t.Fatal(err)
	}
}

// squatClientEnv runs TestHelperSquatClient: the client side as another
// user, with the port (and run file) to use.
const (
	squatClientEnv  = "GOMHI_GENL_SQUAT_CLIENT" // what to check, see TestHelperSquatClient
	squatRunFileEnv = "GOMHI_GENL_SQUAT_RUNFILE"
)

// runAs runs TestHelperSquatClient as uid in mode, with env, and returns
// its output; it fails the test unless the helper printed HELPER-OK.
func runAs(t *testing.T, uid int, mode string, env ...string) string {
	t.Helper()
	out, err := reexec.RunTestAs(t, reexec.User{UID: uid}, "TestHelperSquatClient", append([]string{squatClientEnv + "=" + mode}, env...)...)
	t.Logf("uid %d, %s:\n%s", uid, mode, out)
	if err != nil || !strings.Contains(out, "HELPER-OK") {
		t.Fatalf("helper as uid %d (%s): %v", uid, mode, err)
	}
	return out
}

// newRunDir is a directory for a run file that passes the trust test:
// root's, 0755, below the sticky /tmp.
func newRunDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "genl-run-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, "gomhi")
}

// serve runs srv until the test ends.
func serve(t *testing.T, srv *genl.Server) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
		if err := srv.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
}

// TestSquatterListening: uid 65534 binds DefaultPort before the server
// starts and records what it receives. The server (with a run file) starts
// anyway on a kernel-assigned port and names the squatter in its log;
// root's client finds it through the run file and changes the MRU; a
// client sent to DefaultPort refuses it, naming the squatter, without
// sending anything; without a run file the server fails naming the
// squatter; a non-root client cannot change the MRU. The squatter
// receives nothing at all.
func TestSquatterListening(t *testing.T) {
	if !inNetns(t) {
		return
	}
	sq := startSquatter(t, genl.DefaultPort, "listen")
	tr, n := newTree(t, false)

	// Without a run file there is nowhere to advertise another port: fail
	// fast, naming the squatter.
	_, err := genl.NewServer(tr, genl.ServerOptions{})
	want := fmt.Sprintf("pid %d (uid 65534", sq.PID)
	if !errors.Is(err, genl.ErrPortInUse) || !strings.Contains(err.Error(), want) {
		t.Fatalf("server without a run file: %v; want ErrPortInUse naming %s", err, want)
	}
	t.Logf("without a run file: %v", err)

	runFile := filepath.Join(newRunDir(t), "genl.json")
	var logs logbuf.Buffer
	srv, err := genl.NewServer(tr, genl.ServerOptions{RunFile: runFile,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatalf("server with the port squatted: %v", err)
	}
	serve(t, srv)
	holders, squatted := srv.Squatted()
	if !squatted || srv.Port() == genl.DefaultPort || len(holders) != 1 || holders[0].PID != sq.PID || holders[0].UID != 65534 {
		t.Fatalf("server: port %#x, squatted %v by %v; want a kernel-assigned port, squatted by pid %d uid 65534", srv.Port(), squatted, holders, sq.PID)
	}
	if l := logs.String(); !strings.Contains(l, "level=WARN") || !strings.Contains(l, want) || !strings.Contains(l, runFile) {
		t.Errorf("the server's log does not name the squatter and the run file:\n%s", l)
	}
	t.Logf("server log: %s", logs.String())
	checkRunFile(t, runFile, srv.Port())

	// Root's client: through the run file, to the real server.
	c, err := genl.Dial(genl.ClientOptions{RunFile: runFile})
	if err != nil {
		t.Fatalf("client with the run file: %v", err)
	}
	defer c.Close()
	if c.Port() != srv.Port() || c.RunFile() != runFile {
		t.Errorf("client port %#x from %q, want %#x from %s", c.Port(), c.RunFile(), srv.Port(), runFile)
	}
	if d, err := c.SetDevice("mhi0", genl.SetRequest{MRU: u32(16384)}); err != nil || d.MRU != 16384 || n.MRU() != 16384 {
		t.Fatalf("SetDevice through the run file: %+v, %v; device MRU %d", d, err, n.MRU())
	}

	// Root's client sent to DefaultPort (explicitly, or because there is
	// no run file): refused before sending, naming the squatter.
	for _, opts := range []genl.ClientOptions{
		{Port: genl.DefaultPort},
		{RunFile: filepath.Join(filepath.Dir(runFile), "missing.json")},
	} {
		_, err := genl.Dial(opts)
		var ge *genl.Error
		if !errors.Is(err, genl.ErrUntrustedServer) || !errors.As(err, &ge) || ge.Peer == nil ||
			ge.Peer.PID != sq.PID || ge.Peer.UID != 65534 || !strings.Contains(err.Error(), want) ||
			!strings.Contains(err.Error(), "nothing was sent") {
			t.Fatalf("Dial(%+v) with DefaultPort squatted: %v; want ErrUntrustedServer naming %s", opts, err, want)
		}
		t.Logf("Dial(%+v): %v", opts, err)
	}
	if _, err := genl.DialGenetlink(genl.ClientOptions{Port: genl.DefaultPort}); !errors.Is(err, genl.ErrUntrustedServer) {
		t.Errorf("DialGenetlink to the squatted port: %v, want ErrUntrustedServer", err)
	}

	// A second server with the same run file: refused, naming the first.
	if _, err := genl.NewServer(tr, genl.ServerOptions{RunFile: runFile}); !errors.Is(err, genl.ErrPortInUse) ||
		!strings.Contains(err.Error(), fmt.Sprintf("pid %d", os.Getpid())) {
		t.Errorf("second server: %v, want ErrPortInUse naming pid %d", err, os.Getpid())
	}

	// uid 65534 and uid 65533, through the run file: may read, not change.
	for _, uid := range []int{65534, 65533} {
		runAs(t, uid, "nonroot-set", squatRunFileEnv+"="+runFile)
	}
	if n.MRU() != 16384 {
		t.Errorf("MRU %d after non-root SETs, want 16384", n.MRU())
	}

	time.Sleep(50 * time.Millisecond) // anything in flight reaches the squatter
	if got := sq.Received(); len(got) != 0 {
		t.Errorf("the squatter received %d datagrams, want none:\n%s", len(got), strings.Join(got, "\n"))
	}
}

// checkRunFile checks the run file's mode, owner and content.
func checkRunFile(t *testing.T, path string, port uint32) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if fi.Mode().Perm() != 0o644 || st.Uid != 0 {
		t.Errorf("run file %s: mode %v uid %d, want 0644 root", path, fi.Mode(), st.Uid)
	}
	if di, err := os.Stat(filepath.Dir(path)); err != nil || di.Mode().Perm() != 0o755 {
		t.Errorf("run directory: %v %v, want 0755", di.Mode(), err)
	}
	r, err := genl.ReadRunFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if r.PID != os.Getpid() || r.UID != 0 || r.Port != port || !r.Live() || r.StartTime == 0 || r.NetNS == 0 {
		t.Errorf("run file: %+v; want pid %d uid 0 port %#x, live", r, os.Getpid(), port)
	}
	b, _ := os.ReadFile(path)
	t.Logf("run file %s:\n%s", path, b)
}

// TestSquatterAnswering: the squatter answers the family look-up (and any
// request) with forged replies. A client that cannot see who holds the
// port (uid 65533: another user's fds are hidden from it) sends the look-up
// and refuses the forged reply by its credentials, before sending any
// mhi request; root's client refuses the port without sending anything.
func TestSquatterAnswering(t *testing.T) {
	if !inNetns(t) {
		return
	}
	sq := startSquatter(t, genl.DefaultPort, "answer")
	tr, n := newTree(t, false)
	runFile := filepath.Join(newRunDir(t), "genl.json")
	srv, err := genl.NewServer(tr, genl.ServerOptions{RunFile: runFile})
	if err != nil {
		t.Fatal(err)
	}
	serve(t, srv)

	if _, err := genl.Dial(genl.ClientOptions{Port: genl.DefaultPort}); !errors.Is(err, genl.ErrUntrustedServer) {
		t.Fatalf("root's Dial to the squatted port: %v, want ErrUntrustedServer", err)
	}
	if got := sq.Received(); len(got) != 0 {
		t.Fatalf("root's client sent the squatter %d datagrams:\n%s", len(got), strings.Join(got, "\n"))
	}
	// Without the holder check, root's client sends the look-up and
	// refuses the forged reply by its credentials.
	_, err = genl.DialUnverified(genl.DefaultPort, 2*time.Second)
	var ge *genl.Error
	if !errors.Is(err, genl.ErrUntrustedServer) || !errors.As(err, &ge) || ge.Peer == nil || ge.Peer.PID != sq.PID ||
		ge.Peer.UID != 65534 || !strings.Contains(err.Error(), "refusing the reply") {
		t.Fatalf("root's unverified Dial: %v; want ErrUntrustedServer refusing the reply of pid %d", err, sq.PID)
	}
	t.Logf("root, holder check skipped: %v", err)

	out := runAs(t, 65533, "spoofed", genltest.PortEnv+"="+strconv.FormatUint(uint64(genl.DefaultPort), 10),
		"GOMHI_GENL_SQUAT_PID="+strconv.Itoa(sq.PID))
	if !strings.Contains(out, "refusing the reply") {
		t.Errorf("the uid 65533 client did not report the refused reply")
	}
	// Through the run file, the same client reaches the real server.
	runAs(t, 65533, "nonroot-set", squatRunFileEnv+"="+runFile)

	time.Sleep(50 * time.Millisecond)
	// Two look-ups (root's unverified client, uid 65533's), nothing else.
	got := sq.Received()
	if len(got) != 2 {
		t.Errorf("the squatter received %d datagrams, want the 2 family look-ups:\n%s", len(got), strings.Join(got, "\n"))
	}
	for _, r := range got {
		if !strings.Contains(r, "type=0x10 ") || !strings.Contains(r, "cmd=3") || strings.Contains(r, "type=0x4d") {
			t.Errorf("the squatter received more than a family look-up (type 0x10, cmd 3): %s", r)
		}
	}
	if n.MRU() == genltest.ForgedMRU {
		t.Error("the forged MRU reached the device")
	}
}

// TestHelperSquatClient is the client side of the squatter tests, run as
// another user: "nonroot-set" reads and fails to change the MRU through
// the run file; "spoofed" dials the squatted port, which it cannot see
// the holder of, and must refuse the forged reply.
func TestHelperSquatClient(t *testing.T) {
	mode := os.Getenv(squatClientEnv)
	if mode == "" {
		return // run only by the squatter tests (TestMain keeps it out otherwise)
	}
	if os.Getuid() == 0 {
		t.Fatal("helper runs as root; setpriv did not drop privileges")
	}
	switch mode {
	case "nonroot-set":
		c, err := genl.Dial(genl.ClientOptions{RunFile: os.Getenv(squatRunFileEnv)})
		if err != nil {
			t.Fatalf("Dial through the run file as uid %d: %v", os.Getuid(), err)
		}
		defer c.Close()
		if c.RunFile() == "" {
			t.Fatal("the run file was not used")
		}
		if d, err := c.GetDevice("mhi0"); err != nil || d.Name != "mhi0" {
			t.Fatalf("GET as uid %d: %+v, %v", os.Getuid(), d, err)
		}
		_, err = c.SetDevice("mhi0", genl.SetRequest{MRU: u32(4096)})
		if !errors.Is(err, genl.ErrPermission) {
			t.Fatalf("SET as uid %d: %v, want ErrPermission", os.Getuid(), err)
		}
		fmt.Printf("SET as uid %d through %s refused: %v\n", os.Getuid(), c.RunFile(), err)
	case "spoofed":
		port, _ := strconv.ParseUint(os.Getenv(genltest.PortEnv), 0, 32)
		sqPid, _ := strconv.Atoi(os.Getenv("GOMHI_GENL_SQUAT_PID"))
		c, err := genl.Dial(genl.ClientOptions{Port: uint32(port), Timeout: 2 * time.Second})
		if err == nil {
			d, serr := c.SetDevice("mhi0", genl.SetRequest{MRU: u32(4096)})
			c.Close()
			t.Fatalf("Dial accepted the squatter; SetDevice: %+v, %v", d, serr)
		}
		var ge *genl.Error
		if !errors.Is(err, genl.ErrUntrustedServer) || !errors.As(err, &ge) || ge.Peer == nil ||
			ge.Peer.PID != sqPid || ge.Peer.UID != 65534 {
			t.Fatalf("Dial as uid %d: %v; want ErrUntrustedServer naming pid %d uid 65534", os.Getuid(), err, sqPid)
		}
		fmt.Printf("Dial as uid %d: %v\n", os.Getuid(), err)
	default:
		t.Fatalf("unknown mode %q", mode)
	}
	fmt.Println("HELPER-OK")
}
