package ep

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhi/wire"
)

// testBase is the IOVA of the fake host memory: non-zero, so that a zero
// pointer is always out of bounds.
const testBase = 0x1000_0000

const testMemSize = 4 << 20

// waitTimeout bounds every wait of the tests; waits poll and return as soon
// as their condition holds.
const waitTimeout = 5 * time.Second

// fakeMem is host memory for the device: one slab at testBase.
type fakeMem struct {
	base uint64
	buf  []byte

	mu   sync.Mutex
	next uint64 // bump allocator
}

func newFakeMem() *fakeMem {
	return &fakeMem{base: testBase, buf: make([]byte, testMemSize), next: testBase}
}

func (m *fakeMem) offset(iova uint64, n int) (int, error) {
	size := uint64(len(m.buf))
	if iova < m.base || iova-m.base > size || uint64(n) > size-(iova-m.base) {
		return 0, fmt.Errorf("fake host: %w: 0x%x+%d outside 0x%x..0x%x", wire.ErrBounds, iova, n, m.base, m.base+size)
	}
	return int(iova - m.base), nil
}

func (m *fakeMem) ReadAt(p []byte, iova uint64) error {
	off, err := m.offset(iova, len(p))
	if err != nil {
		return err
	}
	copy(p, m.buf[off:])
	return nil
}

func (m *fakeMem) WriteAt(p []byte, iova uint64) error {
	off, err := m.offset(iova, len(p))
	if err != nil {
		return err
	}
	copy(m.buf[off:], p)
	return nil
}

func (m *fakeMem) Load32(iova uint64) (uint32, error) {
	off, err := m.offset(iova, 4)
	if err != nil {
		return 0, err
	}
	if off%4 != 0 {
		return 0, fmt.Errorf("fake host: unaligned load at 0x%x", iova)
	}
	return wire.Load32(m.buf, off), nil
}

func (m *fakeMem) Store32(iova uint64, v uint32) error {
	off, err := m.offset(iova, 4)
	if err != nil {
		return err
	}
	if off%4 != 0 {
		return fmt.Errorf("fake host: unaligned store at 0x%x", iova)
	}
	wire.Store32(m.buf, off, v)
	return nil
}

// alloc returns zeroed memory of size bytes aligned to align.
func (m *fakeMem) alloc(tb testing.TB, size, align int) uint64 {
	tb.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	a := (m.next + uint64(align) - 1) &^ (uint64(align) - 1)
	if a+uint64(size) > m.base+uint64(len(m.buf)) {
		tb.Fatalf("fake host out of memory")
	}
	m.next = a + uint64(size)
	return a
}

// irqRecord is one raised interrupt.
type irqRecord struct {
	vector int
	at     time.Time
}

// fakeIRQ records the vectors the device raises.
type fakeIRQ struct {
	mu      sync.Mutex
	records []irqRecord
}

func (f *fakeIRQ) Raise(v int) {
	f.mu.Lock()
	f.records = append(f.records, irqRecord{vector: v, at: time.Now()})
	f.mu.Unlock()
}

// raised returns the interrupts on vector v so far.
func (f *fakeIRQ) raised(v int) []irqRecord {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []irqRecord
	for _, r := range f.records {
		if r.vector == v {
			out = append(out, r)
		}
	}
	return out
}

// hostRing is a transfer or command ring as the host sees it.
type hostRing struct {
	base    uint64
	n       uint64
	wp      uint64 // index of the next element the host writes
	ctxIOVA uint64
}

func (r *hostRing) addr(i uint64) uint64 { return r.base + i*wire.ElementSize }

// hostEventRing is an event ring as the host sees it.
type hostEventRing struct {
	base    uint64
	n       uint64
	rp      uint64 // next event the host reads
	wp      uint64 // first slot handed back... see doorbell rules
	ctxIOVA uint64
	recycle bool // hand each consumed slot back at once
}

func (r *hostEventRing) addr(i uint64) uint64 { return r.base + i*wire.ElementSize }

