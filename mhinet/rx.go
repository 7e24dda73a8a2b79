package mhinet

import (
	"errors"
	"sync/atomic"
	"time"

	"github.com/gomhi/gomhi/mhi"
	"github.com/gomhi/gomhi/mhi/wire"
)

// fragment is one filled element of a transfer that arrived over several.
type fragment struct {
	buf *rxBuffer
	n   int
}

// chainSlack is what an honest modem may add to ceil(bytes/MRU) elements
// for one transfer: an empty EOT element after a transfer that filled its
// last buffer exactly, and one more for good measure.
const chainSlack = 2

// chainLimit returns the most elements one chained transfer may hold in a
// pool of poolBufs buffers of mru bytes: configured (cfgMax > 0) or what
// an honest modem needs for a maxReasm-byte aggregate — every element but
// the last of a chain is full (OVERFLOW means the buffer is full), so
// ceil(maxReasm/mru) elements, plus chainSlack — and never more than half
// of the pool (at least 1), so that a chain can never take the buffers the
// refill needs to keep the ring going.
func chainLimit(cfgMax, maxReasm, mru, poolBufs int) int {
	limit := cfgMax
	if limit <= 0 {
		limit = (maxReasm+mru-1)/mru + chainSlack
	}
	return min(limit, max(1, poolBufs/2))
}

// rateLimiter lets one event through per interval and counts the others,
// for warnings a misbehaving device could otherwise repeat at line rate.
type rateLimiter struct {
	next       atomic.Int64 // unix ns before which events are suppressed
	suppressed atomic.Uint64
}

// chainWarnInterval is the shortest time between two warnings about
// dropped chains.
const chainWarnInterval = time.Second

// allow reports whether an event at now may be logged, and how many were
// suppressed since the last one that was.
func (r *rateLimiter) allow(now time.Time, every time.Duration) (bool, uint64) {
	next := r.next.Load()
	if now.UnixNano() < next || !r.next.CompareAndSwap(next, now.Add(every).UnixNano()) {
		r.suppressed.Add(1)
		return false, 0
	}
	return true, r.suppressed.Swap(0)
}

// refillRing posts free receive buffers. Buffers are posted in batches: only
// once half the ring is free, as Linux does, unless force is set.
func (d *Device) refillRing(force bool) {
	d.stateMu.Lock()
	ok := d.refill
	d.stateMu.Unlock()
	if !ok {
		return
	}
	d.rxMu.Lock()
	defer d.rxMu.Unlock()
	if d.pool == nil {
		return
	}
	free := d.dl.Free()
	if free == 0 || (!force && free < (d.dl.Config().Elements-1)/2) {
		return
	}
	xs := d.xfers[:0]
	for len(xs) < free {
		b := d.pool.get()
		if b == nil {
			d.c.refillStarved.Add(1)
			break
		}
		xs = append(xs, mhi.Transfer{IOVA: b.dma.IOVA, Len: len(b.data), Flags: mhi.FlagEOT, Cookie: uint64(b.index)})
	}
	if len(xs) == 0 {
		return
	}
	// ErrDoorbell: the buffers are queued (the next doorbell covers them).
	if err := d.dl.Queue(xs); err != nil && !errors.Is(err, mhi.ErrDoorbell) {
		// Give the buffers back without waking the refill: put calls
		// refillRing on a starved pool, and rxMu is held here.
		for _, x := range xs {
			d.pool.unget(d.pool.bufs[x.Cookie])
		}
		d.c.refillErrors.Add(1)
		d.log.Debug("refill", "channel", d.dl.Num(), "buffers", len(xs), "err", err)
		return
	}
	d.posted += len(xs)
	d.c.refills.Add(1)
	maxStore(&d.c.rxPostedHigh, uint64(d.posted))
}

