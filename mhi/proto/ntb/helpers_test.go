package ntb

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/gomhi/gomhi/mhi/proto/internal/prototest"
)

type got struct {
	d   []byte
	sid uint8
	off int
}

// parseAll parses b with p and returns what was delivered, checking that
// every datagram is a view inside b.
func parseAll(t testing.TB, p *Parser, b []byte) ([]got, error) {
	t.Helper()
	var out []got
	n, err := p.Parse(b, func(d []byte, sid uint8) {
		off, ok := prototest.OffsetIn(b, d)
		if !ok {
			t.Fatalf("datagram of %d bytes is not inside the %d-byte input", len(d), len(b))
		}
		if cap(d) != len(d) {
			t.Fatalf("datagram view has cap %d > len %d", cap(d), len(d))
		}
		out = append(out, got{d, sid, off})
	})
	if n != len(out) {
		t.Fatalf("Parse returned %d, delivered %d", n, len(out))
	}
	return out, err
}

// build adds pkts to a fresh aggregate in a buffer of bufLen bytes and
// returns the aggregate; every packet must fit.
func build(t testing.TB, cfg Config, bufLen int, pkts [][]byte) []byte {
	t.Helper()
	return prototest.Build(t, new(Writer), cfg, bufLen, pkts)
}

func samePackets(got []got, want [][]byte, sid uint8) error {
	if len(got) != len(want) {
		return fmt.Errorf("got %d datagrams, want %d", len(got), len(want))
	}
	for i := range want {
		if !bytes.Equal(got[i].d, want[i]) {
			return fmt.Errorf("datagram %d differs (len %d vs %d)", i, len(got[i].d), len(want[i]))
		}
		if got[i].sid != sid {
			return fmt.Errorf("datagram %d session %d, want %d", i, got[i].sid, sid)
		}
	}
	return nil
}

// rawNDP describes an NDP16 for craft16.
type rawNDP struct {
	off    int
	sig    uint32
	length int // wLength; 0 means 8+4*(len(ents)+1)
	next   int
	ents   [][2]int // {index, length}; the terminator is added
}

// craft16 builds an arbitrary NTB16 of size bytes whose first NDP is at
// ndpIdx, with the given NDPs and data written at their offsets.
func craft16(size, ndpIdx int, ndps []rawNDP, data map[int][]byte) []byte {
	b := make([]byte, size)
	le.PutUint32(b, SigNTH16)
	le.PutUint16(b[4:], NTH16Len)
	le.PutUint16(b[8:], uint16(size))
	le.PutUint16(b[10:], uint16(ndpIdx))
	for off, d := range data {
		copy(b[off:], d)
	}
	for _, n := range ndps {
		l := n.length
		if l == 0 {
			l = 8 + 4*(len(n.ents)+1)
		}
		le.PutUint32(b[n.off:], n.sig)
		le.PutUint16(b[n.off+4:], uint16(l))
		le.PutUint16(b[n.off+6:], uint16(n.next))
		for i, e := range n.ents {
			le.PutUint16(b[n.off+8+4*i:], uint16(e[0]))
			le.PutUint16(b[n.off+10+4*i:], uint16(e[1]))
		}
	}
	return b
}

func isAny(err error, targets ...error) bool {
	for _, t := range targets {
		if errors.Is(err, t) {
			return true
		}
	}
	return false
}
