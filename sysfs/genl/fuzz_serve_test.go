package genl_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"syscall"
	"testing"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/gomhi/gomhi/mhi/testenv/fuzzcheck"
	"github.com/gomhi/gomhi/sysfs"
	"github.com/gomhi/gomhi/sysfs/genl"
)

// FuzzServeRequest drives the server's whole request path with arbitrary
// datagrams: decoding, the handlers against a tree bound to a powered-up
// mock modem ("mhi0", with its network device) and reply encoding, through
// the code Serve runs for each received datagram; the answers travel over
// a real NETLINK_USERSOCK socket to the fuzzing client. cred picks the
// sender credentials the kernel would have stamped: 0 none, 1 root, 2 an
// unprivileged uid whose process is gone, 3 an unprivileged uid claiming
// this (root) process.
//
// After each datagram it checks: no panic; every answer is well-formed
// netlink (lengths, alignment, the sender's sequence number and port, the
// family and command of the request, nested attributes that parse,
// NLMSG_ERROR with a negative errno, the echoed request and extended-ack
// attributes); the answers come, request by request, exactly as the
// server promises (one error for a refused request with the errno the
// decoder chose, an ACK for an ignored request asking for one, otherwise
// a reply plus the ACK asked for, or a multipart reply ended by
// NLMSG_DONE); a successful set-device reports the values set; values
// change only to what a set-device asked for, and never for a sender
// without privileges; and nothing leaks.
func FuzzServeRequest(f *testing.F) {
	dev := attr(genl.AttrDevName, str("mhi0"))
	ack := uint16(netlink.Acknowledge)
	f.Add(nlmsg(genl.FamilyID, req, 1, genl.CmdGetDevice, dev), uint8(0))
	f.Add(nlmsg(genl.FamilyID, req|ack, 2, genl.CmdGetDevice, dev), uint8(0))
	f.Add(nlmsg(genl.FamilyID, req|uint16(netlink.Dump), 3, genl.CmdGetDevice), uint8(0))
	f.Add(nlmsg(genl.FamilyID, req, 4, genl.CmdSetDevice, dev, attr(genl.AttrMRU, u32b(16384)), attr(genl.AttrMTU, u32b(1500)), attr(genl.AttrTimeoutMs, u32b(8000))), uint8(1))
	f.Add(nlmsg(genl.FamilyID, req|ack, 5, genl.CmdSetDevice, dev, attr(genl.AttrMRU, u32b(32768))), uint8(1))
	f.Add(nlmsg(genl.FamilyID, req, 6, genl.CmdSetDevice, dev, attr(genl.AttrMRU, u32b(1))), uint8(1))
	f.Add(nlmsg(genl.FamilyID, req, 7, genl.CmdSetDevice, dev, attr(genl.AttrTimeoutMs, u32b(1000)), attr(genl.AttrMTU, u32b(1<<30))), uint8(1))
	f.Add(nlmsg(genl.FamilyID, req, 8, genl.CmdSetDevice, dev, attr(genl.AttrMRU, u32b(8192))), uint8(2))
	f.Add(nlmsg(genl.FamilyID, req, 9, genl.CmdSetDevice, dev, attr(genl.AttrMRU, u32b(8192))), uint8(3))
	f.Add(nlmsg(genl.FamilyID, req, 10, genl.CmdGetStats, dev), uint8(0))
	f.Add(nlmsg(genl.FamilyID, req|uint16(netlink.Dump), 11, genl.CmdDumpChannels, dev), uint8(0))
	f.Add(nlmsg(genl.FamilyID, req, 12, genl.CmdGetDevice, attr(genl.AttrDevName, str("mhi9"))), uint8(0))
	f.Add(nlmsg(0x10, req, 13, unix.CTRL_CMD_GETFAMILY, attr(unix.CTRL_ATTR_FAMILY_NAME, str("mhi"))), uint8(0))
	f.Add(nlmsg(0x10, req|uint16(netlink.Dump), 14, unix.CTRL_CMD_GETFAMILY), uint8(0))
	f.Add(nlmsg(0x10, req, 15, unix.CTRL_CMD_GETFAMILY, attr(unix.CTRL_ATTR_FAMILY_ID, []byte{0x4e, 0})), uint8(0))
	f.Add(append(nlmsg(genl.FamilyID, req, 16, genl.CmdGetDevice, dev), nlmsg(genl.FamilyID, req, 17, 99)...), uint8(0))
	f.Add(append(nlmsg(3, req|ack, 18, 0), nlmsg(genl.FamilyID, 0, 19, genl.CmdGetDevice, dev)...), uint8(0))
	f.Add([]byte{0x14, 0, 0, 0, 0x4d, 0}, uint8(0))

	tr, _ := newTree(f, false)
	srv, client := fuzzServerPair(f, tr)
	f.Fuzz(func(t *testing.T, b []byte, cred uint8) {
		before := fuzzcheck.Snapshot()
		values := deviceValues(tr)
		var uc *unix.Ucred
		switch cred % 4 {
		case 1:
			uc = &unix.Ucred{Pid: int32(os.Getpid())}
		case 2:
			uc = &unix.Ucred{Pid: 1 << 30, Uid: 65534, Gid: 65534}
		case 3:
			uc = &unix.Ucred{Pid: int32(os.Getpid()), Uid: 65534, Gid: 65534}
		}
		srv.HandleDatagram(b, client.port, uc)
		dgrams := client.drain(t, srv.Port())
		sets := checkAnswers(t, b, dgrams, client.port)

		// Values change only as a set-device asked, never without
		// privileges.
		after := deviceValues(tr)
		for name, v := range after {
			if v == values[name] {
				continue
			}
			if uc == nil || uc.Uid != 0 {
				t.Errorf("%s changed from %s to %s by uid %v", name, values[name], v, uc)
			}
			if !sets[name][v] {
				t.Errorf("%s changed from %s to %s, which no set-device asked for", name, values[name], v)
			}
		}
		before.Check(t)
	})
}

