package hostile

import (
	"fmt"
	"sync"

	"github.com/gomhi/gomhi/mhi"
	"github.com/gomhi/gomhi/mhi/msi"
	"github.com/gomhi/gomhi/mhi/wire"
)

// Register layout the scripted Device publishes (the same as the mock
// modem of mhi/ep).
const (
	DefaultRegLen = 0x1000
	CHDBOffset    = 0x400
	ERDBOffset    = 0x800
	BHIOffset     = 0x100
	BHIEOffset    = 0x300
	SerialNumber  = 0x5eed
)

// Behaviour switches the scripted Device's protocol misbehaviours. The zero
// value is an honest device.
type Behaviour struct {
	// NeverReady: after a reset MHISTATUS never shows READY.
	NeverReady bool
	// ResetStuck: MHICTRL.RESET is never cleared.
	ResetStuck bool
	// IgnoreM0: M0 requests (from READY or M3) are not acted upon.
	IgnoreM0 bool
	// IgnoreM3: M3 requests are not acted upon; the device stays in M0.
	IgnoreM3 bool
	// NoEEEvent: M0 is announced without the mission-mode EE event.
	NoEEEvent bool
	// SysErrAtM0: the device enters SYS_ERR right after announcing M0.
	SysErrAtM0 bool
	// IgnoreCommands: command ring doorbells are not answered.
	IgnoreCommands bool
	// CommandCode is the code of command completions (zero: SUCCESS).
	CommandCode wire.CompletionCode
	// Event, when set, sees every event the device posts and may change
	// it; returning false drops it.
	Event func(ring int, ev *wire.Element) bool
}

// DeviceConfig configures a scripted Device.
type DeviceConfig struct {
	// MHI is the configuration the device offers (default Config()).
	MHI wire.ControllerConfig
	// RegLen is the MHIREGLEN the device publishes (default
	// DefaultRegLen).
	RegLen uint32
	// BARSize is the size of the BAR (default RegLen); register accesses
	// beyond it fail, as a transport refuses them.
	BARSize uint64
	// Vectors is the number of MSI vectors (default 3).
	Vectors int
	// Behaviour is the behaviour from power-on (SetBehaviour changes it).
	Behaviour Behaviour
}

// DeviceStats are the scripted Device's counters.
type DeviceStats struct {
	Resets        uint64
	M0Entries     uint64
	SysErrs       uint64
	Commands      uint64
	EventsPosted  uint64
	EventsDropped uint64 // the event ring was full or not set up
	Interrupts    uint64
	BadHostAccess uint64
}

// Device is a scripted MHI device and an mhi.Transport: a register file,
// DMA memory (a Memory), interrupts, and just enough of the protocol for
// the host to power up (READY, M0, the EE event), run its command ring
// (START/STOP/RESET) and move data: uplink transfers complete as the device
// reads them, downlink buffers wait for CompleteDL. Behaviour switches
// misbehaviours, and the methods Post, SetEventRP, WriteHost, EnterSysErr
// and SetRegister let a test lie at will.
type Device struct {
	cfg DeviceConfig
	mem *Memory

	mu       sync.Mutex
	regs     []uint32          // by offset/4, BARSize bytes
	pinned   map[uint32]uint32 // registers that read a fixed value
	state    wire.State
	beh      Behaviour
	sess     *session
	work     []func()
	stats    DeviceStats
	closed   bool
	wake     chan struct{}
	loopDone chan struct{}

	irq      *msi.Deliverer
	stopOnce sync.Once
	stop     chan struct{}
}

// session is what the device learns at M0 and forgets on reset.
type session struct {
	chCtx, erCtx, cmdCtx uint64
	cmdRP                uint64
	chRP                 map[uint8]uint64 // device read pointer of running channels
}

var (
	_ mhi.Transport = (*Device)(nil)
	_ mhi.BARSizer  = (*Device)(nil)
)

