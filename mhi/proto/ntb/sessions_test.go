package ntb

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/gomhi/gomhi/mhi/proto/framing"
	"github.com/gomhi/gomhi/mhi/proto/internal/prototest"
)

// sessionRun writes packets of the given lengths and session ids into
// aggregates in a buffer of bufLen bytes the way a sender does (finish on
// framing.ErrFull or ErrLimit, skip ErrTooLarge), checks every aggregate
// against SizeSessions, FitSessions and FitsSession, and parses it back:
// every session's packets in order, on their own session, one NDP per
// session chained in first-seen order. It returns the aggregates built.
func sessionRun(t *testing.T, cfg Config, bufLen int, lens []int, sids []uint8, seed uint64) int {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 3))
	var w Writer
	buf := make([]byte, bufLen+16)
	if err := w.Reset(buf[:bufLen], cfg); err != nil {
		if errors.Is(err, ErrShortBuffer) {
			return 0
		}
		t.Fatal(err)
	}
	var pkts [][]byte
	var plens []int
	var psids []uint8
	aggs := 0
	flush := func() {
		t.Helper()
		n := w.Finish()
		checkSessionAggregate(t, cfg, bufLen, buf[:n], pkts, plens, psids)
		aggs++
		pkts, plens, psids = pkts[:0], plens[:0], psids[:0]
		if err := w.Reset(buf[:bufLen], cfg); err != nil {
			t.Fatal(err)
		}
	}
	for i, n := range lens {
		pk := prototest.Packet(r, n, i%3 == 0)
		sid := sids[i]
		fits := w.FitsSession(n, sid)
		err := w.AddSession(pk, sid)
		if fits != (err == nil) {
			t.Fatalf("FitsSession(%d, %d) = %v but AddSession: %v", n, sid, fits, err)
		}
		switch {
		case n == 0:
			if err != framing.ErrEmpty {
				t.Fatalf("AddSession of empty = %v", err)
			}
			continue
		case err == framing.ErrFull || err == framing.ErrLimit:
			if len(pkts) == 0 {
				t.Fatalf("%v on an empty aggregate", err)
			}
			flush()
			err = w.AddSession(pk, sid)
		}
		switch err {
		case nil:
			pkts, plens, psids = append(pkts, pk), append(plens, n), append(psids, sid)
		case framing.ErrTooLarge:
			if len(pkts) != 0 {
				t.Fatal("ErrTooLarge on a non-empty aggregate")
			}
		default:
			t.Fatalf("AddSession %d bytes to a fresh aggregate: %v", n, err)
		}
	}
	flush()
	if !bytes.Equal(buf[bufLen:], make([]byte, 16)) {
		t.Fatal("Writer wrote past its buffer")
	}
	return aggs
}

// checkSessionAggregate checks one finished aggregate: its length against
// SizeSessions and FitSessions, and what a Parser delivers from it.
func checkSessionAggregate(t *testing.T, cfg Config, bufLen int, agg []byte, pkts [][]byte, lens []int, sids []uint8) {
	t.Helper()
	if len(agg) > bufLen {
		t.Fatalf("aggregate of %d bytes in a %d-byte buffer", len(agg), bufLen)
	}
	if sz, err := SizeSessions(cfg, lens, sids); err != nil || sz != len(agg) {
		t.Fatalf("SizeSessions = %d, %v; Finish = %d", sz, err, len(agg))
	}
	if fn, fsz, err := FitSessions(cfg, bufLen, lens, sids); err != nil || fn != len(lens) || fsz != len(agg) {
		t.Fatalf("FitSessions = %d, %d, %v; built %d, %d", fn, fsz, err, len(lens), len(agg))
	}
	var p Parser
	out := checkParse(t, &p, agg)
	if p.Stats.Errors() != 0 {
		t.Fatalf("parse errors: %+v", p.Stats)
	}
	// Expected order: by NDP (sessions in first-seen order), then by entry.
	var order []uint8
	for _, s := range sids {
		if !bytes.Contains(order, []byte{s}) {
			order = append(order, s)
		}
	}
	want, wantSid := [][]byte{}, []uint8{}
	for _, s := range order {
		for i := range pkts {
			if sids[i] == s {
				want, wantSid = append(want, pkts[i]), append(wantSid, s)
			}
		}
	}
	if len(out) != len(want) {
		t.Fatalf("parsed %d datagrams, wrote %d", len(out), len(want))
	}
	for i := range want {
		if !bytes.Equal(out[i].d, want[i]) || out[i].sid != wantSid[i] {
			t.Fatalf("datagram %d: session %d len %d, want session %d len %d",
				i, out[i].sid, len(out[i].d), wantSid[i], len(want[i]))
		}
	}
	if ndps := max(len(order), 1); p.Stats.NDPs != uint64(ndps) {
		t.Fatalf("%d NDPs parsed, want %d", p.Stats.NDPs, ndps)
	}
}

