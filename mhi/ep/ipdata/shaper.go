package ipdata

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"time"
	"unsafe"

	"github.com/gomhi/gomhi/mhi/ep"
	"github.com/gomhi/gomhi/mhi/proto/lend"
	"github.com/gomhi/gomhi/mhi/wire"
)

// A slow consumer in the modem: one flow shaped to a rate (like an htb
// class), every other flow at full speed.
//
// MHI completes uplink elements in ring order, so the modem cannot leave
// one element incomplete without stalling the whole channel. The shaped
// flow's packets therefore wait in a queue of the modem's own, and the
// ring element is completed at once. What waits in the queue depends on
// the buffer:
//
//   - An ordinary transmit buffer must be free when its element completes:
//     the modem copies the packet into its queue memory.
//   - A buffer the host has lent (a zero-copy slot of the lend.Region)
//     may be read later: the modem queues only its address and reads the
//     packet from host memory when the shaper sends it, then writes the
//     slot to the release ring. Until then the slot stays pinned, as a
//     vhost-net zero-copy buffer stays pinned while its skb waits in htb.
//
// The queue holds at most ShapeConfig.Queue packets; beyond that the modem
// drops (tail drop, counted in DroppedShaped) and releases a lent slot at
// once.
//
// The shaper is a goroutine of the device whose pipe queued the first
// waiting packet: it starts with that packet, and Device.Close stops it
// and waits for it. Packets a closed device's pipe left in the queue are
// dropped (DroppedShaped); an Function attached to a later device starts a
// new shaper for it.

// ShapeConfig shapes one uplink flow in the modem. The zero value shapes
// nothing.
type ShapeConfig struct {
	// UDPPort selects the flow: UDP datagrams (IPv4 or IPv6, unfragmented)
	// to this destination port. Zero disables shaping.
	UDPPort uint16
	// Rate is the flow's rate in packets per second (> 0).
	Rate float64
	// Queue is the most packets waiting (default DefaultShapeQueue, at
	// most MaxShapeQueue).
	Queue int
}

// DefaultShapeQueue is the default ShapeConfig.Queue (Linux's default
// transmit queue length).
const DefaultShapeQueue = 1000

// MaxShapeQueue bounds ShapeConfig.Queue (the queue is allocated whole).
const MaxShapeQueue = 1 << 16

// MinShapeRate is the lowest ShapeConfig.Rate: one packet every
// 1e6 s (about 11.6 days), far from overflowing the interval.
const MinShapeRate = 1e-6

// shapedPkt is one packet waiting in the shaper: a copy, or the address of
// a lent slot's packet.
type shapedPkt struct {
	lent bool
	iova uint64
	n    int
	slot int
	tag  uint16
	gen  uint64   // lendGen when queued
	sess uint8    // its session
	buf  []byte   // the copy (reused across packets)
	p    *ep.Pipe // the pipe it arrived on
}

// shaper is the state of the shaped flow and of the lending protocol.
type shaper struct {
	// mu guards the fields below; Receive takes it (under the uplink
	// channel's work), and starts the shaper goroutine under it.
	//
	// lockorder: ep.channel.work → shaper.mu → ep.Device.goMu
	mu      sync.Mutex
	q       []shapedPkt // ring of cfg.Queue entries
	head, n int
	running bool     // a shaper goroutine runs
	owner   *ep.Pipe // the pipe whose device runs it
	wake    chan struct{}

	lend    lend.Region
	lendOn  bool
	lendGen uint64 // bumped when the region is set, cleared or reset
	prod    uint32 // release ring producer index
}

// validShape checks and completes a ShapeConfig.
func validShape(c *ShapeConfig) error {
	if c.UDPPort == 0 {
		return nil
	}
	if c.Queue == 0 {
		c.Queue = DefaultShapeQueue
	}
	if !(c.Rate >= MinShapeRate) {
		return fmt.Errorf("shape rate %v packets/s (want at least %v)", c.Rate, MinShapeRate)
	}
	if c.Queue < 1 || c.Queue > MaxShapeQueue {
		return fmt.Errorf("shape queue of %d packets (want 1…%d)", c.Queue, MaxShapeQueue)
	}
	return nil
}

