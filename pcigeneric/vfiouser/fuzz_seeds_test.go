package vfiouser

import (
	"encoding/binary"
	"errors"
	"flag"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhi"
	"github.com/gomhi/gomhi/mhi/testenv/fuzzcheck"
	"github.com/gomhi/gomhi/mhi/wire"
	"github.com/gomhi/gomhi/pcigeneric"
	"github.com/gomhi/gomhi/pcigeneric/vfiouser/client"
	"github.com/gomhi/gomhi/pcigeneric/vfiouser/internal/vutest"
	"github.com/gomhi/gomhi/pcigeneric/vfiouser/protocol"
)

// writeSeeds regenerates the seed corpora of FuzzServe (testdata/fuzz)
// and the recorded sessions of FuzzClient's (client/testdata/fuzz; the
// client's TestFuzzSeeds writes its hand-made ones): go test -run
// TestFuzzSeeds ./pcigeneric/vfiouser ./pcigeneric/vfiouser/client -args
// -write-seeds.
var writeSeeds = flag.Bool("write-seeds", false, "rewrite the FuzzServe seed corpus in testdata/fuzz and FuzzClient's recorded sessions in client/testdata/fuzz")

// serveSeed is one FuzzServe input.
type serveSeed struct {
	name   string
	stream []byte
	plan   []byte
	dma    uint8
}

// fdPlan is the plan byte for n descriptors of kind.
func fdPlan(kind, n int) byte { return byte(kind<<5 | n) }

