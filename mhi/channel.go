package mhi

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/gomhi/gomhi/mhi/wire"
)

// Flags ask for completion behaviour on a queued element.
type Flags uint32

// Queue flags.
const (
	// FlagEOT asks for a completion event when the transfer ends at this element.
	FlagEOT Flags = 1 << iota
	// FlagEOB asks for a completion event at the end of this block.
	FlagEOB
	// FlagChain says the transfer continues in the next element.
	FlagChain
)

// Transfer is one element to queue: a buffer in DMA memory and flags. Cookie
// is returned unchanged in the element's Completion.
type Transfer struct {
	IOVA   uint64
	Len    int
	Flags  Flags
	Cookie uint64
}

// Completion reports one completed (or aborted) element.
type Completion struct {
	Cookie uint64
	IOVA   uint64
	// Len is the number of bytes the device transferred in this element.
	Len int
	// Code is the event's code, EOT, EOB or OVERFLOW (OVERFLOW: the buffer
	// is full and the transfer continues in the next element), for every
	// element the event completed; INVALID when Err is set.
	Code wire.CompletionCode
	// End is true for the element the device's event named (the end of the
	// transfer, the block, or the filled buffer), false for earlier elements
	// of a chain that the same event completed.
	End bool
	// Err is nil, or wraps wire.ErrAborted or ErrBadDevice.
	Err error
}

type slot struct {
	iova   uint64
	n      int
	cookie uint64
}

// Channel is one MHI channel on the host: a transfer ring, its context and
// the bookkeeping for queued buffers.
type Channel struct {
	ctrl *Controller
	cfg  wire.ChannelConfig
	er   *EventRing
	bei  bool

	// mu guards ring, slots, state, dbMode, handler, wanted, comps and
	// reclaimed. It comes after the event ring's mu and the command
	// ring's mu in the Controller's lock order; the doorbell is rung under
	// it (through Controller.gate), the handler is called without it.
	mu      sync.Mutex
	ring    ring
	slots   []slot
	state   wire.ChannelState // host view: DISABLED, ENABLED or STOP
	dbMode  bool
	handler func(Completion)
	wanted  bool         // started by a client; restarted after recovery
	comps   []Completion // scratch for completions, used by the event goroutine
	// errFull is Queue's wire.ErrRingFull, made once: a sender that polls a
	// full ring must not allocate per try.
	errFull error
	// reclaimed, when not nil, is closed by the next abort: a client Reset
	// during SYS_ERR waits on it for the recovery (or a give-up, or
	// PowerDown) to reset the device, hand over what it posted and take
	// the rest of the buffers back.
	reclaimed chan struct{}

	stats ChannelStats
}

// ChannelStats are a channel's counters.
type ChannelStats struct {
	Queued    atomic.Uint64
	Completed atomic.Uint64
	Bytes     atomic.Uint64
	Overflows atomic.Uint64
	Aborted   atomic.Uint64
	Doorbells atomic.Uint64
	DBModes   atomic.Uint64
	BadEvents atomic.Uint64
	// DoorbellErrors counts doorbell writes of this channel the transport
	// failed (the elements stayed queued; see Queue).
	DoorbellErrors atomic.Uint64
}

// Num returns the channel number.
func (ch *Channel) Num() uint8 { return ch.cfg.Num }

// Config returns the channel's configuration.
func (ch *Channel) Config() wire.ChannelConfig { return ch.cfg }

// Stats returns the channel's counters.
func (ch *Channel) Stats() *ChannelStats { return &ch.stats }

func (ch *Channel) ctx() []byte {
	n := int(ch.cfg.Num)
	return ch.ctrl.chCtx.Bytes[n*wire.ContextSize : (n+1)*wire.ContextSize]
}

func (ch *Channel) writeContext(st wire.ChannelState, withRing bool) {
	brst := uint32(wire.BurstDisable)
	if ch.cfg.Burst {
		brst = wire.BurstEnable
	}
	ctx := wire.Context{
		Cfg:   uint32(st) | brst<<wire.ChCfgBrstShift,
		Type:  uint32(ch.cfg.Dir),
		Index: uint32(ch.cfg.EventRing),
	}
	if withRing {
		ctx.RBase, ctx.RLen = ch.ring.base(), ch.ring.length()
		ctx.RP, ctx.WP = ch.ring.base(), ch.ring.base()
	}
	ctx.Put(ch.ctx())
}

// clientOp takes the client side of chanOps for a Start, Stop or Reset
// and reports whether the device is in SYS_ERR (the recovery has not taken
// stock yet). The caller must call ch.ctrl.chanOps.RUnlock.
func (ch *Channel) clientOp() (sysErr bool) {
	c := ch.ctrl
	c.chanOps.RLock()
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pm == pmSysErr
}

