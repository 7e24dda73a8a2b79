package genl_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/gomhi/gomhi/sysfs/genl"
)

// The squatter tests run a process as uid 65534 (setpriv) that binds a
// NETLINK_USERSOCK port before the server does, and records every datagram
// it receives. They run in a network namespace of their own (the test
// binary re-executes itself under `unshare --net`), so that the squatter
// can take the real genl.DefaultPort without disturbing anything else on
// the machine: netlink port ids are per network namespace.

const (
	netnsEnv       = "GOMHI_GENL_IN_TEST_NETNS"
	squatModeEnv   = "GOMHI_GENL_SQUAT_MODE" // "listen" or "answer"
	squatPortEnv   = "GOMHI_GENL_SQUAT_PORT"
	squatReadyLine = "SQUAT-READY"
	squatRecvLine  = "SQUAT-RECV"
)

// requirePrivDrop makes sure the test can run processes as another user:
// root and setpriv. Outside CI a missing piece skips the test; under
// CI=true it fails, naming what is missing.
func requirePrivDrop(t *testing.T, tools ...string) {
	t.Helper()
	miss := func(format string, args ...any) {
		t.Helper()
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true: "+format, args...)
		}
		t.Skipf(format, args...)
	}
	if os.Geteuid() != 0 {
		miss("needs root, to run helper processes as uid 65534 with setpriv")
	}
	for _, tool := range append([]string{"setpriv"}, tools...) {
		if _, err := exec.LookPath(tool); err != nil {
			miss("needs %s (util-linux): %v", tool, err)
		}
	}
}

// inNetns runs the calling test in a fresh network namespace (the test
// binary re-executed under `unshare --net`) and reports whether the
// caller is already there, in which case it runs the body.
func inNetns(t *testing.T) bool {
	t.Helper()
	if os.Getenv(netnsEnv) == "1" {
		return true
	}
	requirePrivDrop(t, "unshare")
	cmd := exec.Command("unshare", "--net", os.Args[0], "-test.run", "^"+t.Name()+"$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), netnsEnv+"=1")
	out, err := cmd.CombinedOutput()
	t.Logf("in a new network namespace:\n%s", out)
	if err != nil {
		t.Fatalf("%v", err)
	}
	if !bytes.Contains(out, []byte("--- PASS: "+t.Name())) {
		t.Fatal("the test did not pass in the namespace")
	}
	return false
}

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// TestMain removes the copy of the test binary sharedTestBinary made.
func TestMain(m *testing.M) {
	code := m.Run()
	if binPath != "" {
		_ = os.RemoveAll(filepath.Dir(binPath))
	}
	os.Exit(code)
}

// sharedTestBinary copies the test binary where uid 65534 can run it (go
// test keeps it in a directory only root may enter), once per process;
// TestMain removes it.
func sharedTestBinary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "genl-squat-")
		if err != nil {
			binErr = err
			return
		}
		if err := os.Chmod(dir, 0o755); err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(dir, "genl.test")
		binErr = copyFile(os.Args[0], binPath)
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// squatter is a running squatter process.
type squatter struct {
	cmd  *exec.Cmd
	pid  int
	port uint32

	mu    sync.Mutex
	recvd []string // SQUAT-RECV lines
	out   bytes.Buffer
	done  chan struct{}
	stdin io.WriteCloser
}

// startSquatter runs TestHelperSquatter as uid 65534 binding port, in
// mode "listen" (records what it receives) or "answer" (also replies as if
// it were the server, with forged content).
func startSquatter(t *testing.T, port uint32, mode string) *squatter {
	t.Helper()
	bin := sharedTestBinary(t)
	cmd := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
		bin, "-test.run=^TestHelperSquatter$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), squatModeEnv+"="+mode, squatPortEnv+"="+strconv.FormatUint(uint64(port), 10))
	cmd.Dir = filepath.Dir(bin)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &squatter{cmd: cmd, pid: cmd.Process.Pid, port: port, done: make(chan struct{}), stdin: stdin}
	ready := make(chan string, 1)
	go func() {
		defer close(s.done)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			s.mu.Lock()
			s.out.WriteString(line + "\n")
			if strings.HasPrefix(line, squatRecvLine) {
				s.recvd = append(s.recvd, line)
			}
			s.mu.Unlock()
			if strings.HasPrefix(line, squatReadyLine) {
				select {
				case ready <- line:
				default:
				}
			}
		}
		_ = cmd.Wait()
	}()
	t.Cleanup(func() { s.stop(t) })
	select {
	case line := <-ready:
		t.Logf("squatter: %s", line)
	case <-s.done:
		t.Fatalf("squatter exited before binding port %#x:\n%s", port, s.output())
	case <-time.After(20 * time.Second):
		t.Fatalf("squatter not ready after 20 s:\n%s", s.output())
	}
	return s
}

func (s *squatter) output() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.out.String()
}

// received returns the datagrams the squatter has recorded so far.
func (s *squatter) received() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.recvd...)
}

// stop closes the squatter's stdin (it exits) and waits for it.
func (s *squatter) stop(t *testing.T) {
	_ = s.stdin.Close()
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
}

