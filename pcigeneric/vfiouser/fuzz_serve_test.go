package vfiouser

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gomhi/gomhi/mhi/testenv/fuzzcheck"
	"github.com/gomhi/gomhi/pcigeneric/vfiouser/internal/vutest"
	"github.com/gomhi/gomhi/pcigeneric/vfiouser/protocol"
)

// FuzzServe plays a hostile vfio-user client against the server's real
// session code (serveConn on one end of a socket pair). The input is the byte
// stream the client sends, the file descriptors it attaches to each
// message (plan[i] for the i-th message: bits 0-4 the count, 0-31, bits
// 5-7 the kind, see fuzzFD), and how it answers the DMA_READ/DMA_WRITE
// requests the server sends for memory mapped without fd (dma, see
// fuzzDMAAnswer). The stream is cut into messages by their headers, as the
// server cuts it; each message goes out in one write with its descriptors.
//
// After each input it checks: no panic; serveConn returns within
// serveBound of the client's end of stream; every well-framed command
// without NO_REPLY gets exactly one reply, in order, with its ID and
// command, and an error reply whenever the command does not decode;
// every server message is a reply or a well-formed DMA_READ/DMA_WRITE;
// the server closes early only after a broken header; the error-reply
// counter matches the error replies sent; and no descriptor, goroutine
// or memfd mapping outlives the session.
func FuzzServe(f *testing.F) {
	for _, s := range serveSeeds() {
		f.Add(s.stream, s.plan, s.dma)
	}
	dev, err := NewServerDevice(DeviceOptions{})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, stream, plan []byte, dma uint8) {
		runServeInput(t, dev, stream, plan, dma)
	})
}

// serveBound bounds one input: the server must be done this long after
// the client's end of stream (dmaTimeout, the longest wait of a session
// whose client is gone, must not apply then). It is far above what a
// healthy server needs (milliseconds), because it also bounds the
// harness's own writer: after 28 minutes of fuzzing on a machine at a load
// of 20, a 3 s bound once caught the writer still creating descriptors
// (not blocked on the server, which was waiting to read); a server that
// stops reading blocks for ever and is still caught.
const serveBound = 10 * time.Second

// fuzzMemfdName names the memfds the fuzzing client passes, to find their
// mappings in /proc/self/maps.
const fuzzMemfdName = "gomhi-fuzz-client"

// Kinds of descriptor the fuzzing client attaches.
const (
	fuzzFDMemfd         = iota // a 4 MiB memfd (DMA memory)
	fuzzFDSmallMemfd           // a 4 KiB memfd
	fuzzFDEventfd              // a non-blocking eventfd (an interrupt)
	fuzzFDBlockingEvent        // a blocking eventfd
	fuzzFDPipeWrite            // the write end of a pipe
	fuzzFDPipeRead             // the read end of a pipe
	fuzzFDSocket               // one end of a socket pair
	fuzzFDDevNull              // /dev/null
)

// fuzzFDs creates n descriptors of kind: the ones to send, and the other
// ends the client keeps until the session is over.
func fuzzFDs(kind, n int) (send, keep []int, err error) {
	for range n {
		var fd int
		switch kind {
		case fuzzFDMemfd, fuzzFDSmallMemfd:
			fd, err = unix.MemfdCreate(fuzzMemfdName, unix.MFD_CLOEXEC)
			if err == nil {
				size := int64(4 << 20)
				if kind == fuzzFDSmallMemfd {
					size = 4 << 10
				}
				if err = unix.Ftruncate(fd, size); err != nil {
					unix.Close(fd)
				}
			}
		case fuzzFDEventfd:
			fd, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
		case fuzzFDBlockingEvent:
			fd, err = unix.Eventfd(0, unix.EFD_CLOEXEC)
		case fuzzFDPipeWrite, fuzzFDPipeRead:
			var p [2]int
			if err = unix.Pipe2(p[:], unix.O_CLOEXEC); err == nil {
				i := 1
				if kind == fuzzFDPipeRead {
					i = 0
				}
				fd = p[i]
				keep = append(keep, p[1-i])
			}
		case fuzzFDSocket:
			var p [2]int
			if p, err = unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0); err == nil {
				fd = p[0]
				keep = append(keep, p[1])
			}
		default:
			fd, err = unix.Open("/dev/null", unix.O_RDWR|unix.O_CLOEXEC, 0)
		}
		if err != nil {
			protocol.CloseFDs(send)
			protocol.CloseFDs(keep)
			return nil, nil, err
		}
		send = append(send, fd)
	}
	return send, keep, nil
}