// Start starts the channel on the device; handler receives every completion
// (from the controller's event goroutine; it may queue again). Start is
// allowed from DISABLED and STOP.
func (ch *Channel) Start(handler func(Completion)) error {
	sysErr := ch.clientOp()
	defer ch.ctrl.chanOps.RUnlock()
	if sysErr {
		return fmt.Errorf("%s: start channel %d: %w", ch.ctrl.name, ch.cfg.Num, ErrRecovering)
	}
	return ch.start(handler)
}

// start is Start without the client gate, for the recovery's restart.
func (ch *Channel) start(handler func(Completion)) error {
	ch.ctrl.procMu.RLock()
	allocated := ch.ctrl.allocated
	ch.ctrl.procMu.RUnlock()
	if !allocated {
		return fmt.Errorf("%s: start channel %d: %w", ch.ctrl.name, ch.cfg.Num, ErrPoweredDown)
	}
	ch.mu.Lock()
	switch ch.state {
	case wire.ChannelDisabled:
		ch.ring.reset()
		ch.writeContext(wire.ChannelEnabled, true)
	case wire.ChannelStop:
		wire.Store32(ch.ctx(), wire.CtxCfg, wire.Load32(ch.ctx(), wire.CtxCfg)&^wire.ChCfgStateMask|uint32(wire.ChannelEnabled))
	default:
		st := ch.state
		ch.mu.Unlock()
		return fmt.Errorf("%s: start channel %d in state %s: %w", ch.ctrl.name, ch.cfg.Num, st, wire.ErrChannelState)
	}
	if handler != nil {
		ch.handler = handler
	}
	ch.mu.Unlock()

	if err := ch.ctrl.sendCommand(wire.PktStartChanCmd, ch.cfg.Num); err != nil {
		return err
	}
	ch.mu.Lock()
	ch.state = wire.ChannelEnabled
	ch.dbMode = true
	ch.wanted = true
	pending := ch.ring.used() > 0
	ch.mu.Unlock()
	if pending {
		ch.mu.Lock()
		err := ch.ringDoorbell()
		ch.mu.Unlock()
		if err != nil {
			// The channel is started; its queued elements wait for the
			// next Queue or Kick.
			ch.ctrl.log.Warn("channel doorbell after start", "channel", ch.cfg.Num, "err", err)
		}
	}
	return nil
}

// Stop stops the channel; queued buffers stay queued.
func (ch *Channel) Stop() error {
	if err := ch.ctrl.LinkDown(); err != nil {
		return fmt.Errorf("stop channel %d: %w", ch.cfg.Num, err)
	}
	sysErr := ch.clientOp()
	defer ch.ctrl.chanOps.RUnlock()
	if sysErr {
		return fmt.Errorf("%s: stop channel %d: %w", ch.ctrl.name, ch.cfg.Num, ErrRecovering)
	}
	ch.mu.Lock()
	if ch.state != wire.ChannelEnabled {
		st := ch.state
		ch.mu.Unlock()
		return fmt.Errorf("%s: stop channel %d in state %s: %w", ch.ctrl.name, ch.cfg.Num, st, wire.ErrChannelState)
	}
	ch.mu.Unlock()
	if err := ch.ctrl.sendCommand(wire.PktStopChanCmd, ch.cfg.Num); err != nil {
		return err
	}
	// The device posted every completion of this channel before it
	// completed the command, possibly on another event ring: handle them
	// now, so that nothing of this channel is left behind the stop.
	ch.er.process(false)
	ch.mu.Lock()
	ch.state = wire.ChannelStop
	ch.mu.Unlock()
	return nil
}

