package mhinet

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/gomhi/gomhi/mhi/proto/framing"
)

// Every framing of mhi/proto/framing has a framer, and nothing else is
// registered.
func TestFormatsRegistered(t *testing.T) {
	n := 0
	for f := framing.RawIP; f.Valid(); f++ {
		n++
		if newFramers[f] == nil {
			t.Errorf("format %v has no framer", f)
		}
	}
	if len(newFramers) != n {
		t.Errorf("%d formats registered, want %d", len(newFramers), n)
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

// What each framer writes, one packet, in a zero-copy slot or as an
// aggregate, its own parser reads back unchanged, on the configured
// session; an aggregate stops at its packet limit.
func TestFramingRoundTrip(t *testing.T) {
	const session = 3
	for f := framing.RawIP; f.Valid(); f++ {
		t.Run(f.String(), func(t *testing.T) {
			cfg := Config{Format: f, Session: session, TXAggMaxPackets: 4, TXAggMaxBytes: 4096}
			var c counters
			fr := newFramer(&cfg, &c)
			mux := uint8(session)
			if f == framing.RawIP {
				mux = 0
			}
			check := func(what string, data []byte, pkts ...[]byte) {
				t.Helper()
				got := fr.parse(data, nil, nil)
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
			n, err := fr.encode(buf, pkt, fr.base())
			if want, lerr := fr.frameLen(len(pkt)); err != nil || lerr != nil || n != want {
				t.Fatalf("encode: %d bytes, %v (frameLen %d, %v)", n, err, want, lerr)
			}
			check("one packet", buf[:n], pkt)

			h, err := fr.zcHeadroom()
			if err != nil {
				t.Fatal(err)
			}
			frame := make([]byte, h+len(pkt)+8)
			copy(frame[h:], pkt)
			if n, err = fr.zcFrame(frame, len(pkt)); err != nil {
				t.Fatal(err)
			}
			check("zero-copy", frame[:n], pkt)

			a, ok := fr.(aggregator)
			if ok != (f != framing.RawIP) {
				t.Fatalf("aggregates: %v", ok)
			}
			if !ok {
				return
			}
			if err := a.aggReset(buf, fr.base()); err != nil {
				t.Fatal(err)
			}
			var pkts [][]byte
			for i := range cfg.TXAggMaxPackets {
				p := ipv4(60+i*7, byte(i))
				if err := a.aggAdd(p, fr.base()); err != nil {
					t.Fatalf("packet %d: %v", i, err)
				}
				pkts = append(pkts, p)
			}
			if err := a.aggAdd(pkt, fr.base()); !errors.Is(err, framing.ErrLimit) {
				t.Fatalf("packet past the limit: %v, want framing.ErrLimit", err)
			}
			check("aggregate", buf[:a.aggFinish()], pkts...)

			if err := a.aggReset(buf[:256], fr.base()); err != nil {
				t.Fatal(err)
			}
			if err := a.aggAdd(ipv4(300, 0), fr.base()); !errors.Is(err, framing.ErrTooLarge) {
				t.Errorf("packet larger than an empty aggregate: %v, want framing.ErrTooLarge", err)
			}
			if err := a.aggAdd(ipv4(200, 0), fr.base()); err != nil {
				t.Fatal(err)
			}
			if err := a.aggAdd(ipv4(100, 0), fr.base()); !errors.Is(err, framing.ErrFull) {
				t.Errorf("packet past the byte limit: %v, want framing.ErrFull", err)
			}
		})
	}
}

// No framer method allocates on the data path: one packet, a zero-copy
// frame and a full aggregate, each written and parsed back.
func TestFramingDoesNotAllocate(t *testing.T) {
	for f := framing.RawIP; f.Valid(); f++ {
		t.Run(f.String(), func(t *testing.T) {
			cfg := Config{Format: f, Session: 1, TXAggMaxPackets: 8}
			var c counters
			fr := newFramer(&cfg, &c)
			pkt := ipv4(200, 7)
			buf := make([]byte, 4096)
			h, err := fr.zcHeadroom()
			if err != nil {
				t.Fatal(err)
			}
			frame := make([]byte, h+len(pkt)+8)
			copy(frame[h:], pkt)
			batch := make([]Packet, 0, 16)
			a, _ := fr.(aggregator)
			run := func() {
				n, _ := fr.encode(buf, pkt, fr.base())
				batch = fr.parse(buf[:n], nil, batch[:0])
				n, _ = fr.zcFrame(frame, len(pkt))
				batch = fr.parse(frame[:n], nil, batch[:0])
				if a == nil {
					return
				}
				_ = a.aggReset(buf, fr.base())
				for range cfg.TXAggMaxPackets {
					_ = a.aggAdd(pkt, fr.base())
				}
				batch = fr.parse(buf[:a.aggFinish()], nil, batch[:0])
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
