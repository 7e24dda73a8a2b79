package mhinet

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gomhi/gomhi/mhi"
	"github.com/gomhi/gomhi/mhi/proto/ntb"
	"github.com/gomhi/gomhi/mhi/proto/qmap"
)

// Defaults of the transmit aggregation limits (rmnet's egress defaults).
const (
	// DefaultTXAggMaxBytes is the largest transmit aggregate, framing
	// included.
	DefaultTXAggMaxBytes = 4096
	// DefaultTXAggMaxPackets is the most packets in one transmit aggregate.
	DefaultTXAggMaxPackets = 16
	// DefaultTXAggTimeout is how long a partly filled transmit aggregate
	// waits for more packets.
	DefaultTXAggTimeout = 800 * time.Microsecond
)

// txBuffer is one transmit buffer in DMA memory and what it carries.
type txBuffer struct {
	dma   mhi.DMABuffer
	pkts  int
	bytes int
}

// txPath is the transmit side: a set of DMA buffers, each carrying one
// packet or one aggregate per uplink element, recycled on completion, an
// aggregate that may stay open between Transmit calls, and the zero-copy
// slots (see txzc.go).
type txPath struct {
	d *Device

	mu       sync.Mutex
	bufs     []txBuffer
	free     []int
	inFlight int
	size     int
	// mtu is the MTU the buffers were allocated for: Transmit and
	// TransmitZC check packets against it under mu, so that a packet and
	// the buffer it is copied into always agree (SetMTU publishes the new
	// MTU together with the new buffers).
	mtu int
	// resizing: SetMTU is draining the uplink and reallocating the
	// buffers; Transmit and TransmitZC return ErrBusy meanwhile.
	resizing bool
	mem      mhi.DMAMemory
	xfers    []mhi.Transfer
	ntbw     ntb.Writer
	qmapw    qmap.Writer
	seq      uint16

	// The open aggregate: buffer index (-1: none), its packets so far,
	// its generation (to match the timer) and the timer.
	open      int
	openGen   uint64
	timer     *time.Timer
	timerGen  uint64
	deadline  time.Time // when the open aggregate must leave
	aggBytes  int
	aggPkts   int
	aggWait   time.Duration // < 0: close at the end of each call
	qmapTXCfg qmap.Config

	zc zcPath
}

func (t *txPath) init(d *Device) error {
	t.d = d
	t.open = -1
	t.xfers = make([]mhi.Transfer, 0, d.ul.Config().Elements)
	t.aggBytes, t.aggPkts, t.aggWait = d.cfg.TXAggMaxBytes, d.cfg.TXAggMaxPackets, d.cfg.TXAggTimeout
	t.qmapTXCfg = qmap.Config{Mux: d.cfg.Session, MaxPackets: t.aggPkts}
	if d.cfg.QMAPCsum == qmap.CsumV5 {
		// The modem parses the uplink with the MAPv5 checksum header
		// when the pair is configured for it; offload is not requested.
		t.qmapTXCfg.Csum = qmap.CsumV5
	}
	t.timer = time.AfterFunc(time.Hour, t.onTimer)
	t.timer.Stop()
	return t.zc.init(d)
}

// overhead is the framing a single packet needs beyond its own bytes.
const overhead = 64

func (t *txPath) bufferSize(mtu int) int {
	size := t.d.cfg.TXBufferSize
	if size == 0 {
		size = mtu + overhead
		if t.aggregating() {
			size = max(size, t.aggBytes)
		}
	}
	return min(size, mhi.MaxTRELength)
}

func (t *txPath) aggregating() bool {
	return t.d.cfg.TXAggregate && t.d.cfg.Format != FormatRawIP
}

// framedLen is the length of the element that carries one mtu-byte packet
// (alone in an aggregate with TXAggregate).
func (t *txPath) framedLen(mtu int) (int, error) {
	d := t.d
	switch d.cfg.Format {
	case FormatMBIM:
		if t.aggregating() {
			return ntb.Size(ntb.Config{Session: d.cfg.Session, MaxDatagrams: t.aggPkts}, []int{mtu})
		}
		return ntb.TXHeaderLen + mtu, nil
	case FormatQMAP:
		return qmap.FrameLen(t.qmapTXCfg, mtu)
	}
	return mtu, nil
}

