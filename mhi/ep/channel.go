package ep

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gomhi/gomhi/mhi"
)

// channel is the device's side of one transfer channel. Each has a worker
// goroutine that services its ring when poked (doorbell, queued downlink
// data, start, resume) or, for burst-mode channels, on a poll timer.
type channel struct {
	d    *Device
	cfg  mhi.ChannelConfig
	num  uint8
	pipe *Pipe
	kick chan struct{}

	state        atomic.Uint32 // mhi.ChannelState; written with mu held
	rdIOVA       atomic.Uint64 // device read pointer, for status displays
	dbModeResync atomic.Bool   // M0 re-entry: host is in doorbell mode again
	// stopReq asks the downlink worker to stop at the next transfer
	// boundary: STOP_CHAN is pending.
	stopReq atomic.Bool

	// mu guards the run cancel function and the downlink queue.
	mu        sync.Mutex
	runCancel context.CancelFunc
	q         [][]byte // ring of queued downlink transfers
	qUnits    []int    // per queued transfer: the units (packets) its producer declared
	qHeaders  []int    // per queued transfer: its packets' header bytes (DLBuffer.headerBytes)
	qHead     int
	qCount    int
	reserved  int      // queue slots held by outstanding reservations
	qGen      uint64   // bumped whenever the whole queue is dropped
	free      [][]byte // spare downlink buffers
	space     signal   // queue space freed or state changed
	// errFull is the error of a non-blocking reservation on a full queue
	// (made once; guarded by mu).
	errFull error
	// onSpace, if set, is called (without mu) whenever a transfer leaves
	// the queue: in virtual time nobody waits on space, so a Function that
	// wants room learns of it here.
	onSpace func()

	// work is held by the worker while it services the ring and by the
	// control goroutine while it starts, stops or resets the channel. It
	// guards the fields below.
	work      sync.Mutex
	sess      *session
	runCtx    context.Context
	started   bool
	ring      ringGeometry
	ctxIOVA   uint64
	erIndex   int
	burst     bool
	rd, wr    uint64
	dbSeq     uint32
	badWP     uint64
	polling   bool // burst mode: the host only updates the context wp
	idlePolls int
	dlOff     int // bytes of the head downlink transfer already written
	// lastBufLen is the length of the last downlink buffer (TRE) the
	// device wrote into: the host's receive buffer size, its MRU.
	lastBufLen atomic.Uint32
	elem       [mhi.ElementSize]byte
	ulData     []byte
	ulTREs     []pendingTRE
	ulBusy     bool // uplink transfers delivered since the last Idle call

	// v is the worker in virtual time (Config.Clock); nil in real time.
	v *vworker
	// droppedUnits counts the units (packets) of queued downlink
	// transfers the device dropped (dropQueueLocked, dropPartialLocked),
	// as their producers declared them at commit (DLBuffer.units).
	droppedUnits atomic.Uint64
}

// pendingTRE is a TRE read from the ring and not yet completed.
type pendingTRE struct {
	addr uint64
	el   mhi.Element
}

func newChannel(d *Device, cc mhi.ChannelConfig) *channel {
	c := &channel{
		d:    d,
		cfg:  cc,
		num:  cc.Num,
		kick: make(chan struct{}, 1),
	}
	if cc.Dir == mhi.Downlink {
		c.q = make([][]byte, d.cfg.DLQueueDepth)
		c.qUnits = make([]int, d.cfg.DLQueueDepth)
		c.qHeaders = make([]int, d.cfg.DLQueueDepth)
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

func (c *channel) channelState() mhi.ChannelState { return mhi.ChannelState(c.state.Load()) }

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
		c.channelState() == mhi.ChannelRunning && c.d.State() == mhi.StateM0
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
	if c.cfg.Dir == mhi.Uplink {
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
		wp, err := c.d.load64(c.ctxIOVA + mhi.CtxWP)
		if err != nil {
			c.d.boundsViolation("channel context wp unreadable", "channel", c.num, "err", err)
			return rung
		}
		c.applyWritePointer(wp, "context wp")
	}
	return rung
}

// applyWritePointer accepts a host write pointer that lies in the ring.
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
	if err := c.d.store64(c.ctxIOVA+mhi.CtxRP, rp); err != nil {
		c.d.boundsViolation("channel context rp not writable", "channel", c.num, "err", err)
	}
}

