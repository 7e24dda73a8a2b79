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
	mhiwire "github.com/gomhi/gomhi/mhi/wire"
	"github.com/gomhi/gomhi/pcigeneric"
)

// writeSeeds regenerates the seed corpora of FuzzServe and FuzzClient
// under testdata/fuzz: go test -run TestFuzzSeeds ./pcigeneric/vfiouser
// -args -write-seeds.
var writeSeeds = flag.Bool("write-seeds", false, "rewrite the FuzzServe and FuzzClient seed corpora in testdata/fuzz")

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
	ver := EncodeMessage(1, CmdVersion, 0, 0, Version{Capabilities: qemuCaps})
	add("version", 0, ver)
	add("version_major_1", 0, EncodeMessage(1, CmdVersion, 0, 0, Version{Major: 1}))
	add("device_info", 0, ver, EncodeMessage(2, CmdDeviceGetInfo, 0, 0, DeviceInfo{Argsz: 16}))
	var regions [][]byte
	for i := range uint32(NumRegions + 1) {
		regions = append(regions, EncodeMessage(uint16(3+i), CmdRegionInfo, 0, 0, RegionInfo{Argsz: 32, Index: i}))
	}
	add("region_info_all", 0, anys(regions)...)
	var irqs [][]byte
	for i := range uint32(NumIRQs + 1) {
		irqs = append(irqs, EncodeMessage(uint16(20+i), CmdIRQInfo, 0, 0, IRQInfo{Argsz: 16, Index: i}))
	}
	add("irq_info_all", 0, anys(irqs)...)
	add("config_read_write", 0,
		EncodeMessage(30, CmdRegionRead, 0, 0, RegionAccess{Region: RegionConfig, Count: 64}),
		EncodeMessage(31, CmdRegionWrite, 0, 0, RegionAccess{Region: RegionConfig, Offset: CfgCommand, Count: 2, Data: []byte{6, 0}}),
		EncodeMessage(32, CmdRegionWrite, 0, 0, RegionAccess{Region: RegionConfig, Offset: CfgMSI + 2, Count: 2, Data: []byte{0x51, 0}}),
		EncodeMessage(33, CmdRegionWrite, 0, 0, RegionAccess{Region: RegionConfig, Offset: CfgBAR0, Count: 8, Data: []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}}),
		EncodeMessage(34, CmdRegionRead, 0, 0, RegionAccess{Region: RegionConfig, Offset: 250, Count: 6}),
	)
	add("msix_table", 0,
		EncodeMessage(40, CmdRegionWrite, 0, 0, RegionAccess{Region: RegionBAR2, Offset: 0, Count: 16, Data: make([]byte, 16)}),
		EncodeMessage(41, CmdRegionRead, 0, 0, RegionAccess{Region: RegionBAR2, Offset: 0, Count: MSIXBARSize}),
	)
	add("bar0_registers", 0,
		EncodeMessage(50, CmdRegionRead, 0, 0, RegionAccess{Region: RegionBAR0, Offset: 0, Count: 256}),
		EncodeMessage(51, CmdRegionRead, 0, 0, RegionAccess{Region: RegionBAR0, Offset: 0x49, Count: 3}),
		EncodeMessage(52, CmdRegionWrite, FlagNoReply, 0, RegionAccess{Region: RegionBAR0, Offset: mhiwire.RegMHICTRL, Count: 4, Data: []byte{2, 0, 0, 0}}),
		EncodeMessage(53, CmdRegionWrite, 0, 0, RegionAccess{Region: RegionBAR0, Offset: 2, Count: 2, Data: []byte{1, 2}}),
		EncodeMessage(54, CmdRegionRead, 0, 0, RegionAccess{Region: RegionBAR0, Offset: 4092, Count: 8}),
	)
	dmaMap := EncodeMessage(60, CmdDMAMap, 0, 0, DMAMap{Argsz: 32, Flags: DMAFlagRead | DMAFlagWrite, IOVA: 0x10000, Size: 64 << 10})
	add("dma_map_memfd", 0, withFDs{dmaMap, fuzzFDMemfd, 1},
		EncodeMessage(61, CmdDMAUnmap, 0, 0, DMAUnmap{Argsz: 24, IOVA: 0x10000, Size: 64 << 10}))
	add("dma_map_beyond_memfd", 0, withFDs{EncodeMessage(60, CmdDMAMap, 0, 0, DMAMap{Argsz: 32, Flags: DMAFlagRead | DMAFlagWrite, IOVA: 0x10000, Size: 1 << 20}), fuzzFDSmallMemfd, 1})
	add("dma_map_offset", 0, withFDs{EncodeMessage(60, CmdDMAMap, 0, 0, DMAMap{Argsz: 32, Flags: DMAFlagRead, Offset: 60 << 10, IOVA: 0x10000, Size: 8 << 10}), fuzzFDMemfd, 1})
	add("dma_map_eventfd", 0, withFDs{dmaMap, fuzzFDEventfd, 1})
	add("dma_map_pipe", 0, withFDs{dmaMap, fuzzFDPipeRead, 1})
	add("dma_map_two_fds", 0, withFDs{dmaMap, fuzzFDMemfd, 2})
	add("dma_map_overlap", 0, withFDs{dmaMap, fuzzFDMemfd, 1},
		EncodeMessage(62, CmdDMAMap, 0, 0, DMAMap{Argsz: 32, Flags: DMAFlagRead, IOVA: 0x18000, Size: 64 << 10}),
		EncodeMessage(63, CmdDMAUnmap, 0, 0, DMAUnmap{Argsz: 24, Flags: DMAUnmapAll}))
	setIRQs := func(id uint16, flags, index, start, count uint32, data []byte) []byte {
		return EncodeMessage(id, CmdSetIRQs, 0, 0, SetIRQs{Flags: flags, Index: index, Start: start, Count: count, Data: data})
	}
	add("set_irqs_msi", 0,
		withFDs{setIRQs(70, IRQDataEventfd|IRQActionTrig, IRQMSI, 0, 4, nil), fuzzFDEventfd, 4},
		setIRQs(71, IRQDataNone|IRQActionTrig, IRQMSI, 0, 4, nil),
		setIRQs(72, IRQDataBool|IRQActionTrig, IRQMSI, 1, 3, []byte{1, 0, 1}),
		setIRQs(73, IRQDataNone|IRQActionTrig, IRQMSI, 0, 0, nil))
	add("set_irqs_msix_pipe", 0,
		withFDs{setIRQs(74, IRQDataEventfd|IRQActionTrig, IRQMSIX, 30, 2, nil), fuzzFDPipeWrite, 2},
		setIRQs(75, IRQDataNone|IRQActionTrig, IRQMSIX, 30, 2, nil))
	add("set_irqs_17_fds", 0, withFDs{setIRQs(76, IRQDataEventfd|IRQActionTrig, IRQMSI, 0, 16, nil), fuzzFDEventfd, 17})
	add("set_irqs_err_req", 0,
		withFDs{setIRQs(77, IRQDataEventfd|IRQActionTrig, IRQErr, 0, 1, nil), fuzzFDEventfd, 1},
		setIRQs(78, IRQDataNone|IRQActionMask, IRQMSI, 0, 1, nil),
		setIRQs(79, IRQDataEventfd|IRQActionTrig, IRQINTx, 0, 0, nil))
	// QEMU's MSI-X set-up: "enabled, no vector" (eventfd data, no
	// descriptor), runs of set and de-assigned vectors, masks and unmasks.
	add("set_irqs_msix_qemu_runs", 0,
		setIRQs(90, IRQDataNone|IRQActionTrig, IRQMSI, 0, 0, nil),
		setIRQs(91, IRQDataEventfd|IRQActionTrig, IRQMSIX, 0, 1, nil),
		withFDs{setIRQs(92, IRQDataEventfd|IRQActionTrig, IRQMSIX, 0, 2, nil), fuzzFDEventfd, 2},
		setIRQs(93, IRQDataEventfd|IRQActionTrig, IRQMSIX, 2, 3, nil),
		withFDs{setIRQs(94, IRQDataEventfd|IRQActionTrig, IRQMSIX, 5, 1, nil), fuzzFDEventfd, 1},
		setIRQs(95, IRQDataBool|IRQActionMask, IRQMSIX, 0, 3, []byte{1, 0, 1}),
		setIRQs(96, IRQDataNone|IRQActionTrig, IRQMSIX, 0, 6, nil),
		EncodeMessage(97, CmdRegionRead, 0, 0, RegionAccess{Region: RegionBAR2, Offset: MSIXPBAOffset, Count: 8}),
		setIRQs(98, IRQDataNone|IRQActionUnmsk, IRQMSIX, 0, 3, nil),
		withFDs{setIRQs(99, IRQDataEventfd|IRQActionMask, IRQMSIX, 0, 1, nil), fuzzFDEventfd, 1},
		setIRQs(100, IRQDataNone|IRQActionTrig, IRQMSIX, 0, 0, nil))
	add("reset", 0, EncodeMessage(80, CmdDeviceReset, 0, 0, nil), EncodeMessage(81, CmdDeviceReset, FlagNoReply, 0, nil))
	add("client_dma_commands", 0,
		EncodeMessage(90, CmdDMARead, 0, 0, DMAAccess{Address: 0x1000, Count: 4}),
		EncodeMessage(91, CmdDMAWrite, 0, 0, DMAAccess{Address: 0x1000, Count: 2, Data: []byte{1, 2}}),
		EncodeMessage(1, CmdDMARead, FlagReply, 0, DMAAccess{Address: 0x1000, Count: 2, Data: []byte{1, 2}}))
	add("unknown_and_unsupported", 0,
		rawMsg(100, 99, 0, nil), rawMsg(101, CmdRegionIOFDs, 0, make([]byte, 16)), rawMsg(102, CmdRegionWriteMult, 0, nil))
	huge := rawMsg(110, CmdRegionRead, 0, nil)
	binary.LittleEndian.PutUint32(huge[4:], MaxMessageSize+1)
	add("size_above_limit", 0, ver, huge)
	add("cut_message", 0, ver, EncodeMessage(111, CmdDeviceGetInfo, 0, 0, DeviceInfo{Argsz: 16})[:20])
	add("short_header", 0, ver, []byte{1, 0, 1, 0, 16})
	// The modem started on memory mapped without fd: its DMA goes through
	// DMA_READ/DMA_WRITE messages, answered in each of the client's ways.
	nofd := EncodeMessage(120, CmdDMAMap, 0, 0, DMAMap{Argsz: 32, Flags: DMAFlagRead | DMAFlagWrite, IOVA: 0x10000, Size: 1 << 20})
	start := func(id uint16, off, v uint32) []byte {
		return EncodeMessage(id, CmdRegionWrite, 0, 0, RegionAccess{Region: RegionBAR0, Offset: uint64(off), Count: 4, Data: binary.LittleEndian.AppendUint32(nil, v)})
	}
	for mode := range uint8(fuzzDMAModes) {
		add("modem_dma_messages_"+string(rune('0'+mode)), mode, nofd,
			start(121, mhiwire.RegCCABAPLower, 0x10000), start(122, mhiwire.RegECABAPLower, 0x11000),
			start(123, mhiwire.RegCRCBAPLower, 0x12000), start(124, mhiwire.RegMHICTRL, 1<<1),
			EncodeMessage(125, CmdRegionRead, 0, 0, RegionAccess{Region: RegionBAR0, Offset: mhiwire.RegMHISTATUS, Count: 4}),
			EncodeMessage(126, CmdDeviceReset, 0, 0, nil))
	}
	return seeds
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
func recordSession(tb testing.TB, opts ClientOptions, powerUp bool) (serveSeed, []byte) {
	tb.Helper()
	dev := newDevice(tb)
	cc, pc := socketPair(tb) // client ↔ proxy
	ps, done := serve(tb, dev)
	var (
		mu     sync.Mutex
		seed   serveSeed
		script []byte
		wg     sync.WaitGroup
	)
	pipe := func(from, to *net.UnixConn, toServer bool) {
		defer wg.Done()
		r, w := newWire(from), newWire(to)
		for {
			hdr, payload, fds, err := r.read()
			if err != nil {
				_ = to.CloseWrite()
				return
			}
			msg := append(hdr, payload...)
			mu.Lock()
			if toServer {
				seed.stream = append(seed.stream, msg...)
				kind := fuzzFDEventfd
				if h, _ := DecodeHeader(hdr); h.Cmd == CmdDMAMap {
					kind = fuzzFDMemfd
				}
				seed.plan = append(seed.plan, fdPlan(kind, len(fds)))
			} else {
				script = append(script, scriptRecord(msg, len(fds))...)
			}
			mu.Unlock()
			_ = w.write(msg, fds)
			closeFDs(fds)
		}
	}
	wg.Add(2)
	go pipe(pc, ps, true)
	go pipe(ps, pc, false)
	tr, err := NewClient(cc, opts)
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
		if _, err := tr.Read32(mhiwire.RegMHIVER); err != nil {
			tb.Fatal(err)
		}
		if err := tr.Write32(mhiwire.RegMHICTRL, 0); err != nil {
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
// rewrites the seed corpora of FuzzServe and FuzzClient.
func TestFuzzSeeds(t *testing.T) {
	serveDir := filepath.Join("testdata", "fuzz", "FuzzServe")
	clientDir := filepath.Join("testdata", "fuzz", "FuzzClient")
	seeds := serveSeeds()
	var scripts []clientSeed
	for _, rec := range []struct {
		name    string
		opts    ClientOptions
		powerUp bool
	}{
		{"session_fd", ClientOptions{Memory: 1 << 20}, false},
		{"session_msix", ClientOptions{Memory: 1 << 20, MSIX: true, NoPostedWrites: true}, false},
		{"powerup_nofd", ClientOptions{Memory: 4 << 20, NoDMAFD: true}, true},
		{"powerup_fd", ClientOptions{Memory: 4 << 20}, true},
	} {
		s, script := recordSession(t, rec.opts, rec.powerUp)
		s.name = rec.name
		// The stream must frame into whole messages that all decode.
		for pos, i := 0, 0; pos < len(s.stream); i++ {
			h, err := DecodeHeader(s.stream[pos : pos+HeaderSize])
			if err != nil {
				t.Fatalf("%s: message %d: %v", rec.name, i, err)
			}
			if _, err := DecodeMessage(s.stream[pos:pos+HeaderSize], s.stream[pos+HeaderSize:pos+int(h.Size)], int(s.plan[i]&31)); err != nil {
				t.Fatalf("%s: message %d: %v", rec.name, i, err)
			}
			pos += int(h.Size)
		}
		t.Logf("%s: the client sent %d messages (%d bytes), the server %d bytes", rec.name, len(s.plan), len(s.stream), len(script))
		seeds = append(seeds, s)
		scripts = append(scripts, clientSeed{name: rec.name, script: script, opts: clientOptsByte(rec.opts)})
	}
	if !*writeSeeds {
		return
	}
	for _, s := range seeds {
		if err := fuzzcheck.WriteCorpus(serveDir, s.name, s.stream, s.plan, s.dma); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range append(clientSeeds(), scripts...) {
		if err := fuzzcheck.WriteCorpus(clientDir, s.name, s.script, s.opts); err != nil {
			t.Fatal(err)
		}
	}
}