// How the fuzzing client answers the server's DMA requests.
const (
	fuzzDMACorrect  = iota // a proper reply (reads return zeros)
	fuzzDMAError           // an EFAULT error reply
	fuzzDMAShort           // a read reply one byte short (write: one byte of data)
	fuzzDMAWrongID         // a proper reply with another ID
	fuzzDMASilent          // no reply
	fuzzDMAWrongCmd        // a reply with the other DMA command
	fuzzDMAWithFD          // a proper reply carrying an eventfd
	fuzzDMAModes
)

// fuzzDMAAnswer builds the answer to a server DMA request m, or nil for
// none.
func fuzzDMAAnswer(mode int, m protocol.Message) ([]byte, []int, error) {
	a, _ := m.Body.(protocol.DMAAccess)
	h := m.Header
	var body any = protocol.DMAAccess{Address: a.Address, Count: a.Count}
	if h.Cmd == protocol.CmdDMARead {
		body = protocol.DMAAccess{Address: a.Address, Count: a.Count, Data: make([]byte, a.Count)}
	}
	switch mode {
	case fuzzDMAError:
		return protocol.EncodeMessage(h.ID, h.Cmd, protocol.FlagReply|protocol.FlagError, uint32(unix.EFAULT), nil), nil, nil
	case fuzzDMAShort:
		d := make([]byte, max(a.Count, 1)-1)
		if h.Cmd == protocol.CmdDMAWrite {
			d = []byte{0}
		}
		return protocol.EncodeMessage(h.ID, h.Cmd, protocol.FlagReply, 0, protocol.DMAAccess{Address: a.Address, Count: a.Count, Data: d}), nil, nil
	case fuzzDMAWrongID:
		return protocol.EncodeMessage(h.ID+1, h.Cmd, protocol.FlagReply, 0, body), nil, nil
	case fuzzDMASilent:
		return nil, nil, nil
	case fuzzDMAWrongCmd:
		return protocol.EncodeMessage(h.ID, protocol.CmdDMARead+protocol.CmdDMAWrite-h.Cmd, protocol.FlagReply, 0, body), nil, nil
	case fuzzDMAWithFD:
		fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
		if err != nil {
			return nil, nil, err
		}
		return protocol.EncodeMessage(h.ID, h.Cmd, protocol.FlagReply, 0, body), []int{fd}, nil
	}
	return protocol.EncodeMessage(h.ID, h.Cmd, protocol.FlagReply, 0, body), nil, nil
}

// expectedReply is what the server must answer to one command.
type expectedReply struct {
	id       uint16
	cmd      protocol.Command
	mustFail bool // the command does not decode: an error reply
}

// fuzzClient is the client end of one input.
type fuzzClient struct {
	t    *testing.T
	conn *net.UnixConn
	w    *protocol.Conn
	dma  int

	mu     sync.Mutex // orders the writer's messages and the answers
	closed bool       // no more answers: end of stream or framing broken

	keep []int // other ends of the descriptors sent

	// Filled by the reader.
	replies  []protocol.Message
	requests int
	problems []string
}

func (c *fuzzClient) problem(format string, args ...any) {
	c.problems = append(c.problems, fmt.Sprintf(format, args...))
}

// send writes one message with fds and closes the client's copies.
func (c *fuzzClient) send(msg []byte, fds []int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	defer protocol.CloseFDs(fds)
	return c.w.WriteMessage(msg, fds)
}

// read collects the server's messages until the server closes, answering
// its DMA requests.
func (c *fuzzClient) read() {
	for {
		hdr, payload, fds, err := c.w.ReadMessage()
		protocol.CloseFDs(fds)
		if err != nil {
			if errors.Is(err, protocol.ErrFraming) {
				c.problem("server sent a broken header: %v", err)
			}
			return
		}
		if len(fds) > 0 {
			c.problem("server sent %d descriptors", len(fds))
		}
		m, err := protocol.DecodeMessage(hdr, payload, 0)
		if m.Header.IsReply() {
			if err != nil && m.Header.Flags&protocol.FlagError == 0 {
				c.problem("server reply %+v does not decode: %v", m.Header, err)
			}
			if m.Header.Flags&protocol.FlagError != 0 && m.Header.Error == 0 {
				c.problem("error reply %+v without errno", m.Header)
			}
			c.replies = append(c.replies, m)
			continue
		}
		c.requests++
		if err != nil || (m.Header.Cmd != protocol.CmdDMARead && m.Header.Cmd != protocol.CmdDMAWrite) || m.Header.Flags&protocol.FlagNoReply != 0 {
			c.problem("server sent command %+v (%v); only DMA_READ/DMA_WRITE expecting a reply are allowed", m.Header, err)
			continue
		}
		ans, afds, err := fuzzDMAAnswer(c.dma, m)
		if err != nil {
			c.problem("answer: %v", err)
			continue
		}
		if ans == nil {
			continue
		}
		c.mu.Lock()
		if !c.closed {
			_ = c.w.WriteMessage(ans, afds)
		}
		c.mu.Unlock()
		protocol.CloseFDs(afds)
	}
}

