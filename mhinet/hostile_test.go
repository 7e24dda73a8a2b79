package mhinet_test

import (
	"encoding/binary"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhi/ep/ipdata"
	"github.com/gomhi/gomhi/mhi/proto/framing"
	"github.com/gomhi/gomhi/mhi/proto/ntb"
	"github.com/gomhi/gomhi/mhi/proto/qmap"
	"github.com/gomhi/gomhi/mhi/testenv/poll"
	"github.com/gomhi/gomhi/mhi/wire"
	"github.com/gomhi/gomhi/mhinet"
)

// The network device's part of the malicious-device suite: a modem that
// lies in what it writes (events, lengths, aggregates) must never make the
// host panic, hang, lose a packet without a named counter, or keep receive
// buffers it has no use for. Every case checks conservation: transfers
// sent = transfers delivered (RxTransfers) + transfers dropped (RxDropped,
// by name), and the good packets all arrive.

// chainDropMsg is the warning logged (rate-limited) for a dropped chain.
const chainDropMsg = "receive chain too long: dropped, buffers back to the pool"

// setLen sets an event's transfer length.
func setLen(ev *wire.Element, n uint32) { ev.Dword0 = ev.Dword0&^0xFFFF | n&0xFFFF }

// setCode sets an event's completion code.
func setCode(ev *wire.Element, c wire.CompletionCode) {
	ev.Dword0 = ev.Dword0&^0xFF000000 | uint32(c)<<24
}

// tinyOverflows makes every OVERFLOW event claim 1 byte.
func tinyOverflows(ev *wire.Element, _ wire.Element) {
	if ev.Code() == wire.CCOverflow {
		setLen(ev, 1)
	}
}

// checkConserved fails unless every transfer sent is delivered or dropped
// under a name, and the modem wrote every transfer it was given.
func checkConserved(t *testing.T, r *hostileRig, s mhinet.Stats, sent uint64) {
	t.Helper()
	if got := s.RxTransfers + s.RxDropped; got != sent {
		t.Errorf("conservation: %d transfers sent, %d delivered + %d dropped = %d (%s)",
			sent, s.RxTransfers, s.RxDropped, got, hostileString(s))
	}
	if ds := r.tr.dev.Stats(); ds.DLTransfers != sent {
		t.Errorf("the modem wrote %d downlink transfers, want %d", ds.DLTransfers, sent)
	}
}

// stormCase is one overflow storm: a transfer of elements full-MRU
// elements whose OVERFLOW events claim 1 byte (tiny) or the whole buffer.
type stormCase struct {
	name     string
	mru      int
	elements int
	tiny     bool
	cfg      mhinet.Config
	limit    int // expected chain limit
}