// advance consumes the element at the read pointer.
func (c *channel) advance() {
	c.rd = c.ring.next(c.rd)
	c.publishReadPointer()
}

// available returns the number of host elements not yet consumed.
func (c *channel) available() uint64 { return c.ring.pending(c.rd, c.wr) }

// readTRE reads and validates the TRE at addr: type TRANSFER, length field
// within 16 bits.
func (c *channel) readTRE(addr uint64) (mhi.Element, error) {
	el, err := c.d.readElement(addr, &c.elem)
	if err != nil {
		return el, err
	}
	if el.Type() != mhi.PktTransfer {
		return el, fmt.Errorf("element at 0x%x is %s, not a transfer TRE", addr, el.Type())
	}
	if el.Dword0 > mhi.MaxTRELength {
		return el, fmt.Errorf("TRE at 0x%x: length word 0x%x exceeds 0x%x", addr, el.Dword0, mhi.MaxTRELength)
	}
	return el, nil
}

// rejectTRE completes a bad TRE with BAD_TRE and counts it.
func (c *channel) rejectTRE(addr uint64, el mhi.Element, err error) {
	c.d.stats.badTREs.Add(1)
	if errors.Is(err, mhi.ErrBounds) {
		c.d.boundsViolation("bad TRE", "channel", c.num, "tre", addr, "element", el, "err", err)
	} else {
		c.d.log.Warn("mhi-ep: bad TRE", "channel", c.num, "tre", addr, "element", el, "err", err)
	}
	c.advance()
	c.postTransfer(addr, mhi.CCBadTRE, 0, el.Length(), false)
}

// gatherResult says what gatherUL found.
type gatherResult int

const (
	gatherComplete   gatherResult = iota // a whole transfer is in ulData
	gatherIncomplete                     // the chain continues past the write pointer
	gatherBad                            // a bad TRE was rejected
)

// gatherUL reads the TREs of one transfer from the read pointer, without
// consuming them, and concatenates their buffers into ulData.
func (c *channel) gatherUL(avail uint64) gatherResult {
	c.ulData = c.ulData[:0]
	c.ulTREs = c.ulTREs[:0]
	idx := c.rd
	for range avail {
		addr := c.ring.addr(idx)
		el, err := c.readTRE(addr)
		if err == nil {
			n := int(el.Length())
			off := len(c.ulData)
			c.ulData = slices.Grow(c.ulData, n)[:off+n]
			if n > 0 {
				if err = c.d.mem.ReadAt(c.ulData[off:], el.Ptr); err != nil {
					err = fmt.Errorf("buffer of TRE at 0x%x: %w", addr, err)
				}
			}
		}
		if err != nil {
			// The chain so far is consumed with the bad TRE and its data
			// dropped: the host cannot get a whole transfer out of it.
			for range c.ulTREs {
				c.advance()
			}
			c.rejectTRE(addr, el, err)
			return gatherBad
		}
		c.ulTREs = append(c.ulTREs, pendingTRE{addr: addr, el: el})
		idx = c.ring.next(idx)
		if el.Flags()&mhi.TREChain == 0 {
			return gatherComplete
		}
	}
	return gatherIncomplete
}

// serviceUL reads uplink transfers, hands them to the Function and
// completes their TREs. wantWork is false when processing was aborted.
func (c *channel) serviceUL() (progressed, wantWork bool) {
	for c.canRun() {
		avail := c.available()
		if avail == 0 {
			c.refreshWrite()
			if avail = c.available(); avail == 0 {
				c.idleUL()
				return progressed, true
			}
		}
		switch c.gatherUL(avail) {
		case gatherBad:
			progressed = true
			continue
		case gatherIncomplete:
			c.refreshWrite()
			if c.available() == avail {
				c.idleUL()
				return progressed, true
			}
			continue
		}
		if !c.deliverUL() {
			return progressed, false
		}
		c.completeUL()
		progressed = true
	}
	return progressed, false
}

// idleUL tells an Idler Function that the uplink ran dry after at least
// one delivered transfer. work must be held.
func (c *channel) idleUL() {
	if !c.ulBusy {
		return
	}
	c.ulBusy = false
	if idler, ok := c.pipe.fn.(Idler); ok {
		idler.Idle(c.pipe)
	}
}

