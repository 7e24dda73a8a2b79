package ntb

import (
	"fmt"
	"testing"

	"github.com/gomhi/gomhi/mhi/proto/internal/prototest"
)

// benchCases are the shared workloads; 8188 datagrams is no practical
// limit in 32 KB (512 datagrams of 64 bytes fill it).
var benchCases = prototest.BenchCases(8188)

func BenchmarkBuildNTB(b *testing.B) {
	for _, ntb32 := range []bool{false, true} {
		f := variant(ntb32)
		for _, c := range benchCases {
			b.Run(fmt.Sprintf("%v/%s", f, c.Name), func(b *testing.B) {
				cfg := Config{NTB32: ntb32, MaxDatagrams: c.Max}
				prototest.BenchBuild(b, new(Writer), cfg, prototest.Packets(c.Pkt, 1000), "datagrams/agg")
			})
		}
	}
}

func BenchmarkParseNTB(b *testing.B) {
	for _, ntb32 := range []bool{false, true} {
		f := variant(ntb32)
		for _, c := range benchCases {
			b.Run(fmt.Sprintf("%v/%s", f, c.Name), func(b *testing.B) {
				cfg := Config{NTB32: ntb32, MaxDatagrams: c.Max}
				var p Parser
				sum := 0
				fn := func(d []byte, _ uint8) { sum += len(d) }
				parse := func(agg []byte) (int, error) { return p.Parse(agg, fn) }
				prototest.BenchParse(b, new(Writer), cfg, prototest.Packets(c.Pkt, 1000), parse, "datagrams/agg")
			})
		}
	}
}