// NewDevice returns a scripted device in RESET, about to be READY, and
// starts its goroutines (Close stops them).
func NewDevice(cfg DeviceConfig) *Device {
	if cfg.MHI.MaxChannels == 0 {
		cfg.MHI = Config()
	}
	if cfg.RegLen == 0 {
		cfg.RegLen = DefaultRegLen
	}
	if cfg.BARSize == 0 {
		cfg.BARSize = uint64(cfg.RegLen)
	}
	if cfg.Vectors <= 0 {
		cfg.Vectors = 3
	}
	d := &Device{
		cfg: cfg, mem: NewMemory(), pinned: map[uint32]uint32{},
		regs: make([]uint32, cfg.BARSize/4), wake: make(chan struct{}, 1), loopDone: make(chan struct{}),
		irq: msi.New(), stop: make(chan struct{}),
	}
	d.beh = cfg.Behaviour
	d.initRegsLocked()
	d.resetLocked()
	d.stats.Resets = 0 // power-on is no reset
	go d.loop()
	return d
}

func (d *Device) setReg(off, v uint32) {
	if uint64(off)+4 <= uint64(len(d.regs))*4 {
		d.regs[off/4] = v
	}
}

func (d *Device) reg(off uint32) uint32 {
	if uint64(off)+4 <= uint64(len(d.regs))*4 {
		return d.regs[off/4]
	}
	return 0
}

// initRegsLocked sets the published registers.
func (d *Device) initRegsLocked() {
	d.setReg(wire.RegMHIREGLEN, d.cfg.RegLen)
	d.setReg(wire.RegMHIVER, wire.MHIVersion1)
	d.setReg(wire.RegMHICFG, uint32(d.cfg.MHI.MaxChannels)|uint32(len(d.cfg.MHI.EventRings))<<wire.MHICFGNERShift)
	d.setReg(wire.RegCHDBOFF, CHDBOffset)
	d.setReg(wire.RegERDBOFF, ERDBOffset)
	d.setReg(wire.RegBHIOFF, BHIOffset)
	d.setReg(wire.RegBHIEOFF, BHIEOffset)
	d.setReg(BHIOffset+wire.BHIExecEnv, uint32(wire.EEAMSS))
	d.setReg(BHIOffset+wire.BHISerialNum, SerialNumber)
}

// resetLocked performs an MHI reset as the behaviour allows.
func (d *Device) resetLocked() {
	d.sess = nil
	d.stats.Resets++
	d.state = wire.StateReset
	d.setReg(wire.RegMHISTATUS, 0)
	d.setReg(BHIOffset+wire.BHIIntVec, 0)
	if !d.beh.ResetStuck {
		d.setReg(wire.RegMHICTRL, 0)
	}
	if !d.beh.NeverReady {
		d.state = wire.StateReady
		d.setReg(wire.RegMHISTATUS, uint32(wire.StateReady)<<wire.MHISTATUSStateShift|wire.MHISTATUSReady)
	}
}

// Memory returns the device's DMA memory.
func (d *Device) Memory() *Memory { return d.mem }

// SetBehaviour replaces the misbehaviour switches.
func (d *Device) SetBehaviour(b Behaviour) {
	d.mu.Lock()
	d.beh = b
	d.mu.Unlock()
}

// SetRegister pins register off: the host reads v there from now on,
// whatever the device does.
func (d *Device) SetRegister(off, v uint32) {
	d.mu.Lock()
	d.pinned[off] = v
	d.mu.Unlock()
}

// UnpinRegister undoes SetRegister.
func (d *Device) UnpinRegister(off uint32) {
	d.mu.Lock()
	delete(d.pinned, off)
	d.mu.Unlock()
}

// State returns the device's MHI state.
func (d *Device) State() wire.State {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.state
}

// Stats returns the device's counters.
func (d *Device) Stats() DeviceStats {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := d.stats
	s.BadHostAccess = d.mem.BadAccesses()
	return s
}

// Violations returns the device-side uses of freed memory (see Memory).
func (d *Device) Violations() []string { return d.mem.Violations() }

func (d *Device) checkOff(op string, off uint32) error {
	if off%4 != 0 || uint64(off)+4 > d.cfg.BARSize {
		return fmt.Errorf("hostile: register %s at 0x%x outside the BAR of 0x%x bytes: %w", op, off, d.cfg.BARSize, wire.ErrBounds)
	}
	return nil
}

