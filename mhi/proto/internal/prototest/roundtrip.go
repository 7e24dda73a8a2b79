package prototest

import (
	"math/rand/v2"
	"testing"

	"github.com/gomhi/gomhi/mhi/proto/framing"
)

// RoundTrip is the round-trip fuzz check of a codec's Writer: it writes
// packets into aggregates the way a sender does (finishing the aggregate
// and starting the next one when the Writer says it is full or at its
// limit), checks every finished aggregate against the codec's Size and Fit,
// and hands it to Check to parse.
type RoundTrip[C any] struct {
	// Writer and Config are the writer under test and its configuration.
	Writer Writer[C]
	Config C
	// Size and Fit are the codec's functions of those names.
	Size func(cfg C, lens []int) (int, error)
	Fit  func(cfg C, bufLen int, lens []int) (n, size int, err error)
	// Check parses a finished aggregate and compares what it delivers with
	// the packets written into it.
	Check func(agg []byte, pkts [][]byte)
	// TooLarge checks a framing.ErrTooLarge from adding a packet of n bytes to an
	// aggregate that holds held packets.
	TooLarge func(n, held int)
}

// Run writes a packet of each of lens (made by Packet from r, every third
// one IPv6) into aggregates in a buffer of bufLen bytes. A zero length
// must fail with framing.ErrEmpty; framing.ErrFull or framing.ErrLimit
// must come only on a non-empty aggregate, which is then finished and the
// packet added to the next; any other error than framing.ErrTooLarge fails
// the test. Every finished
// aggregate must fit the buffer and agree with Size and Fit; the last one
// is finished after the last packet. Nothing may be written past the
// buffer. Run returns the error of the first Reset, when it fails, without
// writing anything.
func (rt *RoundTrip[C]) Run(t *testing.T, r *rand.Rand, bufLen int, lens []int) error {
	t.Helper()
	w := rt.Writer
	buf := make([]byte, bufLen+16)
	if err := w.Reset(buf[:bufLen], rt.Config); err != nil {
		return err
	}
	var pkts [][]byte
	var plens []int
	flush := func() {
		t.Helper()
		n := w.Finish()
		if n > bufLen {
			t.Fatalf("aggregate of %d bytes in a %d-byte buffer", n, bufLen)
		}
		if sz, err := rt.Size(rt.Config, plens); err != nil || sz != n {
			t.Fatalf("Size = %d, %v; Finish = %d", sz, err, n)
		}
		if fn, fsz, err := rt.Fit(rt.Config, bufLen, plens); err != nil || fn != len(plens) || fsz != n {
			t.Fatalf("Fit = %d, %d, %v; built %d, %d", fn, fsz, err, len(plens), n)
		}
		rt.Check(buf[:n], pkts)
		pkts, plens = pkts[:0], plens[:0]
		if err := w.Reset(buf[:bufLen], rt.Config); err != nil {
			t.Fatal(err)
		}
	}
	for i, n := range lens {
		pk := Packet(r, n, i%3 == 0)
		err := w.Add(pk)
		switch {
		case n == 0:
			if err != framing.ErrEmpty {
				t.Fatalf("Add of empty = %v", err)
			}
			continue
		case err == framing.ErrFull || err == framing.ErrLimit:
			if len(pkts) == 0 {
				t.Fatalf("%v on an empty aggregate", err)
			}
			flush()
			err = w.Add(pk)
		}
		switch err {
		case nil:
			pkts = append(pkts, pk)
			plens = append(plens, n)
		case framing.ErrTooLarge:
			rt.TooLarge(n, len(pkts))
		default:
			t.Fatalf("Add %d bytes to a fresh aggregate: %v", n, err)
		}
	}
	flush()
	for _, c := range buf[bufLen:] {
		if c != 0 {
			t.Fatal("Writer wrote past its buffer")
		}
	}
	return nil
}
