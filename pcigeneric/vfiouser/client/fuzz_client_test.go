package client

import (
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gomhi/gomhi/mhi/testenv/fuzzcheck"
	"github.com/gomhi/gomhi/mhi/wire"
	"github.com/gomhi/gomhi/pcigeneric/vfiouser/internal/vutest"
	"github.com/gomhi/gomhi/pcigeneric/vfiouser/protocol"
)

// FuzzClient plays a hostile vfio-user server against the client
// transport (New and then the transport's calls). The input is a
// script of what the server sends, records of [flags][length, 16 bits
// little-endian][bytes]:
//
//	flags&0x01  answer: wait for the client's next command that expects
//	            a reply, and send the bytes in answer to it
//	flags&0x02  patch the message ID with the command's
//	flags&0x04  patch the command with the command's
//	flags&0x08  patch the size field with the record's length
//	flags>>4&7  eventfds attached to the record's first byte
//
// Records without 0x01 go out at once: server requests such as DMA_READ
// and DMA_WRITE, stray replies, garbage. opts selects the client's
// options (see fuzzClientOptions). When the script ends the server shuts
// its side down.
//
// After each input it checks: no panic; New, the calls after it and
// Close return within clientBound and never time out (the fake server
// answers or hangs up, so a timeout means the client dropped an answer);
// the client's messages decode; its answers to the server's requests come
// in order, each with the request's ID and command, EINVAL for a request
// that does not decode, ENOSYS for a command it does not serve, and for
// DMA inside its memory the bytes a model of the memory predicts (EFAULT
// outside); and no descriptor, goroutine or memory mapping is left after
// Close.
func FuzzClient(f *testing.F) {
	for _, s := range clientSeeds() {
		f.Add(s.script, s.opts)
	}
	f.Fuzz(func(t *testing.T, script []byte, opts uint8) {
		runClientInput(t, script, opts)
	})
}

// writeSeeds regenerates FuzzClient's hand-made seeds in testdata/fuzz
// (the server's TestFuzzSeeds writes the recorded sessions there): go test
// -run TestFuzzSeeds ./pcigeneric/vfiouser ./pcigeneric/vfiouser/client
// -args -write-seeds.
var writeSeeds = flag.Bool("write-seeds", false, "rewrite FuzzClient's hand-made seeds in testdata/fuzz")

// TestFuzzSeeds checks that FuzzClient's hand-made seeds in testdata/fuzz
// are what clientSeeds builds (a seed that drifted from the code or went
// missing fails, naming it); with -write-seeds it rewrites them.
func TestFuzzSeeds(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzClient")
	if *writeSeeds {
		for _, s := range clientSeeds() {
			if err := fuzzcheck.WriteCorpus(dir, s.name, s.script, s.opts); err != nil {
				t.Fatal(err)
			}
		}
		return
	}
	tmp := t.TempDir()
	for _, s := range clientSeeds() {
		if err := fuzzcheck.WriteCorpus(tmp, s.name, s.script, s.opts); err != nil {
			t.Fatal(err)
		}
		want, err := os.ReadFile(filepath.Join(tmp, s.name))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(dir, s.name))
		if err != nil {
			t.Errorf("seed %s: %v (rewrite the seeds: go test -run TestFuzzSeeds ./pcigeneric/vfiouser/client -args -write-seeds)", s.name, err)
			continue
		}
		if !bytes.Equal(got, want) {
			t.Errorf("seed %s in %s differs from what clientSeeds builds (rewrite the seeds with -write-seeds)", s.name, dir)
		}
	}
}

// clientBound bounds one FuzzClient input.
const clientBound = 5 * time.Second

// fuzzClientOptions decodes the opts byte: bit 0 MSIX, bit 1
// NoPostedWrites, bit 2 NoDMAFD, bits 3-5 the memory size (64 KiB << n).
func fuzzClientOptions(b uint8) Options {
	return Options{
		MSIX:           b&1 != 0,
		NoPostedWrites: b&2 != 0,
		NoDMAFD:        b&4 != 0,
		Memory:         64 << 10 << (b >> 3 & 7),
		Timeout:        2 * time.Second,
	}
}