// Read32 implements mhi.Registers.
func (d *Device) Read32(off uint32) (uint32, error) {
	if err := d.checkOff("read", off); err != nil {
		return 0, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if v, ok := d.pinned[off]; ok {
		return v, nil
	}
	return d.reg(off), nil
}

// Write32 implements mhi.Registers. Side effects (reset, state changes,
// commands, channel doorbells) run on the device's goroutine.
func (d *Device) Write32(off, v uint32) error {
	if err := d.checkOff("write", off); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case off == wire.RegMHISTATUS:
		return nil // read-only
	case off == wire.RegMHICTRL:
		d.setReg(off, v&(wire.MHICTRLStateMask|wire.MHICTRLReset))
		if v&wire.MHICTRLReset != 0 {
			d.sess = nil // stop using host memory at once
			d.queueLocked(d.resetLocked)
		} else {
			d.queueLocked(d.followStateLocked)
		}
		return nil
	case off == wire.RegSOCRESETREQ:
		if v&wire.SOCResetReqBit != 0 {
			d.sess = nil
			d.queueLocked(d.resetLocked)
		}
		return nil
	case off == wire.RegCRDBLower:
		d.queueLocked(d.processCommandsLocked)
	case off >= CHDBOffset && off < CHDBOffset+wire.DoorbellStride*wire.MaxDoorbellChannels && off%8 == 0:
		ch := uint8((off - CHDBOffset) / wire.DoorbellStride)
		d.queueLocked(func() { d.processChannelLocked(ch) })
	}
	d.setReg(off, v)
	return nil
}

// queueLocked hands f to the device goroutine.
func (d *Device) queueLocked(f func()) {
	d.work = append(d.work, f)
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// loop runs queued work under d.mu.
func (d *Device) loop() {
	defer close(d.loopDone)
	for {
		select {
		case <-d.stop:
			return
		case <-d.wake:
		}
		d.mu.Lock()
		for len(d.work) > 0 {
			f := d.work[0]
			d.work = d.work[1:]
			f()
		}
		d.mu.Unlock()
	}
}

// followStateLocked acts on the state the host requests in MHICTRL.
func (d *Device) followStateLocked() {
	req := wire.State((d.reg(wire.RegMHICTRL) & wire.MHICTRLStateMask) >> wire.MHICTRLStateShift)
	switch {
	case req == wire.StateM0 && d.state == wire.StateReady && !d.beh.IgnoreM0:
		d.sess = &session{
			chCtx:  uint64(d.reg(wire.RegCCABAPHigher))<<32 | uint64(d.reg(wire.RegCCABAPLower)),
			erCtx:  uint64(d.reg(wire.RegECABAPHigher))<<32 | uint64(d.reg(wire.RegECABAPLower)),
			cmdCtx: uint64(d.reg(wire.RegCRCBAPHigher))<<32 | uint64(d.reg(wire.RegCRCBAPLower)),
			chRP:   map[uint8]uint64{},
		}
		if c, err := d.contextLocked(d.sess.cmdCtx); err == nil {
			d.sess.cmdRP = c.RBase
		}
		d.setStateLocked(wire.StateM0)
		d.stats.M0Entries++
		d.postLocked(0, wire.StateChangeEvent(wire.StateM0))
		if !d.beh.NoEEEvent {
			d.postLocked(0, wire.EEEvent(wire.EEAMSS))
		}
		if d.beh.SysErrAtM0 {
			d.enterSysErrLocked()
		}
	case req == wire.StateM0 && d.state == wire.StateM3 && !d.beh.IgnoreM0:
		d.setStateLocked(wire.StateM0)
		d.postLocked(0, wire.StateChangeEvent(wire.StateM0))
	case req == wire.StateM3 && d.state == wire.StateM0 && !d.beh.IgnoreM3:
		d.setStateLocked(wire.StateM3)
		d.postLocked(0, wire.StateChangeEvent(wire.StateM3))
	}
}

func (d *Device) setStateLocked(s wire.State) {
	d.state = s
	d.setReg(wire.RegMHISTATUS, uint32(s)<<wire.MHISTATUSStateShift|wire.MHISTATUSReady)
}

// EnterSysErr puts the device in SYS_ERR: MHISTATUS shows it, the BHI
// INTVEC vector is raised and STATE_CHANGE(SYS_ERR) is posted on event
// ring 0 when a session exists.
func (d *Device) EnterSysErr() {
	d.mu.Lock()
	d.enterSysErrLocked()
	d.mu.Unlock()
}

func (d *Device) enterSysErrLocked() {
	d.stats.SysErrs++
	d.state = wire.StateSysErr
	d.setReg(wire.RegMHISTATUS, uint32(wire.StateSysErr)<<wire.MHISTATUSStateShift|wire.MHISTATUSSysErr|wire.MHISTATUSReady)
	d.raiseLocked(int(d.reg(BHIOffset + wire.BHIIntVec)))
	if d.sess != nil {
		d.postLocked(0, wire.StateChangeEvent(wire.StateSysErr))
	}
}

// contextLocked reads the 44-byte context at iova.
func (d *Device) contextLocked(iova uint64) (wire.Context, error) {
	b, err := d.mem.Slice(iova, wire.ContextSize)
	if err != nil {
		return wire.Context{}, err
	}
	return wire.Context{
		Cfg: wire.Load32(b, wire.CtxCfg), Type: wire.Load32(b, wire.CtxType), Index: wire.Load32(b, wire.CtxIndex),
		RBase: wire.Load64(b, wire.CtxRBase), RLen: wire.Load64(b, wire.CtxRLen),
		RP: wire.Load64(b, wire.CtxRP), WP: wire.Load64(b, wire.CtxWP),
	}, nil
}

// ContextKind selects a context array.
type ContextKind int

// Context arrays.
const (
	ChannelContext ContextKind = iota
	EventContext
	CommandContext
)

// ContextAddr returns the IOVA of context i of the given kind in the
// current session (from the context base registers the host programmed).
func (d *Device) ContextAddr(kind ContextKind, i int) (uint64, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.contextAddrLocked(kind, i)
}

func (d *Device) contextAddrLocked(kind ContextKind, i int) (uint64, error) {
	if d.sess == nil {
		return 0, fmt.Errorf("hostile: no session (device in %s)", d.state)
	}
	switch kind {
	case ChannelContext:
		return d.sess.chCtx + uint64(i)*wire.ContextSize, nil
	case EventContext:
		return d.sess.erCtx + uint64(i)*wire.ContextSize, nil
	}
	return d.sess.cmdCtx, nil
}

// Context returns context i of the given kind as the host wrote it.
func (d *Device) Context(kind ContextKind, i int) (wire.Context, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	a, err := d.contextAddrLocked(kind, i)
	if err != nil {
		return wire.Context{}, err
	}
	return d.contextLocked(a)
}

// Post writes evs on event ring ring at the device's read pointer, moves
// the read pointer on and raises the ring's vector once. Events that do not
// fit are dropped and counted.
func (d *Device) Post(ring int, evs ...wire.Element) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, ev := range evs {
		if err := d.writeEventLocked(ring, ev); err != nil {
			return err
		}
	}
	return d.raiseRingLocked(ring)
}