// SetLendRegion tells the modem which host buffers are lent zero-copy
// slots and where their release ring is (the harness forwards the host's
// mhinet.Device.ZeroCopyRegion). Releases start at index 0 of the ring. It fails with
// wire.ErrConfig for an inconsistent region.
func (f *Function) SetLendRegion(r lend.Region) error {
	if r.Slots < 1 || r.Slots > 0xFFFF || r.SlotSize < 1 || r.Headroom < 0 || r.Headroom >= r.SlotSize ||
		r.RingEntries < r.Slots || r.RingEntries&(r.RingEntries-1) != 0 ||
		r.TagIOVA%4 != 0 || r.ProdIOVA%4 != 0 || r.ConsIOVA%4 != 0 || r.RingIOVA%4 != 0 {
		return fmt.Errorf("ipdata: lend region %+v: %w", r, wire.ErrConfig)
	}
	s := &f.shp
	s.mu.Lock()
	s.lend, s.lendOn, s.prod = r, true, 0
	s.lendGen++
	s.mu.Unlock()
	return nil
}

// ClearLendRegion forgets the lend region: every buffer is treated as an
// ordinary one again.
func (f *Function) ClearLendRegion() {
	s := &f.shp
	s.mu.Lock()
	s.lendOn = false
	s.lendGen++
	s.mu.Unlock()
}

// PipeStateChanged implements PipeObserver. When the uplink channel is
// reset the host takes every lent slot back (their elements come back
// aborted): the modem forgets the lend region and drops the lent packets
// still in its queue without reading them (DroppedShaped). Lent packets
// queued before a ClearLendRegion or SetLendRegion are dropped the same
// way.
func (f *Function) PipeStateChanged(_ *ep.Pipe, dir wire.Direction, st wire.ChannelState) {
	if dir == wire.Uplink && st == wire.ChannelDisabled {
		f.ClearLendRegion()
	}
}

// lentSlot reports whether the transfer being delivered on p's uplink is
// one element inside a lent slot, and which. It runs on the uplink worker,
// which owns the gathered elements.
func (f *Function) lentSlot(p *ep.Pipe) (base uint64, slot int, tag uint16, gen uint64, ok bool) {
	s := &f.shp
	s.mu.Lock()
	r, on, gen := s.lend, s.lendOn, s.lendGen
	s.mu.Unlock()
	if !on {
		return 0, 0, 0, 0, false
	}
	el, ok := p.ULElement()
	if !ok {
		return 0, 0, 0, 0, false
	}
	ptr, n := el.Ptr, uint64(el.Length())
	if ptr < r.DataIOVA {
		return 0, 0, 0, 0, false
	}
	off := ptr - r.DataIOVA
	size := uint64(r.SlotSize)
	if off/size >= uint64(r.Slots) || off%size+n > size {
		return 0, 0, 0, 0, false
	}
	slot = int(off / size)
	w, err := f.hostMem(p).Load32(r.TagIOVA + 4*uint64(slot))
	if err != nil {
		f.st.lendErrors.Add(1)
		return 0, 0, 0, 0, false
	}
	return ptr, slot, uint16(w), gen, true
}

func (f *Function) hostMem(p *ep.Pipe) ep.HostMemory { return p.HostMemory() }

// release writes slot's release to the host's ring.
func (f *Function) release(p *ep.Pipe, slot int, tag uint16, gen uint64) {
	s := &f.shp
	mem := f.hostMem(p)
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.lendOn || gen != s.lendGen {
		return
	}
	r := s.lend
	cons, err := mem.Load32(r.ConsIOVA)
	if err == nil && s.prod-cons >= uint32(r.RingEntries) {
		err = fmt.Errorf("release ring full (prod %d, cons %d)", s.prod, cons)
	}
	if err == nil {
		err = mem.Store32(r.RingIOVA+4*uint64(s.prod&uint32(r.RingEntries-1)), uint32(slot)|uint32(tag)<<16)
	}
	if err == nil {
		err = mem.Store32(r.ProdIOVA, s.prod+1)
	}
	if err != nil {
		f.st.lendErrors.Add(1)
		return
	}
	s.prod++
	f.st.lentReleased.Add(1)
}

