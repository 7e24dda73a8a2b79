package mhinet

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gomhi/gomhi/mhi"
	"github.com/gomhi/gomhi/mhi/wire"
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

// txPath is the transmit side. A packet leaves in one of three ways:
// copied into a transmit buffer of its own (txcopy.go), packed with others
// into an aggregate in a transmit buffer (txagg.go), or lent in a
// zero-copy slot (txzc.go). Transmit and TransmitZC share one entry
// (begin, end: a txBatch) and one queue; SetMTU rebuilds the buffers
// (txresize.go). The framer (framing.go) formats every element. One lock, mu, guards it all: the three ways share the ring,
// whose order they keep, and the buffers.
type txPath struct {
	d *Device
	f framer

	// mu comes after gsoTx.mu and before Device.rxMu in the Device's
	// lock order: the uplink is queued (mhi.Channel.mu) under it, and
	// txPath.onComplete takes it under mhi's event ring lock.
	mu       sync.Mutex
	bufs     []txBuffer
	free     []int
	inFlight int
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

	agg txAgg
	zc  zcPath

	// ready wakes a caller waiting after ErrBusy (Device.TransmitReady);
	// sessionReady are the channels of TransmitReadySession, by session
	// (readyMu guards their creation; wake reads the published list).
	// readyMu is a leaf: nothing is taken under it.
	// lockorder: txPath.readyMu
	ready        chan struct{}
	readyMu      sync.Mutex
	sessionReady [256]chan struct{}
	readyList    atomic.Pointer[[]chan struct{}]
}

func (t *txPath) init(d *Device) error {
	t.d, t.f = d, d.framer
	t.ready = make(chan struct{}, 1)
	t.xfers = make([]mhi.Transfer, 0, d.ul.Config().Elements)
	t.agg.init(t, &d.cfg)
	return t.zc.init(d)
}

// overhead is the framing a single packet needs beyond its own bytes.
const overhead = 64

func (t *txPath) bufferSize(mtu int) int {
	size := t.d.cfg.TXBufferSize
	if size == 0 {
		size = mtu + overhead
		if t.agg.on() {
			size = max(size, t.agg.maxBytes)
		}
	}
	return min(size, wire.MaxTRELength)
}

// framedLen is the length of the element that carries one mtu-byte packet
// (alone in an aggregate with TXAggregate).
func (t *txPath) framedLen(mtu int) (int, error) {
	if t.agg.on() {
		return t.agg.w.aggFrameLen(mtu)
	}
	return t.f.frameLen(mtu)
}