// TestHelperSquatter is the squatter's side: it binds the port as
// whatever user it runs as, prints SQUAT-READY, then one SQUAT-RECV line
// per datagram (sender port, its messages' types, flags and commands, and
// the bytes). In "answer" mode it answers a GETFAMILY for "mhi" with a
// forged NEWFAMILY and any mhi-family request with a forged device whose
// MRU is 4242. It exits when its stdin closes.
func TestHelperSquatter(t *testing.T) {
	mode := os.Getenv(squatModeEnv)
	if mode == "" {
		t.Skip("helper process for the squatter tests")
	}
	port, err := strconv.ParseUint(os.Getenv(squatPortEnv), 0, 32)
	if err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_USERSOCK)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Pid: uint32(port)}); err != nil {
		t.Fatalf("bind port %#x as uid %d: %v", port, os.Getuid(), err)
	}
	fmt.Printf("%s port=%#x uid=%d pid=%d\n", squatReadyLine, port, os.Getuid(), os.Getpid())
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		unix.Shutdown(fd, unix.SHUT_RDWR) // not supported on netlink; the exit below ends us
		os.Exit(0)
	}()
	buf := make([]byte, 64<<10)
	for {
		n, from, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			if err == unix.EINTR {
				continue
			}
			t.Fatalf("recvfrom: %v", err)
		}
		sa, _ := from.(*unix.SockaddrNetlink)
		var src uint32
		if sa != nil {
			src = sa.Pid
		}
		data := buf[:n]
		var desc []string
		var msgs []netlink.Message
		for b := data; len(b) >= 16; {
			l := int(uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24)
			if l < 16 || l > len(b) {
				break
			}
			var m netlink.Message
			if err := m.UnmarshalBinary(b[:l]); err == nil {
				msgs = append(msgs, m)
				cmd := -1
				if len(m.Data) > 0 {
					cmd = int(m.Data[0])
				}
				desc = append(desc, fmt.Sprintf("type=%#x flags=%#x seq=%d cmd=%d", uint16(m.Header.Type), uint16(m.Header.Flags), m.Header.Sequence, cmd))
			}
			b = b[(l+3)&^3:]
		}
		fmt.Printf("%s from=%#x len=%d %s bytes=%x\n", squatRecvLine, src, n, strings.Join(desc, ";"), data)
		if mode != "answer" || sa == nil {
			continue
		}
		for _, m := range msgs {
			if reply := forgedReply(m); reply != nil {
				if err := unix.Sendto(fd, reply, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Pid: src}); err != nil {
					fmt.Printf("SQUAT-SEND-ERR %v\n", err)
				} else {
					fmt.Printf("SQUAT-SENT to=%#x len=%d\n", src, len(reply))
				}
			}
		}
	}
}

// forgedReply is what a squatter impersonating the server answers.
func forgedReply(req netlink.Message) []byte {
	if len(req.Data) < 4 {
		return nil
	}
	ae := netlink.NewAttributeEncoder()
	cmd := req.Data[0]
	switch {
	case uint16(req.Header.Type) == unix.GENL_ID_CTRL && cmd == unix.CTRL_CMD_GETFAMILY:
		ae.Uint16(unix.CTRL_ATTR_FAMILY_ID, genl.FamilyID)
		ae.String(unix.CTRL_ATTR_FAMILY_NAME, genl.FamilyName)
		ae.Uint32(unix.CTRL_ATTR_VERSION, genl.FamilyVersion)
		cmd = unix.CTRL_CMD_NEWFAMILY
	case uint16(req.Header.Type) == genl.FamilyID:
		ae.String(genl.AttrDevName, "mhi0")
		ae.String(genl.AttrState, "M0")
		ae.Uint32(genl.AttrMRU, 4242)
		ae.Uint32(genl.AttrMTU, 1500)
	default:
		return nil
	}
	attrs, err := ae.Encode()
	if err != nil {
		return nil
	}
	m := netlink.Message{
		Header: netlink.Header{Type: req.Header.Type, Sequence: req.Header.Sequence, PID: req.Header.PID},
		Data:   append([]byte{cmd, 1, 0, 0}, attrs...),
	}
	m.Header.Length = uint32(16 + len(m.Data))
	b, err := m.MarshalBinary()
	if err != nil {
		return nil
	}
	return b
}

// TestSquatterReproduce: uid 65534 binds DefaultPort first. Root's server
// must start anyway and root's client must never send the squatter a
// thing.
func TestSquatterReproduce(t *testing.T) {
	if !inNetns(t) {
		return
	}
	sq := startSquatter(t, genl.DefaultPort, "answer")
	tr, n := newTree(t, false)
	srv, err := genl.NewServer(tr, genl.ServerOptions{})
	if err != nil {
		t.Errorf("server with the port squatted: %v", err)
	} else {
		defer srv.Close()
	}
	c, err := genl.Dial(genl.ClientOptions{Timeout: 500 * time.Millisecond})
	if err == nil {
		d, err := c.SetDevice("mhi0", genl.SetRequest{MRU: u32(16384)})
		t.Logf("client SetDevice: %+v, %v (real MRU %d)", d, err, n.MRU())
		c.Close()
	} else {
		t.Logf("client Dial: %v", err)
	}
	time.Sleep(100 * time.Millisecond)
	for _, r := range sq.received() {
		t.Errorf("the squatter received: %s", r)
	}
}
