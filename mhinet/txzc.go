package mhinet

import (
	"errors"
	"fmt"
	"time"

	"github.com/gomhi/gomhi/mhi"
	"github.com/gomhi/gomhi/mhi/proto/lend"
	"github.com/gomhi/gomhi/mhi/wire"
)

// Zero-copy transmit.
//
// With Config.TXZeroCopy the device owns a set of pinned DMA slots, one per
// usable uplink element. A caller takes one with TXBuffer, writes a packet
// into its Bytes, and hands it over with TransmitZC: the slot itself goes
// on the ring (the framing header is written into headroom in front of the
// packet), nothing is copied. The modem may keep reading a slot after it
// has completed the ring element (a shaped flow holds its packets in the
// modem's queue); it says when it is done through the release ring, a
// small area of host memory it writes (see lend.Region and docs/NETWORK.md).
// Only then does the slot come back: to the free list, or with
// TXZeroCopyNotify to the caller through TXReleased.
//
// Once half the uplink ring's elements are pending as zero-copy slots,
// TransmitZC copies further packets into the pre-mapped copy buffers
// instead (and gives their slots back at once), so a flow whose slots the
// modem holds cannot take every slot and stall the others. With
// TXZeroCopyNoFallback it does not, and TXBuffer runs dry instead.

// Errors of the zero-copy API.
var (
	// ErrZeroCopyOff: the device was not configured with TXZeroCopy.
	ErrZeroCopyOff = errors.New("mhinet: zero-copy transmit not enabled")
	// ErrNotOwner: a ZCBuffer passed to TransmitZC or PutTXBuffer that the caller
	// does not own (already handed over, freed, or from an earlier Up).
	ErrNotOwner = errors.New("mhinet: zero-copy buffer not owned by the caller")
)

// zcCookie marks an uplink element carrying a zero-copy slot. The cookie
// also holds the slot's lending tag (bits 32–47), the packet length (bits
// 16–31) and the slot index (bits 0–15).
const zcCookie = 1 << 63

// Slot states.
const (
	zcFree   uint8 = iota // on the free list
	zcCaller              // the caller's (TXBuffer, or released with notify)
	zcDevice              // handed to the modem, not yet released
)

// ZCBuffer is a pinned transmit slot in DMA memory. Get one with
// Device.TXBuffer, write a packet into Bytes, set its length with SetLen
// and pass it to Device.TransmitZC. The caller must not touch it again
// until it is released (see Config.TXZeroCopyNotify).
type ZCBuffer struct {
	slot  int
	epoch uint32 // the allocation it belongs to
	tag   uint16 // the current lending
	n     int
	frame []byte // the whole slot: headroom, packet, padding
	data  []byte // the packet area (MTU bytes)
	iova  uint64
}

// Bytes returns the packet area: MTU bytes the caller writes the packet
// into.
func (b *ZCBuffer) Bytes() []byte { return b.data }

// SetLen sets the length of the packet in Bytes.
func (b *ZCBuffer) SetLen(n int) { b.n = n }

// Len returns the length set by SetLen.
func (b *ZCBuffer) Len() int { return b.n }

// Offsets in the control area.
const (
	zcProdOff = 0
	zcConsOff = 4
	zcTagOff  = 8
)

// zcPath is the zero-copy state of a txPath; guarded by txPath.mu.
type zcPath struct {
	d        *Device
	on       bool
	fallback bool
	notify   chan *ZCBuffer

	epoch    uint32
	data     mhi.DMABuffer
	ctl      mhi.DMABuffer
	slots    []ZCBuffer
	state    []uint8
	free     []int
	headroom int
	slotSize int
	ringN    int
	ringOff  int
	cons     uint32
	pending  int
	out      []*ZCBuffer // released slots to hand back after the lock
	poll     *time.Timer // reaps while slots are pending
	polling  bool
}

// ZCReapInterval is how often the release ring is polled while zero-copy
// slots are pending. It is also read on every completion and on every
// TXBuffer and TransmitZC call, so the poll matters only when the modem
// releases a slot while the host is otherwise idle.
const ZCReapInterval = time.Millisecond

func (z *zcPath) init(d *Device) error {
	z.d = d
	z.on = d.cfg.TXZeroCopy
	z.fallback = !d.cfg.TXZeroCopyNoFallback
	if !z.on {
		return nil
	}
	headroom, err := d.framer.zcHeadroom()
	if err != nil {
		return err
	}
	z.headroom = headroom
	n := d.ul.Config().Elements - 1
	if n > 0xFFFF {
		n = 0xFFFF
	}
	if d.cfg.TXZeroCopyNotify {
		z.notify = make(chan *ZCBuffer, n)
	}
	z.out = make([]*ZCBuffer, 0, n)
	z.poll = time.AfterFunc(time.Hour, z.onPoll)
	z.poll.Stop()
	return nil
}