// testHost drives a Device the way Linux's MHI host does, directly through
// registers and memory.
type testHost struct {
	t   testing.TB
	mem *fakeMem
	irq *fakeIRQ
	dev *Device
	cfg Config

	chCtx, erCtx, cmdCtx uint64
	cmd                  hostRing
	ev                   []*hostEventRing
	ch                   map[uint8]*hostRing
}

// testControllerConfig offers LOOPBACK 0/1 on control ring 0 and one burst
// pair, IP_HW0 100/101, on a moderated hardware ring 1.
func testControllerConfig() wire.ControllerConfig {
	return wire.ControllerConfig{
		MaxChannels:     128,
		Timeout:         time.Second,
		CommandElements: 16,
		Channels: []wire.ChannelConfig{
			{Num: 0, Name: "LOOPBACK", Elements: 16, EventRing: 0, Dir: wire.Uplink, EE: wire.EEAMSS},
			{Num: 1, Name: "LOOPBACK", Elements: 16, EventRing: 0, Dir: wire.Downlink, EE: wire.EEAMSS},
			{Num: 100, Name: "IP_HW0", Elements: 16, EventRing: 1, Dir: wire.Uplink, EE: wire.EEAMSS, Burst: true, DBModeSwitch: true},
			{Num: 101, Name: "IP_HW0", Elements: 16, EventRing: 1, Dir: wire.Downlink, EE: wire.EEAMSS, Burst: true, DBModeSwitch: true},
		},
		EventRings: []wire.EventRingConfig{
			{Elements: 16, Kind: wire.EventCtrl, Vector: 1, Channel: -1},
			{Elements: 16, Kind: wire.EventHWData, ModerationMs: 20, Vector: 2, Hardware: true, Channel: -1},
		},
	}
}

// testLogger writes Debug records to stderr when EP_TEST_LOG is set, and
// formats (then discards) them otherwise, so the logging paths run.
func testLogger() *slog.Logger {
	var w io.Writer = io.Discard
	if os.Getenv("EP_TEST_LOG") != "" {
		w = os.Stderr
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// newHost starts a device on fresh fake memory; mod may adjust the config.
func newHost(tb testing.TB, mod func(*Config)) *testHost {
	tb.Helper()
	cfg := Config{
		MHI:          testControllerConfig(),
		SerialNumber: 0x5A5A1234,
		SoCHWVersion: 0x60050100,
		Logger:       testLogger(),
	}
	for i := range cfg.OEMPKHash {
		cfg.OEMPKHash[i] = 0xA0000000 + uint32(i)
	}
	if mod != nil {
		mod(&cfg)
	}
	h := &testHost{t: tb, mem: newFakeMem(), irq: &fakeIRQ{}, cfg: cfg, ch: map[uint8]*hostRing{}}
	dev, err := New(cfg, h.mem, h.irq)
	if err != nil {
		tb.Fatal(err)
	}
	h.dev = dev
	tb.Cleanup(func() { _ = dev.Close() })
	return h
}

// waitFor polls cond until it holds or the deadline passes.
func (h *testHost) waitFor(what string, cond func() bool) {
	h.t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			h.t.Fatalf("timed out waiting for %s (stats %+v)", what, h.dev.Stats())
		}
		time.Sleep(200 * time.Microsecond)
	}
}

