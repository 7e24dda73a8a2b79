package mhinet

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strings"
	"testing"
)

// Every registered format has a name that round-trips through
// ParseFormat, and all its names parse to it.
func TestFormatsRegistered(t *testing.T) {
	want := map[Format]string{FormatRawIP: "raw", FormatMBIM: "mbim", FormatQMAP: "qmap"}
	seen := 0
	for i, spec := range formats {
		if spec == nil {
			continue
		}
		seen++
		if spec.format != Format(i) {
			t.Errorf("format %v registered at %d", spec.format, i)
		}
		if w, ok := want[spec.format]; !ok || spec.format.String() != w {
			t.Errorf("format %d is %q, want %q", spec.format, spec.format.String(), w)
		}
		for _, name := range spec.names {
			if f, err := ParseFormat(strings.ToUpper(name)); err != nil || f != spec.format {
				t.Errorf("ParseFormat(%q) = %v, %v; want %v", strings.ToUpper(name), f, err, spec.format)
			}
		}
	}
	if seen != len(want) {
		t.Errorf("%d formats registered, want %d", seen, len(want))
	}
	if _, err := ParseFormat("ppp"); err == nil || !strings.Contains(err.Error(), `"ppp" (raw, mbim, qmap)`) {
		t.Errorf("ParseFormat(ppp): %v", err)
	}
	if s := Format(200).String(); s != "format(200)" {
		t.Errorf("Format(200) is %q", s)
	}
}

// ipv4 returns an n-byte IPv4 packet (header and payload) with payload
// bytes seeded by seed.
func ipv4(n int, seed byte) []byte {
	p := make([]byte, n)
	p[0] = 0x45
	binary.BigEndian.PutUint16(p[2:], uint16(n))
	p[8], p[9] = 64, 17
	for i := 20; i < n; i++ {
		p[i] = seed + byte(i)
	}
	return p
}

// What each framing writes, one packet, in a zero-copy slot or as an
// aggregate, its own parser reads back unchanged, on the configured
// session; an aggregate stops at its packet limit.
func TestFramingRoundTrip(t *testing.T) {
	const session = 3
	for _, spec := range formats {
		if spec == nil {
			continue
		}
		t.Run(spec.names[0], func(t *testing.T) {
			cfg := Config{Format: spec.format, Session: session, TXAggMaxPackets: 4, TXAggMaxBytes: 4096}
			var c counters
			f := newFraming(&cfg, &c)
			mux := uint8(session)
			if spec.format == FormatRawIP {
				mux = 0
			}
			check := func(what string, data []byte, pkts ...[]byte) {
				t.Helper()
				got := f.parse(data, nil, nil)
				if len(got) != len(pkts) {
					t.Fatalf("%s: %d packets parsed, want %d", what, len(got), len(pkts))
				}
				for i, p := range got {
					if !bytes.Equal(p.Data, pkts[i]) || p.Mux != mux {
						t.Errorf("%s: packet %d: %d bytes on mux %d, want %d bytes on %d", what, i, len(p.Data), p.Mux, len(pkts[i]), mux)
					}
				}
			}
			pkt := ipv4(101, 1)

			buf := make([]byte, 4096)
			n, err := f.encode(buf, pkt)
			if want, lerr := f.frameLen(len(pkt)); err != nil || lerr != nil || n != want {
				t.Fatalf("encode: %d bytes, %v (frameLen %d, %v)", n, err, want, lerr)
			}
			check("one packet", buf[:n], pkt)

			h, err := f.zcHeadroom()
			if err != nil {
				t.Fatal(err)
			}
			frame := make([]byte, h+len(pkt)+8)
			copy(frame[h:], pkt)
			if n, err = f.zcFrame(frame, len(pkt)); err != nil {
				t.Fatal(err)
			}
			check("zero-copy", frame[:n], pkt)

			a, ok := f.(aggregator)
			if ok != (spec.format != FormatRawIP) {
				t.Fatalf("aggregates: %v", ok)
			}
			if !ok {
				return
			}
			if err := a.aggReset(buf); err != nil {
				t.Fatal(err)
			}
			var pkts [][]byte
			for i := range cfg.TXAggMaxPackets {
				p := ipv4(60+i*7, byte(i))
				if err := a.aggAdd(p); err != nil {
					t.Fatalf("packet %d: %v", i, err)
				}
				pkts = append(pkts, p)
			}
			if err := a.aggAdd(pkt); !errors.Is(err, errAggLimit) {
				t.Fatalf("packet past the limit: %v, want errAggLimit", err)
			}
			check("aggregate", buf[:a.aggFinish()], pkts...)

			if err := a.aggReset(buf[:256]); err != nil {
				t.Fatal(err)
			}
			if err := a.aggAdd(ipv4(300, 0)); !errors.Is(err, errAggTooLarge) {
				t.Errorf("packet larger than an empty aggregate: %v, want errAggTooLarge", err)
			}
			if err := a.aggAdd(ipv4(200, 0)); err != nil {
				t.Fatal(err)
			}
			if err := a.aggAdd(ipv4(100, 0)); !errors.Is(err, errAggFull) {
				t.Errorf("packet past the byte limit: %v, want errAggFull", err)
			}
		})
	}
}

// No framing method allocates on the data path: one packet, a zero-copy
// frame and a full aggregate, each written and parsed back.
func TestFramingDoesNotAllocate(t *testing.T) {
	for _, spec := range formats {
		if spec == nil {
			continue
		}
		t.Run(spec.names[0], func(t *testing.T) {
			cfg := Config{Format: spec.format, Session: 1, TXAggMaxPackets: 8}
			var c counters
			f := newFraming(&cfg, &c)
			pkt := ipv4(200, 7)
			buf := make([]byte, 4096)
			h, err := f.zcHeadroom()
			if err != nil {
				t.Fatal(err)
			}
			frame := make([]byte, h+len(pkt)+8)
			copy(frame[h:], pkt)
			batch := make([]Packet, 0, 16)
			a, _ := f.(aggregator)
			run := func() {
				n, _ := f.encode(buf, pkt)
				batch = f.parse(buf[:n], nil, batch[:0])
				n, _ = f.zcFrame(frame, len(pkt))
				batch = f.parse(frame[:n], nil, batch[:0])
				if a == nil {
					return
				}
				_ = a.aggReset(buf)
				for range cfg.TXAggMaxPackets {
					_ = a.aggAdd(pkt)
				}
				batch = f.parse(buf[:a.aggFinish()], nil, batch[:0])
			}
			run() // writers size their tables on first use
			if n := testing.AllocsPerRun(100, run); n != 0 {
				t.Errorf("%.1f allocations per round", n)
			}
			if a != nil && len(batch) != cfg.TXAggMaxPackets {
				t.Errorf("aggregate parsed to %d packets, want %d", len(batch), cfg.TXAggMaxPackets)
			}
		})
	}
}
