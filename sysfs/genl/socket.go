package genl

import (
	"fmt"
	"iter"
	"sync"
	"syscall"
	"time"

	"github.com/mdlayher/genetlink"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// userSocket is a netlink.Socket that sends to a user port instead of the
// kernel (netlink.Conn always sends to port 0), accepts datagrams only from
// that port (the kernel-stamped source, not nlmsg_pid), and drops replies
// to earlier requests that arrive late. It asks for the senders'
// credentials (SO_PASSCRED): a datagram from the port whose credentials
// the expected peer does not accept fails Receive with an error wrapping
// ErrUntrustedServer.
type userSocket struct {
	raw *netlink.Conn // the dialed NETLINK_USERSOCK socket
	rc  syscall.RawConn
	dst uint32
	exp *expected
	buf []byte
	oob []byte

	mu       sync.Mutex
	seq      uint32 // sequence number of the last request sent
	seqSet   bool
	deadline time.Time // write deadline, for retries of a full queue
}

var (
	_ netlink.Socket = (*userSocket)(nil)
)

func newUserSocket(exp *expected) (*userSocket, error) {
	dst := exp.port
	raw, err := netlink.Dial(unix.NETLINK_USERSOCK, nil)
	if err != nil {
		return nil, fmt.Errorf("genl: open NETLINK_USERSOCK socket: %w", err)
	}
	if raw.PID() == dst {
		// The kernel gave us the server's port (autobind tries the
		// process id first, and the server is not there): take another
		// one while holding this, or we would talk to ourselves.
		other, err := netlink.Dial(unix.NETLINK_USERSOCK, nil)
		_ = raw.Close()
		if err != nil {
			return nil, fmt.Errorf("genl: open NETLINK_USERSOCK socket: %w", err)
		}
		raw = other
	}
	rc, err := raw.SyscallConn()
	if err != nil {
		_ = raw.Close()
		return nil, fmt.Errorf("genl: %w", err)
	}
	if err := passCred(rc); err != nil {
		_ = raw.Close()
		return nil, err
	}
	return &userSocket{raw: raw, rc: rc, dst: dst, exp: exp, buf: make([]byte, recvBufSize),
		oob: make([]byte, unix.CmsgSpace(unix.SizeofUcred))}, nil
}

// Close closes the socket.
func (s *userSocket) Close() error { return s.raw.Close() }

// Send marshals m and sends it to the destination port.
func (s *userSocket) Send(m netlink.Message) error {
	m.Header.Length = uint32(align4(nlHdrLen + len(m.Data)))
	b, err := m.MarshalBinary()
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.seq, s.seqSet = m.Header.Sequence, true
	deadline := s.deadline
	s.mu.Unlock()
	return sendRetry(s.rc, s.dst, b, deadline)
}

// SendMessages sends each message in turn.
func (s *userSocket) SendMessages(ms []netlink.Message) error {
	for _, m := range ms {
		if err := s.Send(m); err != nil {
			return err
		}
	}
	return nil
}

// Receive returns the messages of the next datagram from the destination
// port that answer the last request.
func (s *userSocket) Receive() ([]netlink.Message, error) {
	for {
		n, oobn, rflags, from, err := recvmsg(s.rc, s.buf, s.oob)
		if err != nil {
			return nil, err
		}
		if sa, ok := from.(*unix.SockaddrNetlink); !ok || sa.Pid != s.dst {
			continue // not from the server
		}
		// Whoever holds the port sent this: it must be the process the
		// client trusts, by the credentials the kernel stamped on it.
		if cred := parseCred(s.oob[:oobn]); !s.exp.accepts(cred) {
			return nil, s.exp.replyError(cred)
		}
		if rflags&unix.MSG_TRUNC != 0 {
			return nil, fmt.Errorf("%w: reply datagram larger than %d bytes", ErrProtocol, len(s.buf))
		}
		msgs, err := splitMessages(s.buf[:n])
		if err != nil {
			return nil, err
		}
		s.mu.Lock()
		seq, seqSet := s.seq, s.seqSet
		s.mu.Unlock()
		keep := msgs[:0]
		for _, m := range msgs {
			// Replies never carry NLM_F_REQUEST; answers to earlier
			// (timed-out) requests carry an older sequence number.
			if m.Header.Flags&netlink.Request == 0 && (!seqSet || m.Header.Sequence == seq) {
				keep = append(keep, m)
			}
		}
		if len(keep) > 0 {
			return keep, nil
		}
	}
}

// ReceiveIter yields the messages Receive returns.
func (s *userSocket) ReceiveIter() iter.Seq2[netlink.Message, error] {
	return func(yield func(netlink.Message, error) bool) {
		msgs, err := s.Receive()
		if err != nil {
			yield(netlink.Message{}, err)
			return
		}
		for _, m := range msgs {
			if !yield(m, nil) {
				return
			}
		}
	}
}

// SetDeadline sets the read and write deadlines.
func (s *userSocket) SetDeadline(t time.Time) error {
	s.mu.Lock()
	s.deadline = t
	s.mu.Unlock()
	return s.raw.SetDeadline(t)
}

// SetReadDeadline sets the read deadline.
func (s *userSocket) SetReadDeadline(t time.Time) error { return s.raw.SetReadDeadline(t) }

// SetWriteDeadline sets the deadline for retrying a send to a full queue.
func (s *userSocket) SetWriteDeadline(t time.Time) error {
	s.mu.Lock()
	s.deadline = t
	s.mu.Unlock()
	return s.raw.SetWriteDeadline(t)
}

// SyscallConn exposes the underlying socket.
func (s *userSocket) SyscallConn() (syscall.RawConn, error) { return s.rc, nil }

// splitMessages parses the netlink messages of one datagram, copying their
// payloads.
func splitMessages(b []byte) ([]netlink.Message, error) {
	var msgs []netlink.Message
	for len(b) >= nlHdrLen {
		l := ne.Uint32(b)
		if l < nlHdrLen || l > uint32(len(b)) {
			return nil, fmt.Errorf("%w: message length %d in a %d-byte datagram", ErrProtocol, l, len(b))
		}
		msgs = append(msgs, netlink.Message{
			Header: netlink.Header{
				Length:   l,
				Type:     netlink.HeaderType(ne.Uint16(b[4:])),
				Flags:    netlink.HeaderFlags(ne.Uint16(b[6:])),
				Sequence: ne.Uint32(b[8:]),
				PID:      ne.Uint32(b[12:]),
			},
			Data: append([]byte(nil), b[nlHdrLen:l]...),
		})
		b = b[min(align4(int(l)), len(b)):]
	}
	return msgs, nil
}

// DialGenetlink opens a *genetlink.Conn whose requests go to the server at
// opts.Port (0: as Dial finds it) over NETLINK_USERSOCK, for tools that
// want raw generic-netlink access: GetFamily("mhi"), Execute with any
// command. The port's holder and every reply's credentials are checked as
// Dial does (ErrUntrustedServer). Deadlines set on it apply to both
// directions. Most callers want Dial.
func DialGenetlink(opts ClientOptions) (*genetlink.Conn, error) {
	exp, err := locate(opts)
	if err != nil {
		return nil, &Error{Op: "dial", Port: exp.port, Kind: ErrUntrustedServer, Err: err}
	}
	sock, err := newUserSocket(exp)
	if err != nil {
		return nil, err
	}
	return genetlink.NewConn(netlink.NewConn(sock, sock.raw.PID())), nil
}