// serveSeeds are hand-made inputs: each command valid and in a few bad
// shapes, with and without descriptors.
func serveSeeds() []serveSeed {
	var seeds []serveSeed
	add := func(name string, dma uint8, msgs ...any) {
		s := serveSeed{name: name, dma: dma}
		for _, m := range msgs {
			switch v := m.(type) {
			case []byte:
				s.stream = append(s.stream, v...)
				s.plan = append(s.plan, 0)
			case withFDs:
				s.stream = append(s.stream, v.msg...)
				s.plan = append(s.plan, fdPlan(v.kind, v.n))
			}
		}
		seeds = append(seeds, s)
	}
	ver := protocol.EncodeMessage(1, protocol.CmdVersion, 0, 0, protocol.Version{Capabilities: qemuCaps})
	add("version", 0, ver)
	add("version_major_1", 0, protocol.EncodeMessage(1, protocol.CmdVersion, 0, 0, protocol.Version{Major: 1}))
	add("device_info", 0, ver, protocol.EncodeMessage(2, protocol.CmdDeviceGetInfo, 0, 0, protocol.DeviceInfo{Argsz: 16}))
	var regions [][]byte
	for i := range uint32(protocol.NumRegions + 1) {
		regions = append(regions, protocol.EncodeMessage(uint16(3+i), protocol.CmdRegionInfo, 0, 0, protocol.RegionInfo{Argsz: 32, Index: i}))
	}
	add("region_info_all", 0, anys(regions)...)
	var irqs [][]byte
	for i := range uint32(protocol.NumIRQs + 1) {
		irqs = append(irqs, protocol.EncodeMessage(uint16(20+i), protocol.CmdIRQInfo, 0, 0, protocol.IRQInfo{Argsz: 16, Index: i}))
	}
	add("irq_info_all", 0, anys(irqs)...)
	add("config_read_write", 0,
		protocol.EncodeMessage(30, protocol.CmdRegionRead, 0, 0, protocol.RegionAccess{Region: protocol.RegionConfig, Count: 64}),
		protocol.EncodeMessage(31, protocol.CmdRegionWrite, 0, 0, protocol.RegionAccess{Region: protocol.RegionConfig, Offset: protocol.CfgCommand, Count: 2, Data: []byte{6, 0}}),
		protocol.EncodeMessage(32, protocol.CmdRegionWrite, 0, 0, protocol.RegionAccess{Region: protocol.RegionConfig, Offset: protocol.CfgMSI + 2, Count: 2, Data: []byte{0x51, 0}}),
		protocol.EncodeMessage(33, protocol.CmdRegionWrite, 0, 0, protocol.RegionAccess{Region: protocol.RegionConfig, Offset: protocol.CfgBAR0, Count: 8, Data: []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}}),
		protocol.EncodeMessage(34, protocol.CmdRegionRead, 0, 0, protocol.RegionAccess{Region: protocol.RegionConfig, Offset: 250, Count: 6}),
	)
	add("msix_table", 0,
		protocol.EncodeMessage(40, protocol.CmdRegionWrite, 0, 0, protocol.RegionAccess{Region: protocol.RegionBAR2, Offset: 0, Count: 16, Data: make([]byte, 16)}),
		protocol.EncodeMessage(41, protocol.CmdRegionRead, 0, 0, protocol.RegionAccess{Region: protocol.RegionBAR2, Offset: 0, Count: msixBARSize}),
	)
	add("bar0_registers", 0,
		protocol.EncodeMessage(50, protocol.CmdRegionRead, 0, 0, protocol.RegionAccess{Region: protocol.RegionBAR0, Offset: 0, Count: 256}),
		protocol.EncodeMessage(51, protocol.CmdRegionRead, 0, 0, protocol.RegionAccess{Region: protocol.RegionBAR0, Offset: 0x49, Count: 3}),
		protocol.EncodeMessage(52, protocol.CmdRegionWrite, protocol.FlagNoReply, 0, protocol.RegionAccess{Region: protocol.RegionBAR0, Offset: wire.RegMHICTRL, Count: 4, Data: []byte{2, 0, 0, 0}}),
		protocol.EncodeMessage(53, protocol.CmdRegionWrite, 0, 0, protocol.RegionAccess{Region: protocol.RegionBAR0, Offset: 2, Count: 2, Data: []byte{1, 2}}),
		protocol.EncodeMessage(54, protocol.CmdRegionRead, 0, 0, protocol.RegionAccess{Region: protocol.RegionBAR0, Offset: 4092, Count: 8}),
	)
	dmaMap := protocol.EncodeMessage(60, protocol.CmdDMAMap, 0, 0, protocol.DMAMap{Argsz: 32, Flags: protocol.DMAFlagRead | protocol.DMAFlagWrite, IOVA: 0x10000, Size: 64 << 10})
	add("dma_map_memfd", 0, withFDs{dmaMap, fuzzFDMemfd, 1},
		protocol.EncodeMessage(61, protocol.CmdDMAUnmap, 0, 0, protocol.DMAUnmap{Argsz: 24, IOVA: 0x10000, Size: 64 << 10}))
	add("dma_map_beyond_memfd", 0, withFDs{protocol.EncodeMessage(60, protocol.CmdDMAMap, 0, 0, protocol.DMAMap{Argsz: 32, Flags: protocol.DMAFlagRead | protocol.DMAFlagWrite, IOVA: 0x10000, Size: 1 << 20}), fuzzFDSmallMemfd, 1})
	add("dma_map_offset", 0, withFDs{protocol.EncodeMessage(60, protocol.CmdDMAMap, 0, 0, protocol.DMAMap{Argsz: 32, Flags: protocol.DMAFlagRead, Offset: 60 << 10, IOVA: 0x10000, Size: 8 << 10}), fuzzFDMemfd, 1})
	add("dma_map_eventfd", 0, withFDs{dmaMap, fuzzFDEventfd, 1})
	add("dma_map_pipe", 0, withFDs{dmaMap, fuzzFDPipeRead, 1})
	add("dma_map_two_fds", 0, withFDs{dmaMap, fuzzFDMemfd, 2})
	add("dma_map_overlap", 0, withFDs{dmaMap, fuzzFDMemfd, 1},
		protocol.EncodeMessage(62, protocol.CmdDMAMap, 0, 0, protocol.DMAMap{Argsz: 32, Flags: protocol.DMAFlagRead, IOVA: 0x18000, Size: 64 << 10}),
		protocol.EncodeMessage(63, protocol.CmdDMAUnmap, 0, 0, protocol.DMAUnmap{Argsz: 24, Flags: protocol.DMAUnmapAll}))
	setIRQs := func(id uint16, flags, index, start, count uint32, data []byte) []byte {
		return protocol.EncodeMessage(id, protocol.CmdSetIRQs, 0, 0, protocol.SetIRQs{Flags: flags, Index: index, Start: start, Count: count, Data: data})
	}
	add("set_irqs_msi", 0,
		withFDs{setIRQs(70, protocol.IRQDataEventfd|protocol.IRQActionTrig, protocol.IRQMSI, 0, 4, nil), fuzzFDEventfd, 4},
		setIRQs(71, protocol.IRQDataNone|protocol.IRQActionTrig, protocol.IRQMSI, 0, 4, nil),
		setIRQs(72, protocol.IRQDataBool|protocol.IRQActionTrig, protocol.IRQMSI, 1, 3, []byte{1, 0, 1}),
		setIRQs(73, protocol.IRQDataNone|protocol.IRQActionTrig, protocol.IRQMSI, 0, 0, nil))
	add("set_irqs_msix_pipe", 0,
		withFDs{setIRQs(74, protocol.IRQDataEventfd|protocol.IRQActionTrig, protocol.IRQMSIX, 30, 2, nil), fuzzFDPipeWrite, 2},
		setIRQs(75, protocol.IRQDataNone|protocol.IRQActionTrig, protocol.IRQMSIX, 30, 2, nil))
	add("set_irqs_17_fds", 0, withFDs{setIRQs(76, protocol.IRQDataEventfd|protocol.IRQActionTrig, protocol.IRQMSI, 0, 16, nil), fuzzFDEventfd, 17})
	add("set_irqs_err_req", 0,
		withFDs{setIRQs(77, protocol.IRQDataEventfd|protocol.IRQActionTrig, protocol.IRQErr, 0, 1, nil), fuzzFDEventfd, 1},
		setIRQs(78, protocol.IRQDataNone|protocol.IRQActionMask, protocol.IRQMSI, 0, 1, nil),
		setIRQs(79, protocol.IRQDataEventfd|protocol.IRQActionTrig, protocol.IRQINTx, 0, 0, nil))
	// QEMU's MSI-X set-up: "enabled, no vector" (eventfd data, no
	// descriptor), runs of set and de-assigned vectors, masks and unmasks.
	add("set_irqs_msix_qemu_runs", 0,
		setIRQs(90, protocol.IRQDataNone|protocol.IRQActionTrig, protocol.IRQMSI, 0, 0, nil),
		setIRQs(91, protocol.IRQDataEventfd|protocol.IRQActionTrig, protocol.IRQMSIX, 0, 1, nil),
		withFDs{setIRQs(92, protocol.IRQDataEventfd|protocol.IRQActionTrig, protocol.IRQMSIX, 0, 2, nil), fuzzFDEventfd, 2},
		setIRQs(93, protocol.IRQDataEventfd|protocol.IRQActionTrig, protocol.IRQMSIX, 2, 3, nil),
		withFDs{setIRQs(94, protocol.IRQDataEventfd|protocol.IRQActionTrig, protocol.IRQMSIX, 5, 1, nil), fuzzFDEventfd, 1},
		setIRQs(95, protocol.IRQDataBool|protocol.IRQActionMask, protocol.IRQMSIX, 0, 3, []byte{1, 0, 1}),
		setIRQs(96, protocol.IRQDataNone|protocol.IRQActionTrig, protocol.IRQMSIX, 0, 6, nil),
		protocol.EncodeMessage(97, protocol.CmdRegionRead, 0, 0, protocol.RegionAccess{Region: protocol.RegionBAR2, Offset: msixPBAOffset, Count: 8}),
		setIRQs(98, protocol.IRQDataNone|protocol.IRQActionUnmsk, protocol.IRQMSIX, 0, 3, nil),
		withFDs{setIRQs(99, protocol.IRQDataEventfd|protocol.IRQActionMask, protocol.IRQMSIX, 0, 1, nil), fuzzFDEventfd, 1},
		setIRQs(100, protocol.IRQDataNone|protocol.IRQActionTrig, protocol.IRQMSIX, 0, 0, nil))
	add("reset", 0, protocol.EncodeMessage(80, protocol.CmdDeviceReset, 0, 0, nil), protocol.EncodeMessage(81, protocol.CmdDeviceReset, protocol.FlagNoReply, 0, nil))
	add("client_dma_commands", 0,
		protocol.EncodeMessage(90, protocol.CmdDMARead, 0, 0, protocol.DMAAccess{Address: 0x1000, Count: 4}),
		protocol.EncodeMessage(91, protocol.CmdDMAWrite, 0, 0, protocol.DMAAccess{Address: 0x1000, Count: 2, Data: []byte{1, 2}}),
		protocol.EncodeMessage(1, protocol.CmdDMARead, protocol.FlagReply, 0, protocol.DMAAccess{Address: 0x1000, Count: 2, Data: []byte{1, 2}}))
	add("unknown_and_unsupported", 0,
		rawMsg(100, 99, 0, nil), rawMsg(101, protocol.CmdRegionIOFDs, 0, make([]byte, 16)), rawMsg(102, protocol.CmdRegionWriteMult, 0, nil))
	huge := rawMsg(110, protocol.CmdRegionRead, 0, nil)
	binary.LittleEndian.PutUint32(huge[4:], protocol.MaxMessageSize+1)
	add("size_above_limit", 0, ver, huge)
	add("cut_message", 0, ver, protocol.EncodeMessage(111, protocol.CmdDeviceGetInfo, 0, 0, protocol.DeviceInfo{Argsz: 16})[:20])
	add("short_header", 0, ver, []byte{1, 0, 1, 0, 16})
	// The modem started on memory mapped without fd: its DMA goes through
	// DMA_READ/DMA_WRITE messages, answered in each of the client's ways.
	nofd := protocol.EncodeMessage(120, protocol.CmdDMAMap, 0, 0, protocol.DMAMap{Argsz: 32, Flags: protocol.DMAFlagRead | protocol.DMAFlagWrite, IOVA: 0x10000, Size: 1 << 20})
	start := func(id uint16, off, v uint32) []byte {
		return protocol.EncodeMessage(id, protocol.CmdRegionWrite, 0, 0, protocol.RegionAccess{Region: protocol.RegionBAR0, Offset: uint64(off), Count: 4, Data: binary.LittleEndian.AppendUint32(nil, v)})
	}
	for mode := range uint8(fuzzDMAModes) {
		add("modem_dma_messages_"+string(rune('0'+mode)), mode, nofd,
			start(121, wire.RegCCABAPLower, 0x10000), start(122, wire.RegECABAPLower, 0x11000),
			start(123, wire.RegCRCBAPLower, 0x12000), start(124, wire.RegMHICTRL, 1<<1),
			protocol.EncodeMessage(125, protocol.CmdRegionRead, 0, 0, protocol.RegionAccess{Region: protocol.RegionBAR0, Offset: wire.RegMHISTATUS, Count: 4}),
			protocol.EncodeMessage(126, protocol.CmdDeviceReset, 0, 0, nil))
	}
	return seeds
}

