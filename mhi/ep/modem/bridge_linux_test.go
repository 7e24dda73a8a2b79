package modem_test

import (
	"errors"
	"io"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gomhi/gomhi/mhi"
	"github.com/gomhi/gomhi/mhi/ep"
	"github.com/gomhi/gomhi/mhi/proto/qmi"
	"github.com/gomhi/gomhi/mhi/wire"
	"github.com/gomhi/gomhi/pcigeneric/mock"
)

// This file is a test-only stand-in for the host's control port (the
// ctrlport package of the control-channels work): it joins a control
// channel pair of a host controller to a raw pseudo-terminal, so that
// Debian's qmicli, or a terminal, talks to the mock modem through the real
// MHI path (host stack, rings, events, the mock's channel code) exactly as
// through Linux's /dev/wwan0qmi0 or /dev/wwan0at0.

// openPTY returns a raw pseudo-terminal: the master and the slave's path.
// The test keeps a slave descriptor open so that the terminal keeps its
// raw settings and the master never sees a hang-up between clients.
func openPTY(t *testing.T) (master *os.File, slavePath string) {
	t.Helper()
	mfd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("open /dev/ptmx: %v", err)
	}
	if err := unix.IoctlSetPointerInt(mfd, unix.TIOCSPTLCK, 0); err != nil {
		t.Fatalf("unlockpt: %v", err)
	}
	n, err := unix.IoctlGetInt(mfd, unix.TIOCGPTN)
	if err != nil {
		t.Fatalf("ptsname: %v", err)
	}
	slavePath = "/dev/pts/" + strconv.Itoa(n)
	sfd, err := unix.Open(slavePath, unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("open %s: %v", slavePath, err)
	}
	tio, err := unix.IoctlGetTermios(sfd, unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	// cfmakeraw
	tio.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON
	tio.Oflag &^= unix.OPOST
	tio.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
	tio.Cflag &^= unix.CSIZE | unix.PARENB
	tio.Cflag |= unix.CS8
	tio.Cc[unix.VMIN], tio.Cc[unix.VTIME] = 1, 0
	if err := unix.IoctlSetTermios(sfd, unix.TCSETS, tio); err != nil {
		t.Fatal(err)
	}
	// Non-blocking, so that the runtime poller serves it and Close
	// interrupts a pending Read.
	if err := unix.SetNonblock(mfd, true); err != nil {
		t.Fatal(err)
	}
	master = os.NewFile(uintptr(mfd), "ptmx")
	slave := os.NewFile(uintptr(sfd), slavePath)
	t.Cleanup(func() {
		_ = master.Close()
		_ = slave.Close()
	})
	return master, slavePath
}

// framer splits the byte stream from the terminal into uplink transfers:
// it returns the length of the first complete unit of buf, 0 when more
// bytes are needed, or -1 to discard buf (garbage).
type framer func(buf []byte) int

// qmuxFramer cuts QMUX frames by their I/F type and length.
func qmuxFramer(buf []byte) int {
	n, err := qmi.FrameLen(buf)
	switch {
	case errors.Is(err, qmi.ErrShort):
		return 0
	case err != nil:
		return -1
	case n > len(buf):
		return 0
	}
	return n
}

// rawFramer passes whatever the terminal wrote (AT).
func rawFramer(buf []byte) int { return len(buf) }

// bridge joins a host channel pair to a PTY master.
type bridge struct {
	t       *testing.T
	master  *os.File
	ul, dl  *mhi.Channel
	mem     mhi.Transport
	split   framer
	corrupt func([]byte) // test hook: alters each downlink transfer

	mu      sync.Mutex
	ulFree  []mhi.DMABuffer
	ulBusy  map[uint64]mhi.DMABuffer
	dlBufs  []mhi.DMABuffer
	cur     []byte
	cond    *sync.Cond
	closed  bool
	ulCount int
	dlCount int
}

const bridgeBufSize = 4096

