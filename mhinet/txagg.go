package mhinet

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/gomhi/gomhi/mhi"
	"github.com/gomhi/gomhi/mhi/proto/framing"
)

// Transmit aggregation (Config.TXAggregate, with a framer that
// aggregates): packets are packed into one open aggregate, in a transmit
// buffer, which leaves as an element when it reaches TXAggMaxPackets or
// the next packet would pass TXAggMaxBytes, after TXAggTimeout, on Flush,
// or at the end of each call with a negative TXAggTimeout.

// txAgg is the aggregation state of a txPath; guarded by txPath.mu.
type txAgg struct {
	w aggregator // nil: no aggregation

	// The open aggregate: buffer index (-1: none), its generation (to
	// match the timer) and the timer.
	open     int
	openGen  uint64
	timer    *time.Timer
	timerGen uint64
	deadline time.Time // when the open aggregate must leave

	maxBytes int
	maxPkts  int
	wait     time.Duration // < 0: close at the end of each call
}

func (a *txAgg) init(t *txPath, cfg *Config) {
	a.open = -1
	a.maxBytes, a.maxPkts, a.wait = cfg.TXAggMaxBytes, cfg.TXAggMaxPackets, cfg.TXAggTimeout
	if w, ok := t.f.(aggregator); ok && cfg.TXAggregate {
		a.w = w
	}
	a.timer = time.AfterFunc(time.Hour, t.onTimer)
	a.timer.Stop()
}

// on reports whether transmitted packets are aggregated.
func (a *txAgg) on() bool { return a.w != nil }

// aggOpen opens an aggregate in the free buffer bi, limited to limit
// bytes, for packets on wire id wire.
func (t *txPath) aggOpen(bi, limit int, wire uint8) error {
	a := &t.agg
	buf := t.bufs[bi].dma.Bytes[:min(limit, len(t.bufs[bi].dma.Bytes))]
	if err := a.w.aggReset(buf, wire); err != nil {
		return fmt.Errorf("mhinet: transmit: aggregate of %d bytes: %w", len(buf), err)
	}
	a.open = bi
	a.openGen++
	b := &t.bufs[bi]
	b.pkts, b.bytes = 0, 0
	return nil
}

// aggAdd puts p (valid, within the MTU), on wire id b.wire, into the open
// aggregate, opening one when needed and closing the aggregate (into b)
// when the packet limit is reached or p would pass the byte limit (or,
// in an NTB, p's session would be one NDP too many): then p is not taken
// yet (txAgain without b.err) and the caller offers it again.
func (t *txPath) aggAdd(b *txBatch, p []byte) txOutcome {
	a := &t.agg
	if a.open < 0 {
		if len(b.xs) >= b.room || len(t.free) == 0 {
			b.err = ErrBusy
			return txAgain
		}
		if b.err = t.aggOpen(t.free[len(t.free)-1], a.maxBytes, b.wire); b.err != nil {
			return txAgain
		}
		t.free = t.free[:len(t.free)-1]
	}
	return t.aggPut(b, p)
}

// aggPut adds p to the open aggregate (see aggAdd).
func (t *txPath) aggPut(b *txBatch, p []byte) txOutcome {
	d, a := t.d, &t.agg
	buf := &t.bufs[a.open]
	err := a.w.aggAdd(p, b.wire)
	switch {
	case err == nil:
	case buf.pkts > 0 && len(b.xs) >= b.room:
		// Full, but no element to close it into now.
		b.err = ErrBusy
		return txAgain
	case buf.pkts > 0 && (errors.Is(err, framing.ErrFull) || errors.Is(err, framing.ErrTooLarge)):
		// The next packet would pass the byte limit.
		b.xs = t.closeAgg(b.xs, &d.c.txAggClosedBytes)
		return txAgain
	case buf.pkts > 0 && errors.Is(err, framing.ErrLimit):
		b.xs = t.closeAgg(b.xs, &d.c.txAggClosedPackets)
		return txAgain
	case buf.pkts == 0:
		return t.aggAlone(b, p)
	default:
		b.err = fmt.Errorf("mhinet: transmit: packet of %d bytes: %w", len(p), err)
		return txAgain
	}
	buf.pkts++
	buf.bytes += len(p)
	d.c.txAggPending.Add(1)
	if buf.pkts == 1 && a.wait > 0 {
		a.timerGen = a.openGen
		a.deadline = time.Now().Add(a.wait)
		a.timer.Reset(a.wait)
	}
	if buf.pkts >= a.maxPkts && len(b.xs) < b.room {
		b.xs = t.closeAgg(b.xs, &d.c.txAggClosedPackets)
	}
	return txSent
}

