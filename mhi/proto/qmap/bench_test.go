package qmap

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// benchCases: a 32 KB buffer filled with 1500-byte packets (21 fit), with
// 64-byte packets under the modem's 32-packet limit (2.2 KB), and with
// 64-byte packets and no practical limit (the whole 32 KB).
var benchCases = []struct {
	name string
	pkt  int
	max  int
}{
	{"pkt=1500", 1500, 0},
	{"pkt=64/max=32", 64, 0},
	{"pkt=64/fill32K", 64, 1 << 20},
}

const benchBuf = 32768

func benchPackets(pkt, n int) [][]byte {
	r := rand.New(rand.NewPCG(1, 1))
	out := make([][]byte, n)
	for i := range out {
		out[i] = packet(r, pkt, false)
	}
	return out
}

func BenchmarkBuildQMAP(b *testing.B) {
	for _, mode := range []CsumMode{CsumNone, CsumV4, CsumV5} {
		for _, c := range benchCases {
			b.Run(fmt.Sprintf("csum=%v/%s", mode, c.name), func(b *testing.B) {
				cfg := Config{Csum: mode, MaxPackets: c.max, CsumValid: true}
				pkts := benchPackets(c.pkt, 1000)
				buf := make([]byte, benchBuf)
				var w Writer
				n := 0
				fill := func() {
					if err := w.Reset(buf, cfg); err != nil {
						b.Fatal(err)
					}
					for _, p := range pkts {
						if w.Add(p) != nil {
							break
						}
					}
					n = w.Finish()
				}
				fill()
				b.SetBytes(int64(n))
				b.ReportAllocs()
				b.ResetTimer()
				for b.Loop() {
					fill()
				}
				b.ReportMetric(float64(w.Count()), "packets/agg")
			})
		}
	}
}

func BenchmarkParseQMAP(b *testing.B) {
	for _, mode := range []CsumMode{CsumNone, CsumV4, CsumV5} {
		for _, c := range benchCases {
			b.Run(fmt.Sprintf("csum=%v/%s", mode, c.name), func(b *testing.B) {
				cfg := Config{Csum: mode, MaxPackets: c.max, CsumValid: true}
				buf := make([]byte, benchBuf)
				var w Writer
				if err := w.Reset(buf, cfg); err != nil {
					b.Fatal(err)
				}
				for _, p := range benchPackets(c.pkt, 1000) {
					if w.Add(p) != nil {
						break
					}
				}
				count := w.Count()
				agg := buf[:w.Finish()]
				p := Parser{Csum: mode}
				sum := 0
				fn := func(pk Packet) { sum += len(pk.Data) }
				b.SetBytes(int64(len(agg)))
				b.ReportAllocs()
				b.ResetTimer()
				for b.Loop() {
					if n, err := p.Parse(agg, fn); err != nil || n != count {
						b.Fatalf("Parse = %d, %v", n, err)
					}
				}
				b.ReportMetric(float64(count), "packets/agg")
			})
		}
	}
}
