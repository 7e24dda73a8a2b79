package inproc_test

import (
	"fmt"
	"testing"

	"github.com/gomhi/gomhi/mhi/loopback"
)

// BenchmarkLoopback measures the whole LOOPBACK path: host copies the
// payload into an uplink buffer, queues it, the mock modem reads it, queues
// the echo into the host's downlink buffers, and the host takes the
// completion. One op is one payload. Copy is the reference: copy() of the
// same size, measured in the same run, walking through buffers of the same
// total size as the loopback path's (about 2 MiB), so both work from the
// same level of the cache hierarchy.
func BenchmarkLoopback(b *testing.B) {
	for _, size := range []int{64, 1500, 32768} {
		b.Run(fmt.Sprintf("copy/%dB", size), func(b *testing.B) {
			const footprint = 2 << 20
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
		b.Run(fmt.Sprintf("mhi/%dB", size), func(b *testing.B) {
			r := newRig(b, sdx55(), nil)
			c := openLoopback(b, r, loopback.Options{DLBufferSize: 32768})
			ro := loopback.RunOptions{Count: 1, MinSize: size, MaxSize: size, NoVerify: true}
			// Warm up so the steady state is measured.
			ro.Count = 200
			if _, err := c.Run(ro); err != nil {
				b.Fatal(err)
			}
			ro.Count = b.N
			b.SetBytes(int64(size))
			b.ReportAllocs()
			b.ResetTimer()
			res, err := c.Run(ro)
			b.StopTimer()
			if err != nil || res.Received != b.N {
				b.Fatalf("run: %v %+v", err, res)
			}
		})
	}
}