// shapedFlow reports whether pkt is a UDP datagram of the shaped flow.
func (f *Function) shapedFlow(pkt []byte) bool {
	port := f.cfg.Shape.UDPPort
	if port == 0 || len(pkt) < 1 {
		return false
	}
	var l4 int
	switch pkt[0] >> 4 {
	case 4:
		if len(pkt) < 20 || pkt[9] != 17 || binary.BigEndian.Uint16(pkt[6:])&0x3FFF != 0 {
			return false
		}
		l4 = int(pkt[0]&0x0F) * 4
	case 6:
		if len(pkt) < 40 || pkt[6] != 17 {
			return false
		}
		l4 = 40
	default:
		return false
	}
	return l4 >= 20 && len(pkt) >= l4+8 && binary.BigEndian.Uint16(pkt[l4+2:]) == port
}

// enqueueShaped queues a shaped packet of session sess found in the
// transfer being received; lent says pkt lies in a lent slot starting at iova base (the
// transfer's first byte). It reports whether the modem now holds the
// slot.
func (f *Function) enqueueShaped(p *ep.Pipe, transfer, pkt []byte, sess uint8, lent bool, base uint64, slot int, tag uint16, gen uint64) (held bool) {
	s := &f.shp
	f.countUL(sess, len(pkt))
	s.mu.Lock()
	if s.q == nil {
		s.q = make([]shapedPkt, f.cfg.Shape.Queue)
		s.wake = make(chan struct{}, 1)
	}
	if s.n >= len(s.q) {
		s.mu.Unlock()
		f.drop(sess, &f.st.droppedShaped, 1)
		return false
	}
	if !s.running {
		// Start (or restart, on a new device) the shaper, tied to p's
		// device; a closed device takes nothing.
		if !p.Go(func(ctx context.Context) { f.runShaper(ctx, p) }) {
			s.mu.Unlock()
			f.drop(sess, &f.st.droppedShaped, 1)
			return false
		}
		s.running, s.owner = true, p
	}
	e := &s.q[(s.head+s.n)%len(s.q)]
	e.lent, e.n, e.p, e.sess = lent, len(pkt), p, sess
	if lent {
		off := uint64(uintptr(unsafe.Pointer(unsafe.SliceData(pkt))) - uintptr(unsafe.Pointer(unsafe.SliceData(transfer))))
		e.iova, e.slot, e.tag, e.gen = base+off, slot, tag, gen
		f.st.lentHeld.Add(1)
	} else {
		if cap(e.buf) < len(pkt) {
			e.buf = make([]byte, len(pkt), max(len(pkt), 2048))
		}
		e.buf = e.buf[:len(pkt)]
		copy(e.buf, pkt)
	}
	s.n++
	f.st.shapedQueued.Add(1)
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
	return lent
}