// runStorm sends one storm transfer between honest raw IP packets and
// checks the chain is dropped, counted, its buffers back, and traffic on.
func runStorm(t *testing.T, tc stormCase) {
	tc.cfg.MRU = tc.mru
	r := newHostileRig(t, shortTransferModel, ipdata.Config{}, tc.cfg)
	if tc.tiny {
		r.onDL(tinyOverflows)
	}
	const before, after = 20, 200
	storm := make([]byte, tc.elements*tc.mru)
	storm[0] = 0x45
	sent := append(rawPackets(before, 100, 0), storm)
	done := r.pushAsync(append(sent, rawPackets(after, 100, before)...)...)
	ok := r.rx.waitFor(t, before+after)
	if err := <-done; err != nil {
		t.Errorf("modem: %v", err)
	}
	s := r.quiesce(t)
	if !ok || t.Failed() {
		t.Fatalf("traffic did not resume after the storm: %s", hostileString(s))
	}
	t.Logf("after the storm: %s", hostileString(s))
	if s.RxMaxChain != tc.limit {
		t.Errorf("chain limit %d, want %d", s.RxMaxChain, tc.limit)
	}
	wantBytes := uint64(tc.elements-1)*uint64(tc.mru) + uint64(tc.mru)
	if tc.tiny {
		wantBytes = uint64(tc.elements-1) + uint64(tc.mru) // the EOT element is honest
	}
	if s.RxChainTooLong != 1 || s.RxDroppedFragments != uint64(tc.elements) || s.RxDroppedBytes != wantBytes {
		t.Errorf("chain too long %d (want 1), dropped fragments %d (want %d), bytes %d (want %d)",
			s.RxChainTooLong, s.RxDroppedFragments, tc.elements, s.RxDroppedBytes, wantBytes)
	}
	if s.RxPackets != before+after || r.rx.bad != 0 || len(r.rx.seqs) != before+after {
		t.Errorf("delivered %d packets (%d bad, %d distinct), want %d", s.RxPackets, r.rx.bad, len(r.rx.seqs), before+after)
	}
	// At most half the pool in the chain leaves the ring's 127 buffers to
	// the refill: it never starved.
	if s.RefillStarved != 0 {
		t.Errorf("refill starved %d times during the storm", s.RefillStarved)
	}
	checkConserved(t, r, s, before+1+after)
	checkPoolWhole(t, s)
	if n := r.warns.count(chainDropMsg); n != 1 {
		t.Errorf("%d warnings for the dropped chain, want 1", n)
	}
}

// Finding 2 (issue 11): tiny OVERFLOW fragments captured the whole receive
// pool. A chain was bounded by bytes only, so 254 one-byte OVERFLOW
// completions pinned every buffer; the refill starved and only Down/Up
// recovered. Now a chain is bounded by elements as well (at most half the
// pool), dropped when it passes the bound, its buffers back at once.
func TestOverflowStormOfTinyFragments(t *testing.T) {
	for _, tc := range []stormCase{
		// 254 buffers (twice the 127 usable elements): 300 elements
		// are more than the pool.
		{name: "mru1024", mru: 1024, elements: 300, tiny: true, limit: 127},
		{name: "mru32768", mru: 32768, elements: 300, tiny: true, limit: 256<<10/32768 + 2},
	} {
		t.Run(tc.name, func(t *testing.T) { runStorm(t, tc) })
	}
}

func TestHostileReceive(t *testing.T) {
	t.Run("overflow storm of full fragments longer than the pool", func(t *testing.T) {
		// Honest-looking OVERFLOW elements within a generous byte bound:
		// 300 × 2 KiB = 600 KiB < 1 MiB, but 300 buffers > the pool.
		runStorm(t, stormCase{mru: 2048, elements: 300, cfg: mhinet.Config{MaxReassembly: 1 << 20}, limit: 127})
	})
	t.Run("overflow storm with a configured element bound", func(t *testing.T) {
		runStorm(t, stormCase{mru: 4096, elements: 40, tiny: true, cfg: mhinet.Config{MaxChainElements: 16}, limit: 16})
	})
	t.Run("overflow storms in a burst warn once", testStormBurst)
	t.Run("chain that never ends", testChainNeverEnds)
	t.Run("EOT with length 0", testEmptyTransfers)
	t.Run("EOT length past the buffer", testLengthPastBuffer)
	t.Run("NTB16 with lying headers", func(t *testing.T) { testLyingNTB(t, false) })
	t.Run("NTB32 with lying headers", func(t *testing.T) { testLyingNTB(t, true) })
	t.Run("QMAP with lying lengths", testLyingQMAP)
	t.Run("completion replayed for a returned buffer", func(t *testing.T) { testBadPointer(t, true) })
	t.Run("completion naming another channel's element", func(t *testing.T) { testBadPointer(t, false) })
	t.Run("TX completion for an element never queued", func(t *testing.T) { testTXBadPointer(t, false) })
	t.Run("TX completion replayed", func(t *testing.T) { testTXBadPointer(t, true) })
}

