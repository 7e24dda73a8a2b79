package protocol

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"slices"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Conn frames messages on a unix stream socket, with file descriptors as
// SCM_RIGHTS ancillary data. One goroutine reads (Next, ReadMessage); any
// may write (WriteMessage, or Begin and Flush).
//
// Messages are read into a buffer owned by the connection and handed out
// by Next without allocating. By default each recvmsg asks for exactly
// the rest of the current header or message, so it never reaches into the
// next message: descriptors then belong to the message holding the first
// byte of the sendmsg that carried them, however the peer groups its
// messages into sendmsg calls. That costs two recvmsg per message.
//
// A Greedy Conn (the server's) asks for as much as the buffer holds and
// hands out the messages one recvmsg brought one by one: when the peer
// sends faster than it is served, less than one system call per message.
// Its descriptors: the kernel hands out the descriptors of a sendmsg with
// the recvmsg that reaches the first byte it sent, and that recvmsg reads
// nothing past the bytes of that sendmsg. So the descriptors a recvmsg
// brings belong to the message holding the last byte it read. With one
// message per sendmsg, as this package and QEMU send them, that is the
// message they were sent with, as on an exact Conn; a peer that packs
// several messages into one sendmsg with descriptors gets them on the last
// of those, where they are checked (and refused) as on any other message.
//
// Writing goes through one buffer owned by the connection (Begin, Flush),
// so encoding a message allocates nothing either. Both directions call the
// socket directly (syscall.RawConn) and wait in the runtime's poller when
// it is not ready.
type Conn struct {
	// Greedy reads as much as the buffer holds, not one message at a
	// time; set it before the first Next.
	Greedy bool

	c      *net.UnixConn
	raw    syscall.RawConn
	rawErr error

	rbuf    []byte // received bytes; rbuf[rpos:rend] are not yet handed out
	rpos    int
	rend    int
	base    uint64 // stream offset of rbuf[0]
	oob     []byte
	fdq     []fdChunk // descriptors received, waiting for their message
	msgFDs  []int     // the descriptors Next hands out (reused)
	recvFn  func(fd uintptr) bool
	recvP   []byte
	recvN   int
	recvOOB int
	recvFl  int
	recvErr error

	wmu     sync.Mutex
	wbuf    []byte // the write buffer Begin hands out, under wmu
	sendFn  func(fd uintptr) bool
	sendP   []byte
	sendOOB []byte
	sendErr error
}

// fdChunk is the descriptors one recvmsg brought: they belong to the
// message holding stream byte end-1.
type fdChunk struct {
	end       uint64
	fds       []int
	truncated bool // MSG_CTRUNC: the peer sent more than MaxFDs
}

// wireBufSize is the initial size of a connection's read and write
// buffers; a bigger message grows them (up to MaxMessageSize).
const wireBufSize = 64 << 10

// NewConn frames messages on c, which it owns (Close closes it).
func NewConn(c *net.UnixConn) *Conn {
	w := &Conn{c: c, oob: make([]byte, unix.CmsgSpace(MaxFDs*4)),
		rbuf: make([]byte, wireBufSize), wbuf: make([]byte, 0, wireBufSize), msgFDs: make([]int, 0, MaxFDs+1)}
	w.raw, w.rawErr = c.SyscallConn()
	w.recvFn = w.recvOnce
	w.sendFn = w.sendOnce
	return w
}

// ErrFraming marks a read error after which the stream cannot be resynced.
var ErrFraming = errors.New("vfiouser: framing lost")

// Next returns the next message: its decoded header, the header bytes, the
// payload and the descriptors that came with it. hdr, payload and fds
// belong to the Conn and stay valid until the following call of Next; the
// caller owns the descriptors themselves (it must close or keep them). An
// invalid header is returned with ErrFraming: the stream cannot continue.
// On error every received descriptor not yet handed out is closed.
func (w *Conn) Next() (h Header, hdr, payload []byte, fds []int, err error) {
	for {
		need := HeaderSize
		if avail := w.rend - w.rpos; avail >= HeaderSize {
			hdr = w.rbuf[w.rpos : w.rpos+HeaderSize]
			h, err = DecodeHeader(hdr)
			if err != nil {
				w.dropFDs()
				return h, hdr, nil, nil, fmt.Errorf("%w: %w", ErrFraming, err)
			}
			if avail >= int(h.Size) {
				start := w.rpos
				w.rpos += int(h.Size)
				fds = w.takeFDs(w.base + uint64(w.rpos))
				return h, w.rbuf[start : start+HeaderSize], w.rbuf[start+HeaderSize : w.rpos], fds, nil
			}
			need = int(h.Size)
		}
		if err := w.fill(need); err != nil {
			w.dropFDs()
			return Header{}, nil, nil, nil, err
		}
	}
}

