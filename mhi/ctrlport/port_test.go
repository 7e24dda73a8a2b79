package ctrlport_test

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhi/ctrlport"
	"github.com/gomhi/gomhi/mhi/ep/modem"
	"github.com/gomhi/gomhi/mhi/proto/mbim"
	"golang.org/x/sys/unix"
)

// ptyClient opens the port's link as a tool would.
func ptyClient(t *testing.T, path string) *os.File {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// readMessage reads one MBIM message from a client's stream.
func readMessage(t *testing.T, f *os.File) mbim.Message {
	t.Helper()
	_ = f.SetReadDeadline(time.Now().Add(5 * time.Second))
	hdr := make([]byte, 12)
	if _, err := io.ReadFull(f, hdr); err != nil {
		t.Fatalf("reading a header: %v", err)
	}
	_, n, _, _ := mbim.PeekHeader(hdr)
	if n < 12 || n > 1<<20 {
		t.Fatalf("header with length %d: % x", n, hdr)
	}
	msg := append(hdr, make([]byte, n-12)...)
	if _, err := io.ReadFull(f, msg[12:]); err != nil {
		t.Fatalf("reading a body: %v", err)
	}
	m, err := mbim.ParseMessage(msg)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func openPort(t *testing.T, mm *mockModem, opts ctrlport.Options) *ctrlport.Port {
	t.Helper()
	if opts.Link == "" {
		opts.Link = filepath.Join(t.TempDir(), "wwan0mbim0")
	}
	p, err := ctrlport.Open(mm.mock.Controller, "MBIM", opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func TestPortPTY(t *testing.T) {
	mm := startMock(t, modem.Config{}, modem.MBIMOptions{})
	p := openPort(t, mm, ctrlport.Options{StaleTimeout: 200 * time.Millisecond, PartialTimeout: 100 * time.Millisecond})
	if target, err := os.Readlink(p.Link()); err != nil || target != p.Path() {
		t.Fatalf("link %s → %q %v, want %s", p.Link(), target, err, p.Path())
	}

	// A message written in two pieces, after some garbage.
	c := ptyClient(t, p.Link())
	open := mbim.AppendOpen(nil, 1, 4096)
	if _, err := c.Write(append([]byte{0xde, 0xad, 0xbe, 0xef, 0x55}, open[:7]...)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	if _, err := c.Write(open[7:]); err != nil {
		t.Fatal(err)
	}
	if m := readMessage(t, c); m.Type != mbim.TypeOpenDone || m.TID != 1 {
		t.Fatalf("%+v", m)
	}
	// Two messages in one write.
	two := mbim.AppendCommand(nil, 2, mbim.ServiceBasicConnect, mbim.CIDDeviceCaps, mbim.CommandQuery, nil)
	two = mbim.AppendCommand(two, 3, mbim.ServiceBasicConnect, mbim.CIDRadioState, mbim.CommandQuery, nil)
	c.Write(two)
	if m := readMessage(t, c); m.TID != 2 || m.Status != mbim.StatusSuccess {
		t.Fatalf("%+v", m)
	}
	if m := readMessage(t, c); m.TID != 3 || m.CID != mbim.CIDRadioState {
		t.Fatalf("%+v", m)
	}
	// The client closes; its next request goes unread: it vanished
	// mid-transaction.
	c.Close()
	c = ptyClient(t, p.Link())
	c.Write(mbim.AppendCommand(nil, 4, mbim.ServiceBasicConnect, mbim.CIDDeviceCaps, mbim.CommandQuery, nil))
	waitFor(t, "the reply", func() bool { return p.Stats().DLMessages == 4 })
	c.Close()
	// Half a message, then the client dies.
	c = ptyClient(t, p.Link())
	c.Write(open[:10])
	c.Close()
	waitFor(t, "the unread reply to be discarded", func() bool { return p.Stats().DLStaleFlushes == 1 })
	time.Sleep(150 * time.Millisecond) // past PartialTimeout

	// The next client sees only its own answers.
	c = ptyClient(t, p.Link())
	defer c.Close()
	c.Write(mbim.AppendCommand(nil, 5, mbim.ServiceBasicConnect, mbim.CIDSubscriberReadyStatus, mbim.CommandQuery, nil))
	if m := readMessage(t, c); m.TID != 5 || m.CID != mbim.CIDSubscriberReadyStatus || m.Status != mbim.StatusSuccess {
		t.Fatalf("%+v\n%+v\n%+v", m, p.Stats(), mm.mbim.Stats())
	}
	// The port counts a message after its write returns, which may be
	// after the client has read it.
	waitFor(t, "the last downlink write to be counted", func() bool { return p.Stats().DLMessages == 5 })
	st := p.Stats()
	if st.ULGarbageRuns != 1 || st.ULGarbage != 5 || st.ULPartialDropped != 1 || st.ULMessages != 5 || st.DLMessages != 5 {
		t.Fatalf("stats %+v", st)
	}
	link := p.Link()
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(link); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("link left behind: %v", err)
	}
}

// A PTY nobody reads: downlink messages are dropped after WriteTimeout,
// counted, and never block the channel; the port keeps working.
func TestPortNoReader(t *testing.T) {
	mm := startMock(t, modem.Config{}, modem.MBIMOptions{})
	p := openPort(t, mm, ctrlport.Options{WriteTimeout: 100 * time.Millisecond, StaleTimeout: time.Hour})
	c := ptyClient(t, p.Link())
	defer c.Close()
	c.Write(mbim.AppendOpen(nil, 1, 4096))
	// Long replies (fragments of 4 KiB) until the PTY is full.
	req := mbim.AppendCommand(nil, 2, mbim.ServiceBasicConnect, mbim.CIDDeviceServices, mbim.CommandQuery, nil)
	for range 600 {
		c.Write(req)
	}
	waitFor(t, "a write timeout", func() bool { return p.Stats().DLWriteTimeouts > 0 })
	waitFor(t, "every reply", func() bool {
		s := p.Stats()
		return s.DLMessages+s.DLWriteTimeouts+s.DLQueueFull >= 601 && s.Pair.DLMessages == 601
	})
	// Drain and talk again.
	_ = unix.IoctlSetInt(int(c.Fd()), unix.TCFLSH, unix.TCIFLUSH)
	c.Write(mbim.AppendCommand(nil, 3, mbim.ServiceBasicConnect, mbim.CIDRadioState, mbim.CommandQuery, nil))
	for {
		m := readMessage(t, c)
		if m.TID == 3 {
			break
		}
	}
	// Every downlink message is written or counted as dropped (the last
	// count may trail the client's read by a moment).
	waitFor(t, "conservation", func() bool {
		st := p.Stats()
		return st.Pair.DLMessages == st.DLMessages+st.DLWriteTimeouts+st.DLQueueFull
	})
	st := p.Stats()
	if st.Pair.DLMessages != st.DLMessages+st.DLWriteTimeouts+st.DLQueueFull {
		t.Fatalf("conservation: pair delivered %d, port wrote %d + timeouts %d + queue full %d", st.Pair.DLMessages, st.DLMessages, st.DLWriteTimeouts, st.DLQueueFull)
	}
}

func TestPortLinkErrors(t *testing.T) {
	mm := startMock(t, modem.Config{}, modem.MBIMOptions{})
	dir := t.TempDir()
	stale := filepath.Join(dir, "stale")
	os.Symlink("/dev/pts/999999", stale)
	p, err := ctrlport.Open(mm.mock.Controller, "MBIM", ctrlport.Options{Link: stale})
	if err != nil {
		t.Fatalf("replacing a stale link: %v", err)
	}
	p.Close()
	file := filepath.Join(dir, "file")
	os.WriteFile(file, nil, 0o644)
	if _, err := ctrlport.Open(mm.mock.Controller, "MBIM", ctrlport.Options{Link: file}); err == nil {
		t.Fatal("a regular file was replaced")
	}
	if _, err := ctrlport.Open(mm.mock.Controller, "IP_HW0_MBIM", ctrlport.Options{}); err == nil {
		t.Fatal("a data pair opened as a control port without a framer")
	}
}
