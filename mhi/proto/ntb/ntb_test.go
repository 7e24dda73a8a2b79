package ntb

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/gomhi/gomhi/mhi/proto/framing"
	"github.com/gomhi/gomhi/mhi/proto/internal/prototest"
)

// TestRoundTrip fills aggregates of many buffer sizes with packets of many
// sizes until the Writer says full or limit, then parses each aggregate and
// expects the same packets back, and Size/Fit to agree with Finish.
func TestRoundTrip(t *testing.T) {
	bufLens := []int{20, 28, 64, 100, 1500, 3500, 16384, 32768, 65535, 70000}
	pktLens := []int{1, 20, 40, 64, 576, 1248, 1249, 1262, 1263, 1500, 9000, 65000}
	cfgs := []struct {
		name string
		cfg  Config
	}{
		{"ntb16", Config{}},
		{"ntb16-align8", Config{DatagramAlign: 8}},
		{"ntb16-align1-ndp8", Config{DatagramAlign: 1, NDPAlign: 8}},
		{"ntb16-first", Config{Layout: NDPFirst}},
		{"ntb16-first-max26-align8", Config{Layout: NDPFirst, MaxDatagrams: 26, DatagramAlign: 8}},
		{"ntb16-sid7", Config{Session: 7}},
		{"ntb16-max1", Config{MaxDatagrams: 1}},
		{"ntb16-max200", Config{MaxDatagrams: 200}},
		{"ntb32", Config{NTB32: true}},
		{"ntb32-first-align16", Config{NTB32: true, Layout: NDPFirst, DatagramAlign: 16, Session: 255}},
	}
	r := rand.New(rand.NewPCG(1, 2))
	for _, c := range cfgs {
		for _, bl := range bufLens {
			for _, pl := range pktLens {
				for _, mix := range []bool{false, true} { // mix: random lengths up to pl
					var w Writer
					buf := make([]byte, bl)
					err := w.Reset(buf, c.cfg)
					empty, _ := Size(c.cfg, nil)
					if empty > min(bl, 65535) || (!c.cfg.NTB32 && empty > 65535) {
						if !errors.Is(err, ErrShortBuffer) {
							t.Fatalf("%s buf %d: Reset = %v, want ErrShortBuffer", c.name, bl, err)
						}
						continue
					}
					if err != nil {
						t.Fatalf("%s buf %d: Reset: %v", c.name, bl, err)
					}
					pkts, lens, n, err := prototest.AddUntilRefused(&w, r, pl, mix)
					i := len(pkts)
					if !isAny(err, framing.ErrFull, framing.ErrLimit, framing.ErrTooLarge) {
						t.Fatalf("%s buf %d pkt %d: Add: %v", c.name, bl, n, err)
					}
					if errors.Is(err, framing.ErrTooLarge) != (i == 0) {
						t.Fatalf("%s buf %d pkt %d: framing.ErrTooLarge after %d datagrams", c.name, bl, n, i)
					}
					if errors.Is(err, framing.ErrLimit) != (i == w.l.max) {
						t.Fatalf("%s: framing.ErrLimit at %d, max %d", c.name, i, w.l.max)
					}
					if w.Fits(n) {
						t.Fatalf("%s: Fits(%d) true after %v", c.name, n, err)
					}
					before := w.Len()
					total := w.Finish()
					if total != before {
						t.Fatalf("%s: Len %d before Finish, Finish %d", c.name, before, total)
					}
					if w.Finish() != total {
						t.Fatalf("%s: second Finish differs", c.name)
					}
					if sz, err := Size(c.cfg, lens); err != nil || sz != total {
						t.Fatalf("%s buf %d: Size = %d, %v; Finish = %d", c.name, bl, sz, err, total)
					}
					if fn, fsz, err := Fit(c.cfg, bl, append(lens, pl)); err != nil || fn != len(lens) || fsz != total {
						t.Fatalf("%s buf %d pkt %d: Fit = %d, %d, %v; built %d datagrams, %d bytes", c.name, bl, pl, fn, fsz, err, len(lens), total)
					}
					var p Parser
					gotd, err := parseAll(t, &p, buf[:total])
					if err != nil {
						t.Fatalf("%s buf %d pkt %d: Parse: %v", c.name, bl, pl, err)
					}
					if err := samePackets(gotd, pkts, c.cfg.Session); err != nil {
						t.Fatalf("%s buf %d pkt %d: %v", c.name, bl, pl, err)
					}
					al := max(c.cfg.DatagramAlign, 1)
					if c.cfg.DatagramAlign == 0 {
						al = DefaultDatagramAlign
					}
					for i, g := range gotd {
						if g.off%al != 0 {
							t.Fatalf("%s: datagram %d at %d not aligned to %d", c.name, i, g.off, al)
						}
					}
					if p.Stats.Errors() != 0 || p.Stats.NTBs != 1 || p.Stats.NDPs != 1 {
						t.Fatalf("%s: stats %+v", c.name, p.Stats)
					}
				}
			}
		}
	}
}

