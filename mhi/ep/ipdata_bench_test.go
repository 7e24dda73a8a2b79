package ep

import (
	"context"
	"fmt"
	"testing"

	"github.com/gomhi/gomhi/mhi/proto/framing"
	"github.com/gomhi/gomhi/mhi/proto/ntb"
	"github.com/gomhi/gomhi/mhi/wire"
)

// benchPipe returns ipd's pipe on a device whose downlink channel (101)
// accepts transfers without a host: the benchmark drains the queue itself.
func benchPipe(b *testing.B, ipd *IPData) (*Pipe, *channel) {
	b.Helper()
	h := newHost(b, func(c *Config) { c.Functions = map[string]Function{IPDataName: ipd} })
	p, _ := h.dev.Pipe(IPDataName)
	dl := h.dev.channelByNum(dlChan)
	dl.setState(wire.ChannelRunning)
	return p, dl
}

// drain drops every queued downlink transfer the way the worker does
// after writing it, recycling the buffers.
func drain(c *channel) {
	c.mu.Lock()
	n := c.qCount
	c.mu.Unlock()
	for range n {
		c.popDL()
	}
}

// BenchmarkIPDataReceive measures the function alone: raw uplink packets
// in, downlink aggregates built in place in the queue's buffers out.
func BenchmarkIPDataReceive(b *testing.B) {
	formats := []struct {
		name string
		cfg  IPDataConfig
	}{
		{"ntb16", IPDataConfig{Format: framing.NTB16, UplinkRaw: true}},
		{"ntb16-from-ntb", IPDataConfig{Format: framing.NTB16}},
		{"qmap", IPDataConfig{Format: framing.QMAP, UplinkRaw: true}},
		{"raw", IPDataConfig{Format: framing.RawIP}},
	}
	for _, f := range formats {
		for _, size := range []int{64, 1500} {
			b.Run(fmt.Sprintf("%s/%dB", f.name, size), func(b *testing.B) {
				ipd, err := NewIPData(f.cfg)
				if err != nil {
					b.Fatal(err)
				}
				p, dl := benchPipe(b, ipd)
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
					drain(dl)
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
