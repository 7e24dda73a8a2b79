package ep

import (
	"context"
	"fmt"

	"github.com/gomhi/gomhi/mhi/wire"
)

// The downlink queue: transfers a Function has committed (Pipe.Send,
// Reserve/Commit) and the worker has not finished writing into host
// buffers. Producers reserve a slot and a buffer, fill it in place and
// commit it; the worker takes transfers off the head (popDL). The buffers
// of finished or dropped transfers are kept for reuse.

// dlQueue is the state of a downlink channel's queue. Every field is
// guarded by the owning channel's mu; its methods (all ...Locked) must be
// called with mu held. An uplink channel's dlQueue is the zero value.
type dlQueue struct {
	q        [][]byte // ring of queued downlink transfers
	qUnits   []int    // per queued transfer: the units (packets) its producer declared
	qHeaders []int    // per queued transfer: its packets' header bytes (DLBuffer.headerBytes)
	qHead    int
	qCount   int
	reserved int      // queue slots held by outstanding reservations
	qGen     uint64   // bumped whenever the whole queue is dropped
	free     [][]byte // spare downlink buffers
	space    signal   // queue space freed or state changed
	// errFull is the error of a non-blocking reservation on a full queue
	// (made once).
	errFull error
	// onSpace, if set, is called (without mu) whenever a transfer leaves
	// the queue: in virtual time nobody waits on space, so a Function that
	// wants room learns of it here.
	onSpace func()
}

// newDLQueue returns an empty queue of depth transfers.
func newDLQueue(depth int) dlQueue {
	return dlQueue{q: make([][]byte, depth), qUnits: make([]int, depth), qHeaders: make([]int, depth)}
}

// hasRoomLocked reports whether a slot is free for one more reservation.
func (q *dlQueue) hasRoomLocked() bool { return q.qCount+q.reserved < len(q.q) }

// pushLocked appends a transfer of units units (headers header bytes) at
// the tail.
func (q *dlQueue) pushLocked(buf []byte, units, headers int) {
	tail := (q.qHead + q.qCount) % len(q.q)
	q.q[tail] = buf
	q.qUnits[tail] = units
	q.qHeaders[tail] = headers
	q.qCount++
}

// popHeadLocked takes the head transfer off the queue; there must be one.
func (q *dlQueue) popHeadLocked() (buf []byte, units int) {
	buf, units = q.q[q.qHead], q.qUnits[q.qHead]
	q.q[q.qHead] = nil
	q.qUnits[q.qHead] = 0
	q.qHeaders[q.qHead] = 0
	q.qHead = (q.qHead + 1) % len(q.q)
	q.qCount--
	return buf, units
}

// unreserveLocked ends a reservation that queued nothing: its slot and
// buffer are free again.
func (q *dlQueue) unreserveLocked(buf []byte) {
	q.reserved--
	q.recycleLocked(buf)
	q.space.broadcast()
}

// recycleLocked keeps buf as a spare.
func (q *dlQueue) recycleLocked(buf []byte) {
	if buf != nil && len(q.free) <= len(q.q) {
		q.free = append(q.free, buf[:0])
	}
}

// takeBufferLocked returns a buffer of n bytes, reusing a spare one when
// one is large enough. When none is, one of the spares (all too small) is
// dropped, so that the new buffer finds room among them when it comes back
// and the spares grow to the transfers' size instead of every larger
// transfer allocating.
func (q *dlQueue) takeBufferLocked(n int) []byte {
	for i := len(q.free) - 1; i >= 0; i-- {
		if buf := q.free[i]; cap(buf) >= n {
			q.dropSpareLocked(i)
			return buf[:n]
		}
	}
	if len(q.free) > 0 {
		q.dropSpareLocked(len(q.free) - 1)
	}
	return make([]byte, n)
}

// dropSpareLocked removes the spare buffer at index i.
func (q *dlQueue) dropSpareLocked(i int) {
	last := len(q.free) - 1
	q.free[i] = q.free[last]
	q.free[last] = nil
	q.free = q.free[:last]
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
	c.mu.Lock()
	defer c.mu.Unlock()
	for waited := false; ; waited = true {
		st := c.channelState()
		accepting := st == wire.ChannelRunning || st == wire.ChannelStop
		if accepting && c.hasRoomLocked() {
			c.reserved++
			return DLBuffer{Buf: c.takeBufferLocked(size), gen: c.qGen, c: c}, nil
		}
		if !block {
			return DLBuffer{}, c.refusalLocked(st, accepting)
		}
		if !waited {
			c.d.stats.dlQueueWaits.Add(1)
		}
		if !c.space.waitLocked(&c.mu, ctx.Done(), c.d.ctx.Done()) {
			if err := ctx.Err(); err != nil {
				return DLBuffer{}, fmt.Errorf("ep: channel %d (%s): %w", c.num, c.cfg.Name, err)
			}
			return DLBuffer{}, ErrClosed
		}
	}
}