// testStormBurst: three storms back to back are three drops and one
// warning (rate-limited), and the traffic after them arrives.
func testStormBurst(t *testing.T) {
	r := newHostileRig(t, shortTransferModel, ipdata.Config{}, mhinet.Config{MRU: 1024})
	r.onDL(tinyOverflows)
	storm := make([]byte, 200*1024)
	var sent [][]byte
	for range 3 {
		sent = append(sent, storm)
	}
	sent = append(sent, rawPackets(50, 100, 0)...)
	done := r.pushAsync(sent...)
	r.rx.waitFor(t, 50)
	if err := <-done; err != nil {
		t.Error(err)
	}
	s := r.quiesce(t)
	if s.RxChainTooLong != 3 || s.RxPackets != 50 || r.rx.bad != 0 {
		t.Errorf("%s", hostileString(s))
	}
	if n := r.warns.count(chainDropMsg); n != 1 {
		t.Errorf("%d warnings for 3 dropped chains within a second, want 1", n)
	}
	checkConserved(t, r, s, uint64(len(sent)))
	checkPoolWhole(t, s)
}

// testChainNeverEnds: the modem sends three OVERFLOW elements and then
// nothing, while the receiver holds every other buffer, so no buffer is
// posted behind the chain and the channel reset returns none. Down must
// still release the chain (it used to stay pinned, and leak into the first
// transfer after the next Up).
func testChainNeverEnds(t *testing.T) {
	r := newHostileRig(t, shortTransferModel, ipdata.Config{}, mhinet.Config{MRU: 1024, PoolBuffers: 8})
	r.rx.mu.Lock()
	r.rx.keep = true
	r.rx.mu.Unlock()
	r.pushAll(t, rawPackets(5, 100, 0)...)
	r.rx.waitFor(t, 5)
	r.onDL(func(ev *wire.Element, _ wire.Element) {
		setCode(ev, wire.CCOverflow) // even the last element: the transfer never ends
		setLen(ev, 1)
	})
	r.pushAll(t, make([]byte, 3*1024))
	// Wait for the whole state, not for the element count alone: Stats
	// reads the posted count before the element counter, so a snapshot
	// taken while the last completion is handled can count 8 elements
	// and still 1 buffer posted.
	s := waitStats(t, r.dev, "setup: 5 held + 3 chained of 8 buffers, none posted, chain limit 4", func(s mhinet.Stats) bool {
		return s.RxElements == 8 && s.RxPosted == 0 && s.PoolFree == 0 && s.RxMaxChain == 4
	})
	r.onDL(nil)
	if err := r.dev.Down(); err != nil {
		t.Fatal(err)
	}
	r.rx.mu.Lock()
	held := r.rx.held
	r.rx.held, r.rx.keep = nil, false
	r.rx.mu.Unlock()
	for _, p := range held {
		p.Release()
	}
	s = r.dev.Stats()
	if s.RxChainAborted != 1 || s.RxDroppedFragments != 3 {
		t.Errorf("after Down: chain aborted %d (want 1), dropped fragments %d (want 3)", s.RxChainAborted, s.RxDroppedFragments)
	}
	if inUse := r.tr.slab.InUse(); inUse != r.inUse0 {
		t.Errorf("after Down and every packet released, %d bytes of DMA memory in use, %d before Up: the chain leaked",
			inUse, r.inUse0)
	}
	// After Up, nothing of the old chain may meet the new transfers.
	if err := r.dev.Up(); err != nil {
		t.Fatal(err)
	}
	r.pushAll(t, rawPackets(10, 100, 100)...)
	r.rx.waitFor(t, 15)
	s = r.quiesce(t)
	if r.rx.bad != 0 || s.RxPackets != 15 || s.RxErrors != 0 {
		t.Errorf("after Up: %d bad packets, %s", r.rx.bad, hostileString(s))
	}
	checkConserved(t, r, s, 5+1+10)
}

