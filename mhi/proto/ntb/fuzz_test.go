package ntb

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/gomhi/gomhi/mhi/proto/internal/prototest"
)

// seedAggregates returns valid aggregates built by the Writer and a few
// hand-broken ones, for the fuzz corpora.
func seedAggregates(t testing.TB) [][]byte {
	r := rand.New(rand.NewPCG(7, 7))
	var out [][]byte
	for _, c := range []struct {
		cfg  Config
		lens []int
	}{
		{Config{}, []int{20, 40, 1500}},
		{Config{Session: 3, DatagramAlign: 8}, []int{64, 64, 64, 64, 64}},
		{Config{Layout: NDPFirst, MaxDatagrams: 4}, []int{100, 1, 33}},
		{Config{NTB32: true}, []int{60, 1280}},
		{Config{NTB32: true, Layout: NDPFirst, Session: 0xFF}, []int{40}},
		{Config{}, nil},
	} {
		var pkts [][]byte
		for i, n := range c.lens {
			pkts = append(pkts, prototest.Packet(r, n, i%2 == 0))
		}
		sz, err := Size(c.cfg, c.lens)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, build(t, c.cfg, sz, pkts))
	}
	// Several sessions: one NDP per session, chained.
	for _, cfg := range []Config{{Session: 112}, {NTB32: true, Layout: NDPFirst}} {
		var w Writer
		buf := make([]byte, 4096)
		if err := w.Reset(buf, cfg); err != nil {
			t.Fatal(err)
		}
		for i, sid := range []uint8{112, 113, 112, 0, 114, 113} {
			if err := w.AddSession(prototest.Packet(r, 40+i, i%2 == 1), sid); err != nil {
				t.Fatal(err)
			}
		}
		out = append(out, bytes.Clone(buf[:w.Finish()]))
	}
	tx := make([]byte, TXHeaderLen+20)
	_, _ = EncodeTX(tx, prototest.Packet(r, 20, false), 1, 9)
	out = append(out, tx)

	good := out[0]
	ndp := int(le.Uint16(good[10:]))
	broken := func(f func(b []byte)) {
		b := bytes.Clone(good)
		f(b)
		out = append(out, b)
	}
	broken(func(b []byte) { le.PutUint16(b[ndp+6:], uint16(ndp)) })        // NDP loop
	broken(func(b []byte) { le.PutUint16(b[ndp+4:], 0xFFFF) })             // NDP length
	broken(func(b []byte) { le.PutUint16(b[ndp+8+4+2:], 0xFFFF) })         // datagram out of bounds
	broken(func(b []byte) { le.PutUint16(b[8:], uint16(len(b)+1)) })       // block length
	broken(func(b []byte) { le.PutUint16(b[ndp+8+4:], 0) })                // zero index
	broken(func(b []byte) { b[int(le.Uint16(b[ndp+8:]))] = 0x00 })         // IP version
	broken(func(b []byte) { le.PutUint16(b[ndp+8+6:], le.Uint16(b[8:])) }) // overlap-ish
	return out
}

