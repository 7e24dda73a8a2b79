package mhinet_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhi/ep/ipdata"
	"github.com/gomhi/gomhi/mhi/proto/framing"
	"github.com/gomhi/gomhi/mhinet"
	"github.com/gomhi/gomhi/pcigeneric/mock"
)

// countingRx counts and releases at once.
type countingRx struct{ n atomic.Uint64 }

func (c *countingRx) Receive(pkts []mhinet.Packet) {
	for _, p := range pkts {
		p.Release()
	}
	c.n.Add(uint64(len(pkts)))
}

func benchDevice(b *testing.B, mru int, txAgg bool) (*mock.Mock, *mhinet.Device, *countingRx) {
	return benchDeviceCfg(b, mhinet.Config{MRU: mru, TXAggregate: txAgg})
}

// benchDeviceCfg is benchDevice with a configuration (pair and format set
// here).
func benchDeviceCfg(b *testing.B, cfg mhinet.Config) (*mock.Mock, *mhinet.Device, *countingRx) {
	m, err := mock.Open(mock.Options{Model: "telit-fn990", IPData: &ipdata.Config{Format: framing.NTB16}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = m.Close() })
	if err := m.Controller.PowerUp(); err != nil {
		b.Fatal(err)
	}
	rx := &countingRx{}
	cfg.Pair, cfg.Format = m.DataPair, framing.NTB16
	d, err := mhinet.New(m.Controller, cfg, rx)
	if err != nil {
		b.Fatal(err)
	}
	if err := d.Up(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = d.Down() })
	return m, d, rx
}

// cpuTime returns the CPU time (user + system) the process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU adds the CPU time per op (host and mock modem together, all
// goroutines) to the benchmark's output: wall time per op is bounded by
// the modelled interrupt moderation, CPU time per op by the code.
func reportCPU(b *testing.B, start time.Duration) {
	b.ReportMetric(float64((cpuTime()-start).Nanoseconds())/float64(b.N), "cpu-ns/op")
}

func waitCount(b *testing.B, c *atomic.Uint64, want uint64) {
	// Not poll: a benchmark's wait in its timed loop, every 20 µs; poll's pauses (up to 20 ms) would count as time per op.
	deadline := time.Now().Add(30 * time.Second)
	for c.Load() < want {
		if time.Now().After(deadline) {
			b.Fatalf("received %d of %d", c.Load(), want)
		}
		time.Sleep(20 * time.Microsecond)
	}
}

// BenchmarkLoopbackPath measures the whole path, one op per packet: the
// host transmits (MBIM, packets of a batch aggregated into NTBs), the mock
// modem de-aggregates and loops every packet back aggregated (up to 32 per
// 32 KiB NTB), the host receives them into MRU-sized buffers (chained when
// an NTB is larger than the MRU), de-aggregates and delivers packets.
// "copy" is the reference: copy() of the same packet size, in the same run.
func BenchmarkLoopbackPath(b *testing.B) {
	for _, size := range []int{64, 1500} {
		b.Run(fmt.Sprintf("copy/%dB", size), func(b *testing.B) {
			const footprint = 4 << 20
			src, dst := make([]byte, footprint), make([]byte, footprint)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			off := 0
			for b.Loop() {
				copy(dst[off:off+size], src[off:off+size])
				if off += size; off+size > footprint {
					off = 0
				}
			}
		})
		for _, mru := range []int{3500, 32768} {
			b.Run(fmt.Sprintf("mru%d/%dB", mru, size), func(b *testing.B) {
				_, d, rx := benchDevice(b, mru, true)
				pkts := make([][]byte, 64)
				for i := range pkts {
					pkts[i] = ipv4(size, uint32(i))
				}
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
				}
				send(5000) // warm up
				waitCount(b, &rx.n, 5000)
				base := rx.n.Load()
				b.SetBytes(int64(size))
				b.ReportAllocs()
				b.ResetTimer()
				cpu := cpuTime()
				send(b.N)
				waitCount(b, &rx.n, base+uint64(b.N))
				reportCPU(b, cpu)
			})
		}
	}
}

// BenchmarkReceivePath measures the downlink alone, one op per packet: the
// mock modem's generator fills 32-packet NTBs into the host's buffers and
// the host de-aggregates and delivers them.
func BenchmarkReceivePath(b *testing.B) {
	for _, size := range []int{64, 1500} {
		for _, mru := range []int{3500, 32768} {
			b.Run(fmt.Sprintf("mru%d/%dB", mru, size), func(b *testing.B) {
				benchReceive(b, mhinet.Config{MRU: mru}, size)
			})
		}
	}
}

// BenchmarkReceivePathRxCopy is BenchmarkReceivePath at MRU 32768 with
// copy-on-receive off (zero-copy, the in-process mock's default) and on
// (the default for VFIO and vfio-user).
func BenchmarkReceivePathRxCopy(b *testing.B) {
	for _, size := range []int{64, 1500} {
		for _, mode := range []mhinet.RxCopyMode{mhinet.RxCopyOff, mhinet.RxCopyOn} {
			b.Run(fmt.Sprintf("%dB/copy=%s", size, mode), func(b *testing.B) {
				benchReceive(b, mhinet.Config{MRU: 32768, RxCopy: mode}, size)
			})
		}
	}
}

// benchReceive runs the generator benchmark on a device with cfg.
func benchReceive(b *testing.B, cfg mhinet.Config, size int) {
	m, _, rx := benchDeviceCfg(b, cfg)
	gen := func(n int) {
		if err := m.IPData.StartGenerator(ipdata.GeneratorConfig{Count: n, Sizes: []int{size}}); err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := m.IPData.WaitGenerator(ctx); err != nil {
			b.Fatal(err)
		}
	}
	gen(5000)
	waitCount(b, &rx.n, 5000)
	base := rx.n.Load()
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	cpu := cpuTime()
	gen(b.N)
	waitCount(b, &rx.n, base+uint64(b.N))
	reportCPU(b, cpu)
}