// runShaper sends the shaped flow's packets at its rate until p's device
// closes (ctx is the device's); it runs as one of the device's goroutines.
func (f *Function) runShaper(ctx context.Context, p *ep.Pipe) {
	s := &f.shp
	defer f.shaperExit(p)
	interval := time.Duration(float64(time.Second) / f.cfg.Shape.Rate)
	var scratch, reply, own []byte
	// The bucket starts empty: the first packet leaves one interval after
	// the shaper starts; after an idle spell, at once.
	next := time.Now().Add(interval)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		if ctx.Err() != nil {
			return // shaperExit drops what is left
		}
		s.mu.Lock()
		n := s.n
		s.mu.Unlock()
		if n == 0 {
			select {
			case <-s.wake:
				continue
			case <-ctx.Done():
				return
			}
		}
		if now := time.Now(); next.Before(now) {
			next = now
		} else {
			timer.Reset(next.Sub(now))
			select {
			case <-timer.C:
			case <-ctx.Done():
				return
			}
		}
		next = next.Add(interval)
		s.mu.Lock()
		e := s.q[s.head]
		if !e.lent {
			// Take the copy's buffer and leave ours in the slot, which
			// the uplink worker may refill as soon as the lock is free.
			s.q[s.head].buf, own = own, e.buf
		}
		s.q[s.head].p = nil
		s.head = (s.head + 1) % len(s.q)
		s.n--
		stale := e.lent && e.gen != s.lendGen
		s.mu.Unlock()
		f.st.shapedQueued.Add(-1)
		var pkt []byte
		if !e.lent {
			pkt = own[:e.n]
		}
		if stale {
			f.st.lentHeld.Add(-1)
			f.drop(e.sess, &f.st.droppedShaped, 1)
			continue
		}
		if e.lent {
			// The modem reads the packet only now, from the host's slot.
			if cap(scratch) < e.n {
				scratch = make([]byte, e.n, max(e.n, 65536))
			}
			pkt = scratch[:e.n]
			err := f.hostMem(e.p).ReadAt(pkt, e.iova)
			f.st.lentHeld.Add(-1)
			f.release(e.p, e.slot, e.tag, e.gen)
			if err != nil {
				f.st.lendErrors.Add(1)
				f.drop(e.sess, &f.st.droppedShaped, 1)
				continue
			}
		}
		f.st.shapedSent.Add(1)
		f.deliverShaped(ctx, e.p, pkt, e.sess, &reply)
	}
}

// shaperExit ends the shaper of p's device: the packets that device's
// pipe left in the queue are dropped (DroppedShaped; lent slots are not
// released: the device is gone), and if packets of another device's pipe
// wait, a shaper starts for it.
func (f *Function) shaperExit(p *ep.Pipe) {
	s := &f.shp
	s.mu.Lock()
	defer s.mu.Unlock()
	s.running, s.owner = false, nil
	for gone := p; gone != nil; {
		// Keep, in order, the entries of other pipes (swapping entries,
		// so that every copy buffer stays owned by one entry).
		kept := 0
		for i := range s.n {
			e := &s.q[(s.head+i)%len(s.q)]
			if e.p == gone {
				if e.lent {
					f.st.lentHeld.Add(-1)
				}
				f.st.shapedQueued.Add(-1)
				f.drop(e.sess, &f.st.droppedShaped, 1)
				e.p = nil
				continue
			}
			if kept != i {
				k := &s.q[(s.head+kept)%len(s.q)]
				*k, *e = *e, *k
			}
			kept++
		}
		s.n = kept
		gone = nil
		if s.n == 0 {
			break
		}
		next := s.q[s.head].p
		if next.Go(func(ctx context.Context) { f.runShaper(ctx, next) }) {
			s.running, s.owner = true, next
			break
		}
		gone = next
	}
}

// deliverShaped does with a shaped packet of session sess what the mode
// says, as Receive does with other packets (which it counted in ULPackets
// already), on its session.
func (f *Function) deliverShaped(ctx context.Context, p *ep.Pipe, pkt []byte, sess uint8, reply *[]byte) {
	switch f.Mode() {
	case ModeGenerator:
		f.drop(sess, &f.st.droppedSunk, 1)
		return
	case ModeResponder:
		if *reply == nil {
			*reply = make([]byte, 1<<16)
		}
		n, ok := answer(*reply, pkt)
		if !ok {
			f.drop(sess, &f.st.droppedNotAnswered, 1)
			return
		}
		f.st.answered.Add(1)
		pkt = (*reply)[:n]
	}
	if err := f.add(ctx, p, pkt, sess, noUL); err != nil {
		f.drop(sess, &f.st.droppedAborted, 1)
	}
}
