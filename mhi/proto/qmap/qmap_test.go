package qmap

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/gomhi/gomhi/mhi/proto/framing"
	"github.com/gomhi/gomhi/mhi/proto/internal/prototest"
)

func TestRoundTrip(t *testing.T) {
	bufLens := []int{1, 4, 8, 64, 100, 1500, 3500, 16384, 32768, 65535, 70000}
	pktLens := []int{1, 2, 3, 20, 40, 63, 64, 576, 1262, 1263, 1500, 9000, 65000}
	cfgs := []struct {
		name string
		cfg  Config
	}{
		{"plain", Config{}},
		{"mux7", Config{Mux: 7}},
		{"align1", Config{Align: 1}},
		{"align8", Config{Align: 8, Mux: 255}},
		{"align64", Config{Align: 64}},
		{"v4", Config{Csum: CsumV4, CsumValid: true, Mux: 1}},
		{"v4-uplink", Config{Csum: CsumV4, CsumValid: true, Uplink: true, Mux: 3}},
		{"v5", Config{Csum: CsumV5, CsumValid: true, Mux: 2}},
		{"v5-invalid", Config{Csum: CsumV5}},
		{"max1", Config{MaxPackets: 1}},
		{"max200", Config{MaxPackets: 200}},
	}
	r := rand.New(rand.NewPCG(5, 6))
	for _, c := range cfgs {
		align := c.cfg.Align
		if align == 0 {
			align = DefaultAlign
		}
		max := c.cfg.MaxPackets
		if max == 0 {
			max = DefaultMaxPackets
		}
		for _, bl := range bufLens {
			for _, pl := range pktLens {
				for _, mix := range []bool{false, true} {
					buf := make([]byte, bl)
					var w Writer
					if err := w.Reset(buf, c.cfg); err != nil {
						t.Fatal(err)
					}
					pkts, lens, n, err := prototest.AddUntilRefused(&w, r, pl, mix)
					i := len(pkts)
					if errors.Is(err, framing.ErrLimit) != (i == max) {
						t.Fatalf("%s: %v after %d packets", c.name, err, i)
					}
					if errors.Is(err, framing.ErrTooLarge) && i != 0 && n < bl {
						fl, _ := FrameLen(c.cfg, n)
						if fl <= bl {
							t.Fatalf("%s: framing.ErrTooLarge for a %d-byte frame in %d bytes", c.name, fl, bl)
						}
					}
					if w.Fits(n) {
						t.Fatalf("%s: Fits after %v", c.name, err)
					}
					total := w.Finish()
					if sz, err := Size(c.cfg, lens); err != nil || sz != total {
						t.Fatalf("%s: Size = %d, %v; Finish %d", c.name, sz, err, total)
					}
					if fn, fsz, err := Fit(c.cfg, bl, append(lens, pl)); err != nil || fn != len(lens) || fsz != total {
						t.Fatalf("%s buf %d pkt %d: Fit = %d, %d, %v; built %d, %d", c.name, bl, pl, fn, fsz, err, len(lens), total)
					}
					if total%align != 0 {
						t.Fatalf("%s: aggregate of %d bytes not a multiple of %d", c.name, total, align)
					}
					p := Parser{Csum: c.cfg.Csum, Uplink: c.cfg.Uplink}
					g, err := parseAll(t, &p, buf[:total])
					if len(pkts) == 0 {
						if !errors.Is(err, ErrShort) || len(g) != 0 {
							t.Fatalf("%s: empty aggregate: %v", c.name, err)
						}
						continue
					}
					if err != nil {
						t.Fatalf("%s buf %d pkt %d: %v", c.name, bl, pl, err)
					}
					if err := samePackets(g, pkts, c.cfg.Mux); err != nil {
						t.Fatalf("%s buf %d pkt %d: %v", c.name, bl, pl, err)
					}
					ul4 := c.cfg.Csum == CsumV4 && c.cfg.Uplink
					for i, x := range g {
						hdr := HeaderLen
						switch {
						case c.cfg.Csum == CsumV5:
							hdr += V5HeaderLen
						case ul4:
							hdr += ULHeaderLen
						}
						if (x.off-hdr)%align != 0 {
							t.Fatalf("%s: frame %d not aligned", c.name, i)
						}
						switch {
						case ul4 && x.Csum != (Csum{}):
							// Add asks for no offload on the uplink.
							t.Fatalf("%s: uplink header %+v", c.name, x.Csum)
						case !ul4 && c.cfg.Csum != CsumNone && x.Csum.Valid != c.cfg.CsumValid:
							t.Fatalf("%s: csum valid %v", c.name, x.Csum.Valid)
						case !ul4 && c.cfg.Csum == CsumV4 && int(x.Csum.Length) != len(x.Data):
							t.Fatalf("%s: trailer length %d", c.name, x.Csum.Length)
						}
					}
				}
			}
		}
	}
}

