package ep

import (
	"context"
	"fmt"

	"github.com/gomhi/gomhi/mhi/wire"
)

// A channel's life, driven by the device's control goroutine: START_CHAN
// loads the ring (start) and lets the worker run (activate), STOP_CHAN
// pauses it, RESET_CHAN and an MHI reset forget the ring, M0 re-entry
// after M3 wakes it. The worker is kept out by cancelling its run context
// (cancelRun) and taking work.

// cancelRun aborts whatever the worker is waiting for.
func (c *channel) cancelRun() {
	c.mu.Lock()
	if c.runCancel != nil {
		c.runCancel()
		c.runCancel = nil
	}
	c.mu.Unlock()
}

// setState changes the channel state and wakes Send callers.
func (c *channel) setState(st wire.ChannelState) {
	c.mu.Lock()
	c.state.Store(uint32(st))
	c.space.broadcast()
	c.mu.Unlock()
}

// loadedRing is what START_CHAN reads from a channel context and checks:
// the ring, the host's read and write indexes in it, and its event ring.
type loadedRing struct {
	ctx     wire.Context
	ctxIOVA uint64
	ring    ringGeometry
	rd, wr  uint64
}

// loadRing reads the channel's context of session s and checks that its
// ring, pointers and event ring index are usable. It touches no channel
// state.
func (c *channel) loadRing(s *session) (loadedRing, error) {
	lr := loadedRing{ctxIOVA: s.chCtxBase + uint64(c.num)*wire.ContextSize}
	var scratch [wire.ContextSize]byte
	ctx, err := c.d.readContext(lr.ctxIOVA, &scratch)
	if err != nil {
		return lr, err
	}
	if c.d.observing() {
		c.d.observe(Observation{Kind: ObserveContext, Ring: RingChannel, Index: int(c.num), Context: ctx})
	}
	lr.ctx = ctx
	if lr.ring, err = c.d.newRingGeometry(ctx.RBase, ctx.RLen); err != nil {
		return lr, err
	}
	var okRP, okWP bool
	lr.rd, okRP = lr.ring.index(ctx.RP)
	lr.wr, okWP = lr.ring.index(ctx.WP)
	if !okRP || !okWP {
		return lr, fmt.Errorf("%w: rp 0x%x / wp 0x%x outside ring 0x%x..0x%x",
			wire.ErrBounds, ctx.RP, ctx.WP, lr.ring.base, lr.ring.end())
	}
	if int(ctx.Index) >= len(s.events) {
		return lr, fmt.Errorf("%w: event ring index %d, the host set up %d", wire.ErrBounds, ctx.Index, len(s.events))
	}
	return lr, nil
}

// start executes START_CHAN: load the ring from the channel context, mark
// the context RUNNING and begin processing.
func (c *channel) start(s *session) error {
	lr, err := c.loadRing(s)
	if err != nil {
		return err
	}
	c.cancelRun()
	c.work.Lock()
	if err := c.d.setChannelStateInContext(lr.ctxIOVA, wire.ChannelRunning); err != nil {
		c.work.Unlock()
		return err
	}
	_, c.dbSeq = c.d.latchedDoorbell(&c.d.regs.chdb[c.num])
	c.sess = s
	c.ring, c.ctxIOVA, c.erIndex = lr.ring, lr.ctxIOVA, int(lr.ctx.Index)
	c.rd, c.wr = lr.rd, lr.wr
	c.burst = lr.ctx.BurstMode() == wire.BurstEnable
	c.polling, c.idlePolls, c.badWP = false, 0, 0
	c.stopReq.Store(false)
	c.started = true
	runCtx, cancel := context.WithCancel(s.active)
	c.runCtx = runCtx
	c.rdIOVA.Store(lr.ring.addr(lr.rd))
	c.mu.Lock()
	c.runCancel = cancel
	c.mu.Unlock()
	c.work.Unlock()

	c.d.log.Debug("mhi-ep: channel started", "channel", c.num, "name", c.cfg.Name,
		"base", lr.ring.base, "elements", lr.ring.n, "event_ring", lr.ctx.Index, "burst", c.burst)
	return nil
}

// activate lets a started channel move data. It runs after the START
// completion is posted: a host (Linux included) ignores transfer events for
// a channel whose START it has not seen complete.
func (c *channel) activate() {
	c.setState(wire.ChannelRunning)
	c.poke()
	c.notifyState()
}

// stop executes STOP_CHAN: processing pauses, nothing is consumed, the
// context says STOP. A downlink channel first finishes the transfer it has
// begun writing, as far as the host has buffers posted for it, so that the
// host does not hold a fragment of a transfer while the channel is stopped;
// transfers not yet begun stay queued.
func (c *channel) stop() {
	if c.cfg.Dir == wire.Downlink {
		c.finishForStop()
	}
	c.cancelRun()
	c.work.Lock()
	if c.started {
		if err := c.d.setChannelStateInContext(c.ctxIOVA, wire.ChannelStop); err != nil {
			c.d.boundsViolation("channel context not writable", "channel", c.num, "err", err)
		}
		c.polling, c.idlePolls = false, 0
		c.setState(wire.ChannelStop)
	}
	c.work.Unlock()
	c.notifyState()
}

// reset executes RESET_CHAN: the ring is forgotten and the context says
// DISABLED. Queued downlink transfers that have not started are modem data,
// not ring state: they stay queued for the next START. Only a transfer
// already partly written into host buffers is dropped (and counted).
func (c *channel) reset() {
	c.cancelRun()
	c.work.Lock()
	if c.started {
		if err := c.d.setChannelStateInContext(c.ctxIOVA, wire.ChannelDisabled); err != nil {
			c.d.boundsViolation("channel context not writable", "channel", c.num, "err", err)
		}
	}
	c.forgetLocked(false)
	c.work.Unlock()
	c.notifyState()
}

// resetForMHIReset forgets the channel without touching host memory: after
// an MHI reset the host's contexts may be gone. Every queued downlink
// transfer is dropped (and counted).
func (c *channel) resetForMHIReset() {
	c.cancelRun()
	c.work.Lock()
	c.forgetLocked(true)
	c.work.Unlock()
}

// forgetLocked drops the ring and, with dropAll, the queued downlink data;
// without, only a partly written head transfer. work must be held.
func (c *channel) forgetLocked(dropAll bool) {
	c.started = false
	c.sess = nil
	c.polling, c.idlePolls = false, 0
	c.stopReq.Store(false)
	c.rdIOVA.Store(0)
	c.mu.Lock()
	if c.q != nil {
		if dropAll {
			c.dropQueueLocked()
		} else {
			c.dropPartialLocked()
		}
	}
	c.state.Store(uint32(wire.ChannelDisabled))
	c.space.broadcast()
	c.mu.Unlock()
}

// resyncDoorbellMode makes a burst channel start over in doorbell mode
// at its next round of work, as the host does on M0 re-entry. It must be
// called before the host can ring the channel's doorbell again (before
// the M0 event is posted): the resync clears the polling a doorbell
// starts only if the doorbell comes after it.
func (c *channel) resyncDoorbellMode() {
	c.dbModeResync.Store(true)
}

// notifyState tells the pair's Function, if it observes, the channel state.
func (c *channel) notifyState() {
	if obs, ok := c.pipe.fn.(PipeObserver); ok {
		obs.PipeStateChanged(c.pipe, c.cfg.Dir, c.channelState())
	}
}