// deliverUL hands ulData to the Function; false means processing was
// aborted and the transfer stays unconsumed.
func (c *channel) deliverUL() bool {
	fn := c.pipe.fn
	if fn == nil {
		c.d.stats.ulDiscarded.Add(1)
		return true
	}
	c.ulBusy = true
	if err := fn.Receive(c.runCtx, c.pipe, c.ulData); err != nil {
		if c.runCtx.Err() != nil {
			return false
		}
		c.d.stats.ulDiscarded.Add(1)
		c.d.log.Warn("mhi-ep: function dropped an uplink transfer", "channel", c.num,
			"bytes", len(c.ulData), "err", err)
	}
	return true
}

// completeUL consumes the gathered TREs and posts their completions: EOB
// for a chained TRE with IEOB, EOT for the last TRE with IEOT, nothing
// otherwise.
func (c *channel) completeUL() {
	// Counted before the host can see the completions, so that a host that
	// has them also sees the counters.
	c.d.stats.ulTransfers.Add(1)
	c.d.stats.ulBytes.Add(uint64(len(c.ulData)))
	for _, t := range c.ulTREs {
		c.advance()
		flags, n := t.el.Flags(), t.el.Length()
		chained := flags&mhi.TREChain != 0
		var code mhi.CompletionCode
		switch {
		case chained && flags&mhi.TREIEOB != 0:
			code = mhi.CCEOB
		case !chained && flags&mhi.TREIEOT != 0:
			code = mhi.CCEOT
		default:
			continue
		}
		c.postTransfer(t.addr, code, n, n, flags&mhi.TREBEI != 0)
	}
	if c.d.debug {
		c.d.log.Debug("mhi-ep: uplink transfer", "channel", c.num, "bytes", len(c.ulData), "tres", len(c.ulTREs))
	}
}

// serviceDL writes queued downlink transfers into the host's TREs.
// wantWork is true when data waits for TREs. While a STOP is pending
// (stopReq) it finishes the transfer in progress and starts no other.
func (c *channel) serviceDL() (progressed, wantWork bool) {
	for c.canRun() {
		stepped, want := c.stepDL()
		if !stepped {
			return progressed, want
		}
		progressed = true
	}
	return progressed, false
}

// stepDL writes the next piece of the head downlink transfer into the next
// host TRE, or rejects a bad TRE. stepped reports that a TRE was consumed;
// wantWork that data waits for TREs. work must be held.
func (c *channel) stepDL() (stepped, wantWork bool) {
	if c.dlOff == 0 && c.stopReq.Load() {
		return false, false
	}
	c.mu.Lock()
	if c.qCount == 0 {
		c.mu.Unlock()
		return false, false
	}
	data := c.q[c.qHead]
	c.mu.Unlock()
	if c.available() == 0 {
		c.refreshWrite()
		if c.available() == 0 {
			return false, true
		}
	}
	addr := c.ring.addr(c.rd)
	el, err := c.readTRE(addr)
	n := 0
	if err == nil {
		c.lastBufLen.Store(el.Length())
		n = min(len(data)-c.dlOff, int(el.Length()))
		if n > 0 {
			if err = c.d.mem.WriteAt(data[c.dlOff:c.dlOff+n], el.Ptr); err != nil {
				err = fmt.Errorf("buffer of TRE at 0x%x: %w", addr, err)
			}
		}
	}
	if err != nil {
		c.rejectTRE(addr, el, err) // the data goes into the next TRE
		return true, false
	}
	c.dlOff += n
	last := c.dlOff == len(data)
	c.advance()
	code := mhi.CCOverflow
	if last {
		code = mhi.CCEOT
	}
	if last {
		c.d.stats.dlTransfers.Add(1)
		c.d.stats.dlBytes.Add(uint64(len(data)))
	}
	c.postTransfer(addr, code, uint32(n), el.Length(), el.Flags()&mhi.TREBEI != 0)
	if last {
		c.popDL()
		if c.d.debug {
			c.d.log.Debug("mhi-ep: downlink transfer", "channel", c.num, "bytes", len(data))
		}
	}
	return true, false
}

