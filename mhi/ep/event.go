package ep

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/gomhi/gomhi/mhi/simclock"
	"github.com/gomhi/gomhi/mhi/wire"
)

// eventRing is the device's side of one event ring: its write index and
// interrupt moderation. It is loaded lazily from the event context on the
// first event, like the EP stack does.
type eventRing struct {
	index   int
	ctxIOVA uint64

	// mu serialises producers and guards the fields below. A producer
	// checks for a free slot against the event doorbell (Device.regMu)
	// under it, and waits there while the ring is full.
	mu       sync.Mutex
	loaded   bool
	warned   bool // context problem already logged
	ring     ringGeometry
	wr       uint64 // next element the device writes
	msiVec   int
	modDelay time.Duration // INTMODT
	badDB    uint64        // last invalid doorbell value logged
	elem     [wire.ElementSize]byte
	ctxBuf   [wire.ContextSize]byte

	modPending bool
	modGen     uint64
	modTimer   *time.Timer
	// vmod is the moderation timer in virtual time (Config.Clock), made
	// once and re-armed; vmodSess is the session it was armed for.
	vmod     *simclock.Timer
	vmodSess *session
}

// eventOptions says how an event is to be posted.
type eventOptions struct {
	bei       bool // the completed TRE asked for no immediate interrupt
	corruptRP bool // fault: store an rp outside the ring
	// until bounds the wait for a free slot; nil means the session. Channel
	// events also give up on SYS_ERR, control events (which announce it)
	// do not.
	until context.Context
}

// postControlEvent posts a command completion, state-change or EE event on
// event ring 0; these always interrupt at once.
func (d *Device) postControlEvent(s *session, ev wire.Element) {
	if err := d.postEvent(s, 0, ev, eventOptions{}); err != nil && s.ctx.Err() == nil {
		d.log.Warn("mhi-ep: control event not posted", "event", ev, "err", err)
	}
}

// postEvent writes ev on event ring ringIdx once the host has handed the
// device a free slot (waiting for an event doorbell while the ring is full),
// stores the new rp in the event context, and raises or schedules the
// interrupt. It fails when the session ends or the ring is unusable.
func (d *Device) postEvent(s *session, ringIdx int, ev wire.Element, opt eventOptions) error {
	if ringIdx < 0 || ringIdx >= len(s.events) {
		d.boundsViolation("event for a ring the host did not set up", "ring", ringIdx, "ner", len(s.events))
		return fmt.Errorf("%w: event ring %d of %d", wire.ErrBounds, ringIdx, len(s.events))
	}
	er := s.events[ringIdx]
	er.mu.Lock()
	defer er.mu.Unlock()
	if !er.loaded {
		if err := d.loadEventRing(er); err != nil {
			return err
		}
	}
	until := opt.until
	if until == nil {
		until = s.ctx
	}
	if err := d.waitEventSlot(until, er); err != nil {
		return err
	}
	slot := er.ring.addr(er.wr)
	ev.Put(er.elem[:])
	if err := d.mem.WriteAt(er.elem[:], slot); err != nil {
		d.boundsViolation("event slot not writable", "ring", ringIdx, "slot", slot, "err", err)
		return err
	}
	if d.observing() {
		d.observe(Observation{Kind: ObserveEvent, Ring: RingEvent, Index: ringIdx, Slot: er.wr, Element: ev})
	}
	er.wr = er.ring.next(er.wr)
	rp := er.ring.addr(er.wr)
	if opt.corruptRP {
		rp = er.ring.end()
	}
	// The element is written before the rp that publishes it: the host
	// reads rp, then the elements before it.
	if err := d.store64(er.ctxIOVA+wire.CtxRP, rp); err != nil {
		d.boundsViolation("event context rp not writable", "ring", ringIdx, "err", err)
		return err
	}
	d.stats.eventsPosted[ringIdx].Add(1)
	if d.debug {
		d.log.Debug("mhi-ep: event posted", "ring", ringIdx, "event", ev, "rp", rp)
	}
	d.interruptForEvent(s, er, opt.bei)
	return nil
}