// postLocked posts one event as the honest device does (Behaviour.Event
// may change or drop it) and raises the ring's vector.
func (d *Device) postLocked(ring int, ev wire.Element) {
	if d.beh.Event != nil && !d.beh.Event(ring, &ev) {
		d.stats.EventsDropped++
		return
	}
	if d.writeEventLocked(ring, ev) == nil {
		_ = d.raiseRingLocked(ring)
	}
}

func (d *Device) writeEventLocked(ring int, ev wire.Element) error {
	a, err := d.contextAddrLocked(EventContext, ring)
	if err != nil {
		d.stats.EventsDropped++
		return err
	}
	c, err := d.contextLocked(a)
	if err != nil {
		d.stats.EventsDropped++
		return err
	}
	if c.RLen == 0 || c.RP < c.RBase || c.RP >= c.RBase+c.RLen || (c.RP-c.RBase)%wire.ElementSize != 0 {
		d.stats.EventsDropped++
		return fmt.Errorf("hostile: event ring %d: rp 0x%x outside [0x%x, +0x%x)", ring, c.RP, c.RBase, c.RLen)
	}
	if c.RP == c.WP {
		d.stats.EventsDropped++
		return fmt.Errorf("hostile: event ring %d full (rp = wp = 0x%x)", ring, c.RP)
	}
	b, err := d.mem.Slice(c.RP, wire.ElementSize)
	if err != nil {
		d.stats.EventsDropped++
		return err
	}
	ev.Put(b)
	next := c.RP + wire.ElementSize
	if next == c.RBase+c.RLen {
		next = c.RBase
	}
	ctx, _ := d.mem.Slice(a, wire.ContextSize)
	wire.Store64(ctx, wire.CtxRP, next) // after the element: the host reads rp, then the element
	d.stats.EventsPosted++
	return nil
}

