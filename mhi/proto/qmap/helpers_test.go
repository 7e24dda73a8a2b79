package qmap

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
	"unsafe"
)

// packet returns an n-byte pseudo-random packet whose first nibble is 4
// (or 6 when v6).
func packet(r *rand.Rand, n int, v6 bool) []byte {
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(r.Uint32())
	}
	if n > 0 {
		p[0] = 0x45
		if v6 {
			p[0] = 0x60 | p[0]&0x0F
		}
	}
	return p
}

// offsetIn returns where d starts inside b, and whether d lies entirely in b.
func offsetIn(b, d []byte) (int, bool) {
	if len(d) == 0 || len(b) == 0 {
		return 0, false
	}
	base := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	p := uintptr(unsafe.Pointer(unsafe.SliceData(d)))
	if p < base || p-base > uintptr(len(b)) || uintptr(len(d)) > uintptr(len(b))-(p-base) {
		return 0, false
	}
	return int(p - base), true
}

type got struct {
	Packet
	off int
}

func parseAll(t testing.TB, p *Parser, b []byte) ([]got, error) {
	t.Helper()
	var out []got
	n, err := p.Parse(b, func(pk Packet) {
		off, ok := offsetIn(b, pk.Data)
		if !ok {
			t.Fatalf("packet of %d bytes not inside the %d-byte input", len(pk.Data), len(b))
		}
		if cap(pk.Data) != len(pk.Data) {
			t.Fatalf("packet view cap %d > len %d", cap(pk.Data), len(pk.Data))
		}
		out = append(out, got{pk, off})
	})
	if n != len(out) {
		t.Fatalf("Parse returned %d, delivered %d", n, len(out))
	}
	return out, err
}

func build(t testing.TB, cfg Config, bufLen int, pkts [][]byte) []byte {
	t.Helper()
	buf := make([]byte, bufLen)
	var w Writer
	if err := w.Reset(buf, cfg); err != nil {
		t.Fatal(err)
	}
	for i, p := range pkts {
		if err := w.Add(p); err != nil {
			t.Fatalf("Add %d (%d bytes): %v", i, len(p), err)
		}
	}
	return buf[:w.Finish()]
}

func samePackets(g []got, want [][]byte, mux uint8) error {
	if len(g) != len(want) {
		return fmt.Errorf("got %d packets, want %d", len(g), len(want))
	}
	for i := range want {
		if !bytes.Equal(g[i].Data, want[i]) {
			return fmt.Errorf("packet %d differs (len %d vs %d)", i, len(g[i].Data), len(want[i]))
		}
		if g[i].Mux != mux {
			return fmt.Errorf("packet %d mux %d, want %d", i, g[i].Mux, mux)
		}
	}
	return nil
}

// frame encodes one raw frame for hand-made aggregates.
func frame(b0, mux byte, plen int, body ...byte) []byte {
	f := []byte{b0, mux, byte(plen >> 8), byte(plen)}
	return append(f, body...)
}
