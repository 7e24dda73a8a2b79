package qmap

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/gomhi/gomhi/mhi/proto/internal/prototest"
)

type got struct {
	Packet
	off int
}

func parseAll(t testing.TB, p *Parser, b []byte) ([]got, error) {
	t.Helper()
	var out []got
	n, err := p.Parse(b, func(pk Packet) {
		off, ok := prototest.OffsetIn(b, pk.Data)
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
