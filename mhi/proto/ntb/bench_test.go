package ntb

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// benchCases: a 32 KB buffer filled with 1500-byte packets (21 fit), with
// 64-byte packets under the modem's 32-datagram limit (about 2.3 KB), and
// with 64-byte packets and no practical limit (the whole 32 KB).
var benchCases = []struct {
	name string
	pkt  int
	max  int
}{
	{"pkt=1500", 1500, 0},
	{"pkt=64/max=32", 64, 0},
	{"pkt=64/fill32K", 64, 8188},
}

const benchBuf = 32768

func benchPackets(pkt, max int) [][]byte {
	r := rand.New(rand.NewPCG(1, 1))
	var out [][]byte
	for range max {
		out = append(out, packet(r, pkt, false))
	}
	return out
}

func BenchmarkBuildNTB(b *testing.B) {
	for _, f := range []Format{NTB16, NTB32} {
		for _, c := range benchCases {
			b.Run(fmt.Sprintf("%v/%s", f, c.name), func(b *testing.B) {
				cfg := Config{Format: f, MaxDatagrams: c.max}
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
				fill() // warm the entry slice
				b.SetBytes(int64(n))
				b.ReportAllocs()
				b.ResetTimer()
				for b.Loop() {
					fill()
				}
				b.ReportMetric(float64(w.Count()), "datagrams/agg")
			})
		}
	}
}

func BenchmarkParseNTB(b *testing.B) {
	for _, f := range []Format{NTB16, NTB32} {
		for _, c := range benchCases {
			b.Run(fmt.Sprintf("%v/%s", f, c.name), func(b *testing.B) {
				cfg := Config{Format: f, MaxDatagrams: c.max}
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
				var p Parser
				sum := 0
				fn := func(d []byte, _ uint8) { sum += len(d) }
				b.SetBytes(int64(len(agg)))
				b.ReportAllocs()
				b.ResetTimer()
				for b.Loop() {
					if n, err := p.Parse(agg, fn); err != nil || n != count {
						b.Fatalf("Parse = %d, %v", n, err)
					}
				}
				b.ReportMetric(float64(count), "datagrams/agg")
			})
		}
	}
}
