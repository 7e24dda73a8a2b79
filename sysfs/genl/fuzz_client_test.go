package genl_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/gomhi/gomhi/mhi/testenv/fuzzcheck"
	"github.com/gomhi/gomhi/sysfs/genl"
)

// writeSeeds regenerates the FuzzClientReply seed corpus from the real
// server's answers: go test -run TestClientReplySeeds ./sysfs/genl -args
// -write-seeds.
var writeSeeds = flag.Bool("write-seeds", false, "rewrite the FuzzClientReply seed corpus in testdata/fuzz")

// FuzzClientReply plays a hostile server (or a squatter on the server's
// port) against the client's whole reply path: netlink framing, sequence
// and port checks, NLMSG_ERROR and extended acks, multipart dumps and the
// client's attribute decoding. The client runs Dial (nlctrl GETFAMILY),
// GetDevice, Devices, SetDevice, Stats, StatsMap, Channels and Dump; each request
// is answered with the next group of datagrams of the script, records of
// [flags][length, 16 bits little-endian][datagram]:
//
//	flags&1  set the sequence number of every message to the request's
//	flags&2  set the port id of every message to the client's
//	flags&4  the last datagram of this request's answer
//
// and then, whatever the group held, an NLMSG_ERROR (EPROTO) with the
// request's sequence number, so that a client still waiting gets an
// answer and a client already answered drops it as stale.
//
// After each input it checks: no panic; every call returns within
// clientBound and none times out; every error is a *genl.Error with its
// sentinel (the package's promise); and no descriptor or goroutine is
// left after Close.
func FuzzClientReply(f *testing.F) {
	for _, s := range append(handClientSeeds(), dumpClientSeeds()...) {
		f.Add(s.script)
	}
	port := uint32(0x10000000 + rand.Uint32N(0x60000000))
	var srv *netlink.Conn
	for range 100 {
		c, err := netlink.Dial(unix.NETLINK_USERSOCK, &netlink.Config{PID: port})
		if err == nil {
			srv = c
			break
		}
		port = 0x10000000 + rand.Uint32N(0x60000000)
	}
	if srv == nil {
		f.Fatal("no free port id")
	}
	defer srv.Close()
	rc, err := srv.SyscallConn()
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, script []byte) {
		runClientReplyInput(t, srv, rc, port, script)
	})
}

// clientBound bounds one FuzzClientReply input.
const clientBound = 10 * time.Second

// Script record flags.
const (
	recPatchSeq  = 1
	recPatchPort = 2
	recEndGroup  = 4
)

// record returns a datagram as a script record.
func record(flags byte, dgram []byte) []byte {
	rec := []byte{flags, 0, 0}
	binary.LittleEndian.PutUint16(rec[1:], uint16(len(dgram)))
	return append(rec, dgram...)
}

// fakeServer answers the client's requests from the script until stop is
// closed.
func fakeServer(srv *netlink.Conn, rc syscall.RawConn, script []byte, stop <-chan struct{}) error {
	buf := make([]byte, 1<<16)
	_ = srv.SetReadDeadline(time.Time{})
	go func() {
		<-stop
		_ = srv.SetReadDeadline(time.Unix(1, 0)) // wake the read up
	}()
	for {
		var (
			n    int
			from unix.Sockaddr
			rerr error
		)
		err := rc.Read(func(fd uintptr) bool {
			n, _, _, from, rerr = unix.Recvmsg(int(fd), buf, nil, unix.MSG_DONTWAIT)
			return rerr != unix.EAGAIN
		})
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return nil // stopped
		}
		if err != nil {
			return nil // closed
		}
		if rerr != nil {
			return rerr
		}
		sa, ok := from.(*unix.SockaddrNetlink)
		if !ok || n < nlHdr {
			return fmt.Errorf("request of %d bytes from %+v", n, from)
		}
		seq := ne.Uint32(buf[8:])
		send := func(b []byte) {
			_ = rc.Control(func(fd uintptr) {
				_ = unix.Sendto(int(fd), b, unix.MSG_DONTWAIT, sa)
			})
		}
		for len(script) >= 3 {
			flags := script[0]
			l := min(int(binary.LittleEndian.Uint16(script[1:])), len(script)-3)
			dgram := bytes.Clone(script[3 : 3+l])
			script = script[3+l:]
			for b := dgram; len(b) >= nlHdr; {
				if flags&recPatchSeq != 0 {
					ne.PutUint32(b[8:], seq)
				}
				if flags&recPatchPort != 0 {
					ne.PutUint32(b[12:], sa.Pid)
				}
				ml := int(ne.Uint32(b))
				if ml < nlHdr || ml > len(b) {
					break
				}
				b = b[min((ml+3)&^3, len(b)):]
			}
			send(dgram)
			if flags&recEndGroup != 0 {
				break
			}
		}
		term := make([]byte, nlHdr+4+nlHdr)
		ne.PutUint32(term, uint32(len(term)))
		ne.PutUint16(term[4:], uint16(netlink.Error))
		ne.PutUint32(term[8:], seq)
		ne.PutUint32(term[12:], sa.Pid)
		ne.PutUint32(term[16:], negErrno(unix.EPROTO))
		copy(term[20:], buf[:nlHdr])
		send(term)
	}
}