func (d *Device) raiseRingLocked(ring int) error {
	a, err := d.contextAddrLocked(EventContext, ring)
	if err != nil {
		return err
	}
	c, err := d.contextLocked(a)
	if err != nil {
		return err
	}
	d.raiseLocked(int(c.Index))
	return nil
}

// SetEventRP stores iova as the read pointer of event ring ring (any value:
// outside the ring, misaligned, backwards) and raises the ring's vector.
func (d *Device) SetEventRP(ring int, iova uint64) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	a, err := d.contextAddrLocked(EventContext, ring)
	if err != nil {
		return err
	}
	ctx, err := d.mem.Slice(a, wire.ContextSize)
	if err != nil {
		return err
	}
	wire.Store64(ctx, wire.CtxRP, iova)
	return d.raiseRingLocked(ring)
}

// WriteHost writes p to host memory at iova, as a DMA write by the device.
func (d *Device) WriteHost(iova uint64, p []byte) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	b, err := d.mem.Slice(iova, len(p))
	if err != nil {
		return err
	}
	copy(b, p)
	return nil
}

// ReadHost reads host memory at iova into p, as a DMA read by the device.
func (d *Device) ReadHost(iova uint64, p []byte) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	b, err := d.mem.Slice(iova, len(p))
	if err != nil {
		return err
	}
	copy(p, b)
	return nil
}

// processCommandsLocked executes the commands between the device's command
// read pointer and the host's write pointer.
func (d *Device) processCommandsLocked() {
	if d.sess == nil || d.beh.IgnoreCommands || d.state != wire.StateM0 {
		return
	}
	c, err := d.contextLocked(d.sess.cmdCtx)
	if err != nil || c.RLen == 0 {
		return
	}
	for n := 0; d.sess.cmdRP != c.WP && n < int(c.RLen/wire.ElementSize); n++ {
		b, err := d.mem.Slice(d.sess.cmdRP, wire.ElementSize)
		if err != nil {
			return
		}
		el := wire.ParseElement(b)
		code := d.beh.CommandCode
		if code == 0 {
			code = d.executeLocked(el)
		}
		d.stats.Commands++
		at := d.sess.cmdRP
		d.sess.cmdRP += wire.ElementSize
		if d.sess.cmdRP >= c.RBase+c.RLen {
			d.sess.cmdRP = c.RBase
		}
		if ctx, err := d.mem.Slice(d.sess.cmdCtx, wire.ContextSize); err == nil {
			wire.Store64(ctx, wire.CtxRP, d.sess.cmdRP)
		}
		d.postLocked(0, wire.CommandCompletionEvent(at, code))
	}
}

// executeLocked runs one channel command and returns its completion code.
func (d *Device) executeLocked(el wire.Element) wire.CompletionCode {
	num := el.Channel()
	if _, ok := d.cfg.MHI.Channel(num); !ok {
		return wire.CCUndefinedErr
	}
	a, _ := d.contextAddrLocked(ChannelContext, int(num))
	ctx, err := d.mem.Slice(a, wire.ContextSize)
	if err != nil {
		return wire.CCUndefinedErr
	}
	var st wire.ChannelState
	switch el.Type() {
	case wire.PktStartChanCmd:
		st = wire.ChannelRunning
		if _, running := d.sess.chRP[num]; !running {
			d.sess.chRP[num] = wire.Load64(ctx, wire.CtxRP)
		}
	case wire.PktStopChanCmd:
		st = wire.ChannelStop
	case wire.PktResetChanCmd:
		st = wire.ChannelDisabled
		delete(d.sess.chRP, num)
	default:
		return wire.CCUndefinedErr
	}
	wire.Store32(ctx, wire.CtxCfg, wire.Load32(ctx, wire.CtxCfg)&^wire.ChCfgStateMask|uint32(st))
	return wire.CCSuccess
}

// processChannelLocked completes the uplink elements the host queued on
// channel num (downlink buffers wait for CompleteDL).
func (d *Device) processChannelLocked(num uint8) {
	if d.sess == nil || d.state != wire.StateM0 || num%2 == 1 {
		return
	}
	rp, running := d.sess.chRP[num]
	if !running {
		return
	}
	a, _ := d.contextAddrLocked(ChannelContext, int(num))
	c, err := d.contextLocked(a)
	if err != nil || c.RLen == 0 {
		return
	}
	for n := 0; rp != c.WP && n < int(c.RLen/wire.ElementSize); n++ {
		b, err := d.mem.Slice(rp, wire.ElementSize)
		if err != nil {
			return
		}
		tre := wire.ParseElement(b)
		at := rp
		rp += wire.ElementSize
		if rp >= c.RBase+c.RLen {
			rp = c.RBase
		}
		d.sess.chRP[num] = rp
		if ctx, err := d.mem.Slice(a, wire.ContextSize); err == nil {
			wire.Store64(ctx, wire.CtxRP, rp)
		}
		if tre.Flags()&(wire.TREIEOT|wire.TREIEOB) != 0 {
			d.postLocked(int(c.Index), wire.TransferEvent(at, wire.CCEOT, tre.Length(), num))
		}
	}
}

