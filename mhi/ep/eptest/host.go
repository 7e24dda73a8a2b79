// Package eptest is test support for the mock modem: a fake host that
// drives an ep.Device through its registers and memory, as Linux's MHI
// host does, on fake DMA memory with a recording interrupt line.
package eptest

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhi/ep"
	"github.com/gomhi/gomhi/mhi/testenv/poll"
	"github.com/gomhi/gomhi/mhi/wire"
)

// MemBase is the IOVA of the fake host memory: non-zero, so that a zero
// pointer is always out of bounds.
const MemBase = 0x1000_0000

// MemSize is the size of the fake host memory in bytes.
const MemSize = 4 << 20

// WaitTimeout bounds every wait of the tests; waits poll and return as soon
// as their condition holds.
const WaitTimeout = 5 * time.Second

// Mem is host memory for the device: one slab at MemBase.
type Mem struct {
	base uint64
	buf  []byte

	// lockorder: Mem.mu
	mu   sync.Mutex
	next uint64 // bump allocator
}

// NewMem returns MemSize bytes of zeroed memory at MemBase.
func NewMem() *Mem {
	return &Mem{base: MemBase, buf: make([]byte, MemSize), next: MemBase}
}

// offset returns the slab offset of n bytes at iova, or ErrBounds.
func (m *Mem) offset(iova uint64, n int) (int, error) {
	size := uint64(len(m.buf))
	if iova < m.base || iova-m.base > size || uint64(n) > size-(iova-m.base) {
		return 0, fmt.Errorf("fake host: %w: 0x%x+%d outside 0x%x..0x%x", wire.ErrBounds, iova, n, m.base, m.base+size)
	}
	return int(iova - m.base), nil
}

// ReadAt copies len(p) bytes at iova into p (ep.HostMemory).
func (m *Mem) ReadAt(p []byte, iova uint64) error {
	off, err := m.offset(iova, len(p))
	if err != nil {
		return err
	}
	copy(p, m.buf[off:])
	return nil
}

// WriteAt copies p to iova (ep.HostMemory).
func (m *Mem) WriteAt(p []byte, iova uint64) error {
	off, err := m.offset(iova, len(p))
	if err != nil {
		return err
	}
	copy(m.buf[off:], p)
	return nil
}

// Load32 reads the aligned 32-bit word at iova atomically (ep.HostMemory).
func (m *Mem) Load32(iova uint64) (uint32, error) {
	off, err := m.offset(iova, 4)
	if err != nil {
		return 0, err
	}
	if off%4 != 0 {
		return 0, fmt.Errorf("fake host: unaligned load at 0x%x", iova)
	}
	return wire.Load32(m.buf, off), nil
}