// interleaved returns n lengths and session ids: sessions base…base+k−1
// round robin, lengths from 20 to 1500.
func interleaved(n, k int, base uint8, seed uint64) ([]int, []uint8) {
	r := rand.New(rand.NewPCG(seed, 9))
	lens, sids := make([]int, n), make([]uint8, n)
	for i := range lens {
		lens[i] = 20 + r.IntN(1481)
		sids[i] = base + uint8(i%k)
	}
	return lens, sids
}

// TestSessionsRoundTrip: 1, 2 and 8 sessions interleaved, NTB16 and
// NTB32, both layouts, several alignments: every aggregate parses back to
// its packets on their sessions, and Size, Fit and Fits agree with it.
func TestSessionsRoundTrip(t *testing.T) {
	for _, k := range []int{1, 2, 8} {
		for _, cfg := range []Config{
			{}, {NTB32: true}, {Layout: NDPFirst}, {NTB32: true, Layout: NDPFirst, MaxDatagrams: 8},
			{DatagramAlign: 1, NDPAlign: 16}, {NTB32: true, DatagramAlign: 8, NDPAlign: 8, MaxDatagrams: 5},
		} {
			t.Run(fmt.Sprintf("%d/%+v", k, cfg), func(t *testing.T) {
				lens, sids := interleaved(300, k, 112, uint64(k))
				for _, bufLen := range []int{1600, 16384, 32768, 65535} {
					if aggs := sessionRun(t, cfg, bufLen, lens, sids, uint64(bufLen)); aggs == 0 {
						t.Fatalf("no aggregate in %d bytes", bufLen)
					}
				}
			})
		}
	}
}

// TestSessionsNDPChain: two sessions give two NDPs chained from the NTH,
// the second's wNextNdpIndex 0, each NDP holding its session's entries.
func TestSessionsNDPChain(t *testing.T) {
	for _, ntb32 := range []bool{false, true} {
		var w Writer
		buf := make([]byte, 4096)
		if err := w.Reset(buf, Config{NTB32: ntb32, Session: 7}); err != nil {
			t.Fatal(err)
		}
		a, b := []byte{0x45, 1, 2, 3}, []byte{0x60, 4, 5}
		for _, e := range []error{w.AddSession(a, 1), w.Add(b), w.AddSession(a, 1)} {
			if e != nil {
				t.Fatal(e)
			}
		}
		if w.NDPs() != 2 || w.Count() != 3 {
			t.Fatalf("NDPs %d Count %d", w.NDPs(), w.Count())
		}
		agg := buf[:w.Finish()]
		first, sig, next := ndpAt(agg, ntb32, 0)
		if sig != NDPSignature(ntb32, IPS, 1) || next == 0 {
			t.Fatalf("%v first NDP at %d sig %#x next %d", variant(ntb32), first, sig, next)
		}
		_, sig2, next2 := ndpAt(agg, ntb32, next)
		if sig2 != NDPSignature(ntb32, IPS, 7) || next2 != 0 {
			t.Fatalf("%v second NDP sig %#x next %d", variant(ntb32), sig2, next2)
		}
		var p Parser
		g, err := parseAll(t, &p, agg)
		if err != nil || len(g) != 3 || g[0].sid != 1 || g[1].sid != 1 || g[2].sid != 7 || !bytes.Equal(g[2].d, b) {
			t.Fatalf("%v parsed %+v, %v", variant(ntb32), g, err)
		}
	}
}

// ndpAt returns the offset, signature and next index of the NDP at off
// (off 0: the NTH's first NDP).
func ndpAt(agg []byte, ntb32 bool, off int) (at int, sig uint32, next int) {
	if off == 0 {
		off = int(le.Uint16(agg[10:]))
		if ntb32 {
			off = int(le.Uint32(agg[12:]))
		}
	}
	next = int(le.Uint16(agg[off+6:]))
	if ntb32 {
		next = int(le.Uint32(agg[off+8:]))
	}
	return off, le.Uint32(agg[off:]), next
}