// loadEventRing reads the event context and starts the ring at its rp.
// er.mu must be held.
func (d *Device) loadEventRing(er *eventRing) error {
	ctx, err := d.readContext(er.ctxIOVA, &er.ctxBuf)
	if err == nil {
		er.ring, err = d.newRingGeometry(ctx.RBase, ctx.RLen)
	}
	if err == nil {
		var ok bool
		if er.wr, ok = er.ring.index(ctx.RP); !ok {
			err = fmt.Errorf("%w: rp 0x%x outside ring 0x%x..0x%x", wire.ErrBounds, ctx.RP, er.ring.base, er.ring.end())
		}
	}
	if err != nil {
		// Counted every time, logged once per session.
		d.stats.boundsViolations.Add(1)
		if !er.warned {
			er.warned = true
			d.log.Warn("mhi-ep: bad event ring context", "ring", er.index, "err", err)
		}
		return fmt.Errorf("event ring %d: %w", er.index, err)
	}
	if d.observing() {
		d.observe(Observation{Kind: ObserveContext, Ring: RingEvent, Index: er.index, Context: ctx})
	}
	er.msiVec = int(ctx.Index)
	er.modDelay = time.Duration(ctx.IntModT()) * time.Millisecond
	er.loaded = true
	d.log.Debug("mhi-ep: event ring started", "ring", er.index, "base", er.ring.base,
		"elements", er.ring.n, "msivec", er.msiVec, "intmodt", er.modDelay)
	return nil
}

// waitEventSlot returns once the slot at er.wr is the host's to give: the
// ring is full while the write index equals the index of the event
// doorbell's value (the first slot the device may not write). er.mu must be
// held.
func (d *Device) waitEventSlot(until context.Context, er *eventRing) error {
	counted := false
	d.regMu.Lock()
	defer d.regMu.Unlock()
	for {
		value := d.regs.erdb[er.index].value()
		limit, valid := er.ring.index(value)
		if valid && limit != er.wr {
			return nil
		}
		if d.cfg.Clock != nil && valid {
			// In virtual time the host's doorbell can only come from an
			// event of the clock, which this one is holding up: waiting
			// would stop the clock. The event is lost and counted.
			d.stats.eventRingFullWaits.Add(1)
			d.stats.eventsLostFull.Add(1)
			return fmt.Errorf("event ring %d: full in virtual time: %w", er.index, wire.ErrRingFull)
		}
		if !valid && value != 0 && value != er.badDB {
			er.badDB = value
			d.boundsViolation("event doorbell outside its ring", "ring", er.index, "value", value,
				"base", er.ring.base, "end", er.ring.end())
		}
		if !counted {
			counted = true
			d.stats.eventRingFullWaits.Add(1)
			if d.debug {
				d.log.Debug("mhi-ep: event ring full, waiting for doorbell", "ring", er.index)
			}
		}
		if !d.erSignals[er.index].waitLocked(&d.regMu, until.Done(), nil) {
			return fmt.Errorf("event ring %d: %w", er.index, until.Err())
		}
	}
}

// interruptForEvent applies the moderation rules: BEI=0 interrupts now and
// cancels a pending moderated interrupt; BEI=1 with INTMODT>0 schedules one
// interrupt INTMODT later unless one is pending; BEI=1 with INTMODT=0 does
// not interrupt. er.mu must be held.
func (d *Device) interruptForEvent(s *session, er *eventRing, bei bool) {
	switch {
	case !bei:
		d.cancelModeration(er)
		d.raise(er.msiVec)
	case er.modDelay > 0:
		if er.modPending {
			return
		}
		er.modPending = true
		er.modGen++
		if clk := d.cfg.Clock; clk != nil {
			if er.vmod == nil {
				er.vmod = clk.NewTimer(func() { d.fireModeration(er) })
			}
			er.vmodSess = s
			er.vmod.Reset(er.modDelay)
			return
		}
		gen := er.modGen
		d.timers.Add(1)
		er.modTimer = time.AfterFunc(er.modDelay, func() {
			defer d.timers.Done()
			d.raiseModerated(er, func() bool { return er.modGen == gen && s.ctx.Err() == nil })
		})
	}
}

// cancelModeration drops a pending moderated interrupt. er.mu must be held.
func (d *Device) cancelModeration(er *eventRing) {
	if !er.modPending {
		return
	}
	er.modPending = false
	if er.vmod != nil {
		er.vmod.Stop()
		return
	}
	if er.modTimer.Stop() {
		d.timers.Done() // the callback will not run
	}
}

// fireModeration is the moderation timer's callback in virtual time.
func (d *Device) fireModeration(er *eventRing) {
	d.raiseModerated(er, func() bool { return er.vmodSess != nil && er.vmodSess.ctx.Err() == nil })
}

// raiseModerated raises the ring's moderated interrupt if one is still
// pending and current says it belongs to the live session (called with
// er.mu held).
func (d *Device) raiseModerated(er *eventRing, current func() bool) {
	er.mu.Lock()
	fire := er.modPending && current()
	if fire {
		er.modPending = false
	}
	vec := er.msiVec
	er.mu.Unlock()
	if fire {
		d.stats.interruptsModerated.Add(1)
		d.raise(vec)
	}
}

// stopModeration cancels the moderation timers of every ring of s.
func (d *Device) stopModeration(s *session) {
	for _, er := range s.events {
		er.mu.Lock()
		d.cancelModeration(er)
		er.mu.Unlock()
	}
}