// NextTRE returns the IOVA and the element of the next element the host
// queued on channel num that the device has not consumed.
func (d *Device) NextTRE(num uint8) (uint64, wire.Element, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.nextTRELocked(num)
}

func (d *Device) nextTRELocked(num uint8) (uint64, wire.Element, error) {
	if d.sess == nil {
		return 0, wire.Element{}, fmt.Errorf("hostile: no session")
	}
	rp, running := d.sess.chRP[num]
	if !running {
		return 0, wire.Element{}, fmt.Errorf("hostile: channel %d not started", num)
	}
	a, _ := d.contextAddrLocked(ChannelContext, int(num))
	c, err := d.contextLocked(a)
	if err != nil {
		return 0, wire.Element{}, err
	}
	if rp == c.WP {
		return 0, wire.Element{}, fmt.Errorf("hostile: channel %d: no element queued", num)
	}
	b, err := d.mem.Slice(rp, wire.ElementSize)
	if err != nil {
		return 0, wire.Element{}, err
	}
	return rp, wire.ParseElement(b), nil
}

// CompleteDL fills the next downlink element of channel num with data (at
// most the element's length) and posts a transfer event with code and the
// length written; it returns the element's IOVA.
func (d *Device) CompleteDL(num uint8, data []byte, code wire.CompletionCode) (uint64, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	at, tre, err := d.nextTRELocked(num)
	if err != nil {
		return 0, err
	}
	n := min(len(data), int(tre.Length()))
	buf, err := d.mem.Slice(tre.Ptr, n)
	if err != nil {
		return 0, err
	}
	copy(buf, data)
	a, _ := d.contextAddrLocked(ChannelContext, int(num))
	c, _ := d.contextLocked(a)
	rp := at + wire.ElementSize
	if rp >= c.RBase+c.RLen {
		rp = c.RBase
	}
	d.sess.chRP[num] = rp
	if ctx, err := d.mem.Slice(a, wire.ContextSize); err == nil {
		wire.Store64(ctx, wire.CtxRP, rp)
	}
	d.postLocked(int(c.Index), wire.TransferEvent(at, code, uint32(n), num))
	return at, nil
}

// Raise raises vector now (outside the protocol: an interrupt storm).
func (d *Device) Raise(vector int) {
	d.mu.Lock()
	d.raiseLocked(vector)
	d.mu.Unlock()
}

func (d *Device) raiseLocked(vector int) {
	if vector < 0 || vector >= d.cfg.Vectors {
		vector = 0
	}
	d.stats.Interrupts++
	d.irq.Raise(vector)
}

// Alloc implements mhi.DMAMemory.
func (d *Device) Alloc(size, align int) (mhi.DMABuffer, error) { return d.mem.Alloc(size, align) }

// Free implements mhi.DMAMemory.
func (d *Device) Free(b mhi.DMABuffer) error { return d.mem.Free(b) }

// Vectors implements mhi.Interrupts.
func (d *Device) Vectors() int { return d.cfg.Vectors }

// SetInterruptHandler implements mhi.Interrupts; it returns once no call
// of the previous handler is running.
func (d *Device) SetInterruptHandler(h func(int)) { d.irq.SetHandler(h) }

// Reset implements mhi.Transport: a function-level reset (registers back to
// their power-on values, then an MHI reset).
func (d *Device) Reset() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	clear(d.regs)
	d.initRegsLocked()
	d.resetLocked()
	return nil
}

// BARSize implements mhi.BARSizer.
func (d *Device) BARSize() uint64 { return d.cfg.BARSize }

// Close stops the device's goroutines.
func (d *Device) Close() error {
	d.stopOnce.Do(func() {
		close(d.stop)
		d.irq.Close()
		<-d.loopDone
	})
	return nil
}
