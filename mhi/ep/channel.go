package ep

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gomhi/gomhi/mhi/wire"
)

// channel is the device's side of one transfer channel. Each has a worker
// goroutine that services its ring when poked (doorbell, queued downlink
// data, start, resume) or, for burst-mode channels, on a poll timer; in
// virtual time the device's clock runs the same work (virtual.go).
//
// Its code is spread over one file per job:
//
//	channel.go            the state, the worker loop, the ring access both directions share
//	channel_uplink.go     uplink: gather a TRE chain, hand it to the Function, complete it
//	channel_downlink.go   downlink: write queued transfers into the host's TREs
//	channel_queue.go      the downlink queue: Reserve/Commit, buffer reuse, drops on reset
//	channel_lifecycle.go  START, STOP, RESET, MHI reset and M3 resume (control goroutine)
//
// Who owns what: fields fixed at construction are read without a lock; the
// atomics are read anywhere and written as their comments say; mu guards
// the downlink queue and runCancel; work guards the ring and everything the
// worker uses while it services it. Lock order: work, then mu. mu is never
// held while calling out (a Function, onSpace, poke); work is held while
// the worker calls the Function's Receive and Idle.
//
// The device's lock order, checked by internal/archtest's TestLockOrder
// (which reads the lockorder lines here and at the other locks): a lock
// may be taken while an earlier one is held, never while a later one is.
//
// lockorder: Device.ctrlMu → channel.work → channel.mu
//
// The control goroutine (and Device.Reset) starts, stops and resets
// channels under ctrlMu. Under work come the locks of what the worker
// calls: the Functions' (IPData, MBIM, QMI, AT, the shaper; each states
// its place, and those that queue a downlink transfer under their lock,
// IPData and MBIM, come before mu), the event rings' and the fault
// state's, and last the register file's (Device.regMu). The Modem's lock
// and the Functions' statistics locks are innermost.
type channel struct {
	// Fixed once the device is built (newChannel, buildChannels, vinit).
	d    *Device
	cfg  wire.ChannelConfig
	num  uint8
	pipe *Pipe
	kick chan struct{} // wakes the real-time worker (run)
	v    *vworker      // the worker in virtual time (Config.Clock); nil in real time

	// Atomics, read by any goroutine.
	state        atomic.Uint32 // wire.ChannelState; written with mu held
	rdIOVA       atomic.Uint64 // device read pointer, for status displays; written with work held
	dbModeResync atomic.Bool   // M0 re-entry: host is in doorbell mode again
	// stopReq asks the downlink worker to stop at the next transfer
	// boundary: STOP_CHAN is pending.
	stopReq atomic.Bool
	// lastBufLen is the length of the last downlink buffer (TRE) the
	// device wrote into: the host's receive buffer size, its MRU.
	lastBufLen atomic.Uint32
	// droppedUnits counts the units (packets) of queued downlink
	// transfers the device dropped (dropQueueLocked, dropPartialLocked),
	// as their producers declared them at commit (DLBuffer.Units).
	droppedUnits atomic.Uint64

	// mu guards runCancel and the downlink queue (dlQueue, whose fields
	// are promoted: c.q, c.qCount, ...). State changes are made with mu
	// held so that a producer waiting in reserve sees them.
	mu        sync.Mutex
	runCancel context.CancelFunc
	dlQueue

	// work is held by the worker while it services the ring and by the
	// control goroutine while it starts, stops or resets the channel. It
	// guards every field below.
	work sync.Mutex
	// The ring as START loaded it.
	sess    *session
	runCtx  context.Context // cancelled by STOP, RESET, MHI reset (runCancel)
	started bool
	ring    ringGeometry
	ctxIOVA uint64
	erIndex int
	burst   bool
	// Where the device is in the ring.
	rd, wr    uint64
	dbSeq     uint32 // sequence of the last doorbell seen (latchedDoorbell)
	badWP     uint64 // last write pointer rejected, logged once
	polling   bool   // burst mode: the host only updates the context wp
	idlePolls int
	elem      [wire.ElementSize]byte // scratch for readTRE
	// Downlink: bytes of the head queued transfer already written.
	dlOff int
	// Uplink: the transfer being gathered and whether the Function has
	// had data since it was last told the uplink is idle.
	ulData []byte
	ulTREs []pendingTRE
	ulBusy bool // uplink transfers delivered since the last Idle call
}