func runClientReplyInput(t *testing.T, srv *netlink.Conn, rc syscall.RawConn, port uint32, script []byte) {
	before := fuzzcheck.Snapshot()
	stop := make(chan struct{})
	served := make(chan error, 1)
	go func() { served <- fakeServer(srv, rc, script, stop) }()

	var errs []error
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := genl.Dial(genl.ClientOptions{Port: port, Timeout: 2 * time.Second})
		errs = append(errs, err)
		if err != nil {
			return
		}
		_, err = c.GetDevice("mhi0")
		errs = append(errs, err)
		_, err = c.Devices()
		errs = append(errs, err)
		mru := uint32(16384)
		_, err = c.SetDevice("mhi0", genl.SetRequest{MRU: &mru})
		errs = append(errs, err)
		_, err = c.Stats("mhi0")
		errs = append(errs, err)
		_, err = c.StatsMap("mhi0")
		errs = append(errs, err)
		_, err = c.Channels("mhi0")
		errs = append(errs, err)
		_, err = c.Dump("mhi0", genl.DumpOptions{}) // fuzz_dump_test.go
		errs = append(errs, err)
		if err := c.Close(); err != nil {
			errs = append(errs, err)
		}
	}()
	select {
	case <-done:
	case <-time.After(clientBound):
		t.Fatalf("the client did not finish within %v\n%s", clientBound, fuzzcheck.Goroutines())
	}
	close(stop)
	if err := <-served; err != nil {
		t.Fatalf("fake server: %v", err)
	}
	// Drop what the client left unread in the server's queue.
	for {
		var rerr error
		_ = rc.Control(func(fd uintptr) {
			_, _, _, _, rerr = unix.Recvmsg(int(fd), make([]byte, 1<<16), nil, unix.MSG_DONTWAIT)
		})
		if rerr != nil {
			break
		}
	}
	for i, err := range errs {
		if err == nil {
			continue
		}
		var ge *genl.Error
		if !errors.As(err, &ge) || ge.Kind == nil || !errors.Is(err, ge.Kind) {
			t.Errorf("call %d: error %v (%T) is not a *genl.Error with its sentinel", i, err, err)
			continue
		}
		if errors.Is(err, genl.ErrTimeout) {
			t.Errorf("call %d timed out (%v): every request was answered", i, err)
		}
	}
	before.Check(t)
}

// clientSeed is one FuzzClientReply input.
type clientSeed struct {
	name   string
	script []byte
}