func TestWireBytes(t *testing.T) {
	ip := []byte{0x45, 1, 2, 3, 4} // 5 bytes → 3 bytes of padding
	cases := []struct {
		name string
		cfg  Config
		cs   Csum
		want []byte
	}{
		{"plain", Config{}, Csum{}, []byte{0x03, 9, 0, 8, 0x45, 1, 2, 3, 4, 0, 0, 0}},
		{"v5 valid", Config{Csum: CsumV5}, Csum{Valid: true},
			[]byte{0x43, 9, 0, 8, 0x04, 0x80, 0, 0, 0x45, 1, 2, 3, 4, 0, 0, 0}},
		// The trailer after the padding: Linux 6.1's rmnet reads it at
		// the packet's length plus the pad length (rmnet_handlers.c,
		// rmnet_map_checksum_downlink_packet(skb, len + pad)).
		{"v4 trailer", Config{Csum: CsumV4}, Csum{Valid: true, Start: 20, Length: 0x1234, Value: 0xBEEF},
			[]byte{0x03, 9, 0, 8, 0x45, 1, 2, 3, 4, 0, 0, 0, 0, 1, 0, 20, 0x12, 0x34, 0xBE, 0xEF}},
		{"align1", Config{Align: 1}, Csum{}, []byte{0x00, 9, 0, 5, 0x45, 1, 2, 3, 4}},
		// rmnet's MAPv4 egress (rmnet_map_egress_handler, 6.1): the
		// checksum header between MAP header and packet, outside the
		// payload length; enabled bit, UDP bit, offset; no padding.
		{"v4 uplink, as rmnet", Config{Csum: CsumV4, Uplink: true, Align: 1},
			Csum{Valid: true, Start: 20, Offset: 6, UDP: true},
			[]byte{0x00, 9, 0, 5, 0, 20, 0xC0, 6, 0x45, 1, 2, 3, 4}},
		{"v4 uplink, padded, TCP", Config{Csum: CsumV4, Uplink: true},
			Csum{Valid: true, Start: 24, Offset: 16},
			[]byte{0x03, 9, 0, 8, 0, 24, 0x80, 16, 0x45, 1, 2, 3, 4, 0, 0, 0}},
		// The host computed the checksum itself: all zero, as rmnet's
		// software-checksum path leaves it.
		{"v4 uplink, no offload", Config{Csum: CsumV4, Uplink: true, Align: 1}, Csum{},
			[]byte{0x00, 9, 0, 5, 0, 0, 0, 0, 0x45, 1, 2, 3, 4}},
	}
	for _, c := range cases {
		buf := bytes.Repeat([]byte{0xEE}, 64)
		var w Writer
		if err := w.Reset(buf, c.cfg); err != nil {
			t.Fatal(err)
		}
		if err := w.AddPacket(ip, 9, c.cs); err != nil {
			t.Fatal(err)
		}
		n := w.Finish()
		if !bytes.Equal(buf[:n], c.want) {
			t.Errorf("%s:\n got % x\nwant % x", c.name, buf[:n], c.want)
		}
		if buf[n] != 0xEE {
			t.Errorf("%s: wrote past the frame", c.name)
		}
		p := Parser{Csum: c.cfg.Csum, Uplink: c.cfg.Uplink}
		g, err := parseAll(t, &p, buf[:n])
		if err != nil || len(g) != 1 || !bytes.Equal(g[0].Data, ip) || g[0].Mux != 9 {
			t.Fatalf("%s: parse %v %+v", c.name, err, g)
		}
		if c.cfg.Csum == CsumV4 && g[0].Csum != c.cs {
			t.Errorf("%s: csum %+v, want %+v", c.name, g[0].Csum, c.cs)
		}
		if c.cfg.Csum == CsumV5 && g[0].Csum != (Csum{Valid: true}) {
			t.Errorf("%s: csum %+v", c.name, g[0].Csum)
		}
	}
}

