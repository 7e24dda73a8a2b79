package mhinet

import (
	"fmt"
	"sync"
	"time"

	"github.com/gomhi/gomhi/mhi"
	"github.com/gomhi/gomhi/mhinet/ntb"
	"github.com/gomhi/gomhi/mhinet/qmap"
)

// txBuffer is one transmit buffer in DMA memory and what it carries.
type txBuffer struct {
	dma   mhi.DMABuffer
	pkts  int
	bytes int
}

// txPath is the transmit side: a set of DMA buffers, each carrying one
// packet or one aggregate per uplink element, recycled on completion.
type txPath struct {
	d *Device

	mu       sync.Mutex
	cond     *sync.Cond
	bufs     []txBuffer
	free     []int
	inFlight int
	size     int
	mem      mhi.DMAMemory
	xfers    []mhi.Transfer
	ntbw     ntb.Writer
	qmapw    qmap.Writer
	seq      uint16
}

func (t *txPath) init(d *Device) error {
	t.d = d
	t.cond = sync.NewCond(&t.mu)
	t.xfers = make([]mhi.Transfer, 0, d.ul.Config().Elements)
	return nil
}

// overhead is the framing a single packet needs beyond its own bytes.
const overhead = 64

func (t *txPath) bufferSize(mtu int) int {
	size := t.d.cfg.TXBufferSize
	if size == 0 {
		size = mtu + overhead
		if t.aggregating() {
			size = max(size, 16<<10)
		}
	}
	return min(size, mhi.MaxTRELength)
}

func (t *txPath) aggregating() bool {
	return t.d.cfg.TXAggregate && t.d.cfg.Format != FormatRawIP
}

// alloc allocates one transmit buffer per usable uplink element.
func (t *txPath) alloc(mem mhi.DMAMemory, mtu int) error {
	size := t.bufferSize(mtu)
	if size < mtu+overhead && !t.aggregating() && size < mtu {
		return fmt.Errorf("mhinet: transmit buffers of %d bytes cannot hold a %d-byte packet", size, mtu)
	}
	n := t.d.ul.Config().Elements - 1
	t.mu.Lock()
	defer t.mu.Unlock()
	t.mem, t.size = mem, size
	for i := 0; i < n; i++ {
		b, err := mem.Alloc(size, 64)
		if err != nil {
			t.freeLocked()
			return fmt.Errorf("mhinet: transmit buffers of %d × %d bytes: %w", n, size, err)
		}
		t.bufs = append(t.bufs, txBuffer{dma: b})
		t.free = append(t.free, i)
	}
	return nil
}

func (t *txPath) release() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.freeLocked()
}

func (t *txPath) freeLocked() {
	for _, b := range t.bufs {
		_ = t.mem.Free(b.dma)
	}
	t.bufs, t.free, t.inFlight = nil, nil, 0
}

// resize waits for the uplink to complete what it holds and reallocates
// the buffers for a new MTU.
func (t *txPath) resize(mem mhi.DMAMemory, mtu int) error {
	deadline := time.Now().Add(5 * time.Second)
	t.mu.Lock()
	for t.inFlight > 0 {
		if time.Now().After(deadline) {
			n := t.inFlight
			t.mu.Unlock()
			return fmt.Errorf("mhinet: MTU change: %d transmit buffers still with the device: %w", n, mhi.ErrTimeout)
		}
		t.mu.Unlock()
		time.Sleep(time.Millisecond)
		t.mu.Lock()
	}
	t.freeLocked()
	t.mu.Unlock()
	return t.alloc(mem, mtu)
}