func TestLimits(t *testing.T) {
	small := []byte{0x45, 1, 2, 3}
	t.Run("32 datagrams", func(t *testing.T) {
		var w Writer
		if err := w.Reset(make([]byte, 32768), Config{}); err != nil {
			t.Fatal(err)
		}
		for i := range 32 {
			if err := w.Add(small); err != nil {
				t.Fatalf("Add %d: %v", i, err)
			}
		}
		if err := w.Add(small); err != framing.ErrLimit {
			t.Fatalf("33rd Add = %v, want framing.ErrLimit", err)
		}
		if w.Count() != 32 {
			t.Fatalf("Count %d", w.Count())
		}
	})
	t.Run("exact fit", func(t *testing.T) {
		for _, cfg := range []Config{{}, {Layout: NDPFirst}, {NTB32: true, DatagramAlign: 8}} {
			lens := []int{100, 37, 1500, 3}
			need, err := Size(cfg, lens)
			if err != nil {
				t.Fatal(err)
			}
			r := rand.New(rand.NewPCG(3, 4))
			var pkts [][]byte
			for _, n := range lens {
				pkts = append(pkts, prototest.Packet(r, n, false))
			}
			b := build(t, cfg, need, pkts)
			if len(b) != need {
				t.Fatalf("built %d bytes, Size said %d", len(b), need)
			}
			var w Writer
			if err := w.Reset(make([]byte, need-1), cfg); err != nil {
				t.Fatal(err)
			}
			for i, p := range pkts {
				err := w.Add(p)
				if i < len(pkts)-1 && err != nil {
					t.Fatalf("Add %d: %v", i, err)
				}
				if i == len(pkts)-1 && err != framing.ErrFull {
					t.Fatalf("last Add into a buffer 1 byte short = %v, want framing.ErrFull", err)
				}
			}
		}
	})
	t.Run("too large and empty", func(t *testing.T) {
		var w Writer
		if err := w.Reset(make([]byte, 100), Config{}); err != nil {
			t.Fatal(err)
		}
		if err := w.Add(make([]byte, 100)); err != framing.ErrTooLarge {
			t.Fatalf("Add = %v, want framing.ErrTooLarge", err)
		}
		if err := w.Add(nil); err != framing.ErrEmpty {
			t.Fatalf("Add(nil) = %v, want framing.ErrEmpty", err)
		}
		w.Finish()
		if err := w.Add(small); err != framing.ErrNotOpen {
			t.Fatalf("Add after Finish = %v, want framing.ErrNotOpen", err)
		}
		var z Writer
		if err := z.Add(small); err != framing.ErrNotOpen {
			t.Fatalf("Add on zero Writer = %v", err)
		}
	})
	t.Run("ntb16 caps at 65535", func(t *testing.T) {
		var w Writer
		if err := w.Reset(make([]byte, 1<<17), Config{MaxDatagrams: 1000}); err != nil {
			t.Fatal(err)
		}
		p := make([]byte, 1000)
		p[0] = 0x45
		for w.Add(p) == nil {
		}
		if n := w.Finish(); n > 65535 {
			t.Fatalf("NTB16 of %d bytes", n)
		}
		if _, err := Size(Config{MaxDatagrams: 100}, []int{40000, 40000}); !errors.Is(err, framing.ErrTooLarge) {
			t.Fatalf("Size over 65535 = %v", err)
		}
	})
	t.Run("bad config", func(t *testing.T) {
		for _, c := range []Config{
			{Layout: 9}, {Kind: 7}, {MaxDatagrams: -1}, {MaxDatagrams: 16381},
			{NTB32: true, MaxDatagrams: 8189}, {DatagramAlign: 3}, {NDPAlign: 2}, {NDPAlign: 8192},
		} {
			var w Writer
			if err := w.Reset(make([]byte, 1000), c); !errors.Is(err, ErrBadConfig) {
				t.Errorf("%+v: Reset = %v, want ErrBadConfig", c, err)
			}
			if _, err := Size(c, nil); !errors.Is(err, ErrBadConfig) {
				t.Errorf("%+v: Size = %v", c, err)
			}
		}
		for _, c := range []Config{{MaxDatagrams: 16380}, {NTB32: true, MaxDatagrams: 8188}} {
			if _, err := Size(c, nil); err != nil {
				t.Errorf("%+v: %v", c, err)
			}
		}
	})
	t.Run("short buffer", func(t *testing.T) {
		var w Writer
		if err := w.Reset(make([]byte, 27), Config{}); !errors.Is(err, ErrShortBuffer) {
			t.Fatalf("Reset = %v", err)
		}
		if err := w.Reset(make([]byte, 28), Config{}); err != nil {
			t.Fatalf("Reset = %v", err)
		}
		if n := w.Finish(); n != 28 {
			t.Fatalf("empty NTB16 is %d bytes", n)
		}
		if _, _, err := Fit(Config{Layout: NDPFirst}, 100, nil); err != ErrShortBuffer {
			t.Fatalf("Fit = %v", err)
		}
	})
}

