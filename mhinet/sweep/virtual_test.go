package sweep

import (
	"context"
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhinet"
)

func TestVirtualSmoke(t *testing.T) {
	prof, err := LoadProfile("mru-thread")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	rep, err := Run(context.Background(), Options{
		Format: mhinet.FormatMBIM, Sizes: []int{64, 1262, 1263, 1500}, MRUs: []int{3500, 32768},
		Packets: 20000, Iterations: 2, Timing: prof,
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range rep.Points {
		t.Logf("mru %5d size %4d: %8.0f pps %6.2f%% elem/pkt %.3f ev/pkt %.3f pkt/xfer %.1f cpu %.0f ns/pkt sent %d deliv %d drops %v cons %v",
			p.MRU, p.Size, p.PPS.Median, p.LineRatePct.Median, p.ElementsPerPacket, p.EventsPerPacket, p.PacketsPerTransfer, p.HostCPUNsPerPacket, p.Sent, p.Delivered, p.Drops, p.Conserved)
	}
	t.Logf("elapsed %v", time.Since(start))
}