// fill makes room for need unread bytes from rpos on (more than there
// are) and receives once.
func (w *Conn) fill(need int) error {
	if w.rpos == w.rend {
		w.base += uint64(w.rpos)
		w.rpos, w.rend = 0, 0
	}
	if len(w.rbuf)-w.rpos < need {
		if len(w.rbuf) < need {
			nb := make([]byte, max(need, 2*len(w.rbuf)))
			w.rend = copy(nb, w.rbuf[w.rpos:w.rend])
			w.rbuf = nb
		} else {
			w.rend = copy(w.rbuf, w.rbuf[w.rpos:w.rend])
		}
		w.base += uint64(w.rpos)
		w.rpos = 0
	}
	buf := w.rbuf[w.rend:]
	if !w.Greedy {
		buf = buf[:need-(w.rend-w.rpos)] // not past the message
	}
	n, oobn, flags, err := w.recv(buf)
	w.rend += n
	if oobn > 0 || flags&unix.MSG_CTRUNC != 0 {
		w.fdq = append(w.fdq, fdChunk{end: w.base + uint64(w.rend), fds: parseRights(w.oob[:oobn]), truncated: flags&unix.MSG_CTRUNC != 0})
	}
	if err != nil {
		if w.rend > w.rpos && errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return err
	}
	if n == 0 {
		if w.rend > w.rpos {
			return io.ErrUnexpectedEOF
		}
		return io.EOF
	}
	return nil
}

// takeFDs hands out the descriptors of the message ending at stream offset
// end. More than MaxFDs (or a truncated set) become tooManyFDs.
func (w *Conn) takeFDs(end uint64) []int {
	if len(w.fdq) == 0 || w.fdq[0].end > end {
		return nil
	}
	fds, truncated := w.msgFDs[:0], false
	k := 0
	for ; k < len(w.fdq) && w.fdq[k].end <= end; k++ {
		c := w.fdq[k]
		truncated = truncated || c.truncated || len(fds)+len(c.fds) > MaxFDs
		if truncated {
			CloseFDs(c.fds)
			continue
		}
		fds = append(fds, c.fds...)
	}
	w.fdq = slices.Delete(w.fdq, 0, k)
	if truncated {
		CloseFDs(fds)
		fds = tooManyFDs(fds[:0])
	}
	w.msgFDs = fds
	return fds
}

// dropFDs closes every descriptor not yet handed out.
func (w *Conn) dropFDs() {
	for _, c := range w.fdq {
		CloseFDs(c.fds)
	}
	w.fdq = w.fdq[:0]
}

// tooManyFDs stands for the descriptors of a message that carried more
// than MaxFDs: MaxFDs+1 entries of -1, no descriptor (CloseFDs skips
// them), so that DecodeMessage refuses the message (ErrUnexpectedFDs)
// and it gets an error reply like any message with too many.
func tooManyFDs(buf []int) []int {
	for range MaxFDs + 1 {
		buf = append(buf, -1)
	}
	return buf
}

func parseRights(oob []byte) []int {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var fds []int
	for _, m := range msgs {
		if r, err := unix.ParseUnixRights(&m); err == nil {
			fds = append(fds, r...)
		}
	}
	return fds
}

// recv is one recvmsg into p and w.oob, waiting in the poller until the
// socket is readable.
func (w *Conn) recv(p []byte) (n, oobn, flags int, err error) {
	if w.rawErr != nil {
		return 0, 0, 0, w.rawErr
	}
	w.recvP = p
	if err := w.raw.Read(w.recvFn); err != nil {
		return 0, 0, 0, err
	}
	return w.recvN, w.recvOOB, w.recvFl, w.recvErr
}

// recvOnce is the RawConn.Read callback: false asks to wait for readability.
func (w *Conn) recvOnce(fd uintptr) bool {
	for {
		n, oobn, flags, err := recvmsg(int(fd), w.recvP, w.oob)
		if err == unix.EINTR {
			continue
		}
		if err == unix.EAGAIN {
			return false
		}
		w.recvN, w.recvOOB, w.recvFl, w.recvErr = n, oobn, flags, err
		if err != nil {
			w.recvN, w.recvOOB = 0, 0
			w.recvErr = &net.OpError{Op: "read", Net: "unix", Err: err}
		}
		return true
	}
}