// handClientSeeds are hand-made hostile answers.
func handClientSeeds() []clientSeed {
	const patch = recPatchSeq | recPatchPort
	family := func(name string, id uint16) []byte {
		ae := netlink.NewAttributeEncoder()
		ae.Uint16(unix.CTRL_ATTR_FAMILY_ID, id)
		ae.String(unix.CTRL_ATTR_FAMILY_NAME, name)
		ae.Uint32(unix.CTRL_ATTR_VERSION, 1)
		b, _ := ae.Encode()
		return answer(0x10, 0, unix.CTRL_CMD_NEWFAMILY, b)
	}
	dev := func(flags uint16, attrs []byte) []byte { return answer(genl.FamilyID, flags, genl.CmdGetDevice, attrs) }
	done := func() []byte { return nlAnswer(uint16(netlink.Done), uint16(netlink.Multi), []byte{0, 0, 0, 0}) }
	errMsg := func(errno unix.Errno, tlv []byte) []byte {
		p := ne.AppendUint32(nil, negErrno(errno))
		p = append(p, make([]byte, nlHdr)...)
		return nlAnswer(uint16(netlink.Error), uint16(netlink.AcknowledgeTLVs|netlink.Capped), append(p, tlv...))
	}
	ok := record(patch|recEndGroup, family("mhi", genl.FamilyID))
	nameAttr := attr(genl.AttrDevName, str("mhi0"))
	return []clientSeed{
		{"no_answers", nil},
		{"family_only", ok},
		{"two_families", record(patch|recEndGroup, append(family("mhi", genl.FamilyID), family("mhi", 0x4e)...))},
		{"family_wrong_name", record(patch|recEndGroup, family("xyz", genl.FamilyID))},
		{"family_id_zero", record(patch|recEndGroup, family("mhi", 0))},
		{"family_unpatched", record(recEndGroup, family("mhi", genl.FamilyID))},
		{"family_multi_no_done", record(patch|recEndGroup, nlAnswer(0x10, uint16(netlink.Multi), family("mhi", genl.FamilyID)[nlHdr:]))},
		{"ack_only", record(patch|recEndGroup, errMsg(0, nil))},
		{"enodev_with_tlvs", bytes.Join([][]byte{ok, record(patch|recEndGroup, errMsg(unix.ENODEV, attr(unix.NLMSGERR_ATTR_MSG, str("no device"))))}, nil)},
		{"error_bad_tlvs", bytes.Join([][]byte{ok, record(patch|recEndGroup, errMsg(unix.EINVAL, []byte{0xff, 0xff, 1, 0}))}, nil)},
		{"error_short", bytes.Join([][]byte{ok, record(patch|recEndGroup, nlAnswer(uint16(netlink.Error), 0, []byte{1}))}, nil)},
		{"device_two_replies", bytes.Join([][]byte{ok, record(patch|recEndGroup, append(dev(0, nameAttr), dev(0, nameAttr)...))}, nil)},
		{"device_overrun_attr", bytes.Join([][]byte{ok, record(patch|recEndGroup, dev(0, []byte{0x40, 0, 1, 0, 'm'}))}, nil)},
		{"device_no_genl_header", bytes.Join([][]byte{ok, record(patch|recEndGroup, nlAnswer(genl.FamilyID, 0, []byte{1}))}, nil)},
		{"device_bad_u32", bytes.Join([][]byte{ok, record(patch|recEndGroup, dev(0, attr(genl.AttrMRU, []byte{1, 2})))}, nil)},
		{"dump_garbage_nest", bytes.Join([][]byte{ok, record(patch|recEndGroup, dev(0, nameAttr)), record(patch, dev(uint16(netlink.Multi), attr(genl.AttrDevice|0x8000, []byte{9, 0, 1, 0, 0}))), record(patch|recEndGroup, done())}, nil)},
		{"dump_without_done", bytes.Join([][]byte{ok, record(patch|recEndGroup, dev(0, nameAttr)), record(patch|recEndGroup, dev(uint16(netlink.Multi), attr(genl.AttrDevice|0x8000, nameAttr)))}, nil)},
		{"done_with_error", bytes.Join([][]byte{ok, record(patch|recEndGroup, dev(0, nameAttr)), record(patch|recEndGroup, nlAnswer(uint16(netlink.Done), uint16(netlink.Multi), ne.AppendUint32(nil, negErrno(unix.EBUSY))))}, nil)},
		{"wrong_sequence", bytes.Join([][]byte{ok, record(recPatchPort|recEndGroup, dev(0, nameAttr))}, nil)},
		{"request_flag_in_answer", bytes.Join([][]byte{ok, record(patch|recEndGroup, answer(genl.FamilyID, uint16(netlink.Request), genl.CmdGetDevice, nameAttr))}, nil)},
		{"truncated_datagram", bytes.Join([][]byte{ok, record(patch|recEndGroup, dev(0, nameAttr)[:10])}, nil)},
		{"length_lies", bytes.Join([][]byte{ok, record(patch|recEndGroup, func() []byte { b := dev(0, nameAttr); ne.PutUint32(b, 1000); return b }())}, nil)},
	}
}

// negErrno is errno as nlmsgerr.error carries it.
func negErrno(errno unix.Errno) uint32 { return uint32(-int32(errno)) }

