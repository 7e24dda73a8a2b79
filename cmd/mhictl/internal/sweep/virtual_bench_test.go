package sweep

import (
	"context"
	"testing"

	"github.com/gomhi/gomhi/mhi/proto/framing"
)

// BenchmarkVirtualSweep simulates the default sweep's grid in virtual time
// with the shipped profile (fewer packets, one iteration), one point at a
// time; it reports the real time of one simulated packet (ns/pkt): a full
// 'mhictl bench' (440 million packets) costs about that per packet.
func BenchmarkVirtualSweep(b *testing.B) {
	prof, err := LoadProfile("mru-thread")
	if err != nil {
		b.Fatal(err)
	}
	const packets = 200000
	sizes, mrus := DefaultSizes, DefaultMRUs
	b.ResetTimer()
	for b.Loop() {
		rep, err := Run(context.Background(), Options{
			Format: framing.NTB16, Sizes: sizes, MRUs: mrus,
			Packets: packets, Iterations: 1, Timing: prof, Parallel: 1,
		})
		if err != nil {
			b.Fatal(err)
		}
		if !rep.Conserved() {
			b.Fatal("not conserved")
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*packets*len(sizes)*len(mrus)), "ns/pkt")
}