// popDL removes the head downlink transfer, keeping its buffer for reuse.
func (c *channel) popDL() {
	c.mu.Lock()
	buf := c.q[c.qHead]
	c.q[c.qHead] = nil
	c.qUnits[c.qHead] = 0
	c.qHead = (c.qHead + 1) % len(c.q)
	c.qCount--
	c.dlOff = 0
	c.recycleLocked(buf)
	c.space.broadcast()
	onSpace := c.onSpace
	c.mu.Unlock()
	if onSpace != nil {
		onSpace()
	}
}

// enterDoorbellMode tells the host, with a DB_MODE completion pointing at
// the device's read pointer, that the device stopped polling the context
// wp and needs a doorbell again.
func (c *channel) enterDoorbellMode() {
	c.polling, c.idlePolls = false, 0
	c.d.stats.dbModeEvents.Add(1)
	c.postTransfer(c.ring.addr(c.rd), mhi.CCDBMode, 0, 0, false)
}

// postTransfer posts a transfer completion event for the TRE at addr on
// the channel's event ring, applying an injected corruption if one is due.
func (c *channel) postTransfer(addr uint64, code mhi.CompletionCode, n, treLen uint32, bei bool) {
	ev := mhi.TransferEvent(addr, code, n, c.num)
	opt := eventOptions{bei: bei, until: c.sess.active}
	c.d.corruptTransferEvent(&ev, &opt, c.ring, treLen)
	if err := c.d.postEvent(c.sess, c.erIndex, ev, opt); err != nil && c.sess.active.Err() == nil {
		c.d.log.Warn("mhi-ep: transfer event not posted", "channel", c.num, "event", ev, "err", err)
	}
}

// enqueue adds one downlink transfer (copied) to the queue. With block it
// waits for room and for the channel to be started; without, it fails.
func (c *channel) enqueue(ctx context.Context, data []byte, block bool) error {
	b, err := c.reserve(ctx, len(data), block)
	if err != nil {
		return err
	}
	copy(b.Buf, data)
	return c.commit(b, len(data), true)
}

// reserve takes a queue slot and a buffer of size bytes for a downlink
// transfer the caller fills before commit. With block it waits for room
// and for the channel to be started (RUNNING or STOP); without, it fails.
func (c *channel) reserve(ctx context.Context, size int, block bool) (DLBuffer, error) {
	for {
		c.mu.Lock()
		st := c.channelState()
		accepting := st == mhi.ChannelRunning || st == mhi.ChannelStop
		if accepting && c.qCount+c.reserved < len(c.q) {
			c.reserved++
			b := DLBuffer{Buf: c.takeBufferLocked(size), gen: c.qGen, c: c}
			c.mu.Unlock()
			return b, nil
		}
		var wake <-chan struct{}
		if block {
			wake = c.space.wait()
		}
		c.mu.Unlock()
		if !block {
			if !accepting {
				return DLBuffer{}, fmt.Errorf("ep: channel %d (%s) is %s: %w", c.num, c.cfg.Name, st, mhi.ErrChannelState)
			}
			// The same every time: made once, so that a producer that
			// tries again and again does not allocate.
			if c.errFull == nil {
				c.errFull = fmt.Errorf("ep: channel %d (%s): %d transfers queued: %w", c.num, c.cfg.Name, len(c.q), mhi.ErrRingFull)
			}
			return DLBuffer{}, c.errFull
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return DLBuffer{}, fmt.Errorf("ep: channel %d (%s): %w", c.num, c.cfg.Name, ctx.Err())
		case <-c.d.ctx.Done():
			return DLBuffer{}, ErrClosed
		}
	}
}

// commit queues b.Buf[:n] as one downlink transfer in b's slot; n == 0
// gives the slot and buffer back unless empty says an empty transfer is
// wanted. A reservation that outlived a drop of the whole queue (MHI reset)
// is dropped and counted like the queue was.
func (c *channel) commit(b DLBuffer, n int, empty bool) error {
	if n < 0 || n > len(b.Buf) {
		c.release(b)
		return fmt.Errorf("ep: channel %d (%s): commit of %d bytes in a %d-byte reservation: %w",
			c.num, c.cfg.Name, n, len(b.Buf), mhi.ErrBounds)
	}
	c.mu.Lock()
	c.reserved--
	switch {
	case n == 0 && !empty:
		c.recycleLocked(b.Buf)
		c.space.broadcast()
		c.mu.Unlock()
		return nil
	case b.gen != c.qGen:
		c.d.stats.dlDroppedOnReset.Add(1)
		c.d.stats.dlDroppedBytesOnReset.Add(uint64(n))
		c.recycleLocked(b.Buf)
		c.space.broadcast()
		c.mu.Unlock()
		return fmt.Errorf("ep: channel %d (%s): queue dropped by a reset while the transfer was built: %w",
			c.num, c.cfg.Name, mhi.ErrAborted)
	}
	tail := (c.qHead + c.qCount) % len(c.q)
	c.q[tail] = b.Buf[:n]
	c.qUnits[tail] = b.units
	c.qHeaders[tail] = b.headerBytes
	c.qCount++
	c.mu.Unlock()
	c.poke()
	return nil
}

