package mhi

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gomhi/gomhi/mhi/wire"
)

// EventRing is one of the host's event rings: the device writes events into
// it and advances the read pointer in the ring's context; the host consumes
// them and hands the slots back through the ring's doorbell.
type EventRing struct {
	ctrl   *Controller
	index  int
	cfg    wire.EventRingConfig
	vector int
	ring
	devRP  int // last device read pointer seen, as an index
	notify chan struct{}
	// Bad device read pointers, guarded by mu (or procMu held for writing,
	// when the ring is reset): the last bad value counted
	// (badRPSet says whether there is one), consecutive looks that found a
	// bad value, and the rate limit of their warnings.
	badRP       uint64
	badRPSet    bool
	badLooks    int
	badLogAt    time.Time
	badUnlogged int // bad values counted but not logged since badLogAt
	// mu serialises processing: the ring's goroutine and callers that
	// drain the ring synchronously (channel stop and reset). It is taken
	// under procMu (read) and held while the events are handled, which
	// takes the command ring's mu and the channels' mu and runs the
	// channels' completion handlers (the Controller's lock order).
	mu sync.Mutex
	// events counts the events consumed from this ring.
	events atomic.Uint64
}

func (er *EventRing) ctx() []byte {
	return er.ctrl.erCtx.Bytes[er.index*wire.ContextSize : (er.index+1)*wire.ContextSize]
}

// arm gives the device every slot but one and rings the ring's doorbell.
func (er *EventRing) arm() error {
	er.ctrl.procMu.Lock()
	er.rp, er.wp, er.devRP = 0, er.n-1, 0
	er.forgetBadRP()
	wire.Store64(er.ctx(), wire.CtxRP, er.base())
	wp := er.iova(er.wp)
	wire.Store64(er.ctx(), wire.CtxWP, wp)
	er.ctrl.procMu.Unlock()
	return er.ctrl.gatedDoorbell(er.ctrl.erdb(er.index), wp)
}

// forgetBadRP clears the bad read pointer bookkeeping (ring reset).
func (er *EventRing) forgetBadRP() {
	er.badRP, er.badRPSet, er.badLooks = 0, false, 0
}

// badReadPointer handles a device read pointer outside the ring: each
// distinct bad value is counted once and logged at most once a second; when
// BadEventRingRPLimit consecutive looks find a bad value the host stops
// waiting for the device to repair it and recovers the device.
func (er *EventRing) badReadPointer(iova uint64, err error) {
	c := er.ctrl
	er.badLooks++
	if !er.badRPSet || iova != er.badRP {
		er.badRP, er.badRPSet = iova, true
		c.stats.BadEventRingRP.Add(1)
		if now := time.Now(); now.Sub(er.badLogAt) >= time.Second {
			c.log.Warn("event ring read pointer outside the ring; events ignored until the device repairs it",
				"ring", er.index, "rp", fmt.Sprintf("0x%x", iova), "err", err, "unlogged_bad_values", er.badUnlogged)
			er.badLogAt, er.badUnlogged = now, 0
		} else {
			er.badUnlogged++
		}
	}
	if er.badLooks == BadEventRingRPLimit {
		c.requestRecovery(fmt.Sprintf("event ring %d: read pointer 0x%x outside the ring on %d consecutive looks", er.index, iova, er.badLooks))
	}
}

func (er *EventRing) signal() {
	select {
	case er.notify <- struct{}{}:
	default:
	}
}

// run is the event ring's processing goroutine.
func (er *EventRing) run(stop <-chan struct{}, poll time.Duration) {
	defer er.ctrl.wg.Done()
	var tick <-chan time.Time
	if poll > 0 {
		t := time.NewTicker(poll)
		defer t.Stop()
		tick = t.C
	}
	quota := er.ctrl.quota
	for {
		more := false
		select {
		case <-stop:
			return
		case <-er.notify:
			more = er.pass(false, quota)
		case <-tick:
			more = er.pass(true, quota)
		}
		if more {
			// The quota ran out with events left: come back for them
			// after the other goroutines (the other rings, the stop,
			// whoever waits for procMu) had their turn.
			er.signal()
			runtime.Gosched()
		}
	}
}

// process consumes every event the device has posted, in passes of at
// most the controller's quota (for callers that must see the ring drained:
// channel stop and reset).
func (er *EventRing) process(byPoll bool) {
	// The ring holds at most n-1 events, so these passes consume all that
	// were posted when the call began; a device that keeps posting cannot
	// hold the caller here.
	quota := er.ctrl.quota
	for passes := (er.n - 1 + quota - 1) / quota; passes > 0 && er.pass(byPoll, quota); passes-- {
	}
}