// aggAlone sends p, larger than the byte limit, alone in an aggregate as
// large as the open (empty) aggregate's buffer allows.
func (t *txPath) aggAlone(b *txBatch, p []byte) txOutcome {
	d, a := t.d, &t.agg
	bi := a.open
	if b.err = t.aggOpen(bi, len(t.bufs[bi].dma.Bytes), b.wire); b.err != nil {
		return txAgain
	}
	if err := a.w.aggAdd(p, b.wire); err != nil {
		a.open = -1
		t.free = append(t.free, bi)
		b.err = fmt.Errorf("mhinet: transmit: packet of %d bytes: %w", len(p), err)
		return txAgain
	}
	t.bufs[bi].pkts, t.bufs[bi].bytes = 1, len(p)
	d.c.txAggPending.Add(1)
	b.xs = t.closeAgg(b.xs, &d.c.txAggClosedBytes)
	return txSent
}

// closeAgg finishes the open aggregate and appends its element to xs,
// counting the reason in cause.
func (t *txPath) closeAgg(xs []mhi.Transfer, cause *atomic.Uint64) []mhi.Transfer {
	d, a := t.d, &t.agg
	bi := a.open
	b := &t.bufs[bi]
	a.open = -1
	n := a.w.aggFinish()
	if b.pkts == 0 {
		t.free = append(t.free, bi)
		return xs
	}
	cause.Add(1)
	d.c.txAggregatedPackets.Add(uint64(b.pkts))
	d.c.txAggPending.Add(^uint64(b.pkts - 1))
	return append(xs, mhi.Transfer{IOVA: b.dma.IOVA, Len: n, Flags: mhi.FlagEOT, Cookie: uint64(bi)})
}

// abortAggLocked forgets the open aggregate when the buffers are freed:
// its packets never reach the device (TxAborted).
func (t *txPath) abortAggLocked() {
	a := &t.agg
	if a.open < 0 {
		return
	}
	t.d.c.txAborted.Add(uint64(t.bufs[a.open].pkts))
	t.d.c.txAggPending.Store(0)
	a.open = -1
	a.timer.Stop()
}

// onTimer closes an aggregate that waited TXAggTimeout for more packets.
func (t *txPath) onTimer() {
	t.mu.Lock()
	defer t.mu.Unlock()
	a := &t.agg
	if a.open < 0 || a.timerGen != a.openGen || t.bufs[a.open].pkts == 0 {
		return
	}
	if wait := time.Until(a.deadline); wait > 0 {
		// A stale expiry (this aggregate was opened while the callback
		// for the previous one waited for the lock): not yet.
		a.timer.Reset(wait)
		return
	}
	if t.d.ul.Free() == 0 {
		// No element: try again shortly (completions free some).
		a.timer.Reset(max(a.wait/4, 50*time.Microsecond))
		return
	}
	xs := t.closeAgg(t.xfers[:0], &t.d.c.txAggClosedTimer)
	_ = t.queueLocked(xs) // failures are counted as aborted packets
}

// Flush sends the open transmit aggregate now, if it holds any packet. It
// fails with ErrBusy when no ring element is free (the aggregate stays
// open and its timer still runs).
func (d *Device) Flush() error {
	if !d.IsUp() {
		return ErrDown
	}
	t := &d.tx
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.agg.open < 0 || t.bufs[t.agg.open].pkts == 0 {
		return nil
	}
	if d.ul.Free() == 0 {
		return ErrBusy
	}
	return t.queueLocked(t.closeAgg(t.xfers[:0], &d.c.txAggClosedFlush))
}