// Reset resets the channel: the device forgets the ring and every queued
// buffer is returned to the handler with wire.ErrAborted.
//
// During SYS_ERR the device cannot reset one channel; the recovery's MHI
// reset resets them all. Reset then marks the channel as no longer wanted
// (the recovery will not restart it) and waits for the recovery to take
// stock: once the device is reset, the completions it posted before reach
// the handler as usual, and only then does every other buffer come back
// with wire.ErrAborted. Handing the buffers back earlier would give the client
// memory the device may still write, and the completions of the packets
// in them would then find the channel reset and be dropped as stale. The
// wait lasts until the recovery attempt starts (its backoff, up to
// Options.RecoveryBackoffMax) and has reset the device, or until the
// controller gives up or is powered down.
func (ch *Channel) Reset() error {
	if err := ch.ctrl.LinkDown(); err != nil {
		// Off the bus: the channel was aborted when the link went down.
		return fmt.Errorf("reset channel %d: %w", ch.cfg.Num, err)
	}
	sysErr := ch.clientOp()
	ch.mu.Lock()
	if ch.state != wire.ChannelEnabled && ch.state != wire.ChannelStop && !sysErr {
		st := ch.state
		ch.mu.Unlock()
		ch.ctrl.chanOps.RUnlock()
		return fmt.Errorf("%s: reset channel %d in state %s: %w", ch.ctrl.name, ch.cfg.Num, st, wire.ErrChannelState)
	}
	ch.wanted = false
	if sysErr {
		if ch.state == wire.ChannelDisabled {
			// A recovery attempt already took stock of the channel (it
			// failed and the next one waits): nothing of it is on the
			// device any more.
			ch.mu.Unlock()
			ch.ctrl.chanOps.RUnlock()
			ch.abort()
			return nil
		}
		// The context stays as it is (the device may still read it until
		// the recovery's MHI reset; the recovery rewrites it after).
		if ch.reclaimed == nil {
			ch.reclaimed = make(chan struct{})
		}
		reclaimed := ch.reclaimed
		ch.mu.Unlock()
		ch.ctrl.chanOps.RUnlock() // let the recovery in
		<-reclaimed
		return nil
	}
	ch.state = wire.ChannelDisabled
	ch.mu.Unlock()
	defer ch.ctrl.chanOps.RUnlock()
	err := ch.ctrl.sendCommand(wire.PktResetChanCmd, ch.cfg.Num)
	// Consume (as stale) whatever the device posted for the channel before
	// the reset, so no old event meets the restarted ring.
	ch.er.process(false)
	ch.abort()
	ch.mu.Lock()
	ch.writeContext(wire.ChannelDisabled, false)
	ch.mu.Unlock()
	return err
}

// abort returns every queued buffer to the handler with wire.ErrAborted, then
// releases a Reset waiting for them (reclaimed).
func (ch *Channel) abort() {
	ch.mu.Lock()
	var out []Completion
	for ch.ring.rp != ch.ring.wp {
		s := ch.slots[ch.ring.rp]
		out = append(out, Completion{Cookie: s.cookie, IOVA: s.iova,
			Err: fmt.Errorf("%s: channel %d: %w", ch.ctrl.name, ch.cfg.Num, wire.ErrAborted)})
		ch.ring.rp = ch.ring.next(ch.ring.rp)
	}
	h := ch.handler
	reclaimed := ch.reclaimed
	ch.reclaimed = nil
	ch.mu.Unlock()
	ch.stats.Aborted.Add(uint64(len(out)))
	if h != nil {
		for _, c := range out {
			h(c)
		}
	}
	if reclaimed != nil {
		close(reclaimed)
	}
}

// Free returns the number of elements that can be queued now.
func (ch *Channel) Free() int {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	return ch.ring.free()
}

// Pending returns the number of queued, not yet completed elements.
func (ch *Channel) Pending() int {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	return ch.ring.used()
}

// Queue posts the elements of xs in order and rings the doorbell once. Either
// all are queued or none (wire.ErrRingFull when the ring lacks room, and
// wire.ErrChannelState, ErrTooLarge).
//
// One error means the opposite: an error wrapping ErrDoorbell says that the
// elements ARE queued but the doorbell write failed (the transport's error
// is wrapped too; the failure is counted in DoorbellErrors). The buffers
// then belong to the channel as after a successful Queue: their completions
// (or wire.ErrAborted returns on reset, SYS_ERR or power-down) reach the handler
// as usual, and the caller must not reuse them. Call Kick to ring the
// doorbell again; the next successful Queue rings it too.
func (ch *Channel) Queue(xs []Transfer) error {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if ch.state != wire.ChannelEnabled {
		return fmt.Errorf("%s: queue on channel %d in state %s: %w", ch.ctrl.name, ch.cfg.Num, ch.state, wire.ErrChannelState)
	}
	if len(xs) > ch.ring.free() {
		return ch.errFull
	}
	for _, x := range xs {
		if x.Len <= 0 || x.Len > wire.MaxTRELength {
			return fmt.Errorf("%s: channel %d: buffer of %d bytes, elements hold 1..%d: %w", ch.ctrl.name, ch.cfg.Num, x.Len, wire.MaxTRELength, ErrTooLarge)
		}
	}
	for _, x := range xs {
		var f uint32
		if x.Flags&FlagEOT != 0 {
			f |= wire.TREIEOT
		}
		if x.Flags&FlagEOB != 0 {
			f |= wire.TREIEOB
		}
		if x.Flags&FlagChain != 0 {
			f |= wire.TREChain
		}
		if ch.bei {
			f |= wire.TREBEI
		}
		i := ch.ring.wp
		ch.ring.put(i, wire.TransferTRE(x.IOVA, uint32(x.Len), f))
		ch.slots[i] = slot{iova: x.IOVA, n: x.Len, cookie: x.Cookie}
		ch.ring.wp = ch.ring.next(i)
	}
	ch.stats.Queued.Add(uint64(len(xs)))
	if err := ch.ringDoorbell(); err != nil {
		return fmt.Errorf("%s: channel %d: %d elements queued, doorbell not rung (Kick to retry): %w",
			ch.ctrl.name, ch.cfg.Num, len(xs), err)
	}
	return nil
}

