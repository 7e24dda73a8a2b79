// Package prototest is the test support the framing codecs' tests
// (mhi/proto/ntb and mhi/proto/qmap) share: packets a Parser accepts, the
// check that a delivered packet is a view inside its input, and what their
// benchmarks and round-trip fuzz targets do with a Writer. Both codecs'
// writers have the same contract (Reset, Add, Finish, Count; Size and Fit;
// ErrEmpty, ErrFull, ErrLimit, ErrTooLarge), which is what this package
// drives. Only tests import it.
package prototest

import (
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/gomhi/gomhi/mhi/proto/framing"
)

// Packet returns an n-byte pseudo-random packet whose first nibble is 4
// (or 6 when v6), so that a Parser accepts it.
func Packet(r *rand.Rand, n int, v6 bool) []byte {
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

// Packets returns n IPv4 packets of size bytes each, the same ones on
// every call (for benchmarks).
func Packets(size, n int) [][]byte {
	r := rand.New(rand.NewPCG(1, 1))
	out := make([][]byte, n)
	for i := range out {
		out[i] = Packet(r, size, false)
	}
	return out
}

// Lengths decodes a fuzzer's byte string as big-endian 16-bit packet
// lengths (an odd last byte is ignored), at most max of them. Zero is
// among them: a Writer must reject it.
func Lengths(spec []byte, max int) []int {
	var lens []int
	for i := 0; i+1 < len(spec) && len(lens) < max; i += 2 {
		lens = append(lens, int(spec[i])<<8|int(spec[i+1]))
	}
	return lens
}

// OffsetIn returns where d starts inside b, and whether d lies entirely
// in b.
func OffsetIn(b, d []byte) (int, bool) {
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

// Writer is the aggregate writer of a framing codec (*ntb.Writer,
// *qmap.Writer): a framing.Writer opened by a Reset that takes a C (its
// Config).
type Writer[C any] interface {
	framing.Writer
	// Reset opens an empty aggregate in buf.
	Reset(buf []byte, cfg C) error
}

// Build writes pkts with w into a fresh aggregate in a buffer of bufLen
// bytes and returns the aggregate. Every packet must fit.
func Build[C any](t testing.TB, w Writer[C], cfg C, bufLen int, pkts [][]byte) []byte {
	t.Helper()
	buf := make([]byte, bufLen)
	if err := w.Reset(buf, cfg); err != nil {
		t.Fatalf("Reset: %v", err)
	}
	for i, p := range pkts {
		if err := w.Add(p); err != nil {
			t.Fatalf("Add %d (%d bytes): %v", i, len(p), err)
		}
	}
	return buf[:w.Finish()]
}

// Fill opens an aggregate in buf with w, adds pkts in order until one does
// not fit, and returns the finished aggregate's length.
func Fill[C any](w Writer[C], buf []byte, cfg C, pkts [][]byte) (int, error) {
	if err := w.Reset(buf, cfg); err != nil {
		return 0, err
	}
	for _, p := range pkts {
		if w.Add(p) != nil {
			break
		}
	}
	return w.Finish(), nil
}

// BenchBuf is the buffer size of the codecs' benchmarks: 32 KiB, the
// buffer size of Linux's MBIM and QMAP downlinks.
const BenchBuf = 32768

// BenchCase is a workload of the codecs' benchmarks: packets of Pkt bytes
// in a BenchBuf-byte buffer, at most Max in one aggregate (0: the codec's
// default limit).
type BenchCase struct {
	Name     string
	Pkt, Max int
}

// BenchCases returns the codecs' benchmark workloads: the buffer filled
// with 1500-byte packets (21 fit), with 64-byte packets under the default
// limit of 32 per aggregate (about 2.2 KB), and with 64-byte packets up to
// noLimit, the codec's largest limit that leaves the buffer size as the
// only one (the whole 32 KB).
func BenchCases(noLimit int) []BenchCase {
	return []BenchCase{
		{"pkt=1500", 1500, 0},
		{"pkt=64/max=32", 64, 0},
		{"pkt=64/fill32K", 64, noLimit},
	}
}

// BenchBuild measures filling a BenchBuf-byte buffer with w from pkts
// (Fill), and reports the packets per aggregate as unit.
func BenchBuild[C any](b *testing.B, w Writer[C], cfg C, pkts [][]byte, unit string) {
	buf := make([]byte, BenchBuf)
	fill := func() int {
		n, err := Fill(w, buf, cfg, pkts)
		if err != nil {
			b.Fatal(err)
		}
		return n
	}
	n := fill() // warm up what the writer keeps between aggregates
	b.SetBytes(int64(n))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		fill()
	}
	b.ReportMetric(float64(w.Count()), unit)
}

// BenchParse measures parse on an aggregate of a BenchBuf-byte buffer
// filled with w from pkts (Fill); parse must return the number of packets
// the aggregate holds. It reports that number as unit.
func BenchParse[C any](b *testing.B, w Writer[C], cfg C, pkts [][]byte, parse func(agg []byte) (int, error), unit string) {
	buf := make([]byte, BenchBuf)
	n, err := Fill(w, buf, cfg, pkts)
	if err != nil {
		b.Fatal(err)
	}
	count, agg := w.Count(), buf[:n]
	b.SetBytes(int64(len(agg)))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if n, err := parse(agg); err != nil || n != count {
			b.Fatalf("Parse = %d, %v", n, err)
		}
	}
	b.ReportMetric(float64(count), unit)
}

// AddUntilRefused adds packets to w's open aggregate until Add refuses
// one: packets of pl bytes, or with mix of random lengths in [1, pl], made
// from r (IPv4 and IPv6 in turn). It returns the packets added and their
// lengths, and the length of the refused packet with Add's error.
func AddUntilRefused[C any](w Writer[C], r *rand.Rand, pl int, mix bool) (pkts [][]byte, lens []int, n int, err error) {
	for i := 0; ; i++ {
		n = pl
		if mix {
			n = 1 + r.IntN(pl)
		}
		p := Packet(r, n, i%2 == 1)
		if err := w.Add(p); err != nil {
			return pkts, lens, n, err
		}
		pkts = append(pkts, p)
		lens = append(lens, n)
	}
}
