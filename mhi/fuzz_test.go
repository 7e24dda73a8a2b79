package mhi

import (
	"encoding/binary"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhi/wire"
)

// fuzzTransport is a transport without a device: registers read 0 and
// writes vanish; DMA memory comes from a bump allocator at a fixed base,
// so that a seed can name real IOVAs.
type fuzzTransport struct{ next uint64 }

const fuzzDMABase = 0x10_0000

func (t *fuzzTransport) Read32(uint32) (uint32, error) { return 0, nil }
func (t *fuzzTransport) Write32(uint32, uint32) error  { return nil }
func (t *fuzzTransport) Alloc(size, align int) (DMABuffer, error) {
	if t.next == 0 {
		t.next = fuzzDMABase
	}
	a := uint64(max(align, 64))
	iova := (t.next + a - 1) &^ (a - 1)
	t.next = iova + uint64(size)
	return DMABuffer{IOVA: iova, Bytes: make([]byte, size)}, nil
}
func (t *fuzzTransport) Free(DMABuffer) error          { return nil }
func (t *fuzzTransport) Vectors() int                  { return 3 }
func (t *fuzzTransport) SetInterruptHandler(func(int)) {}
func (t *fuzzTransport) Reset() error                  { return nil }
func (t *fuzzTransport) Close() error                  { return nil }

// fuzzConfig: channels 0/1 on event ring 0, 2/3 on event ring 1.
func fuzzConfig() wire.ControllerConfig {
	return wire.ControllerConfig{
		MaxChannels: 8,
		Timeout:     time.Second,
		Channels: []wire.ChannelConfig{
			{Num: 0, Name: "A", Elements: 8, EventRing: 0, Dir: wire.Uplink},
			{Num: 1, Name: "A", Elements: 8, EventRing: 0, Dir: wire.Downlink},
			{Num: 2, Name: "B", Elements: 4, EventRing: 1, Dir: wire.Uplink},
			{Num: 3, Name: "B", Elements: 4, EventRing: 1, Dir: wire.Downlink},
		},
		EventRings:      []wire.EventRingConfig{{Elements: 16, Vector: 1}, {Elements: 8, Vector: 2}},
		CommandElements: 4,
	}
}

// Pointers in fuzz input whose top byte is fuzzPtrMagic name a ring element
// instead of an address: byte 1 is the channel (0xFF: the command ring),
// byte 0 the element index. This lets the fuzzer reach valid pointers.
const fuzzPtrMagic = 0xFE

// fuzzHarness is a controller in M0 with its channels enabled and buffers
// queued, driven synchronously.
type fuzzHarness struct {
	c      *Controller
	bufLen map[uint64]int // queued cookie -> buffer length
	next   uint64         // next cookie
	got    int            // completions delivered without error
	errs   []string
}