// checkParse parses b with p and checks the invariants that hold for any
// input: no panic, every datagram is a non-empty view inside b with its
// capacity clipped, IP version when checked, total delivered bytes ≤ len(b),
// the return values agree with the callback and the Stats, and parsing is
// deterministic.
func checkParse(t *testing.T, p *Parser, b []byte) []got {
	t.Helper()
	before := p.Stats
	total := 0
	var out []got
	n, err := p.Parse(b, func(d []byte, sid uint8) {
		off, ok := prototest.OffsetIn(b, d)
		if !ok {
			t.Fatalf("datagram (%d bytes) outside the %d-byte input", len(d), len(b))
		}
		if len(d) == 0 || cap(d) != len(d) {
			t.Fatalf("datagram len %d cap %d", len(d), cap(d))
		}
		if off < NTH16Len {
			t.Fatalf("datagram at %d inside the NTH", off)
		}
		if v := d[0] >> 4; !p.AnyProtocol && v != 4 && v != 6 {
			t.Fatalf("delivered IP version %d", v)
		}
		total += len(d)
		out = append(out, got{d, sid, off})
	})
	if n != len(out) {
		t.Fatalf("Parse returned %d, callback saw %d", n, len(out))
	}
	if total > len(b) {
		t.Fatalf("delivered %d bytes from a %d-byte input", total, len(b))
	}
	if p.Stats.Datagrams-before.Datagrams != uint64(n) || p.Stats.Bytes-before.Bytes != uint64(total) {
		t.Fatalf("stats disagree: %+v", p.Stats)
	}
	newErrs := p.Stats.Errors() - before.Errors()
	if (err == nil) != (newErrs == 0) {
		t.Fatalf("err %v but %d errors counted", err, newErrs)
	}
	if err != nil {
		if !isAny(err, Reasons()...) {
			t.Fatalf("error %v is not a reason", err)
		}
		if p.Stats.Get(err) == before.Get(err) {
			t.Fatalf("returned %v without counting it", err)
		}
	}
	// Determinism: a fresh parser with the same options gives the same result.
	q := Parser{Only16: p.Only16, AnyProtocol: p.AnyProtocol}
	i := 0
	n2, err2 := q.Parse(b, func(d []byte, sid uint8) {
		if i >= len(out) || !bytes.Equal(d, out[i].d) || sid != out[i].sid {
			t.Fatalf("second parse differs at datagram %d", i)
		}
		i++
	})
	if n2 != n || err2 != err {
		t.Fatalf("second parse: %d, %v; first %d, %v", n2, err2, n, err)
	}
	return out
}

// FuzzParseNTB feeds arbitrary bytes to the Parser in its three modes.
func FuzzParseNTB(f *testing.F) {
	for _, b := range seedAggregates(f) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, p := range []*Parser{{}, {Only16: true}, {AnyProtocol: true}} {
			checkParse(t, p, b)
		}
	})
}

// FuzzRoundTripNTB builds aggregates from fuzzer-chosen settings and packet
// lengths, checks them against Size and Fit, and expects the Parser to
// return exactly the packets in order.
func FuzzRoundTripNTB(f *testing.F) {
	f.Add(uint8(0), uint8(0), uint16(32768), uint64(1), []byte{0x05, 0xDC, 0x05, 0xDC, 0x00, 0x40})
	f.Add(uint8(0b1111), uint8(0xFF), uint16(3500), uint64(2), []byte{0x04, 0xE0, 0x04, 0xE1, 0x00, 0x01})
	f.Add(uint8(0b0101), uint8(1), uint16(28), uint64(3), []byte{0x00, 0x01})
	f.Add(uint8(0b1010), uint8(0), uint16(65535), uint64(4), bytes.Repeat([]byte{0x01, 0x00}, 40))
	f.Add(uint8(0b110000), uint8(9), uint16(1000), uint64(5), []byte{0xFF, 0xFF, 0x00, 0x10})
	f.Fuzz(func(t *testing.T, flags, sid uint8, bufLen uint16, seed uint64, spec []byte) {
		cfg := Config{Session: sid}
		if flags&1 != 0 {
			cfg.NTB32 = true
		}
		if flags&2 != 0 {
			cfg.Layout = NDPFirst
		}
		cfg.DatagramAlign = 1 << (flags >> 2 & 3) // 1, 2, 4, 8
		cfg.NDPAlign = 4 << (flags >> 4 & 1)      // 4, 8
		cfg.MaxDatagrams = []int{0, 1, 5, 100}[flags>>5&3]
		var p Parser
		rt := prototest.RoundTrip[Config]{
			Writer: new(Writer), Config: cfg, Size: Size, Fit: Fit,
			Check: func(agg []byte, pkts [][]byte) {
				if err := samePackets(checkParse(t, &p, agg), pkts, sid); err != nil {
					t.Fatal(err)
				}
			},
			TooLarge: func(_, held int) {
				if held != 0 {
					t.Fatal("framing.ErrTooLarge on a non-empty aggregate")
				}
			},
		}
		r := rand.New(rand.NewPCG(seed, uint64(flags)))
		if err := rt.Run(t, r, int(bufLen), prototest.Lengths(spec, 300)); err != nil {
			if !errors.Is(err, ErrShortBuffer) {
				t.Fatalf("Reset: %v", err)
			}
			return
		}
		if p.Stats.Errors() != 0 {
			t.Fatalf("parse errors on built aggregates: %+v", p.Stats)
		}
	})
}
