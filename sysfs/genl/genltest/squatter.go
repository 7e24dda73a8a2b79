// Package genltest runs a netlink port squatter for the tests of the
// control plane: a process of another user that binds a NETLINK_USERSOCK
// port before the server does, records every datagram it receives and,
// in "answer" mode, answers as if it were the server, with forged
// content. Tests run it by re-executing their test binary under setpriv
// (StartSquatter, through package reexec); the re-executed binary's helper test calls
// RunSquatterFromEnv.
package genltest

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/gomhi/gomhi/mhi/testenv/reexec"
	"github.com/gomhi/gomhi/sysfs/genl"
)

// Environment of the squatter process.
const (
	// ModeEnv is "listen" (record only) or "answer" (record and forge
	// replies).
	ModeEnv = "GOMHI_GENLTEST_SQUAT_MODE"
	// PortEnv is the port id to bind.
	PortEnv = "GOMHI_GENLTEST_SQUAT_PORT"
)

// Lines the squatter prints on its standard output.
const (
	// ReadyLine starts the line printed once the port is bound.
	ReadyLine = "SQUAT-READY"
	// RecvLine starts the line printed for each datagram received.
	RecvLine = "SQUAT-RECV"
)

// ForgedMRU is the MRU an answering squatter reports.
const ForgedMRU = 4242

// RunSquatterFromEnv runs the squatter if ModeEnv is set, until its
// standard input closes, and then exits the process; otherwise it returns
// at once. Call it from the helper test StartSquatter re-executes.
func RunSquatterFromEnv() error {
	mode := os.Getenv(ModeEnv)
	if mode == "" {
		return nil
	}
	port, err := strconv.ParseUint(os.Getenv(PortEnv), 0, 32)
	if err != nil {
		return fmt.Errorf("genltest: %s: %w", PortEnv, err)
	}
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	}()
	return squat(uint32(port), mode == "answer", os.Stdout)
}

// squat binds port and records (and with answer, answers) every datagram.
func squat(port uint32, answer bool, out io.Writer) error {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_USERSOCK)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Pid: port}); err != nil {
		return fmt.Errorf("genltest: bind port %#x as uid %d: %w", port, os.Getuid(), err)
	}
	fmt.Fprintf(out, "%s port=%#x uid=%d pid=%d\n", ReadyLine, port, os.Getuid(), os.Getpid())
	buf := make([]byte, 64<<10)
	for {
		n, from, err := unix.Recvfrom(fd, buf, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return fmt.Errorf("genltest: recvfrom: %w", err)
		}
		sa, _ := from.(*unix.SockaddrNetlink)
		var src uint32
		if sa != nil {
			src = sa.Pid
		}
		msgs, desc := parse(buf[:n])
		fmt.Fprintf(out, "%s from=%#x len=%d %s bytes=%x\n", RecvLine, src, n, desc, buf[:n])
		if !answer || sa == nil {
			continue
		}
		for _, m := range msgs {
			if reply := forgedReply(m); reply != nil {
				err := unix.Sendto(fd, reply, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Pid: src})
				fmt.Fprintf(out, "SQUAT-SENT to=%#x len=%d err=%v\n", src, len(reply), err)
			}
		}
	}
}

// parse splits a datagram into messages and describes each:
// "type=0x10 flags=0x1 seq=7 cmd=3".
func parse(b []byte) ([]netlink.Message, string) {
	var msgs []netlink.Message
	var desc []string
	for len(b) >= 16 {
		l := int(binary.NativeEndian.Uint32(b))
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
			desc = append(desc, fmt.Sprintf("type=%#x flags=%#x seq=%d cmd=%d",
				uint16(m.Header.Type), uint16(m.Header.Flags), m.Header.Sequence, cmd))
		}
		b = b[min((l+3)&^3, len(b)):]
	}
	return msgs, strings.Join(desc, ";")
}

// forgedReply is what a squatter impersonating the server answers: a
// NEWFAMILY for a GETFAMILY, and a device whose MRU is ForgedMRU for any
// request of the family.
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
		ae.Uint32(genl.AttrMRU, ForgedMRU)
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

// Squatter is a running squatter process.
type Squatter struct {
	// PID is its process id (setpriv execs the binary in place).
	PID int
	// Port is the port it holds.
	Port uint32

	cmd   *exec.Cmd
	stdin io.WriteCloser
	done  chan struct{}

	mu    sync.Mutex
	recvd []string
	out   bytes.Buffer
}

// StartSquatter runs `setpriv --reuid=uid --regid=uid --clear-groups bin
// args...` with ModeEnv=mode and PortEnv=port, waits until it holds the
// port, and stops it at the end of the test. bin must be executable by
// uid (see reexec.Binary) and args must select a helper test that calls
// RunSquatterFromEnv.
func StartSquatter(t testing.TB, uid int, port uint32, mode, bin string, args ...string) *Squatter {
	t.Helper()
	cmd := reexec.Command(reexec.User{UID: uid}, bin, args...)
	cmd.Env = append(cmd.Env, ModeEnv+"="+mode, PortEnv+"="+strconv.FormatUint(uint64(port), 10))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting the squatter: %v", err)
	}
	s := &Squatter{PID: cmd.Process.Pid, Port: port, cmd: cmd, stdin: stdin, done: make(chan struct{})}
	ready := make(chan string, 1)
	go func() {
		defer close(s.done)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			s.mu.Lock()
			s.out.WriteString(line + "\n")
			if strings.HasPrefix(line, RecvLine) {
				s.recvd = append(s.recvd, line)
			}
			s.mu.Unlock()
			if strings.HasPrefix(line, ReadyLine) {
				select {
				case ready <- line:
				default:
				}
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
		_ = cmd.Wait()
	}()
	t.Cleanup(s.Stop)
	select {
	case line := <-ready:
		t.Logf("squatter: %s", line)
	case <-s.done:
		t.Fatalf("the squatter exited before binding port %#x:\n%s", port, s.Output())
	case <-time.After(20 * time.Second):
		t.Fatalf("the squatter is not ready after 20 s:\n%s", s.Output())
	}
	return s
}

// Output returns everything the squatter printed.
func (s *Squatter) Output() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.out.String()
}

// Received returns the RecvLine lines so far, one per datagram.
func (s *Squatter) Received() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.recvd...)
}

// Stop ends the squatter (closing its standard input) and waits for it.
func (s *Squatter) Stop() {
	_ = s.stdin.Close()
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
}
