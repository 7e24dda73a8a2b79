package ipdata

import (
	"context"
	"fmt"
	"testing"

	"github.com/gomhi/gomhi/mhi/ep"
	"github.com/gomhi/gomhi/mhi/ep/eptest"
	"github.com/gomhi/gomhi/mhi/proto/framing"
	"github.com/gomhi/gomhi/mhi/proto/ntb"
)

// benchPipe returns ipd's pipe on a device whose downlink channel (101)
// accepts transfers without a host, and what drains its queue: the
// benchmark drains it itself.
func benchPipe(b *testing.B, ipd *Function) (*ep.Pipe, func()) {
	b.Helper()
	h := eptest.NewHost(b, func(c *ep.Config) { c.Functions = map[string]ep.Function{Name: ipd} })
	p, _ := h.Dev.Pipe(Name)
	return p, p.RunDLWithoutHost()
}

// BenchmarkIPDataReceive measures the function alone: raw uplink packets
// in, downlink aggregates built in place in the queue's buffers out.
func BenchmarkIPDataReceive(b *testing.B) {
	formats := []struct {
		name string
		cfg  Config
	}{
		{"ntb16", Config{Format: framing.NTB16, UplinkRaw: true}},
		{"ntb16-from-ntb", Config{Format: framing.NTB16}},
		{"qmap", Config{Format: framing.QMAP, UplinkRaw: true}},
		{"raw", Config{Format: framing.RawIP}},
	}
	for _, f := range formats {
		for _, size := range []int{64, 1500} {
			b.Run(fmt.Sprintf("%s/%dB", f.name, size), func(b *testing.B) {
				ipd, err := New(f.cfg)
				if err != nil {
					b.Fatal(err)
				}
				p, drain := benchPipe(b, ipd)
				pkt := testPacket(size, 1)
				if !f.cfg.UplinkRaw && f.cfg.Format == framing.NTB16 {
					// One-datagram uplink NTBs, as mhi_wwan_mbim sends.
					tx := make([]byte, ntb.TXHeaderLen+size)
					if _, err := ntb.EncodeTX(tx, pkt, 0, 0); err != nil {
						b.Fatal(err)
					}
					pkt = tx
				}
				ctx := context.Background()
				b.SetBytes(int64(size)) // IP bytes per packet
				b.ReportAllocs()
				for b.Loop() {
					if err := ipd.Receive(ctx, p, pkt); err != nil {
						b.Fatal(err)
					}
					drain()
				}
				b.StopTimer()
				ipd.Flush()
				s := ipd.Stats()
				if s.Dropped() != 0 {
					b.Fatalf("dropped: %+v", s)
				}
				b.ReportMetric(s.AvgDatagrams(), "pkts/agg")
			})
		}
	}
}