// testEmptyTransfers: zero-length transfers, sent as such and made by
// rewriting honest events to length 0, are counted (raw: RxEmpty; MBIM:
// the NTB parser's Short) and the rest arrives.
func testEmptyTransfers(t *testing.T) {
	for _, f := range []struct {
		name   string
		model  string
		format framing.Format
		empty  func(mhinet.Stats) uint64
	}{
		{"raw", shortTransferModel, framing.RawIP, func(s mhinet.Stats) uint64 { return s.RxEmpty }},
		{"mbim", "telit-fn990", framing.NTB16, func(s mhinet.Stats) uint64 { return s.NTB.Short }},
	} {
		t.Run(f.name, func(t *testing.T) {
			r := newHostileRig(t, f.model, ipdata.Config{Format: f.format}, mhinet.Config{Format: f.format, MRU: 4096})
			var n atomic.Int32
			r.onDL(func(ev *wire.Element, _ wire.Element) {
				if ev.Code() == wire.CCEOT && n.Add(1)%4 == 0 {
					setLen(ev, 0) // every fourth transfer claims 0 bytes
				}
			})
			pkts := rawPackets(40, 200, 0)
			var sent [][]byte
			for i, p := range pkts {
				if f.format == framing.NTB16 {
					p = aggregate(t, framing.NTB16, 4096, pkts[i:i+1])[0]
				}
				sent = append(sent, p)
				if i%10 == 0 {
					sent = append(sent, nil) // an empty transfer
				}
			}
			r.pushAll(t, sent...)
			s := r.quiesce(t)
			// 44 transfers: 4 empty, and of the 44 events every fourth
			// (11) rewritten to 0 — some of them on the empty ones.
			var wantEmpty, good uint64
			k := 0
			for _, d := range sent {
				k++
				if len(d) == 0 || k%4 == 0 {
					wantEmpty++
				} else {
					good++
				}
			}
			if f.empty(s) != wantEmpty || s.RxPackets != good || r.rx.bad != 0 {
				t.Errorf("empty %d (want %d), delivered %d (want %d), bad %d: %s", f.empty(s), wantEmpty, s.RxPackets, good,
					r.rx.bad, hostileString(s))
			}
			if s.RxErrors != wantEmpty {
				t.Errorf("RxErrors %d, want %d", s.RxErrors, wantEmpty)
			}
			checkConserved(t, r, s, uint64(len(sent)))
			checkPoolWhole(t, s)
		})
	}
}

// testLengthPastBuffer: an EOT that claims more bytes than the buffer
// holds is clamped by the core (LengthClamped); the NTB's own block length
// then bounds the parse, and every packet arrives intact.
func testLengthPastBuffer(t *testing.T) {
	r := newHostileRig(t, "telit-fn990", ipdata.Config{Format: framing.NTB16}, mhinet.Config{Format: framing.NTB16, MRU: 4096})
	r.onDL(func(ev *wire.Element, _ wire.Element) { setLen(ev, 0xFFFF) })
	pkts := rawPackets(60, 300, 0)
	aggs := aggregate(t, framing.NTB16, 4000, pkts)
	r.pushAll(t, aggs...)
	r.rx.waitFor(t, len(pkts))
	s := r.quiesce(t)
	if cs := r.ctrl.Stats(); cs.LengthClamped != uint64(len(aggs)) {
		t.Errorf("LengthClamped %d, want %d", cs.LengthClamped, len(aggs))
	}
	if s.RxPackets != uint64(len(pkts)) || r.rx.bad != 0 || s.RxErrors != 0 {
		t.Errorf("%d bad: %s", r.rx.bad, hostileString(s))
	}
	checkConserved(t, r, s, uint64(len(aggs)))
}

// ntbLayout is where an NTB's fields are.
type ntbLayout struct {
	nthLen, blockLenOff, ndpIdxOff, ndpHdr, nextOff, entLen, wide int
}

