package mhinet_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhi/ep/ipdata"
	"github.com/gomhi/gomhi/mhi/proto/framing"
	"github.com/gomhi/gomhi/mhinet"
	"github.com/gomhi/gomhi/pcigeneric/mock"
)

// sinkRig opens a mock modem whose IP data function answers only echo
// requests and UDP to port 7, so the UDP packets of these benchmarks are
// consumed and counted (DroppedNotAnswered): the uplink alone is measured.
func sinkRig(b *testing.B, model string, dev ipdata.Config, cfg mhinet.Config) (*mock.Mock, *mhinet.Device) {
	b.Helper()
	dev.Responder = true
	m, err := mock.Open(mock.Options{Model: model, IPData: &dev})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = m.Close() })
	if err := m.Controller.PowerUp(); err != nil {
		b.Fatal(err)
	}
	cfg.Pair = m.DataPair
	d, err := mhinet.New(m.Controller, cfg, &countingRx{})
	if err != nil {
		b.Fatal(err)
	}
	if err := d.Up(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = d.Down() })
	return m, d
}

// waitUL waits until the modem has consumed want uplink packets.
func waitUL(b *testing.B, m *mock.Mock, want uint64) {
	b.Helper()
	// Not poll: a benchmark's wait in its timed loop, every 200 µs; poll's pauses (up to 20 ms) would count as time per op.
	deadline := time.Now().Add(60 * time.Second)
	for {
		s := m.IPData.Stats()
		if s.ULPackets+s.DroppedEmpty >= want {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("modem consumed %d of %d uplink packets", s.ULPackets, want)
		}
		time.Sleep(200 * time.Microsecond)
	}
}

// BenchmarkUplink measures the uplink alone, one op per packet: Transmit
// in batches of 64 (as the TUN bridge hands them over), MBIM NTB16 or QMAP
// framing, one packet per element or aggregated with rmnet's limits (4096
// bytes, 16 packets, 800 µs); the mock modem de-aggregates and consumes.
func BenchmarkUplink(b *testing.B) {
	for _, f := range []struct {
		name  string
		model string
		f     framing.Format
	}{
		{"mbim", "telit-fn990", framing.NTB16},
		{"qmap", mock.DefaultModel, framing.QMAP},
	} {
		for _, agg := range []bool{false, true} {
			for _, size := range []int{64, 1500} {
				mode := "noagg"
				if agg {
					mode = "agg"
				}
				b.Run(fmt.Sprintf("%s/%s/%dB", f.name, mode, size), func(b *testing.B) {
					m, d := sinkRig(b, f.model, ipdata.Config{Format: f.f},
						mhinet.Config{Format: f.f, TXAggregate: agg})
					pkts := make([][]byte, 64)
					for i := range pkts {
						pkts[i] = udp4(make([]byte, size), size, freePort, uint32(i))
					}
					var total uint64
					send := func(n int) {
						for sent := 0; sent < n; {
							k, err := d.Transmit(pkts[:min(len(pkts), n-sent)])
							sent += k
							if errors.Is(err, mhinet.ErrBusy) {
								time.Sleep(5 * time.Microsecond)
							} else if err != nil {
								b.Fatal(err)
							}
						}
						total += uint64(n)
					}
					send(5000) // warm up
					waitUL(b, m, total)
					b.SetBytes(int64(size))
					b.ReportAllocs()
					b.ResetTimer()
					start, cpu := time.Now(), cpuTime()
					send(b.N)
					_ = d.Flush()
					waitUL(b, m, total)
					el := time.Since(start)
					reportCPU(b, cpu)
					b.ReportMetric(float64(b.N)/el.Seconds(), "pkts/s")
					if s := d.Stats(); agg && s.TxAggregated == 0 {
						b.Fatal("no aggregation")
					}
				})
			}
		}
	}
}

// Head-of-line scenario (vhost-net, March 2014): one flow the modem shapes
// to hlRate packets/s, one free flow, sent alternately by one sender.
const (
	hlRate  = 1000
	hlQueue = 256
	hlSize  = 1000
)