// onPoll reaps the release ring while slots are pending.
func (z *zcPath) onPoll() {
	t := &z.d.tx
	t.mu.Lock()
	z.polling = false
	z.reapLocked()
	t.mu.Unlock()
	z.handBack()
	t.wake()
}

// armPollLocked keeps the poll running while slots are pending.
func (z *zcPath) armPollLocked() {
	if z.pending > 0 && !z.polling && z.poll != nil {
		z.polling = true
		z.poll.Reset(ZCReapInterval)
	}
}

// alloc allocates the slots and the control area; t.mu is held.
func (z *zcPath) alloc(mem mhi.DMAMemory, mtu int) error {
	if !z.on {
		return nil
	}
	n := cap(z.out)
	z.slotSize = (z.headroom + mtu + 8 + 63) &^ 63
	ringN := 1
	for ringN < n {
		ringN <<= 1
	}
	z.ringN = ringN
	z.ringOff = (zcTagOff + 4*n + 63) &^ 63
	var err error
	if z.data, err = mem.Alloc(n*z.slotSize, 64); err != nil {
		return fmt.Errorf("mhinet: zero-copy slots of %d × %d bytes: %w", n, z.slotSize, err)
	}
	if z.ctl, err = mem.Alloc(z.ringOff+4*ringN, 64); err != nil {
		_ = mem.Free(z.data)
		z.data = mhi.DMABuffer{}
		return fmt.Errorf("mhinet: zero-copy release ring: %w", err)
	}
	z.epoch++
	z.slots = make([]ZCBuffer, n)
	z.state = make([]uint8, n)
	z.free = make([]int, 0, n)
	for i := range z.slots {
		f := z.data.Bytes[i*z.slotSize : (i+1)*z.slotSize : (i+1)*z.slotSize]
		z.slots[i] = ZCBuffer{slot: i, epoch: z.epoch, frame: f, data: f[z.headroom : z.headroom+mtu],
			iova: z.data.IOVA + uint64(i*z.slotSize)}
		z.free = append(z.free, n-1-i)
	}
	z.cons, z.pending = 0, 0
	return nil
}

// freeLocked forgets every slot (the channel has been reset). Released
// buffers not yet handed back, and those still waiting in the notify
// channel, belong to this allocation: they are discarded, so that the
// channel has room for every slot of the next one.
func (z *zcPath) freeLocked(mem mhi.DMAMemory) {
	if z.data.Bytes != nil {
		_ = mem.Free(z.data)
		_ = mem.Free(z.ctl)
	}
	z.data, z.ctl = mhi.DMABuffer{}, mhi.DMABuffer{}
	if z.poll != nil {
		z.poll.Stop()
		z.polling = false
	}
	z.slots, z.state, z.free, z.pending = nil, nil, nil, 0
	z.d.c.txZCPending.Store(0)
	clear(z.out)
	z.out = z.out[:0]
	for drained := false; z.notify != nil && !drained; {
		select {
		case <-z.notify:
		default:
			drained = true
		}
	}
}

// ZeroCopyRegion returns where the zero-copy slots and the release ring
// are, for the modem (in the model, the harness forwards it to the mock
// modem, as a control message would). It fails with ErrZeroCopyOff or
// ErrDown.
func (d *Device) ZeroCopyRegion() (lend.Region, error) {
	t := &d.tx
	t.mu.Lock()
	defer t.mu.Unlock()
	z := &t.zc
	if !z.on {
		return lend.Region{}, ErrZeroCopyOff
	}
	if z.slots == nil {
		return lend.Region{}, ErrDown
	}
	return lend.Region{DataIOVA: z.data.IOVA, SlotSize: z.slotSize, Slots: len(z.slots), Headroom: z.headroom,
		TagIOVA: z.ctl.IOVA + zcTagOff, ProdIOVA: z.ctl.IOVA + zcProdOff, ConsIOVA: z.ctl.IOVA + zcConsOff,
		RingIOVA: z.ctl.IOVA + uint64(z.ringOff), RingEntries: z.ringN}, nil
}

// TXReleased returns the channel on which released zero-copy buffers come
// back to the caller when Config.TXZeroCopyNotify is set (nil otherwise).
// It has room for every slot, so the device never blocks on it; the
// caller owns what it receives and reuses it with TransmitZC or gives it
// back with Device.PutTXBuffer. The channel stays the same for the life of
// the device. Down and SetMTU free every slot: buffers of the old slots
// still waiting in the channel are then discarded (they could not be used
// any more: ErrNotOwner), so every buffer is released exactly once within
// one allocation of the slots, and the channel always has room for every
// slot of the current one.
func (d *Device) TXReleased() <-chan *ZCBuffer { return d.tx.zc.notify }