func TestHeader(t *testing.T) {
	h := Header{Command: true, NextHeader: true, Pad: 0x3F, Mux: 0xAB, Len: 0x1234}
	b := make([]byte, 4)
	if err := h.Put(b); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, []byte{0xFF, 0xAB, 0x12, 0x34}) {
		t.Fatalf("% x", b)
	}
	if g, err := ReadHeader(b); err != nil || g != h {
		t.Fatalf("%+v %v", g, err)
	}
	if _, err := ReadHeader(b[:3]); err != ErrShort {
		t.Fatal(err)
	}
	if err := h.Put(b[:3]); err != ErrShortBuffer {
		t.Fatal(err)
	}
}

func TestLimits(t *testing.T) {
	ip := []byte{0x45, 0, 0, 0}
	t.Run("32 packets", func(t *testing.T) {
		var w Writer
		if err := w.Reset(make([]byte, 4096), Config{}); err != nil {
			t.Fatal(err)
		}
		for i := range 32 {
			if err := w.Add(ip); err != nil {
				t.Fatal(i, err)
			}
		}
		if err := w.Add(ip); err != framing.ErrLimit {
			t.Fatalf("33rd Add = %v", err)
		}
		if err := w.AddCommand(0, Command{}); err != framing.ErrLimit {
			t.Fatalf("AddCommand = %v", err)
		}
	})
	t.Run("exact fit", func(t *testing.T) {
		for _, cfg := range []Config{{}, {Csum: CsumV4}, {Csum: CsumV5, Align: 8}} {
			lens := []int{100, 37, 1500, 3}
			need, err := Size(cfg, lens)
			if err != nil {
				t.Fatal(err)
			}
			var w Writer
			if err := w.Reset(make([]byte, need-1), cfg); err != nil {
				t.Fatal(err)
			}
			for i, n := range lens {
				pk := make([]byte, n)
				pk[0] = 0x45
				err := w.Add(pk)
				if i < len(lens)-1 && err != nil {
					t.Fatal(err)
				}
				if i == len(lens)-1 && err != framing.ErrFull {
					t.Fatalf("last Add = %v, want framing.ErrFull", err)
				}
			}
			if n, sz, _ := Fit(cfg, need, lens); n != 4 || sz != need {
				t.Fatalf("Fit = %d, %d", n, sz)
			}
		}
	})
	t.Run("sizes", func(t *testing.T) {
		if _, err := FrameLen(Config{}, 65532); err != nil {
			t.Fatalf("65532: %v", err)
		}
		if _, err := FrameLen(Config{}, 65533); !errors.Is(err, framing.ErrTooLarge) {
			t.Fatalf("65533 (pads to 65536): %v", err)
		}
		if _, err := FrameLen(Config{Align: 1}, 65535); err != nil {
			t.Fatalf("65535 unpadded: %v", err)
		}
		if _, err := FrameLen(Config{}, 0); err != framing.ErrEmpty {
			t.Fatal(err)
		}
		if _, err := Size(Config{MaxPackets: 1}, []int{1, 1}); !errors.Is(err, framing.ErrLimit) {
			t.Fatal(err)
		}
		if _, err := Size(Config{}, []int{1, 0}); !errors.Is(err, framing.ErrEmpty) {
			t.Fatal(err)
		}
		var w Writer
		_ = w.Reset(make([]byte, 1<<17), Config{})
		if err := w.Add(make([]byte, 65533)); err != framing.ErrTooLarge {
			t.Fatalf("Add 65533 = %v", err)
		}
		_ = w.Reset(make([]byte, 10), Config{})
		if err := w.Add(make([]byte, 7)); err != framing.ErrTooLarge {
			t.Fatalf("Add into a too small buffer = %v", err)
		}
		if err := w.Add(nil); err != framing.ErrEmpty {
			t.Fatal(err)
		}
		w.Finish()
		if err := w.Add(ip); err != framing.ErrNotOpen {
			t.Fatal(err)
		}
		if err := w.Add(nil); err != framing.ErrNotOpen {
			t.Fatal(err)
		}
	})
	t.Run("bad config", func(t *testing.T) {
		for _, c := range []Config{{Csum: 3}, {Align: 3}, {Align: 128}, {MaxPackets: -1}} {
			var w Writer
			if err := w.Reset(nil, c); !errors.Is(err, ErrBadConfig) {
				t.Errorf("%+v: %v", c, err)
			}
			if w.Finish() != 0 {
				t.Error("Finish after a failed Reset")
			}
			if _, _, err := Fit(c, 100, nil); !errors.Is(err, ErrBadConfig) {
				t.Errorf("Fit %+v: %v", c, err)
			}
		}
	})
}