// pass consumes at most quota of the events the device has posted, hands
// their slots back, and reports whether posted events are left for
// another pass.
func (er *EventRing) pass(byPoll bool, quota int) (more bool) {
	c := er.ctrl
	c.procMu.RLock()
	defer c.procMu.RUnlock()
	er.mu.Lock()
	defer er.mu.Unlock()
	if !c.allocated || !er.armed() || c.halted.Load() {
		return false
	}
	devRPIOVA := wire.Load64(er.ctx(), wire.CtxRP)
	devRP, err := er.index2(devRPIOVA)
	if err != nil {
		er.badReadPointer(devRPIOVA, err)
		return false
	}
	er.badRPSet, er.badLooks = false, 0
	if devRP == er.rp {
		return false
	}
	c.stats.EventPasses.Add(1)
	n := 0
	for er.rp != devRP && n < quota {
		ev := er.get(er.rp)
		er.rp = er.next(er.rp)
		er.wp = er.next(er.wp)
		n++
		c.stats.Events.Add(1)
		er.events.Add(1)
		if byPoll {
			c.stats.EventsByPoll.Add(1)
		}
		er.handle(ev)
	}
	c.noteActivity()
	wire.Store64(er.ctx(), wire.CtxWP, er.iova(er.wp))
	if err := c.gatedDoorbell(c.erdb(er.index), er.iova(er.wp)); err != nil {
		// Counted in DoorbellErrors; logged on the 1st, 2nd, 4th, 8th… failure.
		if n := c.stats.DoorbellErrors.Load(); n&(n-1) == 0 {
			c.log.Warn("event ring doorbell", "ring", er.index, "err", err, "doorbell_errors", n)
		}
	}
	if er.rp != devRP {
		c.stats.EventQuotaReached.Add(1)
		return true
	}
	return false
}

// gatedDoorbell rings a doorbell unless the controller is halted
// (SHUTDOWN, RECOVERY_FAILED); failures are counted in DoorbellErrors.
func (c *Controller) gatedDoorbell(off uint32, v uint64) error {
	c.gate.RLock()
	defer c.gate.RUnlock()
	if c.halted.Load() {
		return fmt.Errorf("%s: doorbell 0x%x: %w", c.name, off, ErrPoweredDown)
	}
	if err := c.doorbell(off, v); err != nil {
		c.stats.DoorbellErrors.Add(1)
		return fmt.Errorf("%w: %w", ErrDoorbell, err)
	}
	return nil
}

// armed reports whether the ring has been handed to the device.
func (er *EventRing) armed() bool { return er.wp != er.rp }

func (er *EventRing) index2(iova uint64) (int, error) { return er.ring.index(iova) }

func (er *EventRing) handle(ev wire.Element) {
	c := er.ctrl
	switch ev.Type() {
	case wire.PktStateChangeEvent:
		c.stats.StateChanges.Add(1)
		c.onStateChange(ev.EventState())
	case wire.PktEEEvent:
		c.onEE(ev.EventEE())
	case wire.PktCmdCompletion:
		c.cmd.complete(c, ev)
	case wire.PktTxEvent:
		num := ev.Channel()
		if int(num) >= len(c.channels) || c.channels[num] == nil {
			c.stats.UnknownChannel.Add(1)
			c.log.Warn("transfer event for unknown channel", "ring", er.index, "channel", num, "event", ev)
			return
		}
		ch := c.channels[num]
		if ch.er != er {
			c.stats.UnknownChannel.Add(1)
			c.log.Warn("transfer event on the wrong event ring", "ring", er.index, "channel", num, "want_ring", ch.cfg.EventRing)
			return
		}
		ch.onEvent(ev)
	default:
		c.stats.UnknownEvent.Add(1)
		c.log.Warn("unknown event type", "ring", er.index, "event", ev)
	}
}

// onInterrupt is the transport's interrupt handler.
func (c *Controller) onInterrupt(vector int) {
	// Held so that a call still running when the transport's handler is
	// removed cannot meet the rings being freed.
	c.procMu.RLock()
	defer c.procMu.RUnlock()
	if !c.acceptInterrupt(vector) {
		return
	}
	for _, er := range c.eventRings {
		if er.vector == vector {
			er.signal()
		}
	}
}

