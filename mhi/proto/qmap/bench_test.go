package qmap

import (
	"fmt"
	"testing"

	"github.com/gomhi/gomhi/mhi/proto/internal/prototest"
)

// benchCases are the shared workloads; 1<<20 frames is no practical
// limit in 32 KB.
var benchCases = prototest.BenchCases(1 << 20)

func BenchmarkBuildQMAP(b *testing.B) {
	for _, mode := range []CsumMode{CsumNone, CsumV4, CsumV5} {
		for _, c := range benchCases {
			b.Run(fmt.Sprintf("csum=%v/%s", mode, c.Name), func(b *testing.B) {
				cfg := Config{Csum: mode, MaxPackets: c.Max, CsumValid: true}
				prototest.BenchBuild(b, new(Writer), cfg, prototest.Packets(c.Pkt, 1000), "packets/agg")
			})
		}
	}
}

func BenchmarkParseQMAP(b *testing.B) {
	for _, mode := range []CsumMode{CsumNone, CsumV4, CsumV5} {
		for _, c := range benchCases {
			b.Run(fmt.Sprintf("csum=%v/%s", mode, c.Name), func(b *testing.B) {
				cfg := Config{Csum: mode, MaxPackets: c.Max, CsumValid: true}
				p := Parser{Csum: mode}
				sum := 0
				fn := func(pk Packet) { sum += len(pk.Data) }
				parse := func(agg []byte) (int, error) { return p.Parse(agg, fn) }
				prototest.BenchParse(b, new(Writer), cfg, prototest.Packets(c.Pkt, 1000), parse, "packets/agg")
			})
		}
	}
}