// clientOptsByte encodes o's flags as FuzzClient's opts byte, which the
// client's fuzzClientOptions decodes (1 MiB memory unless o asks for
// 4 MiB).
func clientOptsByte(o client.Options) uint8 {
	var b uint8
	if o.MSIX {
		b |= 1
	}
	if o.NoPostedWrites {
		b |= 2
	}
	if o.NoDMAFD {
		b |= 4
	}
	if o.Memory == 4<<20 {
		return b | 6<<3
	}
	return b | 4<<3
}

type withFDs struct {
	msg     []byte
	kind, n int
}

func anys(msgs [][]byte) []any {
	out := make([]any, len(msgs))
	for i, m := range msgs {
		out[i] = m
	}
	return out
}

// recordSession runs a real client (and, with powerUp, a host controller
// powering the modem up and down) against a real server through a proxy,
// and returns what the client sent as a FuzzServe seed and what the
// server sent as a FuzzClient script.
func recordSession(tb testing.TB, opts client.Options, powerUp bool) (serveSeed, []byte) {
	tb.Helper()
	dev := newDevice(tb)
	cc, pc := vutest.SocketPair(tb) // client ↔ proxy
	ps, done := serve(tb, dev)
	var (
		mu     sync.Mutex
		seed   serveSeed
		script []byte
		wg     sync.WaitGroup
	)
	pipe := func(from, to *net.UnixConn, toServer bool) {
		defer wg.Done()
		r, w := protocol.NewConn(from), protocol.NewConn(to)
		for {
			hdr, payload, fds, err := r.ReadMessage()
			if err != nil {
				_ = to.CloseWrite()
				return
			}
			msg := append(hdr, payload...)
			h, herr := protocol.DecodeHeader(hdr)
			mu.Lock()
			if toServer {
				seed.stream = append(seed.stream, msg...)
				kind := fuzzFDEventfd
				if h.Cmd == protocol.CmdDMAMap {
					kind = fuzzFDMemfd
				}
				seed.plan = append(seed.plan, fdPlan(kind, len(fds)))
			} else {
				script = append(script, vutest.ScriptRecord(msg, len(fds), herr == nil && h.IsReply())...)
			}
			mu.Unlock()
			_ = w.WriteMessage(msg, fds)
			protocol.CloseFDs(fds)
		}
	}
	wg.Add(2)
	go pipe(pc, ps, true)
	go pipe(ps, pc, false)
	tr, err := client.New(cc, opts)
	if err != nil {
		tb.Fatal(err)
	}
	if powerUp {
		v, d, sv, sd := tr.IDs()
		e, ok := pcigeneric.Lookup(v, d, sv, sd)
		if !ok {
			tb.Fatal("IDs not in the device table")
		}
		cfg := e.Info.Config.WithLoopback()
		cfg.Timeout = 5 * time.Second
		ctrl, err := mhi.NewController(tr, cfg, mhi.Options{Name: "mhi0", PollInterval: 20 * time.Millisecond})
		if err != nil {
			tb.Fatal(err)
		}
		if err := ctrl.PowerUp(); err != nil {
			tb.Fatal(err)
		}
		_ = ctrl.PowerDown()
	} else {
		if _, err := tr.Read32(wire.RegMHIVER); err != nil {
			tb.Fatal(err)
		}
		if err := tr.Write32(wire.RegMHICTRL, 0); err != nil {
			tb.Fatal(err)
		}
		if err := tr.Reset(); err != nil {
			tb.Fatal(err)
		}
	}
	if err := tr.Close(); err != nil {
		tb.Fatal(err)
	}
	wg.Wait()
	if err := waitServe(tb, done); err != nil && !errors.Is(err, net.ErrClosed) {
		tb.Fatal(err)
	}
	return seed, script
}

