package vfiouser

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhi/loopback"
	"github.com/gomhi/gomhi/pcigeneric/vfiouser/client"
)

// BenchmarkLoopback measures the LOOPBACK path with host and mock modem in
// one process joined by vfio-user over a socket pair: doorbells and
// register reads are messages, payloads move through the shared memfd,
// interrupts through eventfds. One op is one payload; compare with
// mhi/inproc's BenchmarkLoopback.
func BenchmarkLoopback(b *testing.B) {
	for _, size := range []int{64, 1500} {
		b.Run(fmt.Sprintf("vfiouser/%dB", size), func(b *testing.B) {
			r := newRig(b, client.Options{}, 2*time.Second)
			if err := r.ctrl.PowerUp(); err != nil {
				b.Fatal(err)
			}
			c, err := loopback.Open(r.ctrl, loopback.Options{DLBufferSize: 32768})
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			ro := loopback.RunOptions{Count: 200, MinSize: size, MaxSize: size, NoVerify: true}
			if _, err := c.Run(ro); err != nil {
				b.Fatal(err)
			}
			ro.Count = b.N
			b.SetBytes(int64(size))
			b.ReportAllocs()
			msgs := r.dev.Stats().Messages
			var m0, m1 runtime.MemStats
			runtime.ReadMemStats(&m0)
			b.ResetTimer()
			res, err := c.Run(ro)
			b.StopTimer()
			runtime.ReadMemStats(&m1)
			if err != nil || res.Received != b.N {
				b.Fatalf("run: %v %+v", err, res)
			}
			b.ReportMetric(float64(r.dev.Stats().Messages-msgs)/float64(b.N), "msgs/op")
			// allocs/op is rounded down to an integer; this is the fraction.
			b.ReportMetric(float64(m1.Mallocs-m0.Mallocs)/float64(b.N), "mallocs/op")
		})
	}
}