// Kick rings the channel's doorbell with its current write pointer, to
// retry after Queue returned an error wrapping ErrDoorbell. It does nothing
// when no element is queued or the channel is not enabled.
func (ch *Channel) Kick() error {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if ch.state != wire.ChannelEnabled || ch.ring.used() == 0 {
		return nil
	}
	if ch.cfg.Burst {
		ch.dbMode = true // a doorbell that may have been lost must ring
	}
	if err := ch.ringDoorbell(); err != nil {
		return fmt.Errorf("%s: channel %d: %w", ch.ctrl.name, ch.cfg.Num, err)
	}
	return nil
}

// ringDoorbell publishes the write pointer and, when allowed, rings the
// channel doorbell. A failed write is counted and returned wrapping
// ErrDoorbell. Called with ch.mu held.
func (ch *Channel) ringDoorbell() error {
	c := ch.ctrl
	wp := ch.ring.iova(ch.ring.wp)
	wire.Store64(ch.ctx(), wire.CtxWP, wp)
	c.gate.RLock()
	defer c.gate.RUnlock()
	c.noteActivity()
	if !c.doorbellsAllowed() {
		if pmState(c.pmNow.Load()) == pmM3 {
			c.requestWake() // auto-suspend: resume, then onM0 rings it
		}
		return nil
	}
	if ch.cfg.Burst {
		if !ch.dbMode {
			return nil // the device polls the context write pointer
		}
		ch.dbMode = false
	}
	ch.stats.Doorbells.Add(1)
	if err := c.doorbell(c.chdb(ch.cfg.Num), wp); err != nil {
		if ch.cfg.Burst {
			ch.dbMode = true // not rung: ring again next time
		}
		ch.stats.DoorbellErrors.Add(1)
		c.stats.DoorbellErrors.Add(1)
		return fmt.Errorf("%w (write pointer 0x%x): %w", ErrDoorbell, wp, err)
	}
	return nil
}

// doorbellsAllowed reports whether channel doorbells may ring: in M0, and
// while powering up.
func (c *Controller) doorbellsAllowed() bool {
	p := pmState(c.pmNow.Load())
	return p == pmM0 || p == pmPowerUp
}

// onM0 re-enters doorbell mode where configured and rings pending work.
func (ch *Channel) onM0() {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if ch.cfg.DBModeSwitch {
		ch.dbMode = true
	}
	if ch.state == wire.ChannelEnabled && ch.ring.used() > 0 {
		if err := ch.ringDoorbell(); err != nil {
			ch.ctrl.log.Warn("channel doorbell on M0", "channel", ch.cfg.Num, "err", err)
		}
	}
}

// onEvent handles a transfer event for this channel.
func (ch *Channel) onEvent(ev wire.Element) {
	c := ch.ctrl
	code := ev.Code()
	ch.mu.Lock()
	if ch.state == wire.ChannelDisabled {
		ch.mu.Unlock()
		c.stats.StaleCompletion.Add(1)
		return
	}
	switch code {
	case wire.CCEOT, wire.CCEOB, wire.CCOverflow, wire.CCBadTRE:
	case wire.CCOOB, wire.CCDBMode:
		ch.stats.DBModes.Add(1)
		ch.dbMode = true
		if ch.state == wire.ChannelEnabled && ch.ring.used() > 0 {
			if err := ch.ringDoorbell(); err != nil {
				c.log.Warn("channel doorbell on DB_MODE", "channel", ch.cfg.Num, "err", err)
			}
		}
		ch.mu.Unlock()
		return
	default:
		ch.mu.Unlock()
		c.stats.BadCode.Add(1)
		ch.stats.BadEvents.Add(1)
		c.log.Warn("transfer event with an unknown completion code", "channel", ch.cfg.Num, "event", ev)
		return
	}
	idx, err := ch.ring.index(ev.Ptr)
	if err == nil && !ch.ring.inFlight(idx) {
		err = fmt.Errorf("%w: element %d is not queued (rp %d, wp %d)", wire.ErrBounds, idx, ch.ring.rp, ch.ring.wp)
	}
	if err != nil {
		ch.mu.Unlock()
		c.stats.BadEventPtr.Add(1)
		ch.stats.BadEvents.Add(1)
		c.log.Warn("transfer event points outside the queued elements", "channel", ch.cfg.Num, "event", ev, "err", err)
		return
	}
	comps, bytes := ch.complete(ev, idx)
	ch.comps = comps
	h := ch.handler
	ch.mu.Unlock()
	ch.stats.Completed.Add(uint64(len(comps)))
	ch.stats.Bytes.Add(bytes)
	if code == wire.CCOverflow {
		ch.stats.Overflows.Add(1)
	}
	if h != nil {
		for _, comp := range comps {
			h(comp)
		}
	}
}

