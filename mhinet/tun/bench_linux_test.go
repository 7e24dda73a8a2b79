package tun_test

import (
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhi/ep"
	"github.com/gomhi/gomhi/mhinet"
	"github.com/gomhi/gomhi/mhinet/tun"
	"github.com/gomhi/gomhi/pcigeneric"
)

// benchPacket is the IP packet size of the benchmark traffic.
const benchPacket = 1500

// startSender floods 198.18.0.2:9 from 198.18.0.1 with benchPacket-byte IP
// packets until the benchmark ends. The socket is made on the calling
// (namespaced) thread; the sending goroutine may run anywhere. Send errors
// (ENOBUFS when the TUN queue is full) are ignored: the kernel counts
// those drops, the benchmark counts what arrives.
func startSender(b *testing.B) {
	b.Helper()
	conn, err := net.DialUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(localAddr, 0)), net.UDPAddrFromAddrPort(netip.AddrPortFrom(peerAddr, 9)))
	if err != nil {
		b.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		payload := make([]byte, benchPacket-28)
		for {
			select {
			case <-stop:
				return
			default:
			}
			_, _ = conn.Write(payload)
		}
	}()
	b.Cleanup(func() {
		close(stop)
		wg.Wait()
		_ = conn.Close()
	})
}

// reportRate reports packets per second over the timed part.
func reportRate(b *testing.B, packets int) {
	b.ReportMetric(float64(packets)/b.Elapsed().Seconds(), "pkts/s")
	b.ReportMetric(float64(packets)*benchPacket*8/b.Elapsed().Seconds()/1e9, "Gbit/s")
}

// The baseline: kernel → TUN read → TUN write back, batched, with nothing
// between read and write. b.N counts packets.
func BenchmarkRawTUN(b *testing.B) {
	enterNetns(b)
	ifc := openTUN(b)
	bufs := make([][]byte, tun.DefaultBatch)
	for i := range bufs {
		bufs[i] = make([]byte, 2048)
	}
	sizes := make([]int, len(bufs))
	out := make([][]byte, len(bufs))
	startSender(b)
	b.ResetTimer()
	for got := 0; got < b.N; {
		n, err := ifc.Read(bufs, sizes)
		if err != nil {
			b.Fatal(err)
		}
		for i := range n {
			out[i] = bufs[i][:sizes[i]]
		}
		if _, err := ifc.Write(out[:n]); err != nil {
			b.Fatal(err)
		}
		got += n
	}
	b.StopTimer()
	reportRate(b, b.N)
}

// The same traffic through the Bridge and the mock modem: kernel → TUN
// read → Transmit → uplink → modem internal loopback (raw IP) → downlink →
// Receive → TUN write. b.N counts packets written back to the TUN.
//
// Sub-benchmarks: raw (IP_HW0, one packet per transfer each way, as the
// default model) and ntb16 (IP_HW0_MBIM with transmit aggregation, the
// modem aggregating up to 32 packets per NTB).
func BenchmarkBridge(b *testing.B) {
	for _, c := range []struct {
		name  string
		model string
		ipd   ep.IPDataConfig
		cfg   mhinet.Config
	}{
		{"raw", pcigeneric.DefaultModel, ep.IPDataConfig{Format: ep.FormatRaw}, mhinet.Config{Format: mhinet.FormatRawIP}},
		{"ntb16", "telit-fn990", ep.IPDataConfig{Format: ep.FormatNTB16}, mhinet.Config{Format: mhinet.FormatMBIM, TXAggregate: true}},
	} {
		b.Run(c.name, func(b *testing.B) { benchBridge(b, c.model, c.ipd, c.cfg) })
	}
}

func benchBridge(b *testing.B, model string, ipd ep.IPDataConfig, cfg mhinet.Config) {
	enterNetns(b)
	ifc := openTUN(b)
	r := newRig(b, ifc, model, ipd, cfg, tun.BridgeConfig{}, true)
	startSender(b)
	// Let the pipeline fill before timing.
	r.waitStats(b, "first packets", func(s tun.BridgeStats) bool { return s.DownlinkPackets > 0 })
	base := r.bridge.Stats().DownlinkPackets
	b.ResetTimer()
	last, lastAt := base, time.Now()
	for {
		got := r.bridge.Stats().DownlinkPackets
		if got-base >= uint64(b.N) {
			break
		}
		if got != last {
			last, lastAt = got, time.Now()
		} else if time.Since(lastAt) > 10*time.Second {
			b.Fatalf("stalled: bridge %+v device %+v", r.bridge.Stats(), r.dev.Stats())
		}
		time.Sleep(50 * time.Microsecond)
	}
	b.StopTimer()
	reportRate(b, b.N)
	s := r.bridge.Stats()
	b.ReportMetric(float64(s.UplinkPackets)/float64(max(s.UplinkReads, 1)), "pkts/read")
	b.ReportMetric(float64(s.BusyRetries)/float64(max(s.UplinkReads, 1)), "busy/read")
	if s.UplinkDropped()+s.WriteErrors != 0 {
		b.Logf("bridge drops: %+v", s)
	}
}
