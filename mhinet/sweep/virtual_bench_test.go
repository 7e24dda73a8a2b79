package sweep

import (
	"context"
	"testing"

	"github.com/gomhi/gomhi/mhinet"
)

// BenchmarkVirtualSweep simulates a grid of the default sweep's shape
// (small and large packets, a small and a large MRU) in virtual time with
// the shipped profile, one point at a time; it reports the real CPU cost
// of one simulated packet (ns/pkt), which is what a full 'mhictl bench'
// costs per packet delivered.
func BenchmarkVirtualSweep(b *testing.B) {
	prof, err := LoadProfile("mru-thread")
	if err != nil {
		b.Fatal(err)
	}
	const packets = 500000
	sizes, mrus := []int{64, 512, 1263, 1500}, []int{3500, 32768}
	b.ResetTimer()
	for b.Loop() {
		rep, err := Run(context.Background(), Options{
			Format: mhinet.FormatMBIM, Sizes: sizes, MRUs: mrus,
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