// TestSessionsLimits: MaxDatagrams counts the datagrams of every session;
// a MaxWriterNDPs+1-th session is framing.ErrLimit (Add, Size, Fit, Fits),
// and a new session's NDP counts in Fits.
func TestSessionsLimits(t *testing.T) {
	var w Writer
	buf := make([]byte, 65535)
	if err := w.Reset(buf, Config{MaxDatagrams: 4}); err != nil {
		t.Fatal(err)
	}
	d := []byte{0x45, 0, 0, 0}
	for i := range 4 {
		if err := w.AddSession(d, uint8(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.AddSession(d, 0); err != framing.ErrLimit {
		t.Fatalf("fifth datagram: %v", err)
	}
	if err := w.Reset(buf, Config{MaxDatagrams: 64}); err != nil {
		t.Fatal(err)
	}
	for i := range MaxWriterNDPs {
		if err := w.AddSession(d, uint8(i)); err != nil {
			t.Fatal(err)
		}
	}
	if w.FitsSession(4, MaxWriterNDPs) || w.AddSession(d, MaxWriterNDPs) != framing.ErrLimit {
		t.Fatal("a 17th session was not refused with ErrLimit")
	}
	if err := w.AddSession(d, 3); err != nil {
		t.Fatalf("a known session after the refusal: %v", err)
	}
	lens, sids := make([]int, MaxWriterNDPs+1), make([]uint8, MaxWriterNDPs+1)
	for i := range lens {
		lens[i], sids[i] = 4, uint8(i)
	}
	if _, err := SizeSessions(Config{MaxDatagrams: 64}, lens, sids); !errors.Is(err, framing.ErrLimit) {
		t.Fatalf("SizeSessions with 17 sessions: %v", err)
	}
	if n, _, err := FitSessions(Config{MaxDatagrams: 64}, 65535, lens, sids); err != nil || n != MaxWriterNDPs {
		t.Fatalf("FitSessions with 17 sessions: %d, %v", n, err)
	}
	if _, err := SizeSessions(Config{}, lens, sids[:2]); !errors.Is(err, ErrBadConfig) {
		t.Fatalf("SizeSessions with too few ids: %v", err)
	}
	// A buffer that holds one more datagram of the open session but not
	// the new NDP another session needs.
	sz, _ := Size(Config{}, []int{20, 20})
	if err := w.Reset(buf[:sz], Config{}); err != nil {
		t.Fatal(err)
	}
	_ = w.Add(make([]byte, 20))
	if !w.Fits(20) || w.FitsSession(20, 1) || w.AddSession(make([]byte, 20), 1) != framing.ErrFull {
		t.Fatal("the NDP of a new session is not counted")
	}
}

// TestSessionsNCMShareNDP: NCM NDPs carry no session, so every datagram
// goes in one NDP whatever its session id.
func TestSessionsNCMShareNDP(t *testing.T) {
	var w Writer
	buf := make([]byte, 4096)
	if err := w.Reset(buf, Config{Kind: NCM}); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if err := w.AddSession([]byte{0x45, 1}, uint8(i)); err != nil {
			t.Fatal(err)
		}
	}
	if w.NDPs() != 1 {
		t.Fatalf("%d NCM NDPs", w.NDPs())
	}
}

// FuzzRoundTripSessionsNTB is FuzzRoundTripNTB with a session id per
// packet: spec is pairs of (length byte ×8, session id).
func FuzzRoundTripSessionsNTB(f *testing.F) {
	f.Add(uint8(0), uint16(32768), []byte{0x10, 0, 0x20, 1, 0x05, 0, 0x30, 1})
	f.Add(uint8(0b11), uint16(9000), []byte{0x40, 112, 0x40, 113, 0x40, 114, 0x10, 112})
	f.Add(uint8(0b1101), uint16(300), []byte{1, 0, 2, 1, 3, 2, 4, 3, 5, 4, 6, 5, 7, 6, 8, 7})
	f.Add(uint8(0b100000), uint16(65535), bytes.Repeat([]byte{0x20, 1, 0x20, 2, 0x20, 3, 0x20, 4, 0x20, 5, 0x20, 6,
		0x20, 7, 0x20, 8, 0x20, 9, 0x20, 10, 0x20, 11, 0x20, 12, 0x20, 13, 0x20, 14, 0x20, 15, 0x20, 16, 0x20, 17}, 3))
	f.Fuzz(func(t *testing.T, flags uint8, bufLen uint16, spec []byte) {
		cfg := Config{NTB32: flags&1 != 0, Session: 112}
		if flags&2 != 0 {
			cfg.Layout = NDPFirst
		}
		cfg.DatagramAlign = 1 << (flags >> 2 & 3)
		cfg.NDPAlign = 4 << (flags >> 4 & 1)
		cfg.MaxDatagrams = []int{0, 1, 5, 100}[flags>>5&3]
		var lens []int
		var sids []uint8
		for i := 0; i+1 < len(spec) && len(lens) < 200; i += 2 {
			lens, sids = append(lens, int(spec[i])*8), append(sids, spec[i+1])
		}
		sessionRun(t, cfg, int(bufLen), lens, sids, uint64(flags))
	})
}

// BenchmarkBuildNTBSessions builds 32-datagram aggregates of 1400-byte
// packets on one and on two interleaved sessions: no allocation either way.
func BenchmarkBuildNTBSessions(b *testing.B) {
	pkts := prototest.Packets(1400, 64)
	for _, k := range []int{1, 2} {
		b.Run(fmt.Sprintf("sessions=%d", k), func(b *testing.B) {
			var w Writer
			buf := make([]byte, 65535)
			b.ReportAllocs()
			b.SetBytes(int64(32 * 1400))
			for b.Loop() {
				if err := w.Reset(buf, Config{}); err != nil {
					b.Fatal(err)
				}
				for i := range 32 {
					if err := w.AddSession(pkts[i], uint8(i%k)); err != nil {
						b.Fatal(err)
					}
				}
				w.Finish()
			}
		})
	}
}
