package mhinet

import (
	"errors"
	"sync/atomic"

	"github.com/gomhi/gomhi/mhi"
	"github.com/gomhi/gomhi/mhinet/qmap"
)

// fragment is one filled element of a transfer that arrived over several.
type fragment struct {
	buf *rxBuffer
	n   int
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
		for _, x := range xs {
			d.pool.bufs[x.Cookie].release()
		}
		d.log.Debug("refill", "err", err)
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
	last := c.End && c.Code != mhi.CCOverflow
	if c.Code == mhi.CCOverflow {
		d.c.rxOverflows.Add(1)
	}
	switch {
	case d.skipping:
		// The rest of a transfer whose head was dropped.
		b.release()
		d.skipping = !last
	case last && len(d.chain) == 0:
		d.deliver(b, b.data[:c.Len])
	default:
		d.chain = append(d.chain, fragment{b, c.Len})
		d.chainLen += c.Len
		if d.chainLen > d.cfg.MaxReassembly {
			d.dropChain(&d.c.rxChainTooLong)
			d.skipping = !last
		} else if last {
			d.reassemble()
		}
	}
	d.chainMu.Unlock()
	d.refillRing(false)
}

// dropChain releases the fragments of an incomplete transfer and counts it.
func (d *Device) dropChain(reason *atomic.Uint64) {
	if len(d.chain) == 0 {
		return
	}
	reason.Add(1)
	for _, f := range d.chain {
		f.buf.release()
	}
	d.chain, d.chainLen = d.chain[:0], 0
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
	for _, f := range d.chain {
		n += copy(r.data[n:], f.buf.data[:f.n])
		f.buf.release()
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
	batch := d.batch[:0]
	switch d.cfg.Format {
	case FormatRawIP:
		switch {
		case len(data) == 0:
			d.c.rxEmpty.Add(1)
		case data[0]>>4 != 4 && data[0]>>4 != 6:
			d.c.rxBadPacket.Add(1)
		default:
			batch = append(batch, Packet{Data: data[:len(data):len(data)], buf: b})
		}
	case FormatMBIM:
		d.parseMu.Lock()
		_, _ = d.ntbp.Parse(data, func(dg []byte, sid uint8) {
			batch = append(batch, Packet{Data: dg, Mux: sid, buf: b})
		})
		d.parseMu.Unlock()
	case FormatQMAP:
		d.parseMu.Lock()
		_, _ = d.qmapp.Parse(data, func(p qmap.Packet) {
			batch = append(batch, Packet{Data: p.Data, Mux: p.Mux, buf: b})
		})
		d.parseMu.Unlock()
	}
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