// layoutOf returns the layout of an NTB16, or with ntb32 an NTB32.
func layoutOf(ntb32 bool) ntbLayout {
	if !ntb32 {
		return ntbLayout{ntb.NTH16Len, 8, 10, ntb.NDP16HeaderLen, 6, ntb.NDP16EntryLen, 2}
	}
	return ntbLayout{ntb.NTH32Len, 8, 12, ntb.NDP32HeaderLen, 8, ntb.NDP32EntryLen, 4}
}

func (l ntbLayout) get(b []byte, off int) int {
	if l.wide == 2 {
		return int(binary.LittleEndian.Uint16(b[off:]))
	}
	return int(binary.LittleEndian.Uint32(b[off:]))
}

func (l ntbLayout) put(b []byte, off, v int) {
	if l.wide == 2 {
		binary.LittleEndian.PutUint16(b[off:], uint16(v))
		return
	}
	binary.LittleEndian.PutUint32(b[off:], uint32(v))
}

// testLyingNTB sends NTBs whose NTH, NDP and datagram pointers lie, each
// among honest ones: every lie is counted under its reason, the datagrams
// the structure still allows arrive, nothing else.
func testLyingNTB(t *testing.T, ntb32 bool) {
	l := layoutOf(ntb32)
	type lie struct {
		name    string
		apply   func(b []byte) // b is a valid NTB of 3 datagrams
		counter func(ntb.Stats) uint64
		good    int // datagrams still delivered
	}
	ndp := func(b []byte) int { return l.get(b, l.ndpIdxOff) }
	entry := func(b []byte, k int) int { return ndp(b) + l.ndpHdr + k*l.entLen }
	lies := []lie{
		{"NDP index past the block", func(b []byte) { l.put(b, l.ndpIdxOff, len(b)) },
			func(s ntb.Stats) uint64 { return s.BadNDPIndex }, 0},
		{"NDP index inside the NTH", func(b []byte) { l.put(b, l.ndpIdxOff, 4) },
			func(s ntb.Stats) uint64 { return s.BadNDPIndex }, 0},
		{"block length past the transfer", func(b []byte) { l.put(b, l.blockLenOff, len(b)+64) },
			func(s ntb.Stats) uint64 { return s.BadBlockLength }, 0},
		{"block length 0", func(b []byte) { l.put(b, l.blockLenOff, 0) },
			func(s ntb.Stats) uint64 { return s.BadBlockLength }, 0},
		{"datagram index past the block", func(b []byte) { l.put(b, entry(b, 0), len(b)+8) },
			func(s ntb.Stats) uint64 { return s.DatagramOutOfBounds }, 2},
		{"datagram length past the block", func(b []byte) { l.put(b, entry(b, 1)+l.wide, 0xFFFF) },
			func(s ntb.Stats) uint64 { return s.DatagramOutOfBounds }, 2},
		{"datagram inside the NTH", func(b []byte) { l.put(b, entry(b, 2), 2) },
			func(s ntb.Stats) uint64 { return s.DatagramOutOfBounds }, 2},
		{"NDP chain loops onto itself", func(b []byte) { l.put(b, ndp(b)+l.nextOff, ndp(b)) },
			func(s ntb.Stats) uint64 { return s.NDPLoop }, 3},
		{"NDP length past the block", func(b []byte) { binary.LittleEndian.PutUint16(b[ndp(b)+4:], 0xFFF0) },
			func(s ntb.Stats) uint64 { return s.BadNDPLength }, 0},
		{"bad signature", func(b []byte) { copy(b, "XXXX") },
			func(s ntb.Stats) uint64 { return s.BadSignature }, 0},
	}
	for _, lc := range lies {
		t.Run(lc.name, func(t *testing.T) {
			r := newHostileRig(t, "telit-fn990", ipdata.Config{Format: framing.NTB16}, mhinet.Config{Format: framing.NTB16, MRU: 8192})
			build := func(seq uint32) []byte {
				buf := make([]byte, 8192)
				var w ntb.Writer
				if err := w.Reset(buf, ntb.Config{NTB32: ntb32}); err != nil {
					t.Fatal(err)
				}
				for i := range 3 {
					if err := w.Add(ipv4(500, seq+uint32(i))); err != nil {
						t.Fatal(err)
					}
				}
				return buf[:w.Finish()]
			}
			var sent [][]byte
			for i := range 10 {
				b := build(uint32(i * 3))
				if i%2 == 1 {
					lc.apply(b)
				}
				sent = append(sent, b)
			}
			r.pushAll(t, sent...)
			s := r.quiesce(t)
			wantPkts := uint64(5*3 + 5*lc.good)
			if got := lc.counter(s.NTB); got != 5 {
				t.Errorf("counter %d, want 5 (NTB stats %+v)", got, s.NTB)
			}
			if s.RxPackets != wantPkts || r.rx.bad != 0 {
				t.Errorf("delivered %d (want %d), bad %d", s.RxPackets, wantPkts, r.rx.bad)
			}
			checkConserved(t, r, s, uint64(len(sent)))
		})
	}
}