// TXBuffer takes a free zero-copy slot. It fails with ErrZeroCopyOff,
// ErrDown, or ErrBusy when every slot is with the caller or the modem
// (retry after releases) or while SetMTU rebuilds the slots.
func (d *Device) TXBuffer() (*ZCBuffer, error) {
	t := &d.tx
	t.mu.Lock()
	z := &t.zc
	if !z.on {
		t.mu.Unlock()
		return nil, ErrZeroCopyOff
	}
	if z.slots == nil {
		t.mu.Unlock()
		return nil, ErrDown
	}
	if t.resizing {
		// SetMTU is about to free every slot.
		t.mu.Unlock()
		d.c.txZCBusy.Add(1)
		return nil, ErrBusy
	}
	z.reapLocked()
	if len(z.free) == 0 {
		t.mu.Unlock()
		d.c.txZCBusy.Add(1)
		z.handBack()
		return nil, ErrBusy
	}
	i := z.free[len(z.free)-1]
	z.free = z.free[:len(z.free)-1]
	z.state[i] = zcCaller
	b := &z.slots[i]
	b.n = 0
	t.mu.Unlock()
	z.handBack()
	return b, nil
}

// PutTXBuffer gives a zero-copy buffer the caller owns back to the
// device's free list. It fails with ErrNotOwner for a buffer the caller
// does not own.
func (d *Device) PutTXBuffer(b *ZCBuffer) error {
	t := &d.tx
	t.mu.Lock()
	defer t.mu.Unlock()
	z := &t.zc
	if !z.owns(b) || z.state[b.slot] != zcCaller {
		return fmt.Errorf("mhinet: free of zero-copy slot %d: %w", b.slot, ErrNotOwner)
	}
	z.state[b.slot] = zcFree
	z.free = append(z.free, b.slot)
	return nil
}

// owns reports whether b is one of the current slots.
func (z *zcPath) owns(b *ZCBuffer) bool {
	return b != nil && z.slots != nil && b.epoch == z.epoch && b.slot >= 0 && b.slot < len(z.slots) && &z.slots[b.slot] == b
}

// TransmitZC hands zero-copy buffers to the uplink without copying them:
// each becomes one element, framed in its headroom. While half the uplink
// ring (Elements/2) is already pending as zero-copy slots, further packets
// are copied into the pre-mapped copy buffers (aggregated with
// TXAggregate) and their slots released at once, unless
// TXZeroCopyNoFallback. Packets that are empty or longer than the MTU are
// counted (TxEmpty, TxTooLong) and their slots released. It returns how
// many buffers it took; every taken buffer is released exactly once (see
// TXReleased). When elements or copy buffers run out it returns what it
// took so far and ErrBusy; the rest stay the caller's.
func (d *Device) TransmitZC(bufs []*ZCBuffer) (int, error) {
	t := &d.tx
	z := &t.zc
	b, err := t.begin(true, 0)
	if err != nil {
		return 0, err
	}
	z.reapLocked()
	for b.taken < len(bufs) && b.err == nil {
		zb := bufs[b.taken]
		if !z.owns(zb) || z.state[zb.slot] != zcCaller {
			b.err = fmt.Errorf("mhinet: transmit of zero-copy buffer %d: %w", b.taken, ErrNotOwner)
			break
		}
		switch {
		case !t.admit(zb.n, min(b.mtu, len(zb.data))):
			z.releaseLocked(zb.slot)
			b.taken++
		case z.fallback && z.pending >= z.half():
			t.copySlot(&b, zb)
		case t.lendSlot(&b, zb):
			b.taken++
		}
	}
	return t.end(&b)
}

// copySlot sends zb's packet by copy (see copyPacket) and, once it is
// taken, gives the slot back at once.
func (t *txPath) copySlot(b *txBatch, zb *ZCBuffer) {
	switch t.copyPacket(b, zb.data[:zb.n]) {
	case txAgain:
		return
	case txSent:
		t.d.c.txZCFallback.Add(1)
	}
	t.zc.releaseLocked(zb.slot)
	b.taken++
}