// release gives a reservation back unused.
func (c *channel) release(b DLBuffer) {
	c.mu.Lock()
	c.reserved--
	c.recycleLocked(b.Buf)
	c.space.broadcast()
	c.mu.Unlock()
}

// recycleLocked keeps buf as a spare. mu must be held.
func (c *channel) recycleLocked(buf []byte) {
	if buf != nil && len(c.free) <= len(c.q) {
		c.free = append(c.free, buf[:0])
	}
}

// takeBufferLocked returns a buffer of n bytes, reusing a spare one when
// one is large enough. mu must be held.
func (c *channel) takeBufferLocked(n int) []byte {
	for i := len(c.free) - 1; i >= 0; i-- {
		if buf := c.free[i]; cap(buf) >= n {
			last := len(c.free) - 1
			c.free[i] = c.free[last]
			c.free[last] = nil
			c.free = c.free[:last]
			return buf[:n]
		}
	}
	return make([]byte, n)
}

// dropQueueLocked discards every queued downlink transfer and counts them.
// mu must be held.
func (c *channel) dropQueueLocked() {
	for c.qCount > 0 {
		buf := c.q[c.qHead]
		c.d.stats.dlDroppedOnReset.Add(1)
		c.d.stats.dlDroppedBytesOnReset.Add(uint64(len(buf)))
		c.droppedUnits.Add(uint64(c.qUnits[c.qHead]))
		c.q[c.qHead] = nil
		c.qUnits[c.qHead] = 0
		c.qHead = (c.qHead + 1) % len(c.q)
		c.qCount--
		c.recycleLocked(buf)
	}
	c.qHead = 0
	c.dlOff = 0
	c.qGen++
}

// dropPartialLocked discards the head downlink transfer if part of it has
// been written into host buffers: the host threw those buffers away with
// the ring, so the rest is meaningless to it. Whole transfers stay queued.
// mu must be held.
func (c *channel) dropPartialLocked() {
	if c.dlOff == 0 || c.qCount == 0 {
		c.dlOff = 0
		return
	}
	buf := c.q[c.qHead]
	c.d.stats.dlPartialDropped.Add(1)
	c.d.stats.dlPartialDroppedBytes.Add(uint64(len(buf)))
	c.droppedUnits.Add(uint64(c.qUnits[c.qHead]))
	c.d.log.Warn("mhi-ep: channel reset dropped a partly written downlink transfer", "channel", c.num,
		"bytes", len(buf), "written", c.dlOff)
	c.q[c.qHead] = nil
	c.qUnits[c.qHead] = 0
	c.qHead = (c.qHead + 1) % len(c.q)
	c.qCount--
	c.recycleLocked(buf)
	c.dlOff = 0
	c.space.broadcast()
}

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
func (c *channel) setState(st mhi.ChannelState) {
	c.mu.Lock()
	c.state.Store(uint32(st))
	c.space.broadcast()
	c.mu.Unlock()
}