// testLyingQMAP sends QMAP aggregates whose MAP headers lie about lengths
// and padding: counted by reason, the frames before the lie delivered.
func testLyingQMAP(t *testing.T) {
	type lie struct {
		name    string
		apply   func(b []byte, second int) // b: 3 frames; second: offset of frame 2
		counter func(qmap.Stats) uint64
		good    int
	}
	lies := []lie{
		{"first frame longer than the aggregate", func(b []byte, _ int) { binary.BigEndian.PutUint16(b[2:], 0xFFF0) },
			func(s qmap.Stats) uint64 { return s.Truncated }, 0},
		{"second frame longer than the aggregate", func(b []byte, o int) { binary.BigEndian.PutUint16(b[o+2:], 0xFFF0) },
			func(s qmap.Stats) uint64 { return s.Truncated }, 1},
		{"zero length", func(b []byte, o int) { binary.BigEndian.PutUint16(b[o+2:], 0) },
			func(s qmap.Stats) uint64 { return s.ZeroLength }, 1},
		{"pad longer than the payload", func(b []byte, o int) {
			binary.BigEndian.PutUint16(b[o+2:], 8)
			b[o] = b[o]&^qmap.PadMask | qmap.PadMask
		}, func(s qmap.Stats) uint64 { return s.BadPad }, 1},
	}
	for _, lc := range lies {
		t.Run(lc.name, func(t *testing.T) {
			r := newHostileRig(t, shortTransferModel, ipdata.Config{}, mhinet.Config{Format: framing.QMAP, MRU: 8192})
			build := func(seq uint32) ([]byte, int) {
				buf := make([]byte, 8192)
				var w qmap.Writer
				if err := w.Reset(buf, qmap.Config{}); err != nil {
					t.Fatal(err)
				}
				second := 0
				for i := range 3 {
					if err := w.Add(ipv4(400, seq+uint32(i))); err != nil {
						t.Fatal(err)
					}
					if i == 0 {
						second = w.Len()
					}
				}
				return buf[:w.Finish()], second
			}
			var sent [][]byte
			for i := range 10 {
				b, second := build(uint32(i * 3))
				if i%2 == 1 {
					lc.apply(b, second)
				}
				sent = append(sent, b)
			}
			r.pushAll(t, sent...)
			s := r.quiesce(t)
			if got := lc.counter(s.QMAP); got != 5 {
				t.Errorf("counter %d, want 5 (QMAP stats %+v)", got, s.QMAP)
			}
			if want := uint64(5*3 + 5*lc.good); s.RxPackets != want || r.rx.bad != 0 {
				t.Errorf("delivered %d (want %d), bad %d", s.RxPackets, want, r.rx.bad)
			}
			checkConserved(t, r, s, uint64(len(sent)))
		})
	}
}