// fuzzClientSocket is the fuzzing sender's socket: the server answers to
// its port, and drain reads them without blocking.
type fuzzClientSocket struct {
	conn *netlink.Conn
	rc   syscall.RawConn
	port uint32
	buf  []byte
}

// fuzzServerPair binds a server for tr on a free port (without serving:
// the fuzz target hands it the datagrams) and a client socket with a
// receive queue big enough for every answer to one datagram.
func fuzzServerPair(tb testing.TB, tr *sysfs.Tree) (*genl.Server, *fuzzClientSocket) {
	tb.Helper()
	var srv *genl.Server
	for range 100 {
		s, err := genl.NewServer(tr, genl.ServerOptions{Port: 0x10000000 + rand.Uint32N(0x60000000)})
		if errors.Is(err, genl.ErrPortInUse) {
			continue
		}
		if err != nil {
			tb.Fatal(err)
		}
		srv = s
		break
	}
	if srv == nil {
		tb.Fatal("no free port id")
	}
	tb.Cleanup(func() { _ = srv.Close() })
	conn, err := netlink.Dial(unix.NETLINK_USERSOCK, nil)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = conn.Close() })
	rc, err := conn.SyscallConn()
	if err != nil {
		tb.Fatal(err)
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 64<<20)
	}); err != nil || serr != nil {
		tb.Fatal(err, serr)
	}
	return srv, &fuzzClientSocket{conn: conn, rc: rc, port: conn.PID(), buf: make([]byte, 1<<20)}
}

// drain returns every datagram queued, checking each came from port.
func (c *fuzzClientSocket) drain(t *testing.T, port uint32) [][]byte {
	t.Helper()
	var out [][]byte
	for {
		var (
			n, flags int
			from     unix.Sockaddr
			rerr     error
		)
		if err := c.rc.Control(func(fd uintptr) {
			n, _, flags, from, rerr = unix.Recvmsg(int(fd), c.buf, nil, unix.MSG_DONTWAIT)
		}); err != nil {
			t.Fatal(err)
		}
		if rerr == unix.EAGAIN {
			return out
		}
		if rerr != nil {
			t.Fatalf("receive: %v", rerr)
		}
		if sa, ok := from.(*unix.SockaddrNetlink); !ok || sa.Pid != port {
			t.Fatalf("datagram from %+v, not the server's port %#x", from, port)
		}
		if flags&unix.MSG_TRUNC != 0 {
			t.Fatalf("answer datagram larger than %d bytes", len(c.buf))
		}
		out = append(out, append([]byte(nil), c.buf[:n]...))
	}
}

// deviceValues reads mhi0's writable values.
func deviceValues(tr *sysfs.Tree) map[string]string {
	m := map[string]string{}
	for _, a := range []string{"mru", "mtu", "timeout_ms"} {
		v, err := tr.Get("devices/mhi0/" + a)
		if err != nil {
			v = "error: " + err.Error()
		}
		m[a] = v
	}
	return m
}

// answerMsg is one parsed message of an answer.
type answerMsg struct {
	typ, flags uint16
	seq, pid   uint32
	data       []byte
}

// splitAnswer parses an answer datagram strictly: every message at least
// a header, its length within the datagram and a multiple of 4 (the server
// pads every message), nothing left over.
func splitAnswer(b []byte) ([]answerMsg, error) {
	var out []answerMsg
	for len(b) > 0 {
		if len(b) < nlHdr {
			return nil, fmt.Errorf("%d bytes left after the messages", len(b))
		}
		l := int(ne.Uint32(b))
		if l < nlHdr || l > len(b) || l%4 != 0 {
			return nil, fmt.Errorf("message length %d with %d bytes left", l, len(b))
		}
		out = append(out, answerMsg{typ: ne.Uint16(b[4:]), flags: ne.Uint16(b[6:]), seq: ne.Uint32(b[8:]), pid: ne.Uint32(b[12:]), data: b[nlHdr:l]})
		b = b[l:]
	}
	if len(out) == 0 {
		return nil, errors.New("empty datagram")
	}
	return out, nil
}