// refusalLocked is the error of a non-blocking reservation that cannot be
// had now: the channel is not accepting (in state st) or the queue is
// full. mu must be held.
func (c *channel) refusalLocked(st wire.ChannelState, accepting bool) error {
	if !accepting {
		return fmt.Errorf("ep: channel %d (%s) is %s: %w", c.num, c.cfg.Name, st, wire.ErrChannelState)
	}
	// The same every time: made once, so that a producer that tries again
	// and again does not allocate.
	if c.errFull == nil {
		c.errFull = fmt.Errorf("ep: channel %d (%s): %d transfers queued: %w", c.num, c.cfg.Name, len(c.q), wire.ErrRingFull)
	}
	return c.errFull
}

// commit queues b.Buf[:n] as one downlink transfer in b's slot; n == 0
// gives the slot and buffer back unless empty says an empty transfer is
// wanted. A reservation that outlived a drop of the whole queue (MHI reset)
// is dropped and counted like the queue was.
func (c *channel) commit(b DLBuffer, n int, empty bool) error {
	if n < 0 || n > len(b.Buf) {
		c.release(b)
		return fmt.Errorf("ep: channel %d (%s): commit of %d bytes in a %d-byte reservation: %w",
			c.num, c.cfg.Name, n, len(b.Buf), wire.ErrBounds)
	}
	c.mu.Lock()
	switch {
	case n == 0 && !empty:
		c.unreserveLocked(b.Buf)
		c.mu.Unlock()
		return nil
	case b.gen != c.qGen:
		c.d.stats.dlDroppedOnReset.Add(1)
		c.d.stats.dlDroppedBytesOnReset.Add(uint64(n))
		c.unreserveLocked(b.Buf)
		c.mu.Unlock()
		return fmt.Errorf("ep: channel %d (%s): queue dropped by a reset while the transfer was built: %w",
			c.num, c.cfg.Name, wire.ErrAborted)
	}
	c.reserved--
	c.pushLocked(b.Buf[:n], b.Units, b.headerBytes)
	c.mu.Unlock()
	c.poke()
	return nil
}

// release gives a reservation back unused.
func (c *channel) release(b DLBuffer) {
	c.mu.Lock()
	c.unreserveLocked(b.Buf)
	c.mu.Unlock()
}

// headDL returns the head queued transfer, if any. work must be held (the
// worker is the only consumer, so the head stays put until it pops it).
func (c *channel) headDL() (data []byte, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.qCount == 0 {
		return nil, false
	}
	return c.q[c.qHead], true
}

// popDL removes the head downlink transfer, written out, keeping its
// buffer for reuse, and tells onSpace. work must be held.
func (c *channel) popDL() {
	c.mu.Lock()
	buf, _ := c.popHeadLocked()
	c.dlOff = 0
	c.recycleLocked(buf)
	c.space.broadcast()
	onSpace := c.onSpace
	c.mu.Unlock()
	if onSpace != nil {
		onSpace()
	}
}

// dropQueueLocked discards every queued downlink transfer and counts them.
// work and mu must be held.
func (c *channel) dropQueueLocked() {
	for c.qCount > 0 {
		buf, units := c.popHeadLocked()
		c.d.stats.dlDroppedOnReset.Add(1)
		c.d.stats.dlDroppedBytesOnReset.Add(uint64(len(buf)))
		c.droppedUnits.Add(uint64(units))
		c.recycleLocked(buf)
	}
	c.qHead = 0
	c.dlOff = 0
	c.qGen++
}

// dropPartialLocked discards the head downlink transfer if part of it has
// been written into host buffers: the host threw those buffers away with
// the ring, so the rest is meaningless to it. Whole transfers stay queued.
// work and mu must be held.
func (c *channel) dropPartialLocked() {
	if c.dlOff == 0 || c.qCount == 0 {
		c.dlOff = 0
		return
	}
	buf, units := c.popHeadLocked()
	c.d.stats.dlPartialDropped.Add(1)
	c.d.stats.dlPartialDroppedBytes.Add(uint64(len(buf)))
	c.droppedUnits.Add(uint64(units))
	c.d.log.Warn("mhi-ep: channel reset dropped a partly written downlink transfer", "channel", c.num,
		"bytes", len(buf), "written", c.dlOff)
	c.recycleLocked(buf)
	c.dlOff = 0
	c.space.broadcast()
}