// clientSeed is one FuzzClient input.
type clientSeed struct {
	name   string
	script []byte
	opts   uint8
}

// clientSeeds are hand-made scripts: a whole correct setup answered the
// way the server answers, then variants that break it at each step.
func clientSeeds() []clientSeed {
	reply := func(cmd protocol.Command, body any) []byte {
		return vutest.ScriptRecord(protocol.EncodeMessage(0, cmd, protocol.FlagReply, 0, body), 0, true)
	}
	errReply := func(cmd protocol.Command, errno unix.Errno) []byte {
		return vutest.ScriptRecord(protocol.EncodeMessage(0, cmd, protocol.FlagReply|protocol.FlagError, uint32(errno), nil), 0, true)
	}
	raw := func(flags byte, msg []byte) []byte {
		rec := []byte{flags, 0, 0}
		binary.LittleEndian.PutUint16(rec[1:], uint16(len(msg)))
		return append(rec, msg...)
	}
	// The config header the server presents for these IDs: capability
	// list, class 0xff0000, 64-bit BAR0 and BAR2, MSI the first capability.
	hdr := make([]byte, 64)
	le := binary.LittleEndian
	le.PutUint16(hdr[protocol.CfgVendorID:], 0x17cb)
	le.PutUint16(hdr[protocol.CfgDeviceID:], 0x0306)
	le.PutUint16(hdr[protocol.CfgStatus:], 0x0010)
	hdr[protocol.CfgClassProg+2] = 0xff
	le.PutUint32(hdr[protocol.CfgBAR0:], 0x4)
	le.PutUint32(hdr[protocol.CfgBAR2:], 0x4)
	hdr[protocol.CfgCapPtr] = protocol.CfgMSI
	setup := [][]byte{
		reply(protocol.CmdVersion, protocol.Version{Capabilities: protocol.ServerCapabilities}),
		reply(protocol.CmdDeviceGetInfo, protocol.DeviceInfo{Argsz: 16, Flags: protocol.DeviceFlagPCI | protocol.DeviceFlagReset, NumRegions: protocol.NumRegions, NumIRQs: protocol.NumIRQs}),
		reply(protocol.CmdRegionInfo, protocol.RegionInfo{Argsz: 32, Flags: protocol.RegionFlagRead | protocol.RegionFlagWrite, Index: protocol.RegionBAR0, Size: 4096}),
		reply(protocol.CmdRegionInfo, protocol.RegionInfo{Argsz: 32, Flags: protocol.RegionFlagRead | protocol.RegionFlagWrite, Index: protocol.RegionConfig, Size: protocol.ConfigSize}),
		reply(protocol.CmdRegionRead, protocol.RegionAccess{Region: protocol.RegionConfig, Count: 64, Data: hdr}),
		reply(protocol.CmdIRQInfo, protocol.IRQInfo{Argsz: 16, Flags: protocol.IRQInfoEventfd | protocol.IRQInfoNoResize, Index: protocol.IRQMSI, Count: 32}),
		reply(protocol.CmdRegionWrite, protocol.RegionAccess{Region: protocol.RegionConfig, Offset: protocol.CfgCommand, Count: 2}),
		reply(protocol.CmdRegionWrite, protocol.RegionAccess{Region: protocol.RegionConfig, Offset: protocol.CfgMSI + 2, Count: 2}),
		reply(protocol.CmdDMAMap, nil),
		reply(protocol.CmdSetIRQs, nil),
		reply(protocol.CmdSetIRQs, nil),
	}
	join := func(recs ...[]byte) []byte { return bytes.Join(recs, nil) }
	afterSetup := func(recs ...[]byte) []byte { return join(append(append([][]byte{}, setup...), recs...)...) }
	base := uint64(defaultBase)
	dma := func(id uint16, cmd protocol.Command, flags uint32, a protocol.DMAAccess) []byte {
		return raw(vutest.RecPatchSize, protocol.EncodeMessage(id, cmd, flags, 0, a))
	}
	read32 := reply(protocol.CmdRegionRead, protocol.RegionAccess{Region: protocol.RegionBAR0, Count: 4, Data: []byte{0, 0, 0, 1}})
	seeds := []clientSeed{
		{"setup", afterSetup(read32, reply(protocol.CmdRegionRead, protocol.RegionAccess{Region: protocol.RegionConfig, Count: 4, Data: hdr[:4]})), 4 << 3},
		{"setup_busy", errReply(protocol.CmdVersion, unix.EBUSY), 0},
		{"version_major_1", reply(protocol.CmdVersion, protocol.Version{Major: 1}), 0},
		{"version_bad_caps", join(reply(protocol.CmdVersion, protocol.Version{Capabilities: `{"capabilities":{"max_msg_fds":-1}`}), setup[1]), 0},
		{"not_pci", join(setup[0], reply(protocol.CmdDeviceGetInfo, protocol.DeviceInfo{Argsz: 16})), 0},
		{"bar0_tiny", join(setup[0], setup[1], reply(protocol.CmdRegionInfo, protocol.RegionInfo{Argsz: 32, Flags: 3, Size: 16})), 0},
		{"config_short_read", join(append(setup[:4:4], reply(protocol.CmdRegionRead, protocol.RegionAccess{Region: protocol.RegionConfig, Count: 4, Data: []byte{1, 2, 3, 4}}))...), 0},
		{"no_vectors", join(append(setup[:5:5], reply(protocol.CmdIRQInfo, protocol.IRQInfo{Argsz: 16, Index: protocol.IRQMSI}))...), 0},
		{"wrong_command", join(setup[0], raw(vutest.RecAnswer|vutest.RecPatchID|vutest.RecPatchSize, protocol.EncodeMessage(0, protocol.CmdDeviceReset, protocol.FlagReply, 0, nil))), 0},
		{"malformed_reply", join(setup[0], raw(vutest.RecAnswer|vutest.RecPatchID|vutest.RecPatchCmd, protocol.EncodeMessage(0, protocol.CmdDeviceGetInfo, protocol.FlagReply, 0, protocol.DeviceInfo{Argsz: 16})[:20])), 0},
		{"malformed_reply_body", join(setup[0], raw(vutest.RecAnswer|vutest.RecPatchID|vutest.RecPatchCmd|vutest.RecPatchSize, protocol.EncodeMessage(0, protocol.CmdDeviceGetInfo, protocol.FlagReply, 0, protocol.Version{})), setup[2]), 0},
		{"reply_with_fds", join(setup[0], raw(vutest.RecAnswer|vutest.RecPatchID|vutest.RecPatchCmd|vutest.RecPatchSize|2<<4, protocol.EncodeMessage(0, protocol.CmdDeviceGetInfo, protocol.FlagReply, 0, protocol.DeviceInfo{Argsz: 16, Flags: 2, NumRegions: 9, NumIRQs: 5}))), 0},
		{"wrong_id", join(setup[0], raw(vutest.RecAnswer|vutest.RecPatchCmd|vutest.RecPatchSize, protocol.EncodeMessage(77, protocol.CmdDeviceGetInfo, protocol.FlagReply, 0, protocol.DeviceInfo{Argsz: 16}))), 0},
		{"broken_header", join(setup[0], raw(0, []byte{1, 0, 1, 0, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})), 0},
		{"dma_before_map", join(dma(1, protocol.CmdDMARead, 0, protocol.DMAAccess{Address: base, Count: 4}), setup[0]), 0},
		{"dma_inside_outside", afterSetup(
			dma(1, protocol.CmdDMAWrite, 0, protocol.DMAAccess{Address: base + 8, Count: 4, Data: []byte{1, 2, 3, 4}}),
			dma(2, protocol.CmdDMARead, 0, protocol.DMAAccess{Address: base + 6, Count: 8}),
			dma(3, protocol.CmdDMARead, 0, protocol.DMAAccess{Address: base + (1 << 20) - 2, Count: 4}),
			dma(4, protocol.CmdDMAWrite, 0, protocol.DMAAccess{Address: base - 1, Count: 1, Data: []byte{9}}),
			dma(5, protocol.CmdDMARead, 0, protocol.DMAAccess{Address: ^uint64(0) - 3, Count: 3}),
			dma(6, protocol.CmdDMAWrite, protocol.FlagNoReply, protocol.DMAAccess{Address: base, Count: 2, Data: []byte{7, 7}}),
			dma(7, protocol.CmdDMARead, 0, protocol.DMAAccess{Address: base, Count: protocol.MaxDataXfer}),
			raw(vutest.RecPatchSize, protocol.EncodeMessage(8, protocol.CmdDeviceReset, 0, 0, nil)),
			raw(vutest.RecPatchSize, protocol.EncodeMessage(9, protocol.CmdDMARead, 0, 0, protocol.DMAAccess{Address: base, Count: 4, Data: []byte{1}})),
			read32), 4 << 3},
		{"stray_replies", afterSetup(
			raw(vutest.RecPatchSize, protocol.EncodeMessage(999, protocol.CmdRegionRead, protocol.FlagReply, 0, protocol.RegionAccess{Count: 4, Data: []byte{1, 2, 3, 4}})),
			raw(vutest.RecPatchSize, protocol.EncodeMessage(1000, protocol.CmdVersion, protocol.FlagReply|protocol.FlagError, 5, nil)),
			read32), 4 << 3},
		{"error_replies_after_setup", afterSetup(errReply(protocol.CmdRegionRead, unix.EIO), errReply(protocol.CmdRegionWrite, unix.EFAULT)), 4<<3 | 2},
	}
	return seeds
}