// onDL handles one downlink completion (from the controller's event
// goroutine): it chains fragments, de-aggregates complete transfers,
// delivers their packets and refills the ring.
func (d *Device) onDL(c mhi.Completion) {
	d.rxMu.Lock()
	var b *rxBuffer
	if d.pool != nil && c.Cookie < uint64(len(d.pool.bufs)) {
		b = d.pool.bufs[c.Cookie]
	}
	if b != nil {
		d.posted--
	}
	d.rxMu.Unlock()
	if b == nil {
		d.c.rxStaleCompletion.Add(1)
		return
	}
	// Completions come from the event goroutine, and aborted ones from
	// whoever reset the channel: chainMu keeps the chain consistent.
	d.chainMu.Lock()
	if c.Err != nil {
		// Reset, SYS_ERR or power-down: the buffer was never filled.
		d.c.rxAbortedBuffers.Add(1)
		b.release()
		d.dropChain(&d.c.rxChainAborted)
		d.skipping = false
		d.chainMu.Unlock()
		return
	}
	d.c.rxElements.Add(1)
	last := c.End && c.Code != wire.CCOverflow
	if c.Code == wire.CCOverflow {
		d.c.rxOverflows.Add(1)
	}
	switch {
	case !c.End && c.Code != wire.CCOverflow:
		// The device's event named a later element, so this one was
		// completed without an event of its own: the buffers are posted
		// with IEOT and without CHAIN, so it ended a transfer, of a
		// length the device never said (Len is the whole buffer). Drop
		// it, with the chain it ended, and count the transfer lost.
		d.c.rxUnreported.Add(1)
		d.dropChain(nil)
		d.dropFragment(b, c.Len)
		d.skipping = false
	case d.skipping:
		// The rest of a transfer whose head was dropped.
		d.dropFragment(b, c.Len)
		d.skipping = !last
	case last && len(d.chain) == 0:
		d.deliver(b, b.data[:c.Len])
	default:
		d.chain = append(d.chain, fragment{b, c.Len})
		d.chainLen += c.Len
		// Bounded by bytes and by buffers: OVERFLOW fragments of a byte
		// each would otherwise pin the whole pool within the byte bound.
		if d.chainLen > d.cfg.MaxReassembly || (!last && len(d.chain) >= b.pool.maxChain) {
			d.warnChainDropped(len(d.chain), d.chainLen, b.pool.maxChain)
			d.dropChain(&d.c.rxChainTooLong)
			d.skipping = !last
		} else if last {
			d.reassemble()
		}
	}
	d.chainMu.Unlock()
	d.refillRing(false)
}

// warnChainDropped logs a chain dropped for its size, at most once per
// chainWarnInterval (with the number of drops not logged since).
func (d *Device) warnChainDropped(elements, bytes, limit int) {
	ok, suppressed := d.chainWarn.allow(time.Now(), chainWarnInterval)
	if !ok {
		return
	}
	d.log.Warn("receive chain too long: dropped, buffers back to the pool", "channel", d.dl.Num(),
		"elements", elements, "bytes", bytes, "max_elements", limit, "max_bytes", d.cfg.MaxReassembly,
		"dropped_since_last_warning", suppressed)
}

// dropFragment releases one element of a transfer being dropped and counts
// it. chainMu must be held.
func (d *Device) dropFragment(b *rxBuffer, n int) {
	d.c.rxDroppedFragments.Add(1)
	d.c.rxDroppedBytes.Add(uint64(n))
	b.release()
}

// dropChain releases the fragments of an incomplete transfer and counts
// them, and the transfer under reason (nil: counted by the caller).
// chainMu must be held.
func (d *Device) dropChain(reason *atomic.Uint64) {
	if len(d.chain) == 0 {
		return
	}
	if reason != nil {
		reason.Add(1)
	}
	for i, f := range d.chain {
		d.dropFragment(f.buf, f.n)
		d.chain[i] = fragment{}
	}
	d.chain, d.chainLen = d.chain[:0], 0
}

// abandonChain drops a chain in progress (counted in RxChainAborted) and
// stops skipping: used when the channel is reset or the device fails, so
// that a chain the device never ends cannot pin its buffers.
func (d *Device) abandonChain() {
	d.chainMu.Lock()
	d.dropChain(&d.c.rxChainAborted)
	d.skipping = false
	d.chainMu.Unlock()
}

// reassemble copies a chained transfer into one buffer and delivers it.
func (d *Device) reassemble() {
	d.c.rxChains.Add(1)
	d.c.rxFragments.Add(uint64(len(d.chain)))
	r := d.reasm.get()
	if r == nil {
		r = d.reasm.grow(maxReassemblyBuffers)
	}
	if r == nil {
		d.dropChain(&d.c.rxReassemblyBusy)
		return
	}
	n := 0
	for i, f := range d.chain {
		n += copy(r.data[n:], f.buf.data[:f.n])
		f.buf.release()
		d.chain[i] = fragment{}
	}
	d.chain, d.chainLen = d.chain[:0], 0
	d.deliver(r, r.data[:n])
}

// maxReassemblyBuffers bounds the reassembly buffers receivers may hold.
const maxReassemblyBuffers = 64

// deliver de-aggregates one complete transfer held in b and hands its
// packets to the receiver. It drops the caller's reference to b.
func (d *Device) deliver(b *rxBuffer, data []byte) {
	d.c.rxTransfers.Add(1)
	if b.private != nil && d.rxCopy {
		// Copy-on-receive: one copy out of DMA memory before the
		// parser's first look; the device cannot reach the copy.
		data = b.private[:copy(b.private, data)]
		d.c.rxCopied.Add(1)
		d.c.rxCopiedBytes.Add(uint64(len(data)))
	}
	batch := d.framer.parse(data, b, d.batch[:0])
	if n := len(batch); n > 0 {
		bytes := 0
		for _, p := range batch {
			bytes += len(p.Data)
		}
		b.refs.Add(int32(n))
		d.c.rxPackets.Add(uint64(n))
		d.c.rxBytes.Add(uint64(bytes))
		d.rx.Receive(batch)
	}
	d.batch = batch[:0]
	b.release()
}
