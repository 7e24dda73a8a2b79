package main

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"
)

// readTimeout bounds the wait for each downlink transfer.
const readTimeout = 5 * time.Second

// tally counts what a control probe did to one kind of port, for the
// "CTRL" line the test compares with the modem's counters.
type tally struct {
	kind string
	// opens counts open(2) calls; sessions those that found the node
	// closed (mhi_wwan_ctrl starts the channels only then, and resets
	// them when the last descriptor closes).
	opens, sessions int
	// open is the number of descriptors open now.
	open           int
	writes, reads  int
	wbytes, rbytes int
	// rejected counts writes the kernel refused (no transfer queued).
	rejected int
}

// print writes the CTRL line.
func (t *tally) print() {
	fmt.Printf("CTRL %s opens=%d sessions=%d writes=%d reads=%d wbytes=%d rbytes=%d rejected=%d\n",
		t.kind, t.opens, t.sessions, t.writes, t.reads, t.wbytes, t.rbytes, t.rejected)
}

// node is one open descriptor of a wwan port. Every write is one write(2)
// (mhi_wwan_ctrl queues it as one uplink transfer) and every read one
// read(2) (the driver hands one downlink transfer per read when the
// buffer is large enough), so the counts mean what they say.
type node struct {
	path string
	f    *os.File
	t    *tally
	buf  []byte
}

// openNode opens path for reading and writing. Go registers the
// descriptor with its poller (the wwan port supports poll), so reads take
// deadlines.
func openNode(path string, t *tally) (*node, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	t.opens++
	if t.open == 0 {
		t.sessions++
	}
	t.open++
	return &node{path: path, f: f, t: t, buf: make([]byte, 64<<10)}, nil
}

// close closes the descriptor.
func (n *node) close() error {
	n.t.open--
	return n.f.Close()
}

// write sends b with a single write(2).
func (n *node) write(b []byte) error {
	rc, err := n.f.SyscallConn()
	if err != nil {
		return err
	}
	if err := n.f.SetWriteDeadline(time.Now().Add(readTimeout)); err != nil {
		return fmt.Errorf("%s: no deadline (not pollable?): %w", n.path, err)
	}
	var wn int
	var werr error
	if err := rc.Write(func(fd uintptr) bool {
		wn, werr = syscall.Write(int(fd), b)
		return werr != syscall.EAGAIN
	}); err != nil {
		return fmt.Errorf("write %s: %w", n.path, err)
	}
	if werr != nil {
		n.t.rejected++
		return fmt.Errorf("write %s (%d bytes): %w", n.path, len(b), werr)
	}
	n.t.writes++
	n.t.wbytes += wn
	if wn != len(b) {
		return fmt.Errorf("write %s: %d of %d bytes written", n.path, wn, len(b))
	}
	return nil
}

// errTimeout is a read that found nothing within readTimeout.
var errTimeout = errors.New("no answer")

// read returns the bytes of one read(2) (valid until the next read).
func (n *node) read() ([]byte, error) {
	rc, err := n.f.SyscallConn()
	if err != nil {
		return nil, err
	}
	if err := n.f.SetReadDeadline(time.Now().Add(readTimeout)); err != nil {
		return nil, fmt.Errorf("%s: no deadline (not pollable?): %w", n.path, err)
	}
	var rn int
	var rerr error
	if err := rc.Read(func(fd uintptr) bool {
		rn, rerr = syscall.Read(int(fd), n.buf)
		return rerr != syscall.EAGAIN
	}); err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return nil, fmt.Errorf("read %s: %w within %v", n.path, errTimeout, readTimeout)
		}
		return nil, fmt.Errorf("read %s: %w", n.path, err)
	}
	if rerr != nil {
		return nil, fmt.Errorf("read %s: %w", n.path, rerr)
	}
	if rn == 0 {
		return nil, fmt.Errorf("read %s: end of file", n.path)
	}
	n.t.reads++
	n.t.rbytes += rn
	return n.buf[:rn], nil
}

// mark prints a "MARK <step>" line for the test (which takes the modem's
// counters when it sees it) and gives the host a quiet moment to do so.
func mark(step string) {
	fmt.Printf("MARK %s\n", step)
	time.Sleep(200 * time.Millisecond)
}

// checkReopened opens dev count more times and runs session on each new
// descriptor, closing it after. The check "<p>reopen" fails naming the
// first session that failed (numbered from 2: the first is the one
// before), or passes with detail.
func checkReopened(dev string, t *tally, p string, count int, detail string, session func(n *node) error) bool {
	for i := range count {
		n, err := openNode(dev, t)
		if err == nil {
			err = session(n)
			n.close()
		}
		if err != nil {
			return check(p+"reopen", fmt.Errorf("session %d: %w", i+2, err), "")
		}
	}
	return check(p+"reopen", nil, detail)
}
