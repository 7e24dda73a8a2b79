package vfiouser

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"

	"golang.org/x/sys/unix"
)

// wire frames messages on a unix stream socket, with file descriptors as
// SCM_RIGHTS ancillary data.
type wire struct {
	c   *net.UnixConn
	oob []byte
	wmu sync.Mutex
}

func newWire(c *net.UnixConn) *wire {
	return &wire{c: c, oob: make([]byte, unix.CmsgSpace(MaxFDs*4))}
}

// errFraming marks a read error after which the stream cannot be resynced.
var errFraming = errors.New("vfiouser: framing lost")

// readFull reads exactly len(p) bytes and collects descriptors. When the
// peer attached more descriptors than fit in MaxFDs (the kernel then drops
// the excess and sets MSG_CTRUNC), it closes those received and returns
// tooManyFDs instead.
func (w *wire) readFull(p []byte, fds []int) ([]int, error) {
	for n := 0; n < len(p); {
		k, oobn, flags, _, err := w.c.ReadMsgUnix(p[n:], w.oob)
		if oobn > 0 {
			fds = append(fds, parseRights(w.oob[:oobn])...)
		}
		if flags&unix.MSG_CTRUNC != 0 {
			closeFDs(fds)
			fds = tooManyFDs()
		}
		n += k
		if err != nil {
			if n > 0 && errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return fds, err
		}
		if k == 0 {
			if n == 0 {
				return fds, io.EOF
			}
			return fds, io.ErrUnexpectedEOF
		}
	}
	return fds, nil
}

// tooManyFDs stands for the descriptors of a message that carried more
// than MaxFDs: MaxFDs+1 entries of -1, no descriptor (closeFDs skips
// them), so that DecodeMessage refuses the message (ErrUnexpectedFDs)
// and it gets an error reply like any message with too many.
func tooManyFDs() []int {
	fds := make([]int, MaxFDs+1)
	for i := range fds {
		fds[i] = -1
	}
	return fds
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

// read reads one message: its header bytes, payload and descriptors. An
// invalid header is returned with errFraming: the stream cannot continue.
// On error every received descriptor is closed.
func (w *wire) read() (hdr, payload []byte, fds []int, err error) {
	hdr = make([]byte, HeaderSize)
	fds, err = w.readFull(hdr, nil)
	if err != nil {
		closeFDs(fds)
		return nil, nil, nil, err
	}
	h, err := DecodeHeader(hdr)
	if err != nil {
		closeFDs(fds)
		return hdr, nil, nil, fmt.Errorf("%w: %w", errFraming, err)
	}
	payload = make([]byte, h.Size-HeaderSize)
	fds, err = w.readFull(payload, fds)
	if err != nil {
		closeFDs(fds)
		return nil, nil, nil, err
	}
	return hdr, payload, fds, nil
}

// write sends msg with fds attached to its first byte.
func (w *wire) write(msg []byte, fds []int) error {
	w.wmu.Lock()
	defer w.wmu.Unlock()
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	for len(msg) > 0 {
		n, _, err := w.c.WriteMsgUnix(msg, oob, nil)
		if err != nil {
			return err
		}
		msg, oob = msg[n:], nil
	}
	return nil
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		if fd >= 0 {
			_ = unix.Close(fd)
		}
	}
}