// TestFuzzSeeds checks that the recorded sessions still replay as seeds
// (a whole session's messages frame and decode) and, with -write-seeds,
// rewrites the seed corpus of FuzzServe and the recorded sessions of
// FuzzClient's.
func TestFuzzSeeds(t *testing.T) {
	serveDir := filepath.Join("testdata", "fuzz", "FuzzServe")
	clientDir := filepath.Join("client", "testdata", "fuzz", "FuzzClient")
	seeds := serveSeeds()
	type script struct {
		name   string
		script []byte
		opts   uint8
	}
	var scripts []script
	for _, rec := range []struct {
		name    string
		opts    client.Options
		powerUp bool
	}{
		{"session_fd", client.Options{Memory: 1 << 20}, false},
		{"session_msix", client.Options{Memory: 1 << 20, MSIX: true, NoPostedWrites: true}, false},
		{"powerup_nofd", client.Options{Memory: 4 << 20, NoDMAFD: true}, true},
		{"powerup_fd", client.Options{Memory: 4 << 20}, true},
	} {
		s, sc := recordSession(t, rec.opts, rec.powerUp)
		s.name = rec.name
		// The stream must frame into whole messages that all decode.
		for pos, i := 0, 0; pos < len(s.stream); i++ {
			h, err := protocol.DecodeHeader(s.stream[pos : pos+protocol.HeaderSize])
			if err != nil {
				t.Fatalf("%s: message %d: %v", rec.name, i, err)
			}
			if _, err := protocol.DecodeMessage(s.stream[pos:pos+protocol.HeaderSize], s.stream[pos+protocol.HeaderSize:pos+int(h.Size)], int(s.plan[i]&31)); err != nil {
				t.Fatalf("%s: message %d: %v", rec.name, i, err)
			}
			pos += int(h.Size)
		}
		t.Logf("%s: the client sent %d messages (%d bytes), the server %d bytes", rec.name, len(s.plan), len(s.stream), len(sc))
		seeds = append(seeds, s)
		scripts = append(scripts, script{name: rec.name, script: sc, opts: clientOptsByte(rec.opts)})
	}
	if !*writeSeeds {
		return
	}
	for _, s := range seeds {
		if err := fuzzcheck.WriteCorpus(serveDir, s.name, s.stream, s.plan, s.dma); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range scripts {
		if err := fuzzcheck.WriteCorpus(clientDir, s.name, s.script, s.opts); err != nil {
			t.Fatal(err)
		}
	}
}