func TestCommands(t *testing.T) {
	ip := []byte{0x45, 7, 7, 7}
	for _, c := range []struct {
		mode   CsumMode
		uplink bool
	}{{CsumNone, false}, {CsumV4, false}, {CsumV5, false}, {CsumV4, true}} {
		mode := c.mode
		buf := make([]byte, 256)
		var w Writer
		if err := w.Reset(buf, Config{Csum: mode, Mux: 3, Uplink: c.uplink}); err != nil {
			t.Fatal(err)
		}
		cmd := Command{Name: CmdFlowDisable, Type: CmdRequest, TxID: 0xDEADBEEF, Data: []byte{1, 2, 3}}
		_ = w.Add(ip)
		if err := w.AddCommand(5, cmd); err != nil {
			t.Fatal(err)
		}
		_ = w.Add(ip)
		n := w.Finish()
		if c.uplink {
			// An uplink command is the MAP header and the command,
			// nothing else (rmnet_map_send_ack trims the trailer).
			// Data frames: MAP header, checksum header, 4-byte packet;
			// the command: MAP header, 11 bytes, 1 of padding.
			if off := 4 + 4 + 4; buf[off] != FlagCommand|1 || n != 2*(4+4+4)+4+11+1 {
				t.Fatalf("uplink command frame at %d: % x (aggregate %d bytes)", off, buf[off:off+16], n)
			}
		}
		var cmds []Command
		p := Parser{Csum: mode, Uplink: c.uplink, OnCommand: func(mux uint8, b []byte) {
			c, err := ParseCommand(b)
			if err != nil || mux != 5 {
				t.Fatalf("%v: command on mux %d: %v", mode, mux, err)
			}
			cmds = append(cmds, c)
		}}
		g, err := parseAll(t, &p, buf[:n])
		if err != nil || len(g) != 2 || p.Stats.CommandFrames != 1 || p.Stats.Get(ErrCommandFrame) != 1 {
			t.Fatalf("%v: %v %d %+v", mode, err, len(g), p.Stats)
		}
		if len(cmds) != 1 || cmds[0].Name != cmd.Name || cmds[0].TxID != cmd.TxID || !bytes.Equal(cmds[0].Data, cmd.Data) {
			t.Fatalf("%v: commands %+v", mode, cmds)
		}
		// Without a hook the command is still counted and skipped.
		q := Parser{Csum: mode, Uplink: c.uplink}
		if g, err := parseAll(t, &q, buf[:n]); err != nil || len(g) != 2 || q.Stats.CommandFrames != 1 {
			t.Fatalf("%v: %v %d", mode, err, len(g))
		}
	}
	if _, err := ParseCommand(make([]byte, 7)); err != ErrTruncated {
		t.Fatal(err)
	}
	if _, err := (Command{Data: []byte{1}}).Put(make([]byte, 8)); err != ErrShortBuffer {
		t.Fatal(err)
	}
}