// walkTLVs checks a run of attributes: each fits, NLA_F_NESTED ones hold
// attributes in turn.
func walkTLVs(b []byte, depth int) error {
	if depth > 8 {
		return errors.New("attributes nested deeper than 8")
	}
	for len(b) > 0 {
		if len(b) < 4 {
			return fmt.Errorf("%d bytes after the attributes", len(b))
		}
		l, typ := int(ne.Uint16(b)), ne.Uint16(b[2:])
		if l < 4 || l > len(b) {
			return fmt.Errorf("attribute %d of length %d with %d bytes left", typ&^0xc000, l, len(b))
		}
		if typ&0x8000 != 0 {
			if err := walkTLVs(b[4:l], depth+1); err != nil {
				return fmt.Errorf("in attribute %d: %w", typ&^0xc000, err)
			}
		}
		b = b[min((l+3)&^3, len(b)):]
	}
	return nil
}

// checkError checks an NLMSG_ERROR answering request msg (its bytes) and
// returns its errno (0 for an ACK).
func checkError(m answerMsg, msg []byte) (unix.Errno, error) {
	if len(m.data) < 4+nlHdr {
		return 0, fmt.Errorf("NLMSG_ERROR of %d bytes", len(m.data))
	}
	code := int32(ne.Uint32(m.data))
	if code > 0 || code < -4095 {
		return 0, fmt.Errorf("NLMSG_ERROR code %d", code)
	}
	var hdr [nlHdr]byte
	copy(hdr[:], msg)
	echo := m.data[4 : 4+nlHdr]
	if string(echo[4:]) != string(hdr[4:]) {
		return 0, fmt.Errorf("echoed header % x, request % x", echo, hdr)
	}
	echoLen := nlHdr
	if m.flags&uint16(netlink.Capped) == 0 {
		echoLen = int(ne.Uint32(echo))
		if echoLen > len(m.data)-4 || echoLen > len(msg) || string(m.data[4:4+echoLen]) != string(msg[:echoLen]) {
			return 0, fmt.Errorf("uncapped echo of %d bytes does not match the %d-byte request", echoLen, len(msg))
		}
	}
	tlv := m.data[min(4+(echoLen+3)&^3, len(m.data)):]
	if m.flags&uint16(netlink.AcknowledgeTLVs) != 0 {
		if code == 0 {
			return 0, errors.New("an ACK with extended-ack attributes")
		}
		ad, err := netlink.NewAttributeDecoder(tlv)
		if err != nil {
			return 0, err
		}
		msgSeen := false
		for ad.Next() {
			if ad.Type() == unix.NLMSGERR_ATTR_MSG {
				msgSeen = ad.String() != ""
			}
		}
		if err := ad.Err(); err != nil || !msgSeen {
			return 0, fmt.Errorf("extended ack: %v (message present: %v)", err, msgSeen)
		}
	} else if code != 0 {
		return 0, errors.New("an error without an extended-ack message")
	}
	return unix.Errno(-code), nil
}