// BenchmarkHeadOfLine sends the two flows alternately, one op per free
// packet (so ns/op is the free flow's time per packet and MB/s its
// throughput), in three modes:
//
//   - zerocopy-only: TransmitZC without the fallback. The shaped flow's
//     slots stay pinned in the modem's queue until the shaper sends them;
//     once every slot is pinned, the sender waits for a release.
//   - copy-only: Transmit from the sender's own buffer. The shaped flow's
//     packets are copied into the modem's queue (tail-dropped when full).
//   - fallback: TransmitZC with the fallback: zero-copy until half the
//     ring is pinned, copies after that.
//   - unshaped: the reference: fallback mode, but the modem shapes
//     nothing, so both flows run free.
//
// Reported: free-pkts/s, cpu-ns/pkt (process CPU, host and modem, per
// packet of either flow), cpu-% (process CPU time over wall time, in % of
// one core, as vhost's figures are), the share of packets sent zero-copy
// and the most zero-copy slots pending at once.
func BenchmarkHeadOfLine(b *testing.B) {
	for _, mode := range []string{"zerocopy-only", "copy-only", "fallback", "unshaped"} {
		b.Run(mode, func(b *testing.B) {
			shape := ipdata.ShapeConfig{UDPPort: shapedPort, Rate: hlRate, Queue: hlQueue}
			if mode == "unshaped" {
				shape = ipdata.ShapeConfig{}
			}
			m, err := mock.Open(mock.Options{IPData: &ipdata.Config{Format: framing.RawIP,
				Responder: true, Shape: shape}})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = m.Close() })
			if err := m.Controller.PowerUp(); err != nil {
				b.Fatal(err)
			}
			cfg := mhinet.Config{Pair: m.DataPair, TXZeroCopy: true, TXZeroCopyNotify: true,
				TXZeroCopyNoFallback: mode == "zerocopy-only"}
			d, err := mhinet.New(m.Controller, cfg, &countingRx{})
			if err != nil {
				b.Fatal(err)
			}
			if err := d.Up(); err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = d.Down() })
			reg, err := d.ZeroCopyRegion()
			if err != nil {
				b.Fatal(err)
			}
			if err := m.IPData.SetLendRegion(reg); err != nil {
				b.Fatal(err)
			}
			released := d.TXReleased()
			own := make([]byte, hlSize)
			one := make([][]byte, 1)
			zc := make([]*mhinet.ZCBuffer, 1)
			seq := uint32(0)
			// sendOne sends the next packet of the alternation.
			sendOne := func() {
				port := uint16(freePort)
				if seq%2 == 0 {
					port = shapedPort
				}
				seq++
				if mode == "copy-only" {
					one[0] = udp4(own, hlSize, port, seq)
					for {
						n, err := d.Transmit(one)
						if n == 1 {
							return
						}
						if !errors.Is(err, mhinet.ErrBusy) {
							b.Fatal(err)
						}
						time.Sleep(10 * time.Microsecond)
					}
				}
				var buf *mhinet.ZCBuffer
				select {
				case buf = <-released:
				default:
					if buf, err = d.TXBuffer(); errors.Is(err, mhinet.ErrBusy) {
						buf = <-released // every slot is with the modem: wait
					} else if err != nil {
						b.Fatal(err)
					}
				}
				buf.SetLen(len(udp4(buf.Bytes(), hlSize, port, seq)))
				zc[0] = buf
				for {
					n, err := d.TransmitZC(zc)
					if n == 1 {
						return
					}
					if !errors.Is(err, mhinet.ErrBusy) {
						b.Fatal(err)
					}
					time.Sleep(10 * time.Microsecond)
				}
			}
			// Warm up into the steady state: the modem's queue or the
			// slots full.
			for t0 := time.Now(); time.Since(t0) < 200*time.Millisecond && seq < 4*hlQueue; {
				sendOne()
			}
			s0 := d.Stats()
			b.SetBytes(hlSize)
			b.ReportAllocs()
			b.ResetTimer()
			start, cpu, seq0 := time.Now(), cpuTime(), seq
			for range b.N {
				sendOne() // shaped
				sendOne() // free
			}
			el := time.Since(start)
			used := cpuTime() - cpu
			b.StopTimer()
			s := d.Stats()
			pkts := float64(seq - seq0)
			b.ReportMetric(float64(b.N)/el.Seconds(), "free-pkts/s")
			b.ReportMetric(float64(used.Nanoseconds())/pkts, "cpu-ns/pkt")
			b.ReportMetric(100*used.Seconds()/el.Seconds(), "cpu-%")
			b.ReportMetric(100*float64(s.TxZeroCopy-s0.TxZeroCopy)/pkts, "%zerocopy")
			b.ReportMetric(float64(s.TxZCPendingHigh), "zc-pending-max")
		})
	}
}