// start executes START_CHAN: load the ring from the channel context, mark
// the context RUNNING and begin processing.
func (c *channel) start(s *session) error {
	ctxIOVA := s.chCtxBase + uint64(c.num)*mhi.ContextSize
	var scratch [mhi.ContextSize]byte
	ctx, err := c.d.readContext(ctxIOVA, &scratch)
	if err != nil {
		return err
	}
	ring, err := c.d.newRingGeometry(ctx.RBase, ctx.RLen)
	if err != nil {
		return err
	}
	rd, okRP := ring.index(ctx.RP)
	wr, okWP := ring.index(ctx.WP)
	if !okRP || !okWP {
		return fmt.Errorf("%w: rp 0x%x / wp 0x%x outside ring 0x%x..0x%x",
			mhi.ErrBounds, ctx.RP, ctx.WP, ring.base, ring.end())
	}
	if int(ctx.Index) >= len(s.events) {
		return fmt.Errorf("%w: event ring index %d, the host set up %d", mhi.ErrBounds, ctx.Index, len(s.events))
	}

	c.cancelRun()
	c.work.Lock()
	if err := c.d.setChannelStateInContext(ctxIOVA, mhi.ChannelRunning); err != nil {
		c.work.Unlock()
		return err
	}
	_, c.dbSeq = c.d.latchedDoorbell(&c.d.regs.chdb[c.num])
	c.sess = s
	c.ring, c.ctxIOVA, c.erIndex = ring, ctxIOVA, int(ctx.Index)
	c.rd, c.wr = rd, wr
	c.burst = ctx.BurstMode() == mhi.BurstEnable
	c.polling, c.idlePolls, c.badWP = false, 0, 0
	c.stopReq.Store(false)
	c.started = true
	runCtx, cancel := context.WithCancel(s.active)
	c.runCtx = runCtx
	c.rdIOVA.Store(ring.addr(rd))
	c.mu.Lock()
	c.runCancel = cancel
	c.mu.Unlock()
	c.work.Unlock()

	c.d.log.Debug("mhi-ep: channel started", "channel", c.num, "name", c.cfg.Name,
		"base", ring.base, "elements", ring.n, "event_ring", ctx.Index, "burst", c.burst)
	return nil
}

// activate lets a started channel move data. It runs after the START
// completion is posted: a host (Linux included) ignores transfer events for
// a channel whose START it has not seen complete.
func (c *channel) activate() {
	c.setState(mhi.ChannelRunning)
	c.poke()
	c.notifyState()
}

// stop executes STOP_CHAN: processing pauses, nothing is consumed, the
// context says STOP. A downlink channel first finishes the transfer it has
// begun writing, as far as the host has buffers posted for it, so that the
// host does not hold a fragment of a transfer while the channel is stopped;
// transfers not yet begun stay queued.
// stopFinishTimeout bounds how long a downlink STOP waits for host buffers
// to finish the transfer in progress before pausing mid-transfer.
const stopFinishTimeout = 500 * time.Millisecond

func (c *channel) stop() {
	if c.cfg.Dir == mhi.Downlink {
		// The worker stops at the next transfer boundary; then, holding
		// work, finish whatever it left half written.
		c.stopReq.Store(true)
		c.work.Lock()
		// Wait a bounded time for the host to post the buffers the
		// transfer still needs: it keeps handling completions and
		// refilling while it waits for the STOP to complete.
		deadline := time.Now().Add(stopFinishTimeout)
		for c.started && c.canRun() && c.dlOff > 0 {
			c.serviceDL()
			if c.dlOff == 0 || !time.Now().Before(deadline) {
				break
			}
			c.work.Unlock()
			time.Sleep(c.d.cfg.BurstPollInterval)
			c.work.Lock()
		}
		c.work.Unlock()
	}
	c.cancelRun()
	c.work.Lock()
	if c.started {
		if err := c.d.setChannelStateInContext(c.ctxIOVA, mhi.ChannelStop); err != nil {
			c.d.boundsViolation("channel context not writable", "channel", c.num, "err", err)
		}
		c.polling, c.idlePolls = false, 0
		c.setState(mhi.ChannelStop)
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
		if err := c.d.setChannelStateInContext(c.ctxIOVA, mhi.ChannelDisabled); err != nil {
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
	c.state.Store(uint32(mhi.ChannelDisabled))
	c.space.broadcast()
	c.mu.Unlock()
}

// resumeAfterM3 pokes the worker after M0 re-entry; a burst channel starts
// over in doorbell mode, as the host does.
func (c *channel) resumeAfterM3() {
	c.dbModeResync.Store(true)
	c.poke()
}

// notifyState tells the pair's Function, if it observes, the channel state.
func (c *channel) notifyState() {
	if obs, ok := c.pipe.fn.(PipeObserver); ok {
		obs.PipeStateChanged(c.pipe, c.cfg.Dir, c.channelState())
	}
}