// waitUntil polls cond until it holds or the deadline passes.
func waitUntil(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(waitTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func (h *testHost) reg(off uint32) uint32       { return h.dev.ReadRegister(off) }
func (h *testHost) setReg(off uint32, v uint32) { h.dev.WriteRegister(off, v) }

// setReg64 writes a 64-bit register pair high half first, like the host.
func (h *testHost) setReg64(lowOff uint32, v uint64) {
	h.setReg(lowOff+4, uint32(v>>32))
	h.setReg(lowOff, uint32(v))
}

func (h *testHost) load64(iova uint64) uint64 {
	h.t.Helper()
	hi, err := h.mem.Load32(iova + 4)
	if err != nil {
		h.t.Fatal(err)
	}
	lo, err := h.mem.Load32(iova)
	if err != nil {
		h.t.Fatal(err)
	}
	return uint64(hi)<<32 | uint64(lo)
}

func (h *testHost) store64(iova, v uint64) {
	h.t.Helper()
	if err := h.mem.Store32(iova+4, uint32(v>>32)); err != nil {
		h.t.Fatal(err)
	}
	if err := h.mem.Store32(iova, uint32(v)); err != nil {
		h.t.Fatal(err)
	}
}

func (h *testHost) write(iova uint64, p []byte) {
	h.t.Helper()
	if err := h.mem.WriteAt(p, iova); err != nil {
		h.t.Fatal(err)
	}
}

func (h *testHost) read(iova uint64, n int) []byte {
	h.t.Helper()
	p := make([]byte, n)
	if err := h.mem.ReadAt(p, iova); err != nil {
		h.t.Fatal(err)
	}
	return p
}

func (h *testHost) writeContext(iova uint64, c wire.Context) {
	var b [wire.ContextSize]byte
	c.Put(b[:])
	h.write(iova, b[:])
}

func (h *testHost) writeElement(iova uint64, e wire.Element) {
	var b [wire.ElementSize]byte
	e.Put(b[:])
	h.write(iova, b[:])
}

func (h *testHost) readElement(iova uint64) wire.Element {
	return wire.ParseElement(h.read(iova, wire.ElementSize))
}

func (h *testHost) state() wire.State {
	return wire.State((h.reg(wire.RegMHISTATUS) & wire.MHISTATUSStateMask) >> wire.MHISTATUSStateShift)
}

// waitReady waits for MHISTATUS to show READY with the READY bit.
func (h *testHost) waitReady() {
	h.t.Helper()
	h.waitFor("READY", func() bool {
		st := h.reg(wire.RegMHISTATUS)
		return st&wire.MHISTATUSReady != 0 && h.state() == wire.StateReady && h.reg(wire.RegMHICTRL)&wire.MHICTRLReset == 0
	})
}

// setupContexts allocates and fills the context arrays, the command ring
// and every event ring, as mhi_init_dev_ctxt does, and programs the bases.
func (h *testHost) setupContexts() {
	mc := h.cfg.MHI
	h.chCtx = h.mem.alloc(h.t, wire.ContextSize*mc.MaxChannels, 64)
	h.erCtx = h.mem.alloc(h.t, wire.ContextSize*len(mc.EventRings), 64)
	h.cmdCtx = h.mem.alloc(h.t, wire.ContextSize, 64)
	h.ev = nil
	for i, er := range mc.EventRings {
		size := er.Elements * wire.ElementSize
		base := h.mem.alloc(h.t, size, size)
		h.writeContext(h.erCtx+uint64(i)*wire.ContextSize, wire.Context{
			Cfg: uint32(er.ModerationMs) << wire.IntModTShift, Type: wire.ERTypeValid, Index: uint32(er.Vector),
			RBase: base, RLen: uint64(size), RP: base, WP: base,
		})
		h.ev = append(h.ev, &hostEventRing{base: base, n: uint64(er.Elements),
			ctxIOVA: h.erCtx + uint64(i)*wire.ContextSize, recycle: true})
	}
	n := mc.CommandElements
	base := h.mem.alloc(h.t, n*wire.ElementSize, n*wire.ElementSize)
	h.cmd = hostRing{base: base, n: uint64(n), ctxIOVA: h.cmdCtx}
	h.writeContext(h.cmdCtx, wire.Context{RBase: base, RLen: uint64(n * wire.ElementSize), RP: base, WP: base})
	h.setReg64(wire.RegCCABAPLower, h.chCtx)
	h.setReg64(wire.RegECABAPLower, h.erCtx)
	h.setReg64(wire.RegCRCBAPLower, h.cmdCtx)
	cfgReg := h.reg(wire.RegMHICFG)
	cfgReg = cfgReg&^(wire.MHICFGNERMask|wire.MHICFGNHWERMask) |
		uint32(len(mc.EventRings))<<wire.MHICFGNERShift | uint32(mc.HWEventRings())<<wire.MHICFGNHWERShift
	h.setReg(wire.RegMHICFG, cfgReg)
}

// handEventRing gives the device every slot but one of event ring i.
func (h *testHost) handEventRing(i int) {
	r := h.ev[i]
	r.wp = (r.rp + r.n - 1) % r.n
	h.ringEventDoorbell(i)
}

func (h *testHost) ringEventDoorbell(i int) {
	r := h.ev[i]
	h.store64(r.ctxIOVA+wire.CtxWP, r.addr(r.wp))
	h.setReg64(EventDoorbellOffset+uint32(i)*wire.DoorbellStride, r.addr(r.wp))
}

// powerUp brings the device from READY to M0 like the Linux host and
// checks the STATE_CHANGE(M0) and EE(AMSS) events; then it hands the
// hardware event rings over, as the host does at mission mode.
func (h *testHost) powerUp() {
	h.t.Helper()
	h.waitReady()
	h.setReg(BHIOffset+wire.BHIIntVec, 0)
	h.setupContexts()
	for i, er := range h.cfg.MHI.EventRings {
		if !er.Hardware {
			h.handEventRing(i)
		}
	}
	h.setReg(wire.RegMHICTRL, uint32(wire.StateM0)<<wire.MHICTRLStateShift)
	if ev := h.nextEvent(0); ev.Type() != wire.PktStateChangeEvent || ev.EventState() != wire.StateM0 {
		h.t.Fatalf("first event %v, want STATE_CHANGE(M0)", ev)
	}
	if ev := h.nextEvent(0); ev.Type() != wire.PktEEEvent || ev.EventEE() != wire.EEAMSS {
		h.t.Fatalf("second event %v, want EE(AMSS)", ev)
	}
	for i, er := range h.cfg.MHI.EventRings {
		if er.Hardware {
			h.handEventRing(i)
		}
	}
}

// eventRP reads the device's rp from event context i.
func (h *testHost) eventRP(i int) uint64 { return h.load64(h.ev[i].ctxIOVA + wire.CtxRP) }

// nextEvent waits for the next event on ring i and consumes it.
func (h *testHost) nextEvent(i int) wire.Element {
	h.t.Helper()
	r := h.ev[i]
	h.waitFor(fmt.Sprintf("event on ring %d", i), func() bool { return h.eventRP(i) != r.addr(r.rp) })
	ev := h.readElement(r.addr(r.rp))
	r.rp = (r.rp + 1) % r.n
	if r.recycle {
		r.wp = (r.wp + 1) % r.n
		h.ringEventDoorbell(i)
	}
	return ev
}

// pendingEvents returns how many events the device has posted on ring i
// that the host has not read.
func (h *testHost) pendingEvents(i int) uint64 {
	r := h.ev[i]
	idx := (h.eventRP(i) - r.base) / wire.ElementSize
	return (idx + r.n - r.rp) % r.n
}

// command posts a command and returns its completion event, checking that
// it points at the command.
func (h *testHost) command(t wire.PacketType, ch uint8) wire.Element {
	h.t.Helper()
	addr := h.cmd.addr(h.cmd.wp)
	h.writeElement(addr, wire.CommandElement(t, ch))
	h.cmd.wp = (h.cmd.wp + 1) % h.cmd.n
	h.store64(h.cmdCtx+wire.CtxWP, h.cmd.addr(h.cmd.wp))
	h.setReg64(wire.RegCRDBLower, h.cmd.addr(h.cmd.wp))
	ev := h.nextEvent(0)
	if ev.Type() != wire.PktCmdCompletion || ev.Ptr != addr {
		h.t.Fatalf("reply to %s(%d): %v, want CMD_COMPLETION for 0x%x", t, ch, ev, addr)
	}
	return ev
}

// initChannel writes channel ch's context with a fresh ring of n elements,
// as mhi_init_chan_ctxt does.
func (h *testHost) initChannel(ch uint8, n int) *hostRing {
	h.t.Helper()
	cc, ok := h.cfg.MHI.Channel(ch)
	if !ok {
		cc = wire.ChannelConfig{Num: ch, Dir: wire.Uplink}
	}
	size := n * wire.ElementSize
	base := h.mem.alloc(h.t, size, size)
	ctxIOVA := h.chCtx + uint64(ch)*wire.ContextSize
	brst := uint32(wire.BurstDisable)
	if cc.Burst {
		brst = wire.BurstEnable
	}
	h.writeContext(ctxIOVA, wire.Context{
		Cfg: uint32(wire.ChannelEnabled) | brst<<wire.ChCfgBrstShift, Type: uint32(cc.Dir),
		Index: uint32(cc.EventRing), RBase: base, RLen: uint64(size), RP: base, WP: base,
	})
	r := &hostRing{base: base, n: uint64(n), ctxIOVA: ctxIOVA}
	h.ch[ch] = r
	return r
}

// startChannel initialises channel ch and starts it, expecting SUCCESS.
func (h *testHost) startChannel(ch uint8) *hostRing {
	h.t.Helper()
	r := h.initChannel(ch, 16)
	if ev := h.command(wire.PktStartChanCmd, ch); ev.Code() != wire.CCSuccess {
		h.t.Fatalf("START(%d) = %s", ch, ev.Code())
	}
	if st := h.chState(ch); st != wire.ChannelRunning {
		h.t.Fatalf("channel %d context state %s after START, want RUNNING", ch, st)
	}
	return r
}

func (h *testHost) chState(ch uint8) wire.ChannelState {
	h.t.Helper()
	v, err := h.mem.Load32(h.chCtx + uint64(ch)*wire.ContextSize + wire.CtxCfg)
	if err != nil {
		h.t.Fatal(err)
	}
	return wire.ChannelState(v & wire.ChCfgStateMask)
}

// queue writes a TRE for buf on channel ch and publishes the new wp in the
// context (no doorbell). It returns the TRE's IOVA.
func (h *testHost) queue(ch uint8, buf uint64, n uint32, flags uint32) uint64 {
	return h.queueElement(ch, wire.TransferTRE(buf, n, flags))
}

func (h *testHost) queueElement(ch uint8, el wire.Element) uint64 {
	h.t.Helper()
	r := h.ch[ch]
	addr := r.addr(r.wp)
	h.writeElement(addr, el)
	r.wp = (r.wp + 1) % r.n
	h.store64(r.ctxIOVA+wire.CtxWP, r.addr(r.wp))
	return addr
}

// ring rings channel ch's doorbell with its current wp.
func (h *testHost) ring(ch uint8) {
	r := h.ch[ch]
	h.setReg64(ChannelDoorbellOffset+uint32(ch)*wire.DoorbellStride, r.addr(r.wp))
}

// buffer allocates a data buffer filled with a pattern.
func (h *testHost) buffer(n int, seed byte) (uint64, []byte) {
	h.t.Helper()
	iova := h.mem.alloc(h.t, max(n, 1), 8)
	data := make([]byte, n)
	for i := range data {
		data[i] = seed + byte(i*7)
	}
	h.write(iova, data)
	return iova, data
}

// expectTransfer checks a transfer completion event.
func expectTransfer(tb testing.TB, ev wire.Element, ch uint8, ptr uint64, code wire.CompletionCode, n uint32) {
	tb.Helper()
	if ev.Type() != wire.PktTxEvent || ev.Channel() != ch || ev.Ptr != ptr || ev.Code() != code || ev.Length() != n {
		tb.Fatalf("event %v (ch %d %s len %d), want TX_EVENT ch %d ptr 0x%x %s len %d",
			ev, ev.Channel(), ev.Code(), ev.Length(), ch, ptr, code, n)
	}
}

// stayFor checks that cond keeps holding for d: for asserting that
// something does not happen.
func (h *testHost) stayFor(d time.Duration, what string, cond func() bool) {
	h.t.Helper()
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		if !cond() {
			h.t.Fatalf("%s no longer holds (stats %+v)", what, h.dev.Stats())
		}
		time.Sleep(time.Millisecond)
	}
}