// recvmsg is recvmsg(2) without a source address (the socket is connected),
// so it allocates nothing.
func recvmsg(fd int, p, oob []byte) (n, oobn, flags int, err error) {
	return msgSyscall(unix.SYS_RECVMSG, fd, p, oob, unix.MSG_CMSG_CLOEXEC)
}

// ReadMessage reads one message as Next does, into fresh slices the caller
// keeps.
func (w *Conn) ReadMessage() (hdr, payload []byte, fds []int, err error) {
	_, hb, p, f, err := w.Next()
	if err != nil {
		if hb != nil {
			hb = slices.Clone(hb)
		}
		return hb, nil, nil, err
	}
	return slices.Clone(hb), append([]byte{}, p...), slices.Clone(f), nil
}

// Begin locks the write side and returns the connection's write buffer,
// empty, to append one or more messages to; Flush sends them and unlocks.
func (w *Conn) Begin() []byte {
	w.wmu.Lock()
	return w.wbuf[:0]
}

// Flush sends b (from Begin) with fds attached to its first byte, keeps b
// as the write buffer and unlocks the write side.
func (w *Conn) Flush(b []byte, fds []int) error {
	w.wbuf = b[:0]
	err := w.send(b, fds)
	w.wmu.Unlock()
	return err
}

// WriteMessage sends msg with fds attached to its first byte.
func (w *Conn) WriteMessage(msg []byte, fds []int) error {
	w.wmu.Lock()
	defer w.wmu.Unlock()
	return w.send(msg, fds)
}

// send writes all of msg, fds with its first byte; w.wmu is held.
func (w *Conn) send(msg []byte, fds []int) error {
	if w.rawErr != nil {
		return w.rawErr
	}
	w.sendP, w.sendOOB, w.sendErr = msg, nil, nil
	if len(fds) > 0 {
		w.sendOOB = unix.UnixRights(fds...)
	}
	err := w.raw.Write(w.sendFn)
	if err == nil {
		err = w.sendErr
	}
	w.sendP, w.sendOOB = nil, nil
	return err
}

// sendOnce is the RawConn.Write callback: it writes what it can of
// w.sendP and returns false to wait for writability.
func (w *Conn) sendOnce(fd uintptr) bool {
	for len(w.sendP) > 0 {
		n, err := sendmsg(int(fd), w.sendP, w.sendOOB)
		switch err {
		case nil:
			w.sendP, w.sendOOB = w.sendP[n:], nil
		case unix.EINTR:
		case unix.EAGAIN:
			return false
		default:
			w.sendErr = &net.OpError{Op: "write", Net: "unix", Err: err}
			return true
		}
	}
	return true
}

// sendmsg is sendmsg(2) on a connected socket; it allocates nothing.
func sendmsg(fd int, p, oob []byte) (int, error) {
	n, _, _, err := msgSyscall(unix.SYS_SENDMSG, fd, p, oob, unix.MSG_NOSIGNAL)
	return n, err
}

// msgSyscall makes the system call trap (SYS_RECVMSG or SYS_SENDMSG) on
// the connected socket fd with p as the one data buffer, oob as the
// control buffer and flags, and returns the byte count and the control
// length and message flags the kernel left in the header. Nothing escapes,
// so it allocates nothing.
func msgSyscall(trap uintptr, fd int, p, oob []byte, flags int) (n, oobn, msgFlags int, err error) {
	var iov unix.Iovec
	if len(p) > 0 {
		iov.Base = &p[0]
		iov.SetLen(len(p))
	}
	var msg unix.Msghdr
	msg.Iov = &iov
	msg.SetIovlen(1)
	if len(oob) > 0 {
		msg.Control = &oob[0]
		msg.SetControllen(len(oob))
	}
	r, _, e := unix.Syscall(trap, uintptr(fd), uintptr(unsafe.Pointer(&msg)), uintptr(flags))
	if e != 0 {
		return 0, 0, 0, e
	}
	return int(r), int(msg.Controllen), int(msg.Flags), nil
}

// Close closes the socket.
func (w *Conn) Close() error { return w.c.Close() }

// CloseFDs closes the descriptors of fds, skipping negative entries.
func CloseFDs(fds []int) {
	for _, fd := range fds {
		if fd >= 0 {
			_ = unix.Close(fd)
		}
	}
}

// FileKind names the type of a file for error messages ("regular file",
// "directory", …), such as those wrapping ErrNotSocket.
func FileKind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "directory"
	case m.IsRegular():
		return "regular file"
	case m&fs.ModeNamedPipe != 0:
		return "named pipe"
	case m&fs.ModeDevice != 0:
		return "device"
	case m&fs.ModeSymlink != 0:
		return "symbolic link"
	}
	return m.Type().String()
}