// testBadPointer: the modem's 10th downlink event names, instead of its
// element, the element the 9th completed (replay: a buffer the host already
// took back) or an element of the uplink ring. The core refuses the event
// (BadEventPtr); the element stays queued until the 11th event completes
// it without an event of its own, so its length is unknown: the host drops
// it (RxUnreported) rather than chain it to the next transfer.
func testBadPointer(t *testing.T, replay bool) {
	r := newHostileRig(t, shortTransferModel, ipdata.Config{}, mhinet.Config{MRU: 4096})
	var other uint64
	for _, ch := range r.ctrl.Status().Channels {
		if ch.Num == r.ulNum {
			other = ch.RingBase
		}
	}
	var n atomic.Int32
	var prev uint64
	r.onDL(func(ev *wire.Element, _ wire.Element) {
		if ev.Code() != wire.CCEOT {
			return
		}
		if n.Add(1) == 10 {
			if replay {
				ev.Ptr = prev
			} else {
				ev.Ptr = other
			}
		}
		prev = ev.Ptr
	})
	const sent = 30
	r.pushAll(t, rawPackets(sent, 100, 0)...)
	r.rx.waitFor(t, sent-1)
	s := r.quiesce(t)
	if cs := r.ctrl.Stats(); cs.BadEventPtr != 1 {
		t.Errorf("BadEventPtr %d, want 1", cs.BadEventPtr)
	}
	if s.RxUnreported != 1 || s.RxPackets != sent-1 || r.rx.bad != 0 || s.RxChains != 0 {
		t.Errorf("unreported %d (want 1), delivered %d (want %d), bad %d, chains %d", s.RxUnreported, s.RxPackets, sent-1,
			r.rx.bad, s.RxChains)
	}
	if r.rx.seqs[9] != 0 {
		t.Errorf("the packet whose event was lost was delivered")
	}
	checkConserved(t, r, s, sent)
	checkPoolWhole(t, s)
}

// testTXBadPointer: the modem's first uplink completion names an element
// of the downlink ring (one the uplink never queued) or, replayed, an
// element already completed. The core refuses it (BadEventPtr); the next
// completion completes the element, so every packet transmitted is
// accounted for and the loopback brings each one back.
func testTXBadPointer(t *testing.T, replay bool) {
	r := newHostileRig(t, shortTransferModel, ipdata.Config{}, mhinet.Config{MRU: 4096})
	var dlRing uint64
	for _, ch := range r.ctrl.Status().Channels {
		if ch.Num == r.dlNum {
			dlRing = ch.RingBase
		}
	}
	var n atomic.Int32
	var prev uint64
	r.tr.mem.setHook(func(ev *wire.Element, _ wire.Element) {
		if ev.Channel() != r.ulNum || ev.Code() != wire.CCEOT {
			return
		}
		k := n.Add(1)
		switch {
		case !replay && k == 1:
			ev.Ptr = dlRing
		case replay && k == 5:
			ev.Ptr = prev
		}
		prev = ev.Ptr
	})
	const sent = 50
	pkts := rawPackets(sent, 300, 0)
	for i := range pkts { // one Transmit per packet, one event each
		transmitAll(t, r.dev, pkts[i:i+1])
	}
	r.rx.waitFor(t, sent-1)
	s := r.quiesce(t)
	poll.Until(5*time.Second, func() bool {
		s = r.dev.Stats()
		return s.TxPackets+s.TxDropped+s.TxErrors >= sent
	})
	if cs := r.ctrl.Stats(); cs.BadEventPtr != 1 {
		t.Errorf("BadEventPtr %d, want 1", cs.BadEventPtr)
	}
	if s.TxPackets != sent || s.TxStale != 0 {
		t.Errorf("transmitted %d (want %d), stale %d", s.TxPackets, sent, s.TxStale)
	}
	if got := r.rx.count(); got != sent || r.rx.bad != 0 {
		t.Errorf("looped back %d of %d, %d bad", got, sent, r.rx.bad)
	}
}