// checkSize checks that the transmit buffers for mtu hold an mtu-byte
// packet with its framing, and (with TXAggregate) an aggregate of
// TXAggMaxBytes. The error wraps mhi.ErrConfig.
func (t *txPath) checkSize(mtu int) error {
	size := t.bufferSize(mtu)
	need, err := t.framedLen(mtu)
	if err != nil {
		return fmt.Errorf("mhinet: a %d-byte packet cannot be framed as %v: %v: %w", mtu, t.d.cfg.Format, err, mhi.ErrConfig)
	}
	if size < need {
		return fmt.Errorf("mhinet: transmit buffers of %d bytes cannot hold a %d-byte packet (%d bytes framed as %v): %w",
			size, mtu, need, t.d.cfg.Format, mhi.ErrConfig)
	}
	if t.aggregating() && t.aggBytes > size {
		return fmt.Errorf("mhinet: TXAggMaxBytes %d exceeds the transmit buffer size %d: %w", t.aggBytes, size, mhi.ErrConfig)
	}
	return nil
}

// alloc allocates one transmit buffer per usable uplink element, and the
// zero-copy slots when configured.
func (t *txPath) alloc(mem mhi.DMAMemory, mtu int) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.allocLocked(mem, mtu)
}

// allocLocked is alloc with t.mu held. It publishes mtu with the buffers.
func (t *txPath) allocLocked(mem mhi.DMAMemory, mtu int) error {
	if err := t.checkSize(mtu); err != nil {
		return err
	}
	size := t.bufferSize(mtu)
	n := t.d.ul.Config().Elements - 1
	t.mem, t.size, t.mtu = mem, size, mtu
	for i := 0; i < n; i++ {
		b, err := mem.Alloc(size, 64)
		if err != nil {
			t.freeLocked()
			return fmt.Errorf("mhinet: transmit buffers of %d × %d bytes: %w", n, size, err)
		}
		t.bufs = append(t.bufs, txBuffer{dma: b})
		t.free = append(t.free, i)
	}
	if err := t.zc.alloc(mem, mtu); err != nil {
		t.freeLocked()
		return err
	}
	return nil
}

func (t *txPath) release() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.freeLocked()
}

func (t *txPath) freeLocked() {
	if t.open >= 0 {
		// Packets waiting in the open aggregate never reach the device.
		t.d.c.txAborted.Add(uint64(t.bufs[t.open].pkts))
		t.d.c.txAggPending.Store(0)
		t.open = -1
		t.timer.Stop()
	}
	for _, b := range t.bufs {
		_ = t.mem.Free(b.dma)
	}
	t.bufs, t.free, t.inFlight = nil, nil, 0
	t.zc.freeLocked(t.mem)
}

// resize waits for the uplink to complete what it holds and reallocates
// the buffers for a new MTU. Transmit and TransmitZC return ErrBusy
// meanwhile. The uplink channel is reset around the reallocation, so the
// modem forgets the zero-copy lend region (and the release ring) before
// their memory is freed: the caller forwards the new ZeroCopyRegion.
func (t *txPath) resize(mem mhi.DMAMemory, mtu int) error {
	d := t.d
	t.mu.Lock()
	t.resizing = true
	deadline := time.Now().Add(5 * time.Second)
	for {
		if t.open >= 0 && d.ul.Free() > 0 {
			_ = t.queueLocked(t.closeAgg(t.xfers[:0], &d.c.txAggClosedFlush))
		}
		t.zc.reapLocked()
		if t.open < 0 && t.inFlight == 0 && t.zc.pending == 0 {
			break
		}
		if time.Now().After(deadline) {
			n, z := t.inFlight, t.zc.pending
			t.resizing = false
			t.mu.Unlock()
			t.zc.handBack()
			return fmt.Errorf("mhinet: MTU change: %d transmit buffers and %d zero-copy buffers still with the device: %w",
				n, z, mhi.ErrTimeout)
		}
		t.mu.Unlock()
		t.zc.handBack()
		time.Sleep(time.Millisecond)
		t.mu.Lock()
	}
	t.mu.Unlock()
	t.zc.handBack()
	if err := d.ul.Reset(); err != nil {
		// The modem may still know the old region: keep the buffers
		// (the uplink is disabled on the host side now; Down and Up
		// bring it back).
		t.mu.Lock()
		t.resizing = false
		t.mu.Unlock()
		return fmt.Errorf("mhinet: MTU change: reset uplink: %w", err)
	}
	t.mu.Lock()
	old := t.mtu
	t.freeLocked()
	err := t.allocLocked(mem, mtu)
	if err != nil {
		if rerr := t.allocLocked(mem, old); rerr != nil {
			err = errors.Join(err, rerr)
		}
	}
	t.mu.Unlock()
	serr := d.ul.Start(nil)
	t.mu.Lock()
	t.resizing = false
	t.mu.Unlock()
	if err != nil || serr != nil {
		return fmt.Errorf("mhinet: MTU change: %w", errors.Join(err, serr))
	}
	return nil
}