// Store32 writes the aligned 32-bit word at iova atomically (ep.HostMemory).
func (m *Mem) Store32(iova uint64, v uint32) error {
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

// Alloc returns zeroed memory of size bytes aligned to align.
func (m *Mem) Alloc(tb testing.TB, size, align int) uint64 {
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

// IRQRecord is one raised interrupt.
type IRQRecord struct {
	Vector int
	At     time.Time
}

// IRQ records the vectors the device raises.
type IRQ struct {
	// The device raises interrupts holding its locks.
	//
	// lockorder: ep.Device.ctrlMu → IRQ.mu
	// lockorder: ep.eventRing.mu → IRQ.mu
	// lockorder: ep.channel.work → IRQ.mu
	mu      sync.Mutex
	records []IRQRecord
}

// Raise records an interrupt on vector v.
func (f *IRQ) Raise(v int) {
	f.mu.Lock()
	f.records = append(f.records, IRQRecord{Vector: v, At: time.Now()})
	f.mu.Unlock()
}

// Raised returns the interrupts on vector v so far.
func (f *IRQ) Raised(v int) []IRQRecord {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []IRQRecord
	for _, r := range f.records {
		if r.Vector == v {
			out = append(out, r)
		}
	}
	return out
}

// Ring is a transfer or command ring as the host sees it.
type Ring struct {
	Base    uint64
	N       uint64
	Wp      uint64 // index of the next element the host writes
	CtxIOVA uint64
}

// Addr returns the IOVA of element i.
func (r *Ring) Addr(i uint64) uint64 { return r.Base + i*wire.ElementSize }

// EventRing is an event ring as the host sees it.
type EventRing struct {
	Base    uint64
	N       uint64
	Rp      uint64 // next event the host reads
	Wp      uint64 // first slot handed back... see doorbell rules
	CtxIOVA uint64
	Recycle bool // hand each consumed slot back at once
}

// Addr returns the IOVA of element i.
func (r *EventRing) Addr(i uint64) uint64 { return r.Base + i*wire.ElementSize }

// Host drives a Device the way Linux's MHI host does, directly through
// registers and memory.
type Host struct {
	T   testing.TB // the test the host fails
	Mem *Mem       // host memory the device reaches
	Irq *IRQ       // the interrupts the device raised
	Dev *ep.Device // the device under test
	Cfg ep.Config  // the device's configuration

	ChCtx, ErCtx, CmdCtx uint64          // context arrays (SetupContexts)
	Cmd                  Ring            // the command ring
	Ev                   []*EventRing    // the event rings
	Ch                   map[uint8]*Ring // the channels' rings (InitChannel)
}

// ControllerConfig offers LOOPBACK 0/1 on control ring 0 and one burst
// pair, IP_HW0 100/101, on a moderated hardware ring 1.
func ControllerConfig() wire.ControllerConfig {
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

// Logger writes Debug records to stderr when EP_TEST_LOG is set, and
// formats (then discards) them otherwise, so the logging paths run.
func Logger() *slog.Logger {
	var w io.Writer = io.Discard
	if os.Getenv("EP_TEST_LOG") != "" {
		w = os.Stderr
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// NewHost starts a device on fresh fake memory; mod may adjust the config.
func NewHost(tb testing.TB, mod func(*ep.Config)) *Host {
	tb.Helper()
	cfg := ep.Config{
		MHI:          ControllerConfig(),
		SerialNumber: 0x5A5A1234,
		SoCHWVersion: 0x60050100,
		Logger:       Logger(),
	}
	for i := range cfg.OEMPKHash {
		cfg.OEMPKHash[i] = 0xA0000000 + uint32(i)
	}
	if mod != nil {
		mod(&cfg)
	}
	h := &Host{T: tb, Mem: NewMem(), Irq: &IRQ{}, Cfg: cfg, Ch: map[uint8]*Ring{}}
	dev, err := ep.New(cfg, h.Mem, h.Irq)
	if err != nil {
		tb.Fatal(err)
	}
	h.Dev = dev
	tb.Cleanup(func() { _ = dev.Close() })
	return h
}

// WaitFor polls cond until it holds, failing the test after WaitTimeout.
func (h *Host) WaitFor(what string, cond func() bool) {
	h.T.Helper()
	poll.Wait(h.T, WaitTimeout, cond, func() string {
		return fmt.Sprintf("timed out waiting for %s (stats %+v)", what, h.Dev.Stats())
	})
}

// WaitUntil polls cond until it holds, failing tb after WaitTimeout.
func WaitUntil(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	poll.Wait(tb, WaitTimeout, cond, func() string { return "timed out waiting for " + what })
}

// Reg reads the device register at off.
func (h *Host) Reg(off uint32) uint32 { return h.Dev.ReadRegister(off) }

// SetReg writes v to the device register at off.
func (h *Host) SetReg(off uint32, v uint32) { h.Dev.WriteRegister(off, v) }

// SetReg64 writes a 64-bit register pair high half first, like the host.
func (h *Host) SetReg64(lowOff uint32, v uint64) {
	h.SetReg(lowOff+4, uint32(v>>32))
	h.SetReg(lowOff, uint32(v))
}

// Load64 reads a 64-bit value at iova as two 32-bit loads, high half first.
func (h *Host) Load64(iova uint64) uint64 {
	h.T.Helper()
	hi, err := h.Mem.Load32(iova + 4)
	if err != nil {
		h.T.Fatal(err)
	}
	lo, err := h.Mem.Load32(iova)
	if err != nil {
		h.T.Fatal(err)
	}
	return uint64(hi)<<32 | uint64(lo)
}

// Store64 writes a 64-bit value at iova as two 32-bit stores, high half first.
func (h *Host) Store64(iova, v uint64) {
	h.T.Helper()
	if err := h.Mem.Store32(iova+4, uint32(v>>32)); err != nil {
		h.T.Fatal(err)
	}
	if err := h.Mem.Store32(iova, uint32(v)); err != nil {
		h.T.Fatal(err)
	}
}

// Write copies p to host memory at iova.
func (h *Host) Write(iova uint64, p []byte) {
	h.T.Helper()
	if err := h.Mem.WriteAt(p, iova); err != nil {
		h.T.Fatal(err)
	}
}

// Read returns n bytes of host memory at iova.
func (h *Host) Read(iova uint64, n int) []byte {
	h.T.Helper()
	p := make([]byte, n)
	if err := h.Mem.ReadAt(p, iova); err != nil {
		h.T.Fatal(err)
	}
	return p
}

// WriteContext writes context c at iova.
func (h *Host) WriteContext(iova uint64, c wire.Context) {
	var b [wire.ContextSize]byte
	c.Put(b[:])
	h.Write(iova, b[:])
}

// WriteElement writes ring element e at iova.
func (h *Host) WriteElement(iova uint64, e wire.Element) {
	var b [wire.ElementSize]byte
	e.Put(b[:])
	h.Write(iova, b[:])
}

// ReadElement reads the ring element at iova.
func (h *Host) ReadElement(iova uint64) wire.Element {
	return wire.ParseElement(h.Read(iova, wire.ElementSize))
}

// State returns the MHI state MHISTATUS shows.
func (h *Host) State() wire.State {
	return wire.State((h.Reg(wire.RegMHISTATUS) & wire.MHISTATUSStateMask) >> wire.MHISTATUSStateShift)
}

// WaitReady waits for MHISTATUS to show READY with the READY bit.
func (h *Host) WaitReady() {
	h.T.Helper()
	h.WaitFor("READY", func() bool {
		st := h.Reg(wire.RegMHISTATUS)
		return st&wire.MHISTATUSReady != 0 && h.State() == wire.StateReady && h.Reg(wire.RegMHICTRL)&wire.MHICTRLReset == 0
	})
}

// SetupContexts allocates and fills the context arrays, the command ring
// and every event ring, as mhi_init_dev_ctxt does, and programs the bases.
func (h *Host) SetupContexts() {
	mc := h.Cfg.MHI
	h.ChCtx = h.Mem.Alloc(h.T, wire.ContextSize*mc.MaxChannels, 64)
	h.ErCtx = h.Mem.Alloc(h.T, wire.ContextSize*len(mc.EventRings), 64)
	h.CmdCtx = h.Mem.Alloc(h.T, wire.ContextSize, 64)
	h.Ev = nil
	for i, er := range mc.EventRings {
		size := er.Elements * wire.ElementSize
		base := h.Mem.Alloc(h.T, size, size)
		h.WriteContext(h.ErCtx+uint64(i)*wire.ContextSize, wire.Context{
			Cfg: uint32(er.ModerationMs) << wire.IntModTShift, Type: wire.ERTypeValid, Index: uint32(er.Vector),
			RBase: base, RLen: uint64(size), RP: base, WP: base,
		})
		h.Ev = append(h.Ev, &EventRing{Base: base, N: uint64(er.Elements),
			CtxIOVA: h.ErCtx + uint64(i)*wire.ContextSize, Recycle: true})
	}
	n := mc.CommandElements
	base := h.Mem.Alloc(h.T, n*wire.ElementSize, n*wire.ElementSize)
	h.Cmd = Ring{Base: base, N: uint64(n), CtxIOVA: h.CmdCtx}
	h.WriteContext(h.CmdCtx, wire.Context{RBase: base, RLen: uint64(n * wire.ElementSize), RP: base, WP: base})
	h.SetReg64(wire.RegCCABAPLower, h.ChCtx)
	h.SetReg64(wire.RegECABAPLower, h.ErCtx)
	h.SetReg64(wire.RegCRCBAPLower, h.CmdCtx)
	cfgReg := h.Reg(wire.RegMHICFG)
	cfgReg = cfgReg&^(wire.MHICFGNERMask|wire.MHICFGNHWERMask) |
		uint32(len(mc.EventRings))<<wire.MHICFGNERShift | uint32(mc.HWEventRings())<<wire.MHICFGNHWERShift
	h.SetReg(wire.RegMHICFG, cfgReg)
}

// HandEventRing gives the device every slot but one of event ring i.
func (h *Host) HandEventRing(i int) {
	r := h.Ev[i]
	r.Wp = (r.Rp + r.N - 1) % r.N
	h.RingEventDoorbell(i)
}

// RingEventDoorbell publishes event ring i's wp in its context and rings
// its doorbell.
func (h *Host) RingEventDoorbell(i int) {
	r := h.Ev[i]
	h.Store64(r.CtxIOVA+wire.CtxWP, r.Addr(r.Wp))
	h.SetReg64(ep.EventDoorbellOffset+uint32(i)*wire.DoorbellStride, r.Addr(r.Wp))
}

// PowerUp brings the device from READY to M0 like the Linux host and
// checks the STATE_CHANGE(M0) and EE(AMSS) events; then it hands the
// hardware event rings over, as the host does at mission mode.
func (h *Host) PowerUp() {
	h.T.Helper()
	h.WaitReady()
	h.SetReg(ep.BHIOffset+wire.BHIIntVec, 0)
	h.SetupContexts()
	for i, er := range h.Cfg.MHI.EventRings {
		if !er.Hardware {
			h.HandEventRing(i)
		}
	}
	h.SetReg(wire.RegMHICTRL, uint32(wire.StateM0)<<wire.MHICTRLStateShift)
	if ev := h.NextEvent(0); ev.Type() != wire.PktStateChangeEvent || ev.EventState() != wire.StateM0 {
		h.T.Fatalf("first event %v, want STATE_CHANGE(M0)", ev)
	}
	if ev := h.NextEvent(0); ev.Type() != wire.PktEEEvent || ev.EventEE() != wire.EEAMSS {
		h.T.Fatalf("second event %v, want EE(AMSS)", ev)
	}
	for i, er := range h.Cfg.MHI.EventRings {
		if er.Hardware {
			h.HandEventRing(i)
		}
	}
}

// EventRP reads the device's rp from event context i.
func (h *Host) EventRP(i int) uint64 { return h.Load64(h.Ev[i].CtxIOVA + wire.CtxRP) }

// NextEvent waits for the next event on ring i and consumes it.
func (h *Host) NextEvent(i int) wire.Element {
	h.T.Helper()
	r := h.Ev[i]
	h.WaitFor(fmt.Sprintf("event on ring %d", i), func() bool { return h.EventRP(i) != r.Addr(r.Rp) })
	ev := h.ReadElement(r.Addr(r.Rp))
	r.Rp = (r.Rp + 1) % r.N
	if r.Recycle {
		r.Wp = (r.Wp + 1) % r.N
		h.RingEventDoorbell(i)
	}
	return ev
}

// PendingEvents returns how many events the device has posted on ring i
// that the host has not read.
func (h *Host) PendingEvents(i int) uint64 {
	r := h.Ev[i]
	idx := (h.EventRP(i) - r.Base) / wire.ElementSize
	return (idx + r.N - r.Rp) % r.N
}

// PostCommand writes a command and rings the command doorbell without
// waiting for the completion; it returns the command's IOVA.
func (h *Host) PostCommand(t wire.PacketType, ch uint8) uint64 {
	h.T.Helper()
	addr := h.Cmd.Addr(h.Cmd.Wp)
	h.WriteElement(addr, wire.CommandElement(t, ch))
	h.Cmd.Wp = (h.Cmd.Wp + 1) % h.Cmd.N
	h.Store64(h.CmdCtx+wire.CtxWP, h.Cmd.Addr(h.Cmd.Wp))
	h.SetReg64(wire.RegCRDBLower, h.Cmd.Addr(h.Cmd.Wp))
	return addr
}

// Command posts a command and returns its completion event, checking that
// it points at the command.
func (h *Host) Command(t wire.PacketType, ch uint8) wire.Element {
	h.T.Helper()
	addr := h.PostCommand(t, ch)
	ev := h.NextEvent(0)
	if ev.Type() != wire.PktCmdCompletion || ev.Ptr != addr {
		h.T.Fatalf("reply to %s(%d): %v, want CMD_COMPLETION for 0x%x", t, ch, ev, addr)
	}
	return ev
}

// InitChannel writes channel ch's context with a fresh ring of n elements,
// as mhi_init_chan_ctxt does.
func (h *Host) InitChannel(ch uint8, n int) *Ring {
	h.T.Helper()
	cc, ok := h.Cfg.MHI.Channel(ch)
	if !ok {
		cc = wire.ChannelConfig{Num: ch, Dir: wire.Uplink}
	}
	size := n * wire.ElementSize
	base := h.Mem.Alloc(h.T, size, size)
	ctxIOVA := h.ChCtx + uint64(ch)*wire.ContextSize
	brst := uint32(wire.BurstDisable)
	if cc.Burst {
		brst = wire.BurstEnable
	}
	h.WriteContext(ctxIOVA, wire.Context{
		Cfg: uint32(wire.ChannelEnabled) | brst<<wire.ChCfgBrstShift, Type: uint32(cc.Dir),
		Index: uint32(cc.EventRing), RBase: base, RLen: uint64(size), RP: base, WP: base,
	})
	r := &Ring{Base: base, N: uint64(n), CtxIOVA: ctxIOVA}
	h.Ch[ch] = r
	return r
}

// StartChannel initialises channel ch and starts it, expecting SUCCESS.
func (h *Host) StartChannel(ch uint8) *Ring {
	h.T.Helper()
	r := h.InitChannel(ch, 16)
	if ev := h.Command(wire.PktStartChanCmd, ch); ev.Code() != wire.CCSuccess {
		h.T.Fatalf("START(%d) = %s", ch, ev.Code())
	}
	if st := h.ChState(ch); st != wire.ChannelRunning {
		h.T.Fatalf("channel %d context state %s after START, want RUNNING", ch, st)
	}
	return r
}

// ChState returns channel ch's state from its context.
func (h *Host) ChState(ch uint8) wire.ChannelState {
	h.T.Helper()
	v, err := h.Mem.Load32(h.ChCtx + uint64(ch)*wire.ContextSize + wire.CtxCfg)
	if err != nil {
		h.T.Fatal(err)
	}
	return wire.ChannelState(v & wire.ChCfgStateMask)
}

// Queue writes a TRE for buf on channel ch and publishes the new wp in the
// context (no doorbell). It returns the TRE's IOVA.
func (h *Host) Queue(ch uint8, buf uint64, n uint32, flags uint32) uint64 {
	return h.QueueElement(ch, wire.TransferTRE(buf, n, flags))
}

// QueueElement writes el on channel ch's ring and publishes the new wp in
// the context (no doorbell). It returns the element's IOVA.
func (h *Host) QueueElement(ch uint8, el wire.Element) uint64 {
	h.T.Helper()
	r := h.Ch[ch]
	addr := r.Addr(r.Wp)
	h.WriteElement(addr, el)
	r.Wp = (r.Wp + 1) % r.N
	h.Store64(r.CtxIOVA+wire.CtxWP, r.Addr(r.Wp))
	return addr
}

// Ring rings channel ch's doorbell with its current wp.
func (h *Host) Ring(ch uint8) {
	r := h.Ch[ch]
	h.SetReg64(ep.ChannelDoorbellOffset+uint32(ch)*wire.DoorbellStride, r.Addr(r.Wp))
}

// Buffer allocates a data buffer filled with a pattern.
func (h *Host) Buffer(n int, seed byte) (uint64, []byte) {
	h.T.Helper()
	iova := h.Mem.Alloc(h.T, max(n, 1), 8)
	data := make([]byte, n)
	for i := range data {
		data[i] = seed + byte(i*7)
	}
	h.Write(iova, data)
	return iova, data
}

// ExpectTransfer checks a transfer completion event.
func ExpectTransfer(tb testing.TB, ev wire.Element, ch uint8, ptr uint64, code wire.CompletionCode, n uint32) {
	tb.Helper()
	if ev.Type() != wire.PktTxEvent || ev.Channel() != ch || ev.Ptr != ptr || ev.Code() != code || ev.Length() != n {
		tb.Fatalf("event %v (ch %d %s len %d), want TX_EVENT ch %d ptr 0x%x %s len %d",
			ev, ev.Channel(), ev.Code(), ev.Length(), ch, ptr, code, n)
	}
}

// StayFor checks that cond keeps holding for d: for asserting that
// something does not happen.
func (h *Host) StayFor(d time.Duration, what string, cond func() bool) {
	h.T.Helper()
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		if !cond() {
			h.T.Fatalf("%s no longer holds (stats %+v)", what, h.Dev.Stats())
		}
		time.Sleep(time.Millisecond)
	}
}

// PendingDL returns the transfers queued on downlink channel ch (-1: no
// such channel).
func (h *Host) PendingDL(ch uint8) int {
	for _, c := range h.Dev.Status().Channels {
		if c.Num == ch {
			return c.PendingDL
		}
	}
	return -1
}