// TestMRUArithmetic checks the lead in the facts sheet (6.2): with the NDP
// first and 8-byte datagram alignment, 26 datagrams of 1248 bytes fit in
// 32768 bytes (13 in 16384) but 26 of 1249 bytes do not.
func TestMRUArithmetic(t *testing.T) {
	cfg := Config{Layout: NDPFirst, MaxDatagrams: 26, DatagramAlign: 8}
	lens := func(n, l int) []int {
		s := make([]int, n)
		for i := range s {
			s[i] = l
		}
		return s
	}
	if n, _, _ := Fit(cfg, 32768, lens(26, 1248)); n != 26 {
		t.Errorf("26×1248 in 32768: %d fit", n)
	}
	if n, _, _ := Fit(cfg, 32768, lens(26, 1249)); n != 25 {
		t.Errorf("26×1249 in 32768: %d fit", n)
	}
	cfg.MaxDatagrams = 13
	if n, _, _ := Fit(cfg, 16384, lens(13, 1248)); n != 13 {
		t.Errorf("13×1248 in 16384: %d fit", n)
	}
	if n, _, _ := Fit(cfg, 16384, lens(13, 1249)); n != 12 {
		t.Errorf("13×1249 in 16384: %d fit", n)
	}
}

func TestTXForm(t *testing.T) {
	ip := []byte{0x45, 0, 0, 20, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	dst := make([]byte, 100)
	n, err := EncodeTX(dst, ip, 3, 0x1234)
	if err != nil || n != 48 {
		t.Fatalf("EncodeTX = %d, %v", n, err)
	}
	want := []byte{
		'N', 'C', 'M', 'H', 12, 0, 0x34, 0x12, 48, 0, 12, 0,
		'I', 'P', 'S', 3, 16, 0, 0, 0,
		28, 0, 20, 0,
		0, 0, 0, 0,
	}
	want = append(want, ip...)
	if !bytes.Equal(dst[:n], want) {
		t.Fatalf("TX form\n got % x\nwant % x", dst[:n], want)
	}
	// The Writer produces the same bytes with NDPFirst and one datagram.
	var w Writer
	buf := make([]byte, 100)
	if err := w.Reset(buf, Config{Layout: NDPFirst, MaxDatagrams: 1, Session: 3}); err != nil {
		t.Fatal(err)
	}
	w.SetSequence(0x1234)
	if err := w.Add(ip); err != nil {
		t.Fatal(err)
	}
	if m := w.Finish(); !bytes.Equal(buf[:m], want) {
		t.Fatalf("Writer TX form\n got % x\nwant % x", buf[:m], want)
	}
	if w.Sequence() != 0x1235 {
		t.Fatalf("sequence %#x", w.Sequence())
	}
	var p Parser
	p.Only16 = true
	g, err := parseAll(t, &p, dst[:n])
	if err != nil || len(g) != 1 || g[0].sid != 3 || g[0].off != 28 || !bytes.Equal(g[0].d, ip) {
		t.Fatalf("parse TX form: %v %+v", err, g)
	}
	for _, c := range []struct {
		dst, ip []byte
		err     error
	}{
		{make([]byte, 47), ip, ErrShortBuffer},
		{make([]byte, 100), nil, framing.ErrEmpty},
		{make([]byte, 70000), make([]byte, 65535-27), framing.ErrTooLarge},
	} {
		if _, err := EncodeTX(c.dst, c.ip, 0, 0); err != c.err {
			t.Errorf("EncodeTX(%d, %d) = %v, want %v", len(c.dst), len(c.ip), err, c.err)
		}
	}
	if err := PutTXHeader(make([]byte, 28), 65535-28, 0, 0); err != nil {
		t.Errorf("largest TX: %v", err)
	}
}

func TestSessionIDs(t *testing.T) {
	ip := []byte{0x60, 0, 0, 0}
	for _, ntb32 := range []bool{false, true} {
		f := variant(ntb32)
		for _, sid := range []uint8{0, 1, '0', 0x7F, 0xFF} {
			b := build(t, Config{NTB32: ntb32, Session: sid}, 200, [][]byte{ip})
			ndp := int(le.Uint16(b[10:]))
			if ntb32 {
				ndp = int(le.Uint32(b[12:]))
			}
			if b[ndp+3] != sid {
				t.Fatalf("%v: signature byte 3 = %#x, want %#x", f, b[ndp+3], sid)
			}
			lo := "IPS"
			if ntb32 {
				lo = "ips"
			}
			if string(b[ndp:ndp+3]) != lo {
				t.Fatalf("%v: signature %q", f, b[ndp:ndp+4])
			}
			var p Parser
			g, err := parseAll(t, &p, b)
			if err != nil || len(g) != 1 || g[0].sid != sid {
				t.Fatalf("%v sid %d: %v %+v", f, sid, err, g)
			}
		}
	}
	// DSS and NCM NDPs are built but skipped by the parser.
	for _, k := range []NDPKind{DSS, NCM} {
		b := build(t, Config{Kind: k, Session: 2}, 200, [][]byte{ip})
		var p Parser
		g, err := parseAll(t, &p, b)
		if err != nil || len(g) != 0 || p.Stats.SkippedNDPs != 1 {
			t.Fatalf("kind %d: %v %d %+v", k, err, len(g), p.Stats)
		}
	}
	if NDPSignature(false, NCM, 9) != SigNCM16 || NDPSignature(true, NCM, 9) != SigNCM32 ||
		NDPSignature(true, DSS, 1) != SigDSS32|1<<24 {
		t.Fatal("NDPSignature")
	}
}

func TestSequence(t *testing.T) {
	var w Writer
	var p Parser
	buf := make([]byte, 100)
	w.SetSequence(0xFFFE)
	n := 0
	for i := range 4 {
		if err := w.Reset(buf, Config{}); err != nil {
			t.Fatal(err)
		}
		_ = w.Add([]byte{0x45})
		n = w.Finish()
		if s := le.Uint16(buf[6:]); s != uint16(0xFFFE+i) {
			t.Fatalf("aggregate %d has sequence %#x", i, s)
		}
		if _, err := p.Parse(buf[:n], func([]byte, uint8) {}); err != nil {
			t.Fatal(err)
		}
	}
	if p.Stats.SequenceGaps != 0 {
		t.Fatalf("gaps %d across the 0xFFFF wrap", p.Stats.SequenceGaps)
	}
	le.PutUint16(buf[6:], 7)
	_, _ = p.Parse(buf[:n], func([]byte, uint8) {})
	if p.Stats.SequenceGaps != 1 {
		t.Fatalf("gaps %d", p.Stats.SequenceGaps)
	}
}

// TestMultipleNDPs walks a chain of two IPS NDPs for different sessions
// with a DSS NDP between them.
func TestMultipleNDPs(t *testing.T) {
	a := []byte{0x45, 1, 2, 3, 4, 5, 6, 7}
	bb := []byte{0x60, 9, 9, 9}
	c := []byte{0x45, 0xCC}
	b := craft16(200, 100, []rawNDP{
		{off: 100, sig: SigIPS16 | 1<<24, next: 140, ents: [][2]int{{12, 8}, {20, 4}}},
		{off: 140, sig: SigDSS16 | 1<<24, next: 160, ents: [][2]int{{24, 2}}},
		{off: 160, sig: SigIPS16 | 5<<24, ents: [][2]int{{24, 2}}},
	}, map[int][]byte{12: a, 20: bb, 24: c})
	var p Parser
	g, err := parseAll(t, &p, b)
	if err != nil {
		t.Fatal(err)
	}
	if len(g) != 3 || !bytes.Equal(g[0].d, a) || g[0].sid != 1 || !bytes.Equal(g[1].d, bb) ||
		!bytes.Equal(g[2].d, c) || g[2].sid != 5 {
		t.Fatalf("got %+v", g)
	}
	if p.Stats.NDPs != 3 || p.Stats.SkippedNDPs != 1 {
		t.Fatalf("stats %+v", p.Stats)
	}
}

// TestMalformed checks that each malformation is reported and counted
// under its name and that the valid datagrams are still delivered.
func TestMalformed(t *testing.T) {
	ip4 := func(n int, tag byte) []byte {
		p := make([]byte, n)
		p[0] = 0x45
		for i := 1; i < n; i++ {
			p[i] = tag
		}
		return p
	}
	pk := [][]byte{ip4(40, 1), ip4(41, 2), ip4(42, 3), ip4(43, 4)}
	good := build(t, Config{}, 1000, pk) // NDP after the data
	ndpOff := int(le.Uint16(good[10:]))
	ent := func(b []byte, i int) int { return ndpOff + 8 + 4*i }
	mut := func(f func(b []byte) []byte) []byte {
		b := bytes.Clone(good)
		return f(b)
	}
	loopChain := func() []byte {
		var ndps []rawNDP
		for i := range MaxNDPs + 1 {
			ndps = append(ndps, rawNDP{off: 16 + 16*i, sig: SigIPS16, next: 16 + 16*(i+1), length: 16})
		}
		ndps[MaxNDPs].next = 0
		ndps[0].ents = [][2]int{{12, 4}}
		return craft16(16+16*(MaxNDPs+1), 16, ndps, map[int][]byte{12: {0x45, 0, 0, 0}})
	}

	cases := []struct {
		name   string
		in     []byte
		parser Parser
		err    error
		want   [][]byte // datagrams still delivered
	}{
		{"valid", good, Parser{}, nil, pk},
		{"empty", nil, Parser{}, ErrShort, nil},
		{"short 19", good[:19], Parser{}, ErrShort, nil},
		{"short ntb32", append([]byte("ncmh"), make([]byte, 27)...), Parser{}, ErrShort, nil},
		{"bad signature", mut(func(b []byte) []byte { b[0] = 'X'; return b }), Parser{}, ErrBadSignature, nil},
		{"ascii session not a signature", mut(func(b []byte) []byte { copy(b, "NCM0"); return b }), Parser{}, ErrBadSignature, nil},
		{"ntb32 when Only16", build(t, Config{NTB32: true}, 1000, pk), Parser{Only16: true}, ErrBadSignature, nil},
		{"block length > received", good[:len(good)-1], Parser{}, ErrBadBlockLength, nil},
		{"block length tiny", mut(func(b []byte) []byte { le.PutUint16(b[8:], 19); return b }), Parser{}, ErrBadBlockLength, nil},
		{"ndp index 0", mut(func(b []byte) []byte { le.PutUint16(b[10:], 0); return b }), Parser{}, ErrBadNDPIndex, nil},
		{"ndp index in nth", mut(func(b []byte) []byte { le.PutUint16(b[10:], 11); return b }), Parser{}, ErrBadNDPIndex, nil},
		{"ndp index past block", mut(func(b []byte) []byte { le.PutUint16(b[10:], uint16(len(b)-7)); return b }), Parser{}, ErrBadNDPIndex, nil},
		{"ndp length < 16", mut(func(b []byte) []byte { le.PutUint16(b[ndpOff+4:], 12); return b }), Parser{}, ErrBadNDPLength, nil},
		{"ndp length past block", mut(func(b []byte) []byte { le.PutUint16(b[ndpOff+4:], 0xFFF0); return b }), Parser{}, ErrBadNDPLength, nil},
		{"next ndp bad", mut(func(b []byte) []byte { le.PutUint16(b[ndpOff+6:], 3); return b }), Parser{}, ErrBadNDPIndex, pk},
		{"ndp loops to itself", mut(func(b []byte) []byte { le.PutUint16(b[ndpOff+6:], uint16(ndpOff)); return b }), Parser{}, ErrNDPLoop, pk},
		{"too many ndps", loopChain(), Parser{}, ErrTooManyNDPs, [][]byte{{0x45, 0, 0, 0}}},
		{"zero length entry", mut(func(b []byte) []byte { le.PutUint16(b[ent(b, 2)+2:], 0); return b }), Parser{}, ErrZeroLength, pk[:2]},
		{"zero index entry", mut(func(b []byte) []byte { le.PutUint16(b[ent(b, 1):], 0); return b }), Parser{}, ErrZeroLength, pk[:1]},
		{"datagram past block", mut(func(b []byte) []byte { le.PutUint16(b[ent(b, 1)+2:], 1000); return b }), Parser{}, ErrDatagramOutOfBounds, [][]byte{pk[0], pk[2], pk[3]}},
		{"datagram in nth", mut(func(b []byte) []byte { le.PutUint16(b[ent(b, 0):], 2); return b }), Parser{}, ErrDatagramOutOfBounds, pk[1:]},
		{"bad ip version", mut(func(b []byte) []byte { b[int(le.Uint16(b[ent(b, 2):]))] = 0x50; return b }), Parser{}, ErrBadIPVersion, [][]byte{pk[0], pk[1], pk[3]}},
		{"bad ip version allowed", mut(func(b []byte) []byte { b[int(le.Uint16(b[ent(b, 0):]))] = 0x05; return b }), Parser{AnyProtocol: true}, nil, append([][]byte{append([]byte{5}, pk[0][1:]...)}, pk[1:]...)},
		{"entries reuse one datagram", craft16(400, 300, []rawNDP{{off: 300, sig: SigIPS16,
			ents: [][2]int{{12, 200}, {12, 200}, {12, 200}, {16, 100}}}}, map[int][]byte{12: ip4(200, 9)}),
			Parser{AnyProtocol: true}, ErrOverlap, [][]byte{ip4(200, 9), ip4(200, 9)[4:104]}},
		{"ndps overlap", craft16(100, 12, []rawNDP{
			{off: 12, sig: SigIPS16, length: 80, next: 40, ents: [][2]int{{92, 4}}},
			{off: 40, sig: SigIPS16, length: 56},
		}, map[int][]byte{92: {0x45, 1, 2, 3}}), Parser{}, ErrOverlap, [][]byte{{0x45, 1, 2, 3}}},
		{"non-IPS ndp skipped", mut(func(b []byte) []byte { copy(b[ndpOff:], "NCM0"); return b }), Parser{}, nil, nil},
		{"no terminator before wLength", mut(func(b []byte) []byte { le.PutUint16(b[ndpOff+4:], 8+4*3); return b }), Parser{}, nil, pk[:2]},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := c.parser
			g, err := parseAll(t, &p, c.in)
			if err != c.err {
				t.Fatalf("err = %v, want %v", err, c.err)
			}
			var want []got
			for _, w := range c.want {
				want = append(want, got{d: w})
			}
			if len(g) != len(c.want) {
				t.Fatalf("delivered %d datagrams, want %d", len(g), len(c.want))
			}
			for i := range g {
				if !bytes.Equal(g[i].d, c.want[i]) {
					t.Fatalf("datagram %d = % x…, want % x…", i, g[i].d[:min(4, len(g[i].d))], c.want[i][:min(4, len(c.want[i]))])
				}
			}
			if c.err != nil {
				if n := p.Stats.Get(c.err); n == 0 {
					t.Fatalf("%v not counted: %+v", c.err, p.Stats)
				}
			} else if p.Stats.Errors() != 0 {
				t.Fatalf("errors counted on valid input: %+v", p.Stats)
			}
		})
	}
}

func TestStatsGet(t *testing.T) {
	var s Stats
	for i, r := range Reasons() {
		c := s.counter(r)
		if c == nil {
			t.Fatalf("no counter for %v", r)
		}
		*c = uint64(i + 1)
	}
	for i, r := range Reasons() {
		if s.Get(r) != uint64(i+1) {
			t.Fatalf("Get(%v) = %d", r, s.Get(r))
		}
	}
	if s.Get(framing.ErrFull) != 0 {
		t.Fatal("Get of a builder error")
	}
	rs := Reasons()
	rs[0] = nil
	if Reasons()[0] != ErrShort {
		t.Fatal("Reasons shares its backing array")
	}
}