// lendSlot frames zb in its headroom and puts the slot itself in b,
// after the open aggregate (what waits there goes first). It reports
// whether zb was taken; if not, b.err says why.
func (t *txPath) lendSlot(b *txBatch, zb *ZCBuffer) bool {
	if t.agg.open >= 0 {
		if len(b.xs) >= b.room {
			b.err = ErrBusy
			return false
		}
		b.xs = t.closeAgg(b.xs, &t.d.c.txAggClosedFlush)
	}
	if len(b.xs) >= b.room {
		b.err = ErrBusy
		return false
	}
	n, err := t.f.zcFrame(zb.frame, zb.n)
	if err != nil {
		b.err = err
		return false
	}
	t.zc.lend(zb)
	b.xs = append(b.xs, mhi.Transfer{IOVA: zb.iova, Len: n, Flags: mhi.FlagEOT,
		Cookie: zcCookie | uint64(zb.tag)<<32 | uint64(zb.n)<<16 | uint64(zb.slot)})
	return true
}

func (z *zcPath) half() int { return z.d.ul.Config().Elements / 2 }

// lend marks b as the modem's and publishes its tag.
func (z *zcPath) lend(b *ZCBuffer) {
	b.tag++
	if b.tag == 0 {
		b.tag = 1
	}
	wire.Store32(z.ctl.Bytes, zcTagOff+4*b.slot, uint32(b.tag))
	z.state[b.slot] = zcDevice
	z.pending++
	d := z.d
	d.c.txZeroCopy.Add(1)
	d.c.txZCPending.Store(uint64(z.pending))
	maxStore(&d.c.txZCPendingHigh, uint64(z.pending))
}

// releaseLocked ends the lending (or the caller's hold) of slot i: the
// slot goes to the free list, or with notify to the caller.
func (z *zcPath) releaseLocked(i int) {
	if z.state[i] == zcDevice {
		z.pending--
		z.d.c.txZCPending.Store(uint64(z.pending))
	}
	if z.notify != nil {
		z.state[i] = zcCaller
		z.out = append(z.out, &z.slots[i])
		return
	}
	z.state[i] = zcFree
	z.free = append(z.free, i)
}

// handBack sends the released buffers to the caller (outside t.mu, but
// the channel never blocks: it has room for every slot).
func (z *zcPath) handBack() {
	if z.notify == nil {
		return
	}
	t := &z.d.tx
	t.mu.Lock()
	for _, b := range z.out {
		select {
		case z.notify <- b:
		default: // cannot happen: one entry per slot at most
			z.d.c.txZCBadRelease.Add(1)
		}
	}
	clear(z.out)
	z.out = z.out[:0]
	t.mu.Unlock()
}

// reapLocked reads the modem's release ring. Everything in it is
// untrusted: indexes are bounded, and an entry counts only if it names a
// slot the modem holds under its current tag.
func (z *zcPath) reapLocked() {
	if z.ctl.Bytes == nil {
		return
	}
	defer z.armPollLocked()
	prod := wire.Load32(z.ctl.Bytes, zcProdOff)
	avail := prod - z.cons
	if avail == 0 {
		return
	}
	if avail > uint32(z.ringN) {
		// The modem claims more than the ring holds: skip to its index.
		z.d.c.txZCBadRelease.Add(1)
		z.cons = prod - uint32(z.ringN)
		avail = uint32(z.ringN)
	}
	for range avail {
		e := wire.Load32(z.ctl.Bytes, z.ringOff+4*int(z.cons&uint32(z.ringN-1)))
		z.cons++
		slot, tag := int(e&0xFFFF), uint16(e>>16)
		if slot >= len(z.slots) || z.state[slot] != zcDevice || z.slots[slot].tag != tag {
			z.d.c.txZCBadRelease.Add(1)
			continue
		}
		z.d.c.txZCReleased.Add(1)
		z.releaseLocked(slot)
	}
	wire.Store32(z.ctl.Bytes, zcConsOff, z.cons)
}

// onComplete accounts for a completed zero-copy element; the slot itself
// comes back through the release ring (or at once if the element was
// aborted: the channel was reset and the modem dropped what it held).
func (z *zcPath) onComplete(c mhi.Completion) {
	d := z.d
	t := &d.tx
	t.mu.Lock()
	slot, n, tag := int(c.Cookie&0xFFFF), int(c.Cookie>>16&0xFFFF), uint16(c.Cookie>>32)
	if c.Err != nil {
		d.c.txAborted.Add(1)
		if slot < len(z.slots) && z.state[slot] == zcDevice && z.slots[slot].tag == tag {
			z.releaseLocked(slot)
		}
	} else {
		d.c.txPackets.Add(1)
		d.c.txBytes.Add(uint64(n))
		d.c.txTransfers.Add(1)
	}
	z.reapLocked()
	t.mu.Unlock()
	z.handBack()
	t.wake()
}