// clientReq is a request the fake server sent that the client must
// answer, and what the answer must be.
type clientReq struct {
	id    uint16
	cmd   protocol.Command
	errno unix.Errno // the error reply required; 0: a successful reply
	data  []byte     // for a DMA_READ, the bytes the reply must carry
	check bool       // false: the outcome depends on timing; only the ID and command are checked
}

// fuzzServer is the fake server of one FuzzClient input.
type fuzzServer struct {
	conn *net.UnixConn
	w    *protocol.Conn
	opts Options

	cmds chan protocol.Header // the client's commands that expect a reply

	mu       sync.Mutex
	mapSeen  bool               // the client's DMA_MAP was received: its memory is served
	shadow   map[uint64]byte    // bytes of the client's memory written by DMA_WRITE
	reqs     []clientReq        // requests sent that expect an answer, in order
	answers  []protocol.Message // the client's answers, in order
	problems []string
	framing  bool // the fake server broke the framing: the client stops reading
}

func (s *fuzzServer) problem(format string, args ...any) {
	s.mu.Lock()
	s.problems = append(s.problems, fmt.Sprintf(format, args...))
	s.mu.Unlock()
}

// readLoop reads the client's messages: commands expecting a reply go to
// cmds, answers to the server's requests are recorded.
func (s *fuzzServer) readLoop() {
	defer close(s.cmds)
	for {
		hdr, payload, fds, err := s.w.ReadMessage()
		protocol.CloseFDs(fds)
		if err != nil {
			if errors.Is(err, protocol.ErrFraming) {
				s.problem("client sent a broken header: %v", err)
			}
			return
		}
		nfds := len(fds)
		m, err := protocol.DecodeMessage(hdr, payload, nfds)
		if err != nil {
			s.problem("client message %+v with %d descriptors does not decode: %v", m.Header, nfds, err)
			continue
		}
		h := m.Header
		switch {
		case h.IsReply():
			s.mu.Lock()
			s.answers = append(s.answers, m)
			s.mu.Unlock()
		case h.Flags&protocol.FlagNoReply != 0:
			if h.Cmd != protocol.CmdRegionWrite {
				s.problem("client posted %s", h.Cmd)
			}
		default:
			if h.Cmd == protocol.CmdDMAMap {
				s.mu.Lock()
				s.mapSeen = true
				s.mu.Unlock()
			}
			s.cmds <- h
		}
	}
}