// TestMalformed checks that each malformation is reported and counted
// under its name and that the other packets are still delivered.
func TestMalformed(t *testing.T) {
	a := []byte{0x45, 0xAA, 0xAA, 0xAA}
	b := []byte{0x60, 0xBB, 0xBB, 0xBB}
	okA := frame(0, 1, 4, a...)
	okB := frame(0, 2, 4, b...)
	cat := func(fs ...[]byte) []byte { return bytes.Join(fs, nil) }
	v5 := func(m byte, typ byte, body ...byte) []byte {
		return frame(m, 1, len(body), append([]byte{typ << 1, 0x80, 0, 0}, body...)...)
	}
	cases := []struct {
		name string
		mode CsumMode
		in   []byte
		err  error
		want [][]byte
	}{
		{"valid", CsumNone, cat(okA, okB), nil, [][]byte{a, b}},
		{"empty", CsumNone, nil, ErrShort, nil},
		{"short", CsumNone, []byte{0, 1, 0}, ErrShort, nil},
		{"trailing header bytes", CsumNone, cat(okA, okB, []byte{0, 1}), ErrTruncated, [][]byte{a, b}},
		{"frame past end", CsumNone, cat(okA, frame(0, 1, 100, b...)), ErrTruncated, [][]byte{a}},
		{"zero length ends", CsumNone, cat(okA, frame(0, 1, 0), okB), ErrZeroLength, [][]byte{a}},
		{"all padding", CsumNone, cat(frame(4, 1, 4, 0, 0, 0, 0), okB), ErrZeroLength, [][]byte{b}},
		{"pad > length", CsumNone, cat(okA, frame(8, 1, 4, a...), okB), ErrBadPad, [][]byte{a, b}},
		{"bad ip version", CsumNone, cat(okA, frame(0, 1, 4, 0x50, 0, 0, 0), okB), ErrBadIPVersion, [][]byte{a, b}},
		{"pad removed", CsumNone, cat(frame(1, 1, 4, 0x45, 1, 2, 0), okB), nil, [][]byte{{0x45, 1, 2}, b}},
		{"v4 needs trailer", CsumV4, cat(okA, okB, okA), ErrTruncated, [][]byte{a}},
		{"v5 missing next header", CsumV5, cat(v5(0x40, 2, a...), v5(0x00, 2, b...), v5(0x40, 2, b...)), ErrBadNextHeader, [][]byte{a, b}},
		{"v5 wrong type", CsumV5, cat(v5(0x40, 1, a...), v5(0x40, 2, b...)), ErrBadNextHeader, [][]byte{b}},
		{"v5 command has no v5 header", CsumV5, cat(frame(0x80, 1, 8, 1, 0, 0, 0, 0, 0, 0, 1), v5(0x40, 2, b...)), nil, [][]byte{b}},
		{"v5 all padding", CsumV5, cat(v5(0x44, 2, 0, 0, 0, 0), v5(0x40, 2, b...)), ErrZeroLength, [][]byte{b}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := Parser{Csum: c.mode}
			g, err := parseAll(t, &p, c.in)
			if err != c.err {
				t.Fatalf("err = %v, want %v", err, c.err)
			}
			if len(g) != len(c.want) {
				t.Fatalf("delivered %d, want %d", len(g), len(c.want))
			}
			for i := range g {
				if !bytes.Equal(g[i].Data, c.want[i]) {
					t.Fatalf("packet %d = % x, want % x", i, g[i].Data, c.want[i])
				}
			}
			if c.err != nil && p.Stats.Get(c.err) == 0 {
				t.Fatalf("%v not counted: %+v", c.err, p.Stats)
			}
			if c.err == nil && p.Stats.Errors() != 0 {
				t.Fatalf("errors on valid input: %+v", p.Stats)
			}
		})
	}
}

func TestStatsGet(t *testing.T) {
	var s Stats
	for i, r := range append(Reasons(), ErrCommandFrame) {
		c := s.counter(r)
		if c == nil {
			t.Fatalf("no counter for %v", r)
		}
		*c = uint64(i + 1)
	}
	if s.Errors() != 1+2+3+4+5+6 {
		t.Fatalf("Errors = %d", s.Errors())
	}
	if s.Get(framing.ErrFull) != 0 {
		t.Fatal("Get(framing.ErrFull)")
	}
}