// unavailableLocked is the error of a transmit call that finds no
// buffers: ErrBusy while SetMTU reallocates them, ErrDown otherwise.
func (t *txPath) unavailableLocked() error {
	if t.resizing {
		t.d.c.txBusy.Add(1)
		return ErrBusy
	}
	return ErrDown
}

// Transmit queues packets on the uplink channel, copying each into a
// transmit buffer (one packet per element or, with TXAggregate, packed
// into aggregates bounded by TXAggMaxBytes and TXAggMaxPackets), and rings
// the doorbell once. It returns the number of packets it took from pkts:
// queued, waiting in the open aggregate (which leaves when full, after
// TXAggTimeout, or on Flush), or rejected and counted (empty, longer than
// the MTU). When buffers or ring elements run out it returns what it took
// so far and ErrBusy; the caller retries the rest later. The caller may
// reuse pkts as soon as Transmit returns.
func (d *Device) Transmit(pkts [][]byte) (int, error) {
	if !d.IsUp() {
		return 0, ErrDown
	}
	t := &d.tx
	t.mu.Lock()
	if t.bufs == nil || t.resizing {
		err := t.unavailableLocked()
		t.mu.Unlock()
		return 0, err
	}
	mtu := t.mtu
	xs := t.xfers[:0]
	room := d.ul.Free()
	taken := 0
	var err error
	for taken < len(pkts) {
		p := pkts[taken]
		switch {
		case len(p) == 0:
			d.c.txEmpty.Add(1)
			taken++
			continue
		case len(p) > mtu:
			d.c.txTooLong.Add(1)
			taken++
			continue
		}
		if t.aggregating() {
			var ok bool
			if xs, ok, err = t.aggAdd(xs, room, p); err != nil {
				break
			}
			if ok {
				taken++
			}
			continue
		}
		if len(xs) >= room || len(t.free) == 0 {
			err = ErrBusy
			break
		}
		bi := t.free[len(t.free)-1]
		b := &t.bufs[bi]
		n, ferr := t.fillOne(b, p)
		if errors.Is(ferr, errTooLong) {
			d.c.txTooLong.Add(1)
			taken++
			continue
		}
		if ferr != nil {
			err = ferr
			break
		}
		t.free = t.free[:len(t.free)-1]
		xs = append(xs, mhi.Transfer{IOVA: b.dma.IOVA, Len: n, Flags: mhi.FlagEOT, Cookie: uint64(bi)})
		taken++
	}
	if t.open >= 0 && t.aggWait < 0 && len(xs) < room {
		xs = t.closeAgg(xs, &d.c.txAggClosedFlush)
	}
	qerr := t.queueLocked(xs)
	t.mu.Unlock()
	if qerr != nil {
		return taken, qerr
	}
	if err == ErrBusy {
		d.c.txBusy.Add(1)
	}
	return taken, err
}

// queueLocked queues xs on the uplink. On failure the buffers go back to
// the free list and their packets are counted as aborted (they were
// already taken from the caller).
func (t *txPath) queueLocked(xs []mhi.Transfer) error {
	d := t.d
	defer func() { t.xfers = xs[:0] }()
	if len(xs) == 0 {
		return nil
	}
	// ErrDoorbell: the elements are queued (the next doorbell covers them).
	if qerr := d.ul.Queue(xs); qerr != nil && !errors.Is(qerr, mhi.ErrDoorbell) {
		for _, x := range xs {
			b := &t.bufs[x.Cookie]
			d.c.txAborted.Add(uint64(b.pkts))
			b.pkts, b.bytes = 0, 0
			t.free = append(t.free, int(x.Cookie))
		}
		return fmt.Errorf("mhinet: transmit: %w", qerr)
	}
	t.inFlight += len(xs)
	queued := 0
	for _, x := range xs {
		queued += t.bufs[x.Cookie].pkts
	}
	d.c.txQueued.Add(uint64(queued))
	d.c.txCopied.Add(uint64(queued))
	maxStore(&d.c.txInFlightHigh, uint64(t.inFlight))
	return nil
}