// model updates the memory model for one whole message the server sent
// and returns the request to expect an answer to, if any.
func (s *fuzzServer) model(msg []byte, nfds int) (clientReq, bool) {
	h, _ := protocol.DecodeHeader(msg[:protocol.HeaderSize])
	if h.IsReply() {
		return clientReq{}, false
	}
	req := clientReq{id: h.ID, cmd: h.Cmd, check: nfds <= protocol.MaxFDs}
	m, err := protocol.DecodeMessage(msg[:protocol.HeaderSize], msg[protocol.HeaderSize:], nfds)
	switch {
	case err != nil:
		req.errno = unix.EINVAL
	case h.Cmd != protocol.CmdDMARead && h.Cmd != protocol.CmdDMAWrite:
		req.errno = unix.ENOSYS
	default:
		a := m.Body.(protocol.DMAAccess)
		s.mu.Lock()
		mapped := s.mapSeen
		s.mu.Unlock()
		base, size := s.opts.Base, uint64(s.opts.Memory)
		inside := a.Address >= base && a.Count <= size && a.Address-base <= size-a.Count
		switch {
		case !mapped:
			req.check = false // the client may or may not have its memory yet
		case !inside:
			req.errno = unix.EFAULT
		case h.Cmd == protocol.CmdDMAWrite:
			for i, b := range a.Data {
				s.shadow[a.Address+uint64(i)] = b
			}
		default:
			req.data = make([]byte, a.Count)
			for i := range req.data {
				req.data[i] = s.shadow[a.Address+uint64(i)]
			}
		}
	}
	return req, h.Flags&protocol.FlagNoReply == 0
}

