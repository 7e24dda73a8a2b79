package sweep

import (
	"context"
	"testing"

	"github.com/gomhi/gomhi/mhi/proto/framing"
)

func TestSweepSmallGrid(t *testing.T) {
	for _, mode := range []Mode{Generator, Loopback} {
		for _, f := range []framing.Format{framing.NTB16, framing.QMAP, framing.RawIP} {
			t.Run(string(mode)+"-"+f.String(), func(t *testing.T) {
				rep, err := Run(context.Background(), Options{
					Mode: mode, Format: f, Sizes: []int{64, 1500}, MRUs: []int{1024, 32768},
					Packets: 3000, Iterations: 2,
				})
				if err != nil {
					t.Fatal(err)
				}
				if len(rep.Points) != 4 || !rep.Conserved() {
					t.Fatalf("%+v", rep)
				}
				for _, p := range rep.Points {
					t.Logf("mru %5d size %4d: %8.0f pps  %.3f elem/pkt %.3f ev/pkt %.3f chains/pkt  %.1f pkt/xfer", p.MRU, p.Size, p.PPS.Median, p.ElementsPerPacket, p.EventsPerPacket, p.ChainsPerPacket, p.PacketsPerTransfer)
					if p.Delivered != 6000 || p.PPS.Min <= 0 || p.PPS.Min > p.PPS.Median || p.PPS.Median > p.PPS.Max {
						t.Errorf("point %+v", p)
					}
					// 1500-byte packets never fit a 1024-byte buffer: every
					// transfer must have been chained.
					if p.MRU == 1024 && p.Size == 1500 && p.ChainsPerPacket == 0 {
						t.Errorf("no chains at MRU 1024 with 1500-byte packets: %+v", p)
					}
					if p.MRU == 32768 && p.ChainsPerPacket != 0 {
						t.Errorf("chains at MRU 32768: %+v", p)
					}
				}
			})
		}
	}
}

func TestOptionsRejected(t *testing.T) {
	for _, o := range []Options{
		{MRUs: []int{100}},
		{Sizes: []int{10}},
		{Mode: "sideways"},
		{Packets: -1},
		{Model: "no-such-model", Sizes: []int{64}, MRUs: []int{3500}, Packets: 1, Iterations: 1},
	} {
		if _, err := Run(context.Background(), o); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
}