// nlAnswer builds one answer message with a zero sequence and port (the
// record flags patch them).
func nlAnswer(typ, flags uint16, payload []byte) []byte {
	b := make([]byte, nlHdr, nlHdr+len(payload)+3)
	ne.PutUint16(b[4:], typ)
	ne.PutUint16(b[6:], flags)
	b = append(b, payload...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	ne.PutUint32(b, uint32(len(b)))
	return b
}

// answer builds a generic-netlink answer.
func answer(typ, flags uint16, cmd uint8, attrs []byte) []byte {
	return nlAnswer(typ, flags, append([]byte{cmd, genl.FamilyVersion, 0, 0}, attrs...))
}

// TestClientReplySeeds records the real server's answers to the requests
// FuzzClientReply's client sends, as a seed that walks every call
// successfully (checked here by replaying it), and with -write-seeds
// writes the corpus.
func TestClientReplySeeds(t *testing.T) {
	tr, _ := newTree(t, false)
	srv, client := fuzzServerPair(t, tr)
	dev := attr(genl.AttrDevName, str("mhi0"))
	dump := req | uint16(netlink.Dump)
	var script []byte
	for i, r := range [][]byte{
		nlmsg(0x10, req, 1, unix.CTRL_CMD_GETFAMILY, attr(unix.CTRL_ATTR_FAMILY_NAME, str("mhi"))),
		nlmsg(genl.FamilyID, req, 2, genl.CmdGetDevice, dev),
		nlmsg(genl.FamilyID, dump, 3, genl.CmdGetDevice),
		nlmsg(genl.FamilyID, req, 4, genl.CmdSetDevice, dev, attr(genl.AttrMRU, u32b(16384))),
		nlmsg(genl.FamilyID, req, 5, genl.CmdGetStats, dev),
		nlmsg(genl.FamilyID, req, 6, genl.CmdGetStats, dev),
		nlmsg(genl.FamilyID, dump, 7, genl.CmdDumpChannels, dev),
	} {
		srv.HandleDatagram(r, client.port, &unix.Ucred{})
		dgrams := client.drain(t, srv.Port())
		if len(dgrams) == 0 {
			t.Fatalf("request %d: no answer", i)
		}
		for j, d := range dgrams {
			flags := byte(recPatchSeq | recPatchPort)
			if j == len(dgrams)-1 {
				flags |= recEndGroup
			}
			script = append(script, record(flags, d)...)
		}
	}
	// Replayed, the recording answers every call.
	c, fake, port := replayClient(t)
	stop := make(chan struct{})
	defer close(stop)
	go func() { _ = fakeServer(fake, c, script, stop) }()
	cl, err := genl.Dial(genl.ClientOptions{Port: port, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if d, err := cl.GetDevice("mhi0"); err != nil || d.Name != "mhi0" {
		t.Fatalf("GetDevice: %+v %v", d, err)
	}
	if ds, err := cl.Devices(); err != nil || len(ds) != 1 {
		t.Fatalf("Devices: %+v %v", ds, err)
	}
	mru := uint32(16384)
	if d, err := cl.SetDevice("mhi0", genl.SetRequest{MRU: &mru}); err != nil || d.MRU != mru {
		t.Fatalf("SetDevice: %+v %v", d, err)
	}
	if st, err := cl.Stats("mhi0"); err != nil || len(st) == 0 {
		t.Fatalf("Stats: %d %v", len(st), err)
	}
	if _, err := cl.StatsMap("mhi0"); err != nil {
		t.Fatalf("StatsMap: %v", err)
	}
	if chs, err := cl.Channels("mhi0"); err != nil || len(chs) == 0 {
		t.Fatalf("Channels: %d %v", len(chs), err)
	}
	if !*writeSeeds {
		return
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzClientReply")
	for _, s := range append(handClientSeeds(), clientSeed{"real_server_session", script}) {
		if err := fuzzcheck.WriteCorpus(dir, s.name, s.script); err != nil {
			t.Fatal(err)
		}
	}
}

// replayClient binds a fake server socket on a free port.
func replayClient(t *testing.T) (syscall.RawConn, *netlink.Conn, uint32) {
	t.Helper()
	for range 100 {
		port := 0x10000000 + rand.Uint32N(0x60000000)
		c, err := netlink.Dial(unix.NETLINK_USERSOCK, &netlink.Config{PID: port})
		if err != nil {
			continue
		}
		t.Cleanup(func() { _ = c.Close() })
		rc, err := c.SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		return rc, c, port
	}
	t.Fatal("no free port id")
	return nil, nil, 0
}