func newFuzzHarness(t testing.TB) *fuzzHarness {
	c, err := NewController(&fuzzTransport{}, fuzzConfig(), Options{PollInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.allocate(); err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	c.setPMLocked(pmM0)
	c.devState = wire.StateM0
	c.mu.Unlock()
	for _, er := range c.eventRings {
		if err := er.arm(); err != nil {
			t.Fatal(err)
		}
	}
	h := &fuzzHarness{c: c, bufLen: map[uint64]int{}}
	for _, ch := range c.channels {
		if ch == nil {
			continue
		}
		ch.mu.Lock()
		ch.ring.reset()
		ch.writeContext(wire.ChannelEnabled, true)
		ch.state, ch.wanted, ch.handler = wire.ChannelEnabled, true, h.handle
		ch.mu.Unlock()
		h.fill(t, ch)
	}
	return h
}

// fill queues buffers on ch until its ring is full; buffer n of the
// channel is 64+n bytes long.
func (h *fuzzHarness) fill(t testing.TB, ch *Channel) {
	var xs []Transfer
	for i := 0; i < ch.Free(); i++ {
		n := 64 + int(h.next%7)
		xs = append(xs, Transfer{IOVA: 0x9000_0000 + h.next*0x100, Len: n, Flags: FlagEOT, Cookie: h.next})
		h.bufLen[h.next] = n
		h.next++
	}
	if len(xs) > 0 {
		if err := ch.Queue(xs); err != nil {
			t.Fatalf("queue: %v", err)
		}
	}
}

func (h *fuzzHarness) handle(c Completion) {
	n, ok := h.bufLen[c.Cookie]
	if !ok {
		h.errs = append(h.errs, fmt.Sprintf("completion for cookie %d, which is not queued: %+v", c.Cookie, c))
		return
	}
	delete(h.bufLen, c.Cookie)
	switch {
	case c.Err != nil && !errors.Is(c.Err, ErrBadDevice) && !errors.Is(c.Err, wire.ErrAborted):
		h.errs = append(h.errs, fmt.Sprintf("completion error %v", c.Err))
	case c.Err == nil && c.Code != wire.CCEOT && c.Code != wire.CCEOB && c.Code != wire.CCOverflow:
		h.errs = append(h.errs, fmt.Sprintf("completion with code %s and no error", c.Code))
	case c.Len < 0 || c.Len > n:
		h.errs = append(h.errs, fmt.Sprintf("completion of %d bytes for a %d-byte buffer", c.Len, n))
	}
	if c.Err == nil {
		h.got++
	}
}

// resolve turns a magic pointer into the IOVA of the element it names.
func (h *fuzzHarness) resolve(p uint64) uint64 {
	if p>>56 != fuzzPtrMagic {
		return p
	}
	num, idx := uint8(p>>8), int(uint8(p))
	if num == 0xFF {
		return h.c.cmd.iova(idx % h.c.cmd.n)
	}
	if int(num) < len(h.c.channels) && h.c.channels[num] != nil {
		r := &h.c.channels[num].ring
		return r.iova(idx % r.n)
	}
	return p
}

// round writes up to one ring's worth of events from data into event ring
// ring at the host's read pointer, stores a device read pointer chosen by
// sel (an index past the events, or the raw value rawRP), and processes.
func (h *fuzzHarness) round(ring int, sel byte, rawRP uint64, events []byte) {
	er := h.c.eventRings[ring%len(h.c.eventRings)]
	i := er.rp
	for len(events) >= wire.ElementSize {
		ev := wire.ParseElement(events)
		events = events[wire.ElementSize:]
		ev.Ptr = h.resolve(ev.Ptr)
		er.put(i, ev)
		i = er.next(i)
	}
	rp := er.iova(i)
	switch {
	case sel&0xC0 == 0x40:
		rp = er.iova((er.rp + int(sel&0x3F)) % er.n) // any index
	case sel&0xC0 == 0x80:
		rp = rawRP // anything at all
	}
	wire.Store64(er.ctx(), wire.CtxRP, rp)
	er.process(sel&1 == 1)
}

func (h *fuzzHarness) check(t testing.TB) {
	for _, e := range h.errs {
		t.Error(e)
	}
	for _, er := range h.c.eventRings {
		if er.rp < 0 || er.rp >= er.n || er.wp != (er.rp+er.n-1)%er.n {
			t.Errorf("event ring %d: host rp %d wp %d of %d", er.index, er.rp, er.wp, er.n)
		}
	}
	queued := 0
	for _, ch := range h.c.channels {
		if ch == nil {
			continue
		}
		ch.mu.Lock()
		if ch.ring.rp < 0 || ch.ring.rp >= ch.ring.n || ch.ring.wp < 0 || ch.ring.wp >= ch.ring.n {
			t.Errorf("channel %d: rp %d wp %d of %d", ch.cfg.Num, ch.ring.rp, ch.ring.wp, ch.ring.n)
		}
		queued += ch.ring.used()
		ch.mu.Unlock()
		_ = ch.Status() // reads device-written context words
	}
	if queued != len(h.bufLen) {
		t.Errorf("%d elements queued in the rings, %d buffers not completed", queued, len(h.bufLen))
	}
}

// FuzzEventRing feeds device-written memory to the host's event processing:
// the fuzzer's bytes become event ring contents (transfer, command, state
// and EE events with any pointer, code, length and channel), the device's
// read pointer of the ring, and channel context words. The host must not
// panic, must never complete a buffer that is not queued (or complete it
// twice, or with more bytes than it holds), and must keep its ring indices
// consistent.
//
// Input: rounds of [ring|flags byte][rp selector][8-byte raw rp]
// [event count c][c events of 16 bytes][channel context word]; events
// whose pointer starts with 0xFE name a ring element (see fuzzPtrMagic).
func FuzzEventRing(f *testing.F) {
	le := binary.LittleEndian
	ev := func(e wire.Element) []byte {
		var b [wire.ElementSize]byte
		e.Put(b[:])
		return b[:]
	}
	magic := func(ch, idx uint8) uint64 { return fuzzPtrMagic<<56 | uint64(ch)<<8 | uint64(idx) }
	round := func(ring, sel byte, raw uint64, evs ...[]byte) []byte {
		b := []byte{ring, sel}
		b = le.AppendUint64(b, raw)
		b = append(b, byte(len(evs)))
		for _, e := range evs {
			b = append(b, e...)
		}
		return le.AppendUint32(b, 0)
	}
	f.Add(round(0, 0, 0, ev(wire.TransferEvent(magic(1, 0), wire.CCEOT, 10, 1))))
	f.Add(round(0, 0, 0, ev(wire.TransferEvent(magic(1, 2), wire.CCOverflow, 0xFFFF, 1)), ev(wire.TransferEvent(magic(0, 0), wire.CCEOB, 1, 0))))
	f.Add(round(1, 0, 0, ev(wire.TransferEvent(magic(3, 1), wire.CCEOT, 5, 3)), ev(wire.TransferEvent(magic(3, 1), wire.CCEOT, 5, 3))))
	f.Add(round(0, 0, 0, ev(wire.TransferEvent(magic(3, 0), wire.CCEOT, 5, 3)), ev(wire.TransferEvent(magic(1, 7), wire.CCBadTRE, 5, 1))))
	f.Add(round(0, 0x80, 0xdeadbeef, ev(wire.StateChangeEvent(wire.StateSysErr))))
	f.Add(round(0, 0x45, 0, ev(wire.CommandCompletionEvent(magic(0xFF, 0), wire.CCSuccess)), ev(wire.EEEvent(wire.EEPBL)), ev(wire.StateChangeEvent(wire.StateM0))))
	f.Add(append(round(0, 0, 0, ev(wire.TransferEvent(magic(1, 0), wire.CCDBMode, 0, 1))), round(1, 1, 0, ev(wire.Element{Dword1: 0x99 << 16}))...))
	f.Fuzz(func(t *testing.T, data []byte) {
		h := newFuzzHarness(t)
		for r := 0; r < 8 && len(data) >= 11; r++ {
			ring, sel, raw, n := data[0], data[1], le.Uint64(data[2:]), int(data[10])
			data = data[11:]
			n = min(n, 15, len(data)/wire.ElementSize)
			events := data[:n*wire.ElementSize]
			data = data[n*wire.ElementSize:]
			if len(data) >= 4 {
				// A device-written channel context word: the read pointer's
				// low half of channel ring%4 (the host must not trust it).
				if ch := h.c.channels[ring%4]; ch != nil {
					wire.Store32(ch.ctx(), wire.CtxRP, le.Uint32(data))
				}
				data = data[4:]
			}
			h.round(int(ring>>4), sel, raw, events)
			h.check(t)
			for _, ch := range h.c.channels {
				if ch != nil {
					h.fill(t, ch)
				}
			}
		}
		h.c.release()
	})
}

// The fuzz harness itself must see completions, or FuzzEventRing would
// check nothing: a valid event completes its buffer once, a repeat of it
// completes nothing.
func TestFuzzHarnessDeliversCompletions(t *testing.T) {
	h := newFuzzHarness(t)
	var b [2 * wire.ElementSize]byte
	ev := wire.TransferEvent(fuzzPtrMagic<<56|1<<8|1, wire.CCEOT, 10, 1) // channel 1, element 1: completes 0 and 1
	ev.Put(b[:])
	ev.Put(b[wire.ElementSize:])
	h.round(0, 0, 0, b[:])
	h.check(t)
	if h.got != 2 || h.c.stats.BadEventPtr.Load() != 1 {
		t.Fatalf("%d completions, %d bad pointers; want 2 and 1", h.got, h.c.stats.BadEventPtr.Load())
	}
}