// checkSize checks that the transmit buffers for mtu hold an mtu-byte
// packet with its framing, and (with TXAggregate) an aggregate of
// TXAggMaxBytes. The error wraps wire.ErrConfig.
func (t *txPath) checkSize(mtu int) error {
	size := t.bufferSize(mtu)
	need, err := t.framedLen(mtu)
	if err != nil {
		return fmt.Errorf("mhinet: a %d-byte packet cannot be framed as %v: %v: %w", mtu, t.d.cfg.Format, err, wire.ErrConfig)
	}
	if size < need {
		return fmt.Errorf("mhinet: transmit buffers of %d bytes cannot hold a %d-byte packet (%d bytes framed as %v): %w",
			size, mtu, need, t.d.cfg.Format, wire.ErrConfig)
	}
	if t.agg.on() && t.agg.maxBytes > size {
		return fmt.Errorf("mhinet: TXAggMaxBytes %d exceeds the transmit buffer size %d: %w", t.agg.maxBytes, size, wire.ErrConfig)
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
	t.mem, t.mtu = mem, mtu
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
	t.abortAggLocked()
	for _, b := range t.bufs {
		_ = t.mem.Free(b.dma)
	}
	t.bufs, t.free, t.inFlight = nil, nil, 0
	t.zc.freeLocked(t.mem)
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

// txBatch is the work of one Transmit or TransmitZC call, under t.mu: the
// elements it queues, the ring room they must fit in, and how far it got.
type txBatch struct {
	xs    []mhi.Transfer
	room  int   // free ring elements when the call began
	mtu   int   // the MTU of the buffers
	zc    bool  // a TransmitZC call
	wire  uint8 // the wire id the packets go on (TransmitSession)
	taken int   // packets taken from the caller
	err   error
}

// txOutcome is what became of one packet offered to the batch.
type txOutcome uint8

const (
	// txAgain: not taken. With txBatch.err set the call stops there;
	// without, an aggregate was closed to make room: offer it again.
	txAgain txOutcome = iota
	// txSent: in an element of the batch, or waiting in the open
	// aggregate.
	txSent
	// txDropped: rejected and counted.
	txDropped
)

// begin is the shared start of Transmit (zc false) and TransmitZC, for
// session n (TransmitZC: 0): it fails with ErrDown, ErrSession,
// ErrZeroCopyOff, or ErrBusy while SetMTU rebuilds the buffers; on
// success t.mu is held until end.
func (t *txPath) begin(zc bool, n uint8) (txBatch, error) {
	if !t.d.IsUp() {
		return txBatch{}, ErrDown
	}
	wire, ok := t.f.wire(n)
	if !ok {
		return txBatch{}, fmt.Errorf("mhinet: transmit on session %d (base %d, %v): %w", n, t.f.base(), t.d.cfg.Format, ErrSession)
	}
	t.mu.Lock()
	var err error
	switch {
	case zc && !t.zc.on:
		err = ErrZeroCopyOff
	case t.bufs == nil || (zc && t.zc.slots == nil) || t.resizing:
		err = t.unavailableLocked()
	}
	if err != nil {
		t.mu.Unlock()
		return txBatch{}, err
	}
	return txBatch{xs: t.xfers[:0], room: t.d.ul.Free(), mtu: t.mtu, zc: zc, wire: wire}, nil
}

// end is the shared end of Transmit and TransmitZC: it closes an
// aggregate that may not wait (a negative TXAggTimeout runs no timer),
// queues the batch, releases t.mu and returns the call's result.
func (t *txPath) end(b *txBatch) (int, error) {
	if t.agg.open >= 0 && t.agg.wait < 0 && len(b.xs) < b.room {
		b.xs = t.closeAgg(b.xs, &t.d.c.txAggClosedFlush)
	}
	qerr := t.queueLocked(b.xs)
	if b.zc {
		t.zc.armPollLocked()
	}
	t.mu.Unlock()
	if b.zc {
		t.zc.handBack()
	}
	if qerr != nil {
		return b.taken, qerr
	}
	if b.err == ErrBusy {
		t.d.c.txBusy.Add(1)
	}
	return b.taken, b.err
}

// admit counts an n-byte packet that is empty (TxEmpty) or longer than
// limit (TxTooLong) and reports whether it may go.
func (t *txPath) admit(n, limit int) bool {
	switch {
	case n <= 0:
		t.d.c.txEmpty.Add(1)
		return false
	case n > limit:
		t.d.c.txTooLong.Add(1)
		return false
	}
	return true
}

// Transmit queues packets on the uplink channel, copying each into a
// transmit buffer (one packet per element or, with TXAggregate, packed
// into aggregates bounded by TXAggMaxBytes and TXAggMaxPackets), and rings
// the doorbell once. It returns the number of packets it took from pkts:
// queued, waiting in the open aggregate (which leaves when full, after
// TXAggTimeout, or on Flush), or rejected and counted (empty, longer than
// the MTU). When buffers or ring elements run out it returns what it took
// so far and ErrBusy; the caller retries the rest later. The caller may
// reuse pkts as soon as Transmit returns. Transmit sends on session 0;
// TransmitSession on another.
func (d *Device) Transmit(pkts [][]byte) (int, error) {
	return d.TransmitSession(0, pkts)
}

// TransmitSession is Transmit on session n: the packets go out on wire id
// Config.Session + n (the base as FollowSession follows it), as the MBIM
// session id of their NDP or their QMAP mux id. With TXAggregate one
// aggregate carries several sessions: a mux id per QMAP frame, an NDP per
// session in an NTB (up to ntb.MaxWriterNDPs; a packet of one session
// more closes the NTB, counted in TxAggClosedPackets). It fails with
// ErrSession, taking nothing, when
// the wire id would pass 255 or the format is raw IP and n is not 0.
func (d *Device) TransmitSession(n uint8, pkts [][]byte) (int, error) {
	t := &d.tx
	b, err := t.begin(false, n)
	if err != nil {
		return 0, err
	}
	for b.taken < len(pkts) && b.err == nil {
		p := pkts[b.taken]
		if !t.admit(len(p), b.mtu) || t.copyPacket(&b, p) != txAgain {
			b.taken++
		}
	}
	return t.end(&b)
}

// queueLocked queues xs, copy and zero-copy elements, on the uplink. On
// failure the buffers go back to the free list, the slots are released,
// and their packets are counted as aborted (they were already taken from
// the caller).
func (t *txPath) queueLocked(xs []mhi.Transfer) error {
	d := t.d
	defer func() { t.xfers = xs[:0] }()
	if len(xs) == 0 {
		return nil
	}
	// ErrDoorbell: the elements are queued (the next doorbell covers them).
	if qerr := d.ul.Queue(xs); qerr != nil && !errors.Is(qerr, mhi.ErrDoorbell) {
		for _, x := range xs {
			if x.Cookie&zcCookie != 0 {
				d.c.txAborted.Add(1)
				t.zc.releaseLocked(int(x.Cookie & 0xFFFF))
				continue
			}
			b := &t.bufs[x.Cookie]
			d.c.txAborted.Add(uint64(b.pkts))
			b.pkts, b.bytes = 0, 0
			t.free = append(t.free, int(x.Cookie))
		}
		return fmt.Errorf("mhinet: transmit: %w", qerr)
	}
	queued, copied := 0, 0
	for _, x := range xs {
		if x.Cookie&zcCookie != 0 {
			queued++
			continue
		}
		t.inFlight++
		queued += t.bufs[x.Cookie].pkts
		copied += t.bufs[x.Cookie].pkts
	}
	d.c.txQueued.Add(uint64(queued))
	d.c.txCopied.Add(uint64(copied))
	maxStore(&d.c.txInFlightHigh, uint64(t.inFlight))
	return nil
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
	defer t.wake()
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

// TransmitReady returns a channel that receives a value when the uplink
// may take packets again after ErrBusy: a completion freed a transmit
// buffer or ring element, the modem released zero-copy slots, SetMTU
// ended, or the device went down. Values are coalesced (at most one
// waits) and may predate the ErrBusy they answer: after one, call again
// and, on ErrBusy, wait again. It lets a caller sleep until completions
// come instead of polling.
func (d *Device) TransmitReady() <-chan struct{} { return d.tx.ready }

// TransmitReadySession is TransmitReady with a channel of session n's
// own, so that the writers of several sessions (one tun.Bridge each)
// waiting after ErrBusy are all woken: every wake signals every session's
// channel. The channel is made on the first call for n and kept.
func (d *Device) TransmitReadySession(n uint8) <-chan struct{} {
	t := &d.tx
	t.readyMu.Lock()
	defer t.readyMu.Unlock()
	if c := t.sessionReady[n]; c != nil {
		return c
	}
	c := make(chan struct{}, 1)
	t.sessionReady[n] = c
	var list []chan struct{}
	if old := t.readyList.Load(); old != nil {
		list = append(list, *old...)
	}
	list = append(list, c)
	t.readyList.Store(&list)
	return c
}

// SessionWire returns the wire id session n goes out on now (the base
// plus n), or ErrSession as TransmitSession would fail.
func (d *Device) SessionWire(n uint8) (uint8, error) {
	w, ok := d.framer.wire(n)
	if !ok {
		return 0, fmt.Errorf("mhinet: session %d (base %d, %v): %w", n, d.framer.base(), d.cfg.Format, ErrSession)
	}
	return w, nil
}

// wake tells a caller waiting on TransmitReady to try again; it never
// blocks.
func (t *txPath) wake() {
	select {
	case t.ready <- struct{}{}:
	default:
	}
	if list := t.readyList.Load(); list != nil {
		for _, c := range *list {
			select {
			case c <- struct{}{}:
			default:
			}
		}
	}
}
