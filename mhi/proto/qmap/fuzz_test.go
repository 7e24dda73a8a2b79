package qmap

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/gomhi/gomhi/mhi/proto/internal/prototest"
)

// seedAggregates returns aggregates built by the Writer in each checksum
// mode (the first byte of each seed's pair is the mode) and a few
// hand-broken ones.
func seedAggregates(t testing.TB) (modes []CsumMode, aggs [][]byte) {
	r := rand.New(rand.NewPCG(9, 9))
	for _, c := range []struct {
		cfg  Config
		lens []int
		cmd  bool
	}{
		{Config{}, []int{20, 41, 1500}, false},
		{Config{Mux: 4, Align: 1}, []int{1, 2, 3, 64}, false},
		{Config{Csum: CsumV4, CsumValid: true}, []int{60, 1280}, true},
		{Config{Csum: CsumV4, Uplink: true, Mux: 2}, []int{60, 1281, 33}, true},
		{Config{Csum: CsumV5, CsumValid: true, Mux: 9}, []int{40, 77}, true},
		{Config{Align: 64}, []int{5}, false},
	} {
		buf := make([]byte, 4096)
		var w Writer
		if err := w.Reset(buf, c.cfg); err != nil {
			t.Fatal(err)
		}
		for i, n := range c.lens {
			if err := w.Add(prototest.Packet(r, n, i%2 == 0)); err != nil {
				t.Fatal(err)
			}
			if c.cmd && i == 0 {
				if err := w.AddCommand(1, Command{Name: CmdFlowEnable, TxID: 42}); err != nil {
					t.Fatal(err)
				}
			}
		}
		modes = append(modes, c.cfg.Csum)
		aggs = append(aggs, buf[:w.Finish()])
	}
	good := aggs[0]
	broken := func(f func(b []byte) []byte) {
		modes = append(modes, CsumNone)
		aggs = append(aggs, f(bytes.Clone(good)))
	}
	broken(func(b []byte) []byte { b[0] |= 0x3F; return b })             // pad > length
	broken(func(b []byte) []byte { b[2], b[3] = 0xFF, 0xFF; return b })  // truncated
	broken(func(b []byte) []byte { b[2], b[3] = 0, 0; return b })        // zero length
	broken(func(b []byte) []byte { b[4] = 0x20; return b })              // IP version
	broken(func(b []byte) []byte { return append(b, 0x80, 0, 0, 8, 1) }) // truncated command
	broken(func(b []byte) []byte { return b[:len(b)-1] })                // short last frame
	modes = append(modes, CsumV5)
	aggs = append(aggs, aggs[3][:len(aggs[3])-3]) // v5, truncated
	return modes, aggs
}

// checkParse parses b with p and checks the invariants that hold for any
// input: packets are non-empty views inside b in increasing, non-overlapping
// order with capacity clipped, IP version when checked, total bytes ≤
// len(b), return values agree with the callback and Stats, determinism.
func checkParse(t *testing.T, p *Parser, b []byte) []got {
	t.Helper()
	before := p.Stats
	total, end := 0, 0
	var out []got
	n, err := p.Parse(b, func(pk Packet) {
		off, ok := prototest.OffsetIn(b, pk.Data)
		if !ok {
			t.Fatalf("packet (%d bytes) outside the %d-byte input", len(pk.Data), len(b))
		}
		if len(pk.Data) == 0 || cap(pk.Data) != len(pk.Data) {
			t.Fatalf("packet len %d cap %d", len(pk.Data), cap(pk.Data))
		}
		if off < end+HeaderLen {
			t.Fatalf("packet at %d overlaps the previous one ending at %d", off, end)
		}
		if v := pk.Data[0] >> 4; !p.AnyProtocol && v != 4 && v != 6 {
			t.Fatalf("delivered IP version %d", v)
		}
		if p.Csum == CsumNone && pk.Csum != (Csum{}) {
			t.Fatalf("checksum info without offload: %+v", pk.Csum)
		}
		end = off + len(pk.Data)
		total += len(pk.Data)
		out = append(out, got{pk, off})
	})
	if n != len(out) || total > len(b) {
		t.Fatalf("Parse returned %d, callback saw %d, %d bytes of %d", n, len(out), total, len(b))
	}
	if p.Stats.Packets-before.Packets != uint64(n) || p.Stats.Bytes-before.Bytes != uint64(total) {
		t.Fatalf("stats disagree: %+v", p.Stats)
	}
	newErrs := p.Stats.Errors() - before.Errors()
	if (err == nil) != (newErrs == 0) {
		t.Fatalf("err %v but %d errors counted", err, newErrs)
	}
	if err != nil && p.Stats.Get(err) == before.Get(err) {
		t.Fatalf("returned %v without counting it", err)
	}
	q := Parser{Csum: p.Csum, AnyProtocol: p.AnyProtocol, Uplink: p.Uplink}
	i := 0
	n2, err2 := q.Parse(b, func(pk Packet) {
		if i >= len(out) || !bytes.Equal(pk.Data, out[i].Data) || pk.Mux != out[i].Mux || pk.Csum != out[i].Csum {
			t.Fatalf("second parse differs at packet %d", i)
		}
		i++
	})
	if n2 != n || err2 != err {
		t.Fatalf("second parse: %d, %v; first %d, %v", n2, err2, n, err)
	}
	return out
}