// run plays the script, keeping a model of the stream the client parses.
func (s *fuzzServer) run(script []byte) {
	defer func() { _ = s.conn.CloseWrite() }()
	var (
		stream      []byte // sent, not yet framed into whole messages
		streamFDs   int    // descriptors attached inside stream's first message
		outstanding *protocol.Header
	)
	for len(script) >= 3 {
		flags := script[0]
		n := min(int(binary.LittleEndian.Uint16(script[1:])), len(script)-3)
		msg := bytes.Clone(script[3 : 3+n])
		script = script[3+n:]
		if flags&vutest.RecAnswer != 0 && outstanding == nil {
			h, ok := <-s.cmds
			if !ok {
				return // the client is gone
			}
			outstanding = &h
		}
		if len(msg) >= protocol.HeaderSize {
			if flags&vutest.RecPatchID != 0 && outstanding != nil {
				binary.LittleEndian.PutUint16(msg[0:], outstanding.ID)
			}
			if flags&vutest.RecPatchCmd != 0 && outstanding != nil {
				binary.LittleEndian.PutUint16(msg[2:], uint16(outstanding.Cmd))
			}
			if flags&vutest.RecPatchSize != 0 {
				binary.LittleEndian.PutUint32(msg[4:], uint32(len(msg)))
			}
		}
		var fds []int
		if len(msg) > 0 {
			for range flags >> 4 & 7 {
				fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
				if err != nil {
					s.problem("eventfd: %v", err)
					break
				}
				fds = append(fds, fd)
			}
		}
		err := s.w.WriteMessage(msg, fds)
		protocol.CloseFDs(fds)
		if err != nil {
			return // the client hung up
		}
		// The descriptors arrive with the message holding the record's
		// first byte: stream's first message (stream holds only the
		// unfinished message). Then frame every whole message.
		stream = append(stream, msg...)
		streamFDs += len(fds)
		for len(stream) >= protocol.HeaderSize {
			h, err := protocol.DecodeHeader(stream[:protocol.HeaderSize])
			if err != nil {
				s.mu.Lock()
				s.framing = true
				s.mu.Unlock()
				return // the client stops reading here
			}
			if int(h.Size) > len(stream) {
				break
			}
			whole := stream[:h.Size]
			if h.IsReply() && outstanding != nil && h.ID == outstanding.ID {
				outstanding = nil
			}
			if req, ok := s.model(whole, streamFDs); ok {
				s.mu.Lock()
				s.reqs = append(s.reqs, req)
				s.mu.Unlock()
			}
			stream, streamFDs = stream[h.Size:], 0
		}
	}
}