// Transmit queues packets on the uplink channel, copying each into a
// transmit buffer (one packet per element, or with TXAggregate as many as
// fit per aggregate), and rings the doorbell once. It returns the number of
// packets it took from pkts: queued, or rejected and counted (empty, longer
// than the MTU). When buffers or ring elements run out it returns what it
// took so far and ErrBusy; the caller retries the rest later.
func (d *Device) Transmit(pkts [][]byte) (int, error) {
	if !d.IsUp() {
		return 0, ErrDown
	}
	mtu := d.MTU()
	t := &d.tx
	t.mu.Lock()
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
		if len(xs) >= room || len(t.free) == 0 {
			err = ErrBusy
			break
		}
		bi := t.free[len(t.free)-1]
		b := &t.bufs[bi]
		n, used, ferr := t.fill(b, pkts[taken:], mtu)
		if ferr != nil {
			err = ferr
			break
		}
		t.free = t.free[:len(t.free)-1]
		xs = append(xs, mhi.Transfer{IOVA: b.dma.IOVA, Len: n, Flags: mhi.FlagEOT, Cookie: uint64(bi)})
		taken += used
	}
	if len(xs) > 0 {
		if qerr := d.ul.Queue(xs); qerr != nil {
			// Give the buffers back; nothing was queued.
			for _, x := range xs {
				t.free = append(t.free, int(x.Cookie))
			}
			t.mu.Unlock()
			return 0, fmt.Errorf("mhinet: transmit: %w", qerr)
		}
		t.inFlight += len(xs)
		queued := 0
		for _, x := range xs {
			queued += t.bufs[x.Cookie].pkts
		}
		d.c.txQueued.Add(uint64(queued))
		maxStore(&d.c.txInFlightHigh, uint64(t.inFlight))
	}
	t.xfers = xs[:0]
	t.mu.Unlock()
	if err == ErrBusy {
		d.c.txBusy.Add(1)
	}
	return taken, err
}

// fill encodes packets from pkts (the first is valid and fits the MTU) into
// b: one packet, or with aggregation as many valid ones as fit. It returns
// the element length and how many entries of pkts it used.
func (t *txPath) fill(b *txBuffer, pkts [][]byte, mtu int) (n, used int, err error) {
	buf := b.dma.Bytes
	d := t.d
	b.pkts, b.bytes = 0, 0
	if !t.aggregating() {
		p := pkts[0]
		switch d.cfg.Format {
		case FormatRawIP:
			n = copy(buf, p)
		case FormatMBIM:
			if n, err = ntb.EncodeTX(buf, p, d.cfg.Session, t.seq); err != nil {
				return 0, 0, fmt.Errorf("mhinet: transmit: %w", err)
			}
			t.seq++
		case FormatQMAP:
			if err = t.qmapw.Reset(buf, qmap.Config{Mux: d.cfg.Session, MaxPackets: 1}); err == nil {
				err = t.qmapw.Add(p)
			}
			if err != nil {
				return 0, 0, fmt.Errorf("mhinet: transmit: %w", err)
			}
			n = t.qmapw.Finish()
		}
		b.pkts, b.bytes = 1, len(p)
		return n, 1, nil
	}
	switch d.cfg.Format {
	case FormatMBIM:
		if err = t.ntbw.Reset(buf, ntb.Config{Session: d.cfg.Session}); err != nil {
			return 0, 0, fmt.Errorf("mhinet: transmit: %w", err)
		}
		t.ntbw.SetSequence(t.seq)
		t.seq++
	case FormatQMAP:
		if err = t.qmapw.Reset(buf, qmap.Config{Mux: d.cfg.Session}); err != nil {
			return 0, 0, fmt.Errorf("mhinet: transmit: %w", err)
		}
	}
	for used < len(pkts) {
		p := pkts[used]
		if len(p) == 0 || len(p) > mtu {
			break // the caller counts it
		}
		if d.cfg.Format == FormatMBIM {
			err = t.ntbw.Add(p)
		} else {
			err = t.qmapw.Add(p)
		}
		if err != nil {
			if b.pkts == 0 {
				return 0, 0, fmt.Errorf("mhinet: transmit: packet of %d bytes: %w", len(p), err)
			}
			break // full: this aggregate is done
		}
		b.pkts++
		b.bytes += len(p)
		used++
	}
	if d.cfg.Format == FormatMBIM {
		n = t.ntbw.Finish()
	} else {
		n = t.qmapw.Finish()
	}
	d.c.txAggregatedPackets.Add(uint64(b.pkts))
	return n, used, nil
}

// onComplete recycles a transmit buffer when the device has consumed it.
func (t *txPath) onComplete(c mhi.Completion) {
	d := t.d
	t.mu.Lock()
	defer t.mu.Unlock()
	if c.Cookie >= uint64(len(t.bufs)) {
		d.c.rxStaleCompletion.Add(1)
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