// FuzzParseQMAP feeds arbitrary bytes to Parsers in every checksum mode.
func FuzzParseQMAP(f *testing.F) {
	_, aggs := seedAggregates(f)
	for _, b := range aggs {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, p := range []*Parser{
			{}, {Csum: CsumV4}, {Csum: CsumV5}, {AnyProtocol: true}, {Csum: CsumV4, Uplink: true},
			{Csum: CsumV5, OnCommand: func(_ uint8, c []byte) {
				if _, ok := prototest.OffsetIn(b, c); !ok && len(c) > 0 {
					t.Fatal("command payload outside the input")
				}
				_, _ = ParseCommand(c)
			}},
		} {
			checkParse(t, p, b)
		}
	})
}

// FuzzRoundTripQMAP builds aggregates from fuzzer-chosen settings and packet
// lengths, checks them against Size and Fit, and expects the Parser to
// return exactly the packets, muxes and checksum bits in order.
func FuzzRoundTripQMAP(f *testing.F) {
	f.Add(uint8(0), uint8(0), uint16(32768), uint64(1), []byte{0x05, 0xDC, 0x05, 0xDC, 0x00, 0x40})
	f.Add(uint8(0b1101), uint8(0xFF), uint16(3500), uint64(2), []byte{0x04, 0xE0, 0x04, 0xE1, 0x00, 0x01})
	f.Add(uint8(0b0110), uint8(1), uint16(9), uint64(3), []byte{0x00, 0x01, 0x00, 0x05})
	f.Add(uint8(0b111010), uint8(0), uint16(65535), uint64(4), bytes.Repeat([]byte{0x01, 0x00}, 40))
	f.Add(uint8(0b11000011), uint8(9), uint16(1000), uint64(5), []byte{0xFF, 0xFF, 0x00, 0x10})
	f.Fuzz(func(t *testing.T, flags, mux uint8, bufLen uint16, seed uint64, spec []byte) {
		cfg := Config{
			Mux:        mux,
			Csum:       CsumMode(flags % 3),
			CsumValid:  flags&4 != 0,
			Align:      1 << (flags >> 3 & 7), // 1…128; 128 must be rejected
			MaxPackets: []int{0, 1, 7, 1000}[flags>>6],
			Uplink:     seed&1 == 1,
		}
		p := Parser{Csum: cfg.Csum, Uplink: cfg.Uplink}
		ul4 := cfg.Csum == CsumV4 && cfg.Uplink
		rt := prototest.RoundTrip[Config]{
			Writer: new(Writer), Config: cfg, Size: Size, Fit: Fit,
			Check: func(agg []byte, pkts [][]byte) {
				if len(agg) == 0 {
					return
				}
				g := checkParse(t, &p, agg)
				if err := samePackets(g, pkts, mux); err != nil {
					t.Fatal(err)
				}
				for _, x := range g {
					if ul4 && x.Csum != (Csum{}) {
						t.Fatalf("uplink header %+v", x.Csum)
					}
					if !ul4 && cfg.Csum != CsumNone && x.Csum.Valid != cfg.CsumValid {
						t.Fatalf("csum valid %v", x.Csum.Valid)
					}
				}
			},
			TooLarge: func(n, _ int) {
				if fl, ferr := FrameLen(cfg, n); ferr == nil && fl <= int(bufLen) {
					t.Fatalf("framing.ErrTooLarge for a %d-byte frame in %d bytes", fl, bufLen)
				}
			},
		}
		r := rand.New(rand.NewPCG(seed, uint64(flags)))
		if err := rt.Run(t, r, int(bufLen), prototest.Lengths(spec, 300)); err != nil {
			if cfg.Align != 128 {
				t.Fatalf("Reset: %v", err)
			}
			return
		}
		if p.Stats.Errors() != 0 {
			t.Fatalf("parse errors on built aggregates: %+v", p.Stats)
		}
	})
}