// newBridge starts the pair's channels on ctrl (powered up) and serves the
// PTY until the test ends.
func newBridge(t *testing.T, ctrl *mhi.Controller, pair string, split framer, corrupt func([]byte)) (slavePath string, b *bridge) {
	t.Helper()
	master, path := openPTY(t)
	ul, dl, err := ctrl.ChannelPair(pair)
	if err != nil {
		t.Fatal(err)
	}
	b = &bridge{t: t, master: master, ul: ul, dl: dl, mem: ctrl.Transport(), split: split, corrupt: corrupt,
		ulBusy: map[uint64]mhi.DMABuffer{}}
	b.cond = sync.NewCond(&b.mu)
	for range ul.Config().Elements - 1 {
		buf, err := b.mem.Alloc(bridgeBufSize, 64)
		if err != nil {
			t.Fatal(err)
		}
		b.ulFree = append(b.ulFree, buf)
	}
	for range dl.Config().Elements - 1 {
		buf, err := b.mem.Alloc(bridgeBufSize, 64)
		if err != nil {
			t.Fatal(err)
		}
		b.dlBufs = append(b.dlBufs, buf)
	}
	if err := ul.Start(b.onUL); err != nil {
		t.Fatal(err)
	}
	if err := dl.Start(b.onDL); err != nil {
		t.Fatal(err)
	}
	var xs []mhi.Transfer
	for i, buf := range b.dlBufs {
		xs = append(xs, mhi.Transfer{IOVA: buf.IOVA, Len: len(buf.Bytes), Flags: mhi.FlagEOT, Cookie: uint64(i)})
	}
	if err := dl.Queue(xs); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go b.readLoop(done)
	t.Cleanup(func() {
		b.mu.Lock()
		b.closed = true
		b.cond.Broadcast()
		b.mu.Unlock()
		_ = master.Close()
		<-done
		_ = ul.Reset()
		_ = dl.Reset()
	})
	return path, b
}

func (b *bridge) onUL(c mhi.Completion) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if buf, ok := b.ulBusy[c.IOVA]; ok {
		delete(b.ulBusy, c.IOVA)
		b.ulFree = append(b.ulFree, buf)
		b.cond.Broadcast()
	}
}

func (b *bridge) onDL(c mhi.Completion) {
	if c.Err != nil {
		return
	}
	buf := b.dlBufs[c.Cookie]
	b.cur = append(b.cur, buf.Bytes[:c.Len]...)
	if c.End && c.Code != wire.CCOverflow {
		out := b.cur
		b.cur = nil
		if b.corrupt != nil {
			b.corrupt(out)
		}
		b.dlCount++
		_, _ = b.master.Write(out)
	}
	_ = b.dl.Queue([]mhi.Transfer{{IOVA: buf.IOVA, Len: len(buf.Bytes), Flags: mhi.FlagEOT, Cookie: c.Cookie}})
}

// readLoop reads what clients write to the terminal and sends it uplink.
func (b *bridge) readLoop(done chan struct{}) {
	defer close(done)
	var pending []byte
	rbuf := make([]byte, 8192)
	for {
		n, err := b.master.Read(rbuf)
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, os.ErrClosed) {
				return
			}
			if errors.Is(err, unix.EIO) { // no slave open right now
				time.Sleep(5 * time.Millisecond)
				b.mu.Lock()
				closed := b.closed
				b.mu.Unlock()
				if closed {
					return
				}
				continue
			}
			return
		}
		pending = append(pending, rbuf[:n]...)
		for len(pending) > 0 {
			k := b.split(pending)
			if k == 0 {
				break
			}
			if k < 0 {
				b.t.Logf("bridge: discarding %d bytes of garbage", len(pending))
				pending = pending[:0]
				break
			}
			if !b.send(pending[:k]) {
				return
			}
			pending = pending[k:]
		}
	}
}

// send queues one uplink transfer.
func (b *bridge) send(p []byte) bool {
	for len(p) > 0 {
		chunk := p[:min(len(p), bridgeBufSize)]
		b.mu.Lock()
		for len(b.ulFree) == 0 && !b.closed {
			b.cond.Wait()
		}
		if b.closed {
			b.mu.Unlock()
			return false
		}
		buf := b.ulFree[len(b.ulFree)-1]
		b.ulFree = b.ulFree[:len(b.ulFree)-1]
		b.ulBusy[buf.IOVA] = buf
		b.ulCount++
		b.mu.Unlock()
		copy(buf.Bytes, chunk)
		if err := b.ul.Queue([]mhi.Transfer{{IOVA: buf.IOVA, Len: len(chunk), Flags: mhi.FlagEOT}}); err != nil {
			b.t.Logf("bridge: uplink queue: %v", err)
			return false
		}
		p = p[len(chunk):]
	}
	return true
}

// mockWith starts an embedded mock of model with functions attached to
// pairs and powers the host up.
func mockWith(t *testing.T, model string, fns map[string]ep.Function) *mock.Mock {
	t.Helper()
	m, err := mock.Open(mock.Options{Model: model, Device: func(c *ep.Config) {
		if c.Functions == nil {
			c.Functions = map[string]ep.Function{}
		}
		for k, v := range fns {
			c.Functions[k] = v
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	if err := m.Controller.PowerUp(); err != nil {
		t.Fatal(err)
	}
	return m
}