// errTooLong: a packet does not fit a transmit buffer (the caller counts
// it in TxTooLong).
var errTooLong = errors.New("mhinet: packet longer than the transmit buffer")

// fillOne encodes one packet (valid, within the MTU) into b. It fails with
// errTooLong, and writes nothing, if p does not fit the buffer.
func (t *txPath) fillOne(b *txBuffer, p []byte) (n int, err error) {
	buf := b.dma.Bytes
	d := t.d
	if len(p) > len(buf) {
		return 0, errTooLong
	}
	switch d.cfg.Format {
	case FormatRawIP:
		n = copy(buf, p)
	case FormatMBIM:
		if n, err = ntb.EncodeTX(buf, p, d.cfg.Session, t.seq); err != nil {
			return 0, fmt.Errorf("mhinet: transmit: %w", err)
		}
		t.seq++
	case FormatQMAP:
		c := t.qmapTXCfg
		c.MaxPackets = 1
		if err = t.qmapw.Reset(buf, c); err == nil {
			err = t.qmapw.Add(p)
		}
		if err != nil {
			return 0, fmt.Errorf("mhinet: transmit: %w", err)
		}
		n = t.qmapw.Finish()
	}
	b.pkts, b.bytes = 1, len(p)
	return n, nil
}

// aggOpen opens an aggregate in the free buffer bi, limited to limit
// bytes.
func (t *txPath) aggOpen(bi, limit int) error {
	d := t.d
	buf := t.bufs[bi].dma.Bytes[:min(limit, len(t.bufs[bi].dma.Bytes))]
	var err error
	switch d.cfg.Format {
	case FormatMBIM:
		if err = t.ntbw.Reset(buf, ntb.Config{Session: d.cfg.Session, MaxDatagrams: t.aggPkts}); err == nil {
			t.ntbw.SetSequence(t.seq)
		}
	case FormatQMAP:
		err = t.qmapw.Reset(buf, t.qmapTXCfg)
	}
	if err != nil {
		return fmt.Errorf("mhinet: transmit: aggregate of %d bytes: %w", len(buf), err)
	}
	t.open = bi
	t.openGen++
	b := &t.bufs[bi]
	b.pkts, b.bytes = 0, 0
	return nil
}

// aggAppend adds p to the open aggregate; the outcome is nil, or the
// writer's ErrFull/ErrLimit/ErrTooLarge.
func (t *txPath) aggAppend(p []byte) error {
	if t.d.cfg.Format == FormatMBIM {
		return t.ntbw.Add(p)
	}
	return t.qmapw.Add(p)
}