// runClientInput runs one script against a fresh client.
func runClientInput(t *testing.T, script []byte, optsByte uint8) {
	before := fuzzcheck.Snapshot()
	opts := fuzzClientOptions(optsByte)
	opts.Base = defaultBase
	cconn, sconn := vutest.SocketPair(t)
	srv := &fuzzServer{conn: sconn, w: protocol.NewConn(sconn), opts: opts, cmds: make(chan protocol.Header, 64), shadow: map[uint64]byte{}}
	readDone := make(chan struct{})
	go func() { defer close(readDone); srv.readLoop() }()
	runDone := make(chan struct{})
	go func() { defer close(runDone); srv.run(script) }()

	var errs []error
	clientDone := make(chan struct{})
	go func() {
		defer close(clientDone)
		tr, err := New(cconn, opts)
		errs = append(errs, err)
		if err != nil {
			return
		}
		if tr.Vectors() < 1 || tr.BARSize() < 4096 {
			errs = append(errs, fmt.Errorf("set up with %d vectors and BAR0 of %d bytes", tr.Vectors(), tr.BARSize()))
		}
		_, err = tr.Read32(wire.RegMHIVER)
		errs = append(errs, err)
		errs = append(errs, tr.Write32(wire.RegMHICTRL, 0))
		var cs [8]byte
		errs = append(errs, tr.ReadConfig(0, cs[:]))
		errs = append(errs, tr.Reset())
		errs = append(errs, tr.Close())
		select {
		case <-tr.Done():
		default:
			errs = append(errs, errors.New("Done not closed after Close"))
		}
	}()
	timeout := time.After(clientBound)
	for _, ch := range []chan struct{}{clientDone, runDone, readDone} {
		select {
		case <-ch:
		case <-timeout:
			sconn.Close()
			t.Fatalf("the client did not finish within %v\n%s", clientBound, fuzzcheck.Goroutines())
		}
	}
	sconn.Close()

	for _, err := range errs {
		if errors.Is(err, protocol.ErrTimeout) {
			t.Errorf("the client timed out (%v): it dropped an answer", err)
		}
	}
	for _, p := range srv.problems {
		t.Error(p)
	}
	if len(srv.answers) > len(srv.reqs) {
		t.Fatalf("%d answers to %d requests", len(srv.answers), len(srv.reqs))
	}
	for i, a := range srv.answers {
		r := srv.reqs[i]
		h := a.Header
		if h.ID != r.id || h.Cmd != r.cmd {
			t.Fatalf("answer %d is %+v, want ID %d %s", i, h, r.id, r.cmd)
		}
		if !r.check {
			continue
		}
		if got := unix.Errno(h.Error); got != r.errno {
			t.Errorf("answer %d to %s (ID %d): errno %v, want %v", i, r.cmd, r.id, got, r.errno)
		}
		if r.cmd == protocol.CmdDMARead && r.errno == 0 && h.Flags&protocol.FlagError == 0 {
			if d := a.Body.(protocol.DMAAccess).Data; !bytes.Equal(d, r.data) {
				t.Errorf("answer %d: DMA_READ of %d bytes returned %x…, the memory holds %x…", i, len(r.data), d[:min(len(d), 16)], r.data[:min(len(r.data), 16)])
			}
		}
	}
	if n := fuzzcheck.Mappings("gomhi-vfiouser-dma"); n != 0 {
		t.Errorf("%d mappings of the client's DMA memory left", n)
	}
	before.Check(t)
}