// checkAnswers walks the datagram's requests as the server does and checks
// the answers against each. It returns, per attribute, the values
// set-device requests asked for.
func checkAnswers(t *testing.T, b []byte, dgrams [][]byte, port uint32) map[string]map[string]bool {
	t.Helper()
	sets := map[string]map[string]bool{"mru": {}, "mtu": {}, "timeout_ms": {}}
	var seq uint32 // of the request being answered
	next := func() []answerMsg {
		t.Helper()
		if len(dgrams) == 0 {
			return nil
		}
		msgs, err := splitAnswer(dgrams[0])
		if err != nil {
			t.Fatalf("answer % x: %v", dgrams[0], err)
		}
		for _, m := range msgs {
			if m.seq != seq || m.pid != port {
				t.Fatalf("answer message seq %d port %#x to the request with seq %d from port %#x", m.seq, m.pid, seq, port)
			}
		}
		dgrams = dgrams[1:]
		return msgs
	}
	for i := 0; len(b) > 0; i++ {
		r, n, err := genl.DecodeRequest(b)
		msg := b[:n]
		b = b[n:]
		var hdr [nlHdr]byte
		copy(hdr[:], msg)
		seq = ne.Uint32(hdr[8:])
		where := fmt.Sprintf("request %d (seq %d, command %d)", i, seq, r.Command)
		if err != nil {
			var re *genl.RequestError
			errors.As(err, &re)
			msgs := next()
			if len(msgs) != 1 || msgs[0].typ != uint16(netlink.Error) {
				t.Fatalf("%s refused (%v): answer %+v, want one NLMSG_ERROR", where, err, msgs)
			}
			if errno, err := checkError(msgs[0], msg); err != nil || errno != re.Errno {
				t.Fatalf("%s: error answer errno %v (%v), want %v", where, errno, err, re.Errno)
			}
			continue
		}
		if r.Ignored() {
			if r.Header.Flags&netlink.Request != 0 && r.Header.Flags&netlink.Acknowledge != 0 {
				msgs := next()
				if len(msgs) != 1 || msgs[0].typ != uint16(netlink.Error) {
					t.Fatalf("%s ignored with ACK asked: answer %+v", where, msgs)
				}
				if errno, err := checkError(msgs[0], msg); err != nil || errno != 0 {
					t.Fatalf("%s: ACK errno %v (%v)", where, errno, err)
				}
			}
			continue
		}
		if r.Command == genl.CmdSetDevice {
			for name, v := range map[string]*uint32{"mru": r.MRU, "mtu": r.MTU, "timeout_ms": r.TimeoutMs} {
				if v != nil {
					sets[name][strconv.FormatUint(uint64(*v), 10)] = true
				}
			}
		}
		wantType, wantCmd := genl.FamilyID, r.Command
		if r.Ctrl() {
			wantType, wantCmd = 0x10, unix.CTRL_CMD_NEWFAMILY
		}
		msgs := next()
		if len(msgs) == 0 {
			t.Fatalf("%s: no answer", where)
		}
		if msgs[0].typ == uint16(netlink.Error) {
			errno, err := checkError(msgs[0], msg)
			if err != nil || errno == 0 || len(msgs) != 1 {
				t.Fatalf("%s: error answer errno %v (%v), %d messages", where, errno, err, len(msgs))
			}
			continue
		}
		multi := msgs[0].flags&uint16(netlink.Multi) != 0
		for done := false; !done; {
			for j, m := range msgs {
				switch {
				case m.typ == uint16(netlink.Done) && multi && j == len(msgs)-1:
					done = true
				case m.typ == uint16(netlink.Error) && !multi && j == 1 && len(msgs) == 2:
					if r.Header.Flags&netlink.Acknowledge == 0 {
						t.Fatalf("%s: ACK not asked for", where)
					}
					if errno, err := checkError(m, msg); err != nil || errno != 0 {
						t.Fatalf("%s: ACK errno %v (%v)", where, errno, err)
					}
				case m.typ == wantType && (m.flags&uint16(netlink.Multi) != 0) == multi && (j == 0 || multi):
					if len(m.data) < 4 || m.data[0] != wantCmd {
						t.Fatalf("%s: reply % x, want command %d", where, m.data, wantCmd)
					}
					if err := walkTLVs(m.data[4:], 0); err != nil {
						t.Fatalf("%s: reply attributes: %v", where, err)
					}
					if r.Command == genl.CmdSetDevice && !r.Ctrl() {
						checkSetReply(t, where, r, m.data[4:])
					}
				default:
					t.Fatalf("%s: unexpected message %d of %d: type %d flags %#x", where, j, len(msgs), m.typ, m.flags)
				}
			}
			if !multi {
				if r.Header.Flags&netlink.Acknowledge != 0 && len(msgs) != 2 {
					t.Fatalf("%s: ACK asked for, %d messages", where, len(msgs))
				}
				break
			}
			if !done {
				if msgs = next(); msgs == nil {
					t.Fatalf("%s: multipart answer without NLMSG_DONE", where)
				}
			}
		}
	}
	if len(dgrams) != 0 {
		t.Fatalf("%d answer datagrams left over", len(dgrams))
	}
	return sets
}

// checkSetReply checks that a successful set-device reports the values
// it set.
func checkSetReply(t *testing.T, where string, r genl.Request, attrs []byte) {
	t.Helper()
	ad, err := netlink.NewAttributeDecoder(attrs)
	if err != nil {
		t.Fatalf("%s: %v", where, err)
	}
	got := map[uint16]uint32{}
	for ad.Next() {
		switch ad.Type() {
		case genl.AttrMRU, genl.AttrMTU, genl.AttrTimeoutMs:
			got[ad.Type()] = ad.Uint32()
		}
	}
	for typ, v := range map[uint16]*uint32{genl.AttrMRU: r.MRU, genl.AttrMTU: r.MTU, genl.AttrTimeoutMs: r.TimeoutMs} {
		if v != nil && got[typ] != *v {
			t.Errorf("%s: set-device of attribute %d to %d succeeded, the reply says %d", where, typ, *v, got[typ])
		}
	}
}