// aggAdd puts one valid packet into the open aggregate, opening one when
// needed and closing the aggregate (into xs) when the packet limit is
// reached or the packet would pass the byte limit. ok reports whether p
// was taken; when it was not and err is nil, the caller tries again.
func (t *txPath) aggAdd(xs []mhi.Transfer, room int, p []byte) (_ []mhi.Transfer, ok bool, err error) {
	d := t.d
	if t.open < 0 {
		if len(xs) >= room || len(t.free) == 0 {
			return xs, false, ErrBusy
		}
		bi := t.free[len(t.free)-1]
		if err := t.aggOpen(bi, t.aggBytes); err != nil {
			return xs, false, err
		}
		t.free = t.free[:len(t.free)-1]
	}
	b := &t.bufs[t.open]
	aerr := t.aggAppend(p)
	switch {
	case aerr == nil:
	case b.pkts > 0 && len(xs) >= room:
		// Full, but no element to close it into now.
		return xs, false, ErrBusy
	case b.pkts > 0 && (errors.Is(aerr, ntb.ErrFull) || errors.Is(aerr, qmap.ErrFull) ||
		errors.Is(aerr, ntb.ErrTooLarge) || errors.Is(aerr, qmap.ErrTooLarge)):
		// The next packet would pass the byte limit.
		return t.closeAgg(xs, &d.c.txAggClosedBytes), false, nil
	case b.pkts > 0 && (errors.Is(aerr, ntb.ErrLimit) || errors.Is(aerr, qmap.ErrLimit)):
		return t.closeAgg(xs, &d.c.txAggClosedPackets), false, nil
	case b.pkts == 0:
		// A packet larger than the byte limit travels alone, in an
		// aggregate as large as the buffer allows.
		bi := t.open
		if err := t.aggOpen(bi, len(b.dma.Bytes)); err != nil {
			return xs, false, err
		}
		if aerr = t.aggAppend(p); aerr != nil {
			t.open = -1
			t.free = append(t.free, bi)
			return xs, false, fmt.Errorf("mhinet: transmit: packet of %d bytes: %w", len(p), aerr)
		}
		b.pkts, b.bytes = 1, len(p)
		d.c.txAggPending.Add(1)
		return t.closeAgg(xs, &d.c.txAggClosedBytes), true, nil
	default:
		return xs, false, fmt.Errorf("mhinet: transmit: packet of %d bytes: %w", len(p), aerr)
	}
	b.pkts++
	b.bytes += len(p)
	d.c.txAggPending.Add(1)
	if b.pkts == 1 && t.aggWait > 0 {
		t.timerGen = t.openGen
		t.deadline = time.Now().Add(t.aggWait)
		t.timer.Reset(t.aggWait)
	}
	if b.pkts >= t.aggPkts && len(xs) < room {
		return t.closeAgg(xs, &d.c.txAggClosedPackets), true, nil
	}
	return xs, true, nil
}

// closeAgg finishes the open aggregate and appends its element to xs,
// counting the reason in cause.
func (t *txPath) closeAgg(xs []mhi.Transfer, cause *atomic.Uint64) []mhi.Transfer {
	d := t.d
	bi := t.open
	b := &t.bufs[bi]
	t.open = -1
	var n int
	if d.cfg.Format == FormatMBIM {
		n = t.ntbw.Finish()
		t.seq++
	} else {
		n = t.qmapw.Finish()
	}
	if b.pkts == 0 {
		t.free = append(t.free, bi)
		return xs
	}
	cause.Add(1)
	d.c.txAggregatedPackets.Add(uint64(b.pkts))
	d.c.txAggPending.Add(^uint64(b.pkts - 1))
	return append(xs, mhi.Transfer{IOVA: b.dma.IOVA, Len: n, Flags: mhi.FlagEOT, Cookie: uint64(bi)})
}

// onTimer closes an aggregate that waited TXAggTimeout for more packets.
func (t *txPath) onTimer() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.open < 0 || t.timerGen != t.openGen || t.bufs[t.open].pkts == 0 {
		return
	}
	if wait := time.Until(t.deadline); wait > 0 {
		// A stale expiry (this aggregate was opened while the callback
		// for the previous one waited for the lock): not yet.
		t.timer.Reset(wait)
		return
	}
	if t.d.ul.Free() == 0 {
		// No element: try again shortly (completions free some).
		t.timer.Reset(max(t.aggWait/4, 50*time.Microsecond))
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
	if t.open < 0 || t.bufs[t.open].pkts == 0 {
		return nil
	}
	if d.ul.Free() == 0 {
		return ErrBusy
	}
	return t.queueLocked(t.closeAgg(t.xfers[:0], &d.c.txAggClosedFlush))
}

// onComplete recycles a transmit buffer when the device has consumed it.
func (t *txPath) onComplete(c mhi.Completion) {
	d := t.d
	if c.Cookie&zcCookie != 0 {
		t.zc.onComplete(c)
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if c.Cookie >= uint64(len(t.bufs)) {
		d.c.txStaleCompletion.Add(1)
		return
	}
	b := &t.bufs[c.Cookie]
	if c.Err != nil {
		d.c.txAborted.Add(uint64(b.pkts))
	} else {
		d.c.txPackets.Add(uint64(b.pkts))
		d.c.txBytes.Add(uint64(b.bytes))
		d.c.txTransfers.Add(1)
	}
	b.pkts, b.bytes = 0, 0
	t.free = append(t.free, int(c.Cookie))
	t.inFlight--
}