// runServeInput runs one input against a fresh session of dev.
func runServeInput(t *testing.T, dev *ServerDevice, stream, plan []byte, dma uint8) {
	before := fuzzcheck.Snapshot()
	statsBefore := dev.Stats()

	cconn, sconn := vutest.SocketPair(t)
	c := &fuzzClient{t: t, conn: cconn, w: protocol.NewConn(cconn), dma: int(dma) % fuzzDMAModes}
	served := make(chan error, 1)
	go func() { served <- serveConn(context.Background(), sconn, dev) }()
	readDone := make(chan struct{})
	go func() { defer close(readDone); c.read() }()

	// Write the stream message by message.
	var expected []expectedReply
	brokenHeader := false // the server may close before the end
	incomplete := false   // the stream ends in a cut or broken message
	var writeErr error
	writeDone := make(chan struct{})
	go func() {
		defer close(writeDone)
		for i, pos := 0, 0; pos < len(stream); i++ {
			rest := stream[pos:]
			chunk, whole := rest, false
			var h protocol.Header
			if len(rest) >= protocol.HeaderSize {
				var err error
				h, err = protocol.DecodeHeader(rest[:protocol.HeaderSize])
				switch {
				case err != nil:
					brokenHeader = true
				case int(h.Size) <= len(rest):
					chunk, whole = rest[:h.Size], true
				}
			}
			var fds []int
			if i < len(plan) {
				send, keep, err := fuzzFDs(int(plan[i]>>5), int(plan[i]&31))
				if err != nil {
					writeErr = err
					return
				}
				fds = send
				c.keep = append(c.keep, keep...)
			}
			if whole && !h.IsReply() && h.Flags&protocol.FlagNoReply == 0 {
				_, derr := protocol.DecodeMessage(chunk[:protocol.HeaderSize], chunk[protocol.HeaderSize:], len(fds))
				expected = append(expected, expectedReply{id: h.ID, cmd: h.Cmd, mustFail: derr != nil})
			}
			if err := c.send(chunk, fds); err != nil {
				if !brokenHeader {
					writeErr = fmt.Errorf("write of message %d (%+v): %w", i, h, err)
				}
				return
			}
			if !whole {
				incomplete = true
				return // the rest of the stream is one broken or cut message
			}
			pos += len(chunk)
		}
	}()

	fail := func(format string, args ...any) {
		t.Helper()
		cconn.Close()
		t.Fatalf(format+"\n%s", append(args, fuzzcheck.Goroutines())...)
	}
	select {
	case <-writeDone:
	case <-time.After(serveBound):
		fail("the client's writes blocked for %v: the server stopped reading", serveBound)
	}
	c.mu.Lock()
	c.closed = true
	_ = cconn.CloseWrite()
	c.mu.Unlock()
	var serr error
	select {
	case serr = <-served:
	case <-time.After(serveBound):
		fail("serveConn did not return within %v of the end of stream", serveBound)
	}
	select {
	case <-readDone:
	case <-time.After(serveBound):
		fail("the server did not close the connection")
	}
	cconn.Close()
	protocol.CloseFDs(c.keep)

	if writeErr != nil {
		t.Fatalf("%v (serveConn: %v)", writeErr, serr)
	}
	if serr != nil && !incomplete {
		t.Errorf("serveConn: %v, on a stream of whole messages", serr)
	}
	for _, p := range c.problems {
		t.Error(p)
	}
	if len(c.replies) != len(expected) {
		t.Fatalf("%d replies for %d commands expecting one", len(c.replies), len(expected))
	}
	errReplies := 0
	for i, r := range c.replies {
		e := expected[i]
		if r.Header.ID != e.id || r.Header.Cmd != e.cmd {
			t.Errorf("reply %d is %+v, want ID %d %s", i, r.Header, e.id, e.cmd)
		}
		isErr := r.Header.Flags&protocol.FlagError != 0
		if isErr {
			errReplies++
		}
		if e.mustFail && !isErr {
			t.Errorf("reply %d to %s (ID %d) is a success, but the command does not decode", i, e.cmd, e.id)
		}
	}
	if got := dev.Stats().ErrorReplies - statsBefore.ErrorReplies; got != uint64(errReplies) {
		t.Errorf("error_replies counted %d, %d received", got, errReplies)
	}
	if dev.Modem() != nil {
		t.Error("modem still attached after the session")
	}
	if n := fuzzcheck.Mappings(fuzzMemfdName); n != 0 {
		t.Errorf("%d mappings of the client's memfds left", n)
	}
	before.Check(t)
}