// complete takes the queued elements up to and including idx, the one ev
// points at, off the ring and returns their completions and the bytes they
// carry; ev's length applies to the last. Called with ch.mu held.
func (ch *Channel) complete(ev wire.Element, idx int) ([]Completion, uint64) {
	c, code := ch.ctrl, ev.Code()
	comps := ch.comps[:0]
	var bytes uint64
	for {
		i := ch.ring.rp
		s := ch.slots[i]
		comp := Completion{Cookie: s.cookie, IOVA: s.iova, Len: s.n, Code: code}
		if i == idx {
			comp.End = true
			comp.Len = int(ev.Length())
			if comp.Len > s.n {
				c.stats.LengthClamped.Add(1)
				ch.stats.BadEvents.Add(1)
				c.log.Warn("transfer length larger than the buffer; clamped", "channel", ch.cfg.Num, "len", comp.Len, "buffer", s.n)
				comp.Len = s.n
			}
		}
		if code == wire.CCBadTRE {
			// The device failed the transfer: every element the event
			// completes comes back with the error and no data.
			comp.Code, comp.Len = wire.CCInvalid, 0
			comp.Err = fmt.Errorf("%s: channel %d: device reported a bad element at index %d: %w", c.name, ch.cfg.Num, idx, ErrBadDevice)
		}
		bytes += uint64(comp.Len)
		comps = append(comps, comp)
		ch.ring.rp = ch.ring.next(i)
		if i == idx {
			break
		}
	}
	return comps, bytes
}

// ChannelStatus describes a channel for status displays.
type ChannelStatus struct {
	Num       uint8  `json:"num"`
	Name      string `json:"name"`
	Dir       string `json:"dir"`
	State     string `json:"state"`
	CtxState  string `json:"ctx_state"`
	Elements  int    `json:"elements"`
	EventRing int    `json:"event_ring"`
	RingBase  uint64 `json:"ring_base"`
	HostRP    uint64 `json:"host_rp"`
	HostWP    uint64 `json:"host_wp"`
	CtxRP     uint64 `json:"ctx_rp"`
	CtxWP     uint64 `json:"ctx_wp"`
	Pending   int    `json:"pending"`
	Completed uint64 `json:"completed"`
	Bytes     uint64 `json:"bytes"`
}

// Status returns the channel's state and ring pointers.
func (ch *Channel) Status() ChannelStatus {
	ch.ctrl.procMu.RLock()
	defer ch.ctrl.procMu.RUnlock()
	ch.mu.Lock()
	defer ch.mu.Unlock()
	st := ChannelStatus{
		Num: ch.cfg.Num, Name: ch.cfg.Name, Dir: ch.cfg.Dir.String(), State: ch.state.String(),
		Elements: ch.cfg.Elements, EventRing: ch.cfg.EventRing,
		Pending: ch.ring.used(), Completed: ch.stats.Completed.Load(), Bytes: ch.stats.Bytes.Load(),
	}
	if ch.ctrl.allocated {
		st.RingBase = ch.ring.base()
		st.HostRP, st.HostWP = ch.ring.iova(ch.ring.rp), ch.ring.iova(ch.ring.wp)
		st.CtxState = wire.ChannelState(wire.Load32(ch.ctx(), wire.CtxCfg) & wire.ChCfgStateMask).String()
		st.CtxRP, st.CtxWP = wire.Load64(ch.ctx(), wire.CtxRP), wire.Load64(ch.ctx(), wire.CtxWP)
	}
	return st
}

// EventRingEvents returns the number of events consumed so far from the
// event ring that carries this channel's completions.
func (ch *Channel) EventRingEvents() uint64 { return ch.er.events.Load() }