func newChannel(d *Device, cc wire.ChannelConfig) *channel {
	c := &channel{
		d:    d,
		cfg:  cc,
		num:  cc.Num,
		kick: make(chan struct{}, 1),
	}
	if cc.Dir == wire.Downlink {
		c.dlQueue = newDLQueue(d.cfg.DLQueueDepth)
	}
	return c
}

// poke wakes the worker without blocking (in virtual time: schedules its
// work now).
func (c *channel) poke() {
	if c.v != nil {
		c.vkick()
		return
	}
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

func (c *channel) channelState() wire.ChannelState { return wire.ChannelState(c.state.Load()) }

// run is the worker goroutine.
func (c *channel) run() {
	defer c.d.wg.Done()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	poll := false
	for {
		var tick <-chan time.Time
		if poll {
			timer.Reset(c.d.cfg.BurstPollInterval)
			tick = timer.C
		}
		select {
		case <-c.d.ctx.Done():
			timer.Stop()
			return
		case <-c.kick:
		case <-tick:
		}
		timer.Stop()
		poll = c.service()
	}
}

// canRun reports whether the channel may move data now. work must be held.
func (c *channel) canRun() bool {
	return c.started && c.runCtx.Err() == nil &&
		c.channelState() == wire.ChannelRunning && c.d.State() == wire.StateM0
}

// service moves as much data as the ring allows and reports whether the
// worker should poll again (burst mode).
func (c *channel) service() (poll bool) {
	c.work.Lock()
	defer c.work.Unlock()
	if !c.canRun() {
		return false
	}
	if c.dbModeResync.Swap(false) {
		c.polling, c.idlePolls = false, 0
	}
	c.refreshWrite()
	var progressed, wantWork bool
	if c.cfg.Dir == wire.Uplink {
		progressed, wantWork = c.serviceUL()
	} else {
		progressed, wantWork = c.serviceDL()
	}
	return c.pollAgain(progressed, wantWork)
}

// pollAgain applies the burst-mode polling rules after a round of work and
// reports whether the worker should poll again: only a polling burst
// channel with data waiting does; after BurstIdlePolls rounds without
// progress it posts DB_MODE and waits for a doorbell. work must be held.
func (c *channel) pollAgain(progressed, wantWork bool) bool {
	if !c.burst || !c.polling || !c.canRun() {
		return false
	}
	if progressed {
		c.idlePolls = 0
	}
	if !wantWork {
		return false
	}
	if !progressed {
		c.idlePolls++
		if c.idlePolls >= c.d.cfg.BurstIdlePolls {
			c.enterDoorbellMode()
			return false
		}
	}
	return true
}

// refreshWrite brings the write index up to date: from the latest doorbell,
// or for burst-mode channels from the context wp. It reports whether a
// doorbell was rung since the last call. work must be held.
func (c *channel) refreshWrite() (rung bool) {
	value, seq := c.d.latchedDoorbell(&c.d.regs.chdb[c.num])
	if seq != c.dbSeq {
		c.dbSeq = seq
		rung = true
		if c.burst {
			// A doorbell (re)starts polling, wherever it is noticed:
			// the host now updates only the context wp.
			c.polling, c.idlePolls = true, 0
		} else {
			c.applyWritePointer(value, "doorbell")
		}
	}
	if c.burst {
		wp, err := c.d.load64(c.ctxIOVA + wire.CtxWP)
		if err != nil {
			c.d.boundsViolation("channel context wp unreadable", "channel", c.num, "err", err)
			return rung
		}
		c.applyWritePointer(wp, "context wp")
	}
	return rung
}

// applyWritePointer accepts a host write pointer that lies in the ring.
// work must be held.
func (c *channel) applyWritePointer(wp uint64, source string) {
	idx, ok := c.ring.index(wp)
	if !ok {
		if wp != c.badWP {
			c.badWP = wp
			c.d.boundsViolation("channel write pointer outside its ring", "channel", c.num,
				"source", source, "wp", wp, "base", c.ring.base, "end", c.ring.end())
		}
		return
	}
	c.wr = idx
}

// publishReadPointer stores the device read pointer in the channel
// context. work must be held.
func (c *channel) publishReadPointer() {
	rp := c.ring.addr(c.rd)
	c.rdIOVA.Store(rp)
	if err := c.d.store64(c.ctxIOVA+wire.CtxRP, rp); err != nil {
		c.d.boundsViolation("channel context rp not writable", "channel", c.num, "err", err)
	}
}

// advance consumes the element at the read pointer. work must be held.
func (c *channel) advance() {
	c.rd = c.ring.next(c.rd)
	c.publishReadPointer()
}

// available returns the number of host elements not yet consumed. work
// must be held.
func (c *channel) available() uint64 { return c.ring.pending(c.rd, c.wr) }

// readTRE reads and validates the TRE at addr: type TRANSFER, length field
// within 16 bits. work must be held (it reads into c.elem).
func (c *channel) readTRE(addr uint64) (wire.Element, error) {
	el, err := c.d.readElement(addr, &c.elem)
	if err != nil {
		return el, err
	}
	if c.d.observing() {
		c.d.observe(Observation{Kind: ObserveElement, Ring: RingChannel, Index: int(c.num),
			Slot: (addr - c.ring.base) / wire.ElementSize, Element: el})
	}
	if el.Type() != wire.PktTransfer {
		return el, fmt.Errorf("element at 0x%x is %s, not a transfer TRE", addr, el.Type())
	}
	if el.Dword0 > wire.MaxTRELength {
		return el, fmt.Errorf("TRE at 0x%x: length word 0x%x exceeds 0x%x", addr, el.Dword0, wire.MaxTRELength)
	}
	return el, nil
}

// rejectTRE completes a bad TRE with BAD_TRE and counts it. work must be
// held.
func (c *channel) rejectTRE(addr uint64, el wire.Element, err error) {
	c.d.stats.badTREs.Add(1)
	if errors.Is(err, wire.ErrBounds) {
		c.d.boundsViolation("bad TRE", "channel", c.num, "tre", addr, "element", el, "err", err)
	} else {
		c.d.log.Warn("mhi-ep: bad TRE", "channel", c.num, "tre", addr, "element", el, "err", err)
	}
	c.advance()
	c.postTransfer(addr, wire.CCBadTRE, 0, el.Length(), false)
}

// enterDoorbellMode tells the host, with a DB_MODE completion pointing at
// the device's read pointer, that the device stopped polling the context
// wp and needs a doorbell again. work must be held.
func (c *channel) enterDoorbellMode() {
	c.polling, c.idlePolls = false, 0
	c.d.stats.dbModeEvents.Add(1)
	c.postTransfer(c.ring.addr(c.rd), wire.CCDBMode, 0, 0, false)
}

// postTransfer posts a transfer completion event for the TRE at addr on
// the channel's event ring, applying an injected corruption if one is due.
// work must be held.
func (c *channel) postTransfer(addr uint64, code wire.CompletionCode, n, treLen uint32, bei bool) {
	ev := wire.TransferEvent(addr, code, n, c.num)
	opt := eventOptions{bei: bei, until: c.sess.active}
	c.d.corruptTransferEvent(&ev, &opt, c.ring, treLen)
	if err := c.d.postEvent(c.sess, c.erIndex, ev, opt); err != nil && c.sess.active.Err() == nil {
		c.d.log.Warn("mhi-ep: transfer event not posted", "channel", c.num, "event", ev, "err", err)
	}
}
