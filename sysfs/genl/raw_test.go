package genl_test

import (
	"encoding/binary"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gomhi/gomhi/sysfs/genl"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

var ne = binary.NativeEndian

// rawClient sends hand-made datagrams to the server and reads its answers.
type rawClient struct {
	t    *testing.T
	conn *netlink.Conn
	rc   syscall.RawConn
	dst  uint32
}

func newRawClient(t *testing.T, dst uint32) *rawClient {
	t.Helper()
	conn, err := netlink.Dial(unix.NETLINK_USERSOCK, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	rc, err := conn.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	return &rawClient{t: t, conn: conn, rc: rc, dst: dst}
}

func (r *rawClient) send(b []byte) {
	r.t.Helper()
	var err error
	if cerr := r.rc.Control(func(fd uintptr) {
		err = unix.Sendto(int(fd), b, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Pid: r.dst})
	}); cerr != nil {
		r.t.Fatal(cerr)
	}
	if err != nil {
		r.t.Fatal(err)
	}
}

// recv returns the next datagram, or nil after timeout.
func (r *rawClient) recv(timeout time.Duration) []byte {
	r.t.Helper()
	_ = r.conn.SetReadDeadline(time.Now().Add(timeout))
	buf := make([]byte, 1<<16)
	var n int
	var rerr error
	err := r.rc.Read(func(fd uintptr) bool {
		n, _, _, _, rerr = unix.Recvmsg(int(fd), buf, nil, unix.MSG_DONTWAIT)
		return rerr != unix.EAGAIN
	})
	if err != nil {
		return nil
	}
	if rerr != nil {
		r.t.Fatal(rerr)
	}
	return buf[:n]
}

// nlError is a parsed NLMSG_ERROR.
type nlError struct {
	flags   uint16
	seq     uint32
	errno   unix.Errno
	echoed  []byte // the echoed request (header, plus payload unless capped)
	msg     string
	offs    uint32
	hasOffs bool
	miss    uint32
}

func parseError(t *testing.T, b []byte) nlError {
	t.Helper()
	if len(b) < 36 || ne.Uint16(b[4:]) != uint16(netlink.Error) {
		t.Fatalf("not an NLMSG_ERROR: % x", b)
	}
	l := int(ne.Uint32(b))
	if l != len(b) {
		t.Fatalf("error length %d in a %d-byte datagram", l, len(b))
	}
	e := nlError{flags: ne.Uint16(b[6:]), seq: ne.Uint32(b[8:]), errno: unix.Errno(-int32(ne.Uint32(b[16:])))}
	inner := b[20:36]
	echoLen := nlHdr
	if e.flags&uint16(netlink.Capped) == 0 {
		echoLen = int(ne.Uint32(inner))
	}
	e.echoed = b[20 : 20+echoLen]
	tlv := b[20+(echoLen+3)&^3:]
	if e.flags&uint16(netlink.AcknowledgeTLVs) != 0 {
		ad, err := netlink.NewAttributeDecoder(tlv)
		if err != nil {
			t.Fatal(err)
		}
		for ad.Next() {
			switch ad.Type() {
			case unix.NLMSGERR_ATTR_MSG:
				e.msg = ad.String()
			case unix.NLMSGERR_ATTR_OFFS:
				e.offs, e.hasOffs = ad.Uint32(), true
			case 5: // NLMSGERR_ATTR_MISS_TYPE
				e.miss = ad.Uint32()
			}
		}
		if err := ad.Err(); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

const nlHdr = 16

// nlmsg builds a request: header, genl header and attributes.
func nlmsg(typ, flags uint16, seq uint32, cmd uint8, attrs ...[]byte) []byte {
	b := make([]byte, 20)
	ne.PutUint16(b[4:], typ)
	ne.PutUint16(b[6:], flags)
	ne.PutUint32(b[8:], seq)
	ne.PutUint32(b[12:], 0xdead) // a lie the server must not trust
	b[16], b[17] = cmd, 1
	for _, a := range attrs {
		b = append(b, a...)
	}
	ne.PutUint32(b, uint32(len(b)))
	return b
}

// attr builds one padded TLV.
func attr(typ uint16, p []byte) []byte {
	b := ne.AppendUint16(nil, uint16(4+len(p)))
	b = ne.AppendUint16(b, typ)
	b = append(b, p...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

func str(s string) []byte { return append([]byte(s), 0) }

func u32b(v uint32) []byte { return ne.AppendUint32(nil, v) }

const req = uint16(netlink.Request)

func TestMalformedRequests(t *testing.T) {
	tr, n := newTree(t, false)
	srv := startServer(t, tr)
	rc := newRawClient(t, srv.Port())
	fam := genl.FamilyID
	dev := attr(genl.AttrDevName, str("mhi0"))

	badLen := nlmsg(fam, req, 7, genl.CmdGetDevice, dev)
	ne.PutUint32(badLen, 200)
	shortLen := nlmsg(fam, req, 7, genl.CmdGetDevice, dev)
	ne.PutUint32(shortLen, 8)
	overrun := nlmsg(fam, req, 7, genl.CmdGetDevice, dev)
	ne.PutUint16(overrun[20:], 40) // nla_len beyond the message
	trailing := append(nlmsg(fam, req, 7, genl.CmdGetDevice, dev), 1, 2)
	ne.PutUint32(trailing, uint32(len(trailing)))
	genlShort := nlmsg(fam, req, 7, genl.CmdGetDevice)[:18]
	ne.PutUint32(genlShort, 18)

	for _, tc := range []struct {
		name   string
		b      []byte
		errno  unix.Errno
		msg    string
		offs   uint32 // 0: no offset expected
		capped bool
	}{
		{"truncated header", []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, unix.EINVAL, "truncated netlink header", 0, true},
		{"length beyond datagram", badLen, unix.EINVAL, "exceeds", 0, true},
		{"length below header", shortLen, unix.EINVAL, "shorter than", 0, true},
		{"truncated genl header", genlShort, unix.EINVAL, "truncated generic netlink header", 0, false},
		{"attribute overrun", overrun, unix.EINVAL, "does not fit", 20, false},
		{"trailing bytes", trailing, unix.EINVAL, "left over", 32, false},
		{"unknown attribute type", nlmsg(fam, req, 7, genl.CmdGetDevice, dev, attr(99, u32b(1))), unix.EINVAL, "unknown attribute type 99", 32, false},
		{"reply-only attribute", nlmsg(fam, req, 7, genl.CmdGetDevice, dev, attr(genl.AttrState, str("M0"))), unix.EINVAL, "not valid in get-device", 32, false},
		{"mru in a get", nlmsg(fam, req, 7, genl.CmdGetDevice, dev, attr(genl.AttrMRU, u32b(1))), unix.EINVAL, "not valid", 32, false},
		{"oversized string", nlmsg(fam, req, 7, genl.CmdGetDevice, attr(genl.AttrDevName, str(strings.Repeat("x", 300)))), unix.ERANGE, "longer than the 63-byte limit", 20, false},
		{"embedded NUL", nlmsg(fam, req, 7, genl.CmdGetDevice, attr(genl.AttrDevName, []byte("mh\x00i0"))), unix.EINVAL, "embedded NUL", 20, false},
		{"wrong attribute size", nlmsg(fam, req, 7, genl.CmdSetDevice, dev, attr(genl.AttrMRU, []byte{1, 2})), unix.EINVAL, "mru: attribute is 2 bytes, want 4", 32, false},
		{"missing dev-name", nlmsg(fam, req, 7, genl.CmdGetStats), unix.EINVAL, "needs the dev-name attribute", 0, false},
		{"unknown command", nlmsg(fam, req, 7, 77, dev), unix.EOPNOTSUPP, "unknown command 77", 0, false},
		{"unknown family", nlmsg(0x99, req, 7, 1, dev), unix.ENOENT, "no generic netlink family", 0, false},
		{"unknown device", nlmsg(fam, req, 7, genl.CmdGetDevice, attr(genl.AttrDevName, str("mhi7"))), unix.ENODEV, `no MHI device "mhi7"`, 20, false},
		{"path in dev-name", nlmsg(fam, req, 7, genl.CmdGetDevice, attr(genl.AttrDevName, str("../devices"))), unix.EINVAL, "not a valid device name", 20, false},
		{"nlctrl other command", nlmsg(0x10, req, 7, 6), unix.EOPNOTSUPP, "only GETFAMILY", 0, false},
		{"nlctrl bad family id size", nlmsg(0x10, req, 7, 3, attr(1, []byte{1, 2, 3, 4})), unix.EINVAL, "family-id", 20, false},
		{"out-of-range mru", nlmsg(fam, req, 7, genl.CmdSetDevice, dev, attr(genl.AttrMRU, u32b(70000))), unix.EINVAL, "mru: 70000 outside the valid range 256..65535", 32, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rc.t = t
			rc.send(tc.b)
			b := rc.recv(2 * time.Second)
			if b == nil {
				t.Fatal("no answer")
			}
			e := parseError(t, b)
			if e.errno != tc.errno || !strings.Contains(e.msg, tc.msg) {
				t.Errorf("errno %v message %q, want %v with %q", e.errno, e.msg, tc.errno, tc.msg)
			}
			if tc.offs != 0 && (!e.hasOffs || e.offs != tc.offs) {
				t.Errorf("offset %d (present %v), want %d", e.offs, e.hasOffs, tc.offs)
			}
			if tc.offs == 0 && e.hasOffs {
				t.Errorf("unexpected offset %d", e.offs)
			}
			if e.flags&uint16(netlink.AcknowledgeTLVs) == 0 {
				t.Errorf("no NLM_F_ACK_TLVS in flags %#x", e.flags)
			}
			if got := e.flags&uint16(netlink.Capped) != 0; got != tc.capped {
				t.Errorf("capped %v, want %v", got, tc.capped)
			}
			if len(tc.b) >= nlHdr && e.seq != ne.Uint32(tc.b[8:]) {
				t.Errorf("seq %d, want %d", e.seq, ne.Uint32(tc.b[8:]))
			}
			if !tc.capped && string(e.echoed) != string(tc.b[:ne.Uint32(tc.b)]) {
				t.Errorf("echoed request differs")
			}
		})
	}
	rc.t = t
	if n.MRU() != 32768 {
		t.Errorf("MRU changed to %d", n.MRU())
	}
	// The server keeps serving.
	c := dial(t, srv.Port())
	if _, err := c.GetDevice("mhi0"); err != nil {
		t.Fatalf("after malformed requests: %v", err)
	}
}

func TestRawAckAndIgnored(t *testing.T) {
	tr, _ := newTree(t, false)
	srv := startServer(t, tr)
	rc := newRawClient(t, srv.Port())
	dev := attr(genl.AttrDevName, str("mhi0"))

	// A message without NLM_F_REQUEST (say, someone's stray error) is not
	// answered: the next answer is the GET's.
	rc.send(nlmsg(genl.FamilyID, 0, 1, genl.CmdGetDevice, dev))
	// NLMSG_NOOP with an ACK request gets a bare ACK.
	noop := nlmsg(uint16(netlink.Noop), req|uint16(netlink.Acknowledge), 2, 0)
	rc.send(noop)
	e := parseError(t, rc.recv(2*time.Second))
	if e.errno != 0 || e.seq != 2 || e.flags&uint16(netlink.Capped) == 0 {
		t.Errorf("ack to NOOP: %+v", e)
	}
	// A GET with NLM_F_ACK gets the reply and then an ACK; two requests in
	// one datagram are both answered, in order.
	two := append(nlmsg(genl.FamilyID, req|uint16(netlink.Acknowledge), 3, genl.CmdGetDevice, dev),
		nlmsg(genl.FamilyID, req, 4, genl.CmdGetDevice, attr(genl.AttrDevName, str("nope")))...)
	rc.send(two)
	b := rc.recv(2 * time.Second)
	if ne.Uint16(b[4:]) != genl.FamilyID || ne.Uint32(b[8:]) != 3 {
		t.Fatalf("first answer: % x", b[:16])
	}
	if ne.Uint32(b[12:]) != rc.conn.PID() {
		t.Errorf("reply nlmsg_pid %#x, want the sender's real port %#x", ne.Uint32(b[12:]), rc.conn.PID())
	}
	l := int(ne.Uint32(b))
	ack := parseError(t, b[(l+3)&^3:])
	if ack.errno != 0 || ack.seq != 3 {
		t.Errorf("ack after GET: %+v", ack)
	}
	e = parseError(t, rc.recv(2*time.Second))
	if e.errno != unix.ENODEV || e.seq != 4 {
		t.Errorf("second request: %+v", e)
	}
	if b := rc.recv(100 * time.Millisecond); b != nil {
		t.Errorf("unexpected extra answer: % x", b)
	}
}