// ProcessInterrupt handles an interrupt on vector as the transport's
// interrupt handler does, except that the event rings on that vector are
// processed on the calling goroutine before it returns, instead of by
// their goroutines. It is for a caller that drives the host in virtual time
// (a transport whose interrupts go to that caller instead of to the
// handler), so that the host's work happens at a moment of the caller's
// choosing and in a reproducible order.
func (c *Controller) ProcessInterrupt(vector int) {
	c.procMu.RLock()
	if !c.acceptInterrupt(vector) {
		c.procMu.RUnlock()
		return
	}
	var rings [8]*EventRing
	todo := rings[:0]
	for _, er := range c.eventRings {
		if er.vector == vector {
			todo = append(todo, er)
		}
	}
	c.procMu.RUnlock()
	// process takes procMu itself.
	for _, er := range todo {
		er.process(false)
	}
}

// acceptInterrupt reports whether an interrupt on vector is to be handled
// (the rings are allocated and the controller is not halted) and, if so,
// counts it and, on vector 0 (the BHI/state vector), checks MHISTATUS for
// SYS_ERR as Linux's INTVEC handler does. c.procMu is held for reading.
func (c *Controller) acceptInterrupt(vector int) bool {
	if !c.allocated || c.halted.Load() {
		return false
	}
	c.stats.Interrupts.Add(1)
	if vector == 0 {
		if st, err := c.t.Read32(wire.RegMHISTATUS); err == nil && (st&wire.MHISTATUSSysErr != 0 ||
			wire.State((st&wire.MHISTATUSStateMask)>>wire.MHISTATUSStateShift) == wire.StateSysErr) {
			c.onStateChange(wire.StateSysErr)
		}
	}
	return true
}

func (c *Controller) onStateChange(s wire.State) {
	c.mu.Lock()
	c.devState = s
	// During a power-up (the first, or a recovery's) SYS_ERR fails the
	// power-up's waits instead: PowerUp returns the error, a recovery
	// attempt fails and the next one follows.
	startRecovery := s == wire.StateSysErr && (c.pm == pmM0 || c.pm == pmM3)
	if startRecovery {
		c.setPMLocked(pmSysErr)
	}
	c.cond.Broadcast()
	c.mu.Unlock()
	c.log.Debug("state change", "state", s)
	if s == wire.StateM0 {
		c.onM0()
	}
	if startRecovery {
		c.stats.SysErrs.Add(1)
		c.kickRecovery()
	}
}

func (c *Controller) onEE(ee wire.ExecEnv) {
	c.mu.Lock()
	changed := c.ee != ee
	c.ee = ee
	if ee.MissionMode() {
		c.eeSeen = true
	}
	c.cond.Broadcast()
	c.mu.Unlock()
	c.log.Debug("execution environment", "ee", ee)
	if changed {
		c.notify(StatusEvent{Kind: StatusEE, EE: ee})
	}
}

// onM0 rings what was held back while the device was not in M0.
func (c *Controller) onM0() {
	for _, ch := range c.channels {
		if ch != nil {
			ch.onM0()
		}
	}
}

// waitFor waits until cond() holds (evaluated with c.mu held), the timeout
// passes, or the device enters SYS_ERR.
func (c *Controller) waitFor(what string, timeout time.Duration, cond func() bool) error {
	return c.waitUntil(what, timeout, true, cond)
}

// waitForAny waits until cond() holds (with c.mu held), the timeout passes
// or the controller is fenced; unlike waitFor it does not stop at SYS_ERR.
func (c *Controller) waitForAny(what string, timeout time.Duration, cond func() bool) error {
	return c.waitUntil(what, timeout, false, cond)
}

// waitUntil is waitFor and waitForAny: it waits on c.cond until cond()
// holds, the controller is fenced, the timeout passes, or (stopAtSysErr)
// the device enters SYS_ERR.
func (c *Controller) waitUntil(what string, timeout time.Duration, stopAtSysErr bool, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	timer := time.AfterFunc(timeout, func() {
		c.mu.Lock()
		c.cond.Broadcast()
		c.mu.Unlock()
	})
	defer timer.Stop()
	c.mu.Lock()
	defer c.mu.Unlock()
	for !cond() {
		if stopAtSysErr && c.devState == wire.StateSysErr {
			return fmt.Errorf("%s: waiting for %s: %w", c.name, what, ErrSysErr)
		}
		if err := c.fencedLocked("waiting for " + what); err != nil {
			return err
		}
		if !time.Now().Before(deadline) {
			return fmt.Errorf("%s: %s not reached within %v (state %s, ee %s): %w", c.name, what, timeout, c.devState, c.ee, ErrTimeout)
		}
		c.cond.Wait()
	}
	return nil
}
