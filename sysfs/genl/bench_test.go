package genl_test

import (
	"slices"
	"testing"
	"time"

	"github.com/gomhi/gomhi/sysfs/genl"
)

// percentiles returns the 50th and 99th percentile of d (sorted in place).
func percentiles(d []time.Duration) (p50, p99 time.Duration) {
	if len(d) == 0 {
		return 0, 0
	}
	slices.Sort(d)
	return d[len(d)*50/100], d[min(len(d)*99/100, len(d)-1)]
}

// roundTrips times op n times.
func roundTrips(tb testing.TB, n int, op func() error) []time.Duration {
	tb.Helper()
	d := make([]time.Duration, 0, n)
	for range n {
		start := time.Now()
		if err := op(); err != nil {
			tb.Fatal(err)
		}
		d = append(d, time.Since(start))
	}
	return d
}

// BenchmarkRoundTrip times GET_DEVICE and SET_DEVICE (timeout-ms, which
// the tree applies without touching the data path) between a client and a
// server in this process over real NETLINK_USERSOCK sockets, with the
// server reading a tree bound to the mock modem. Besides ns/op it reports
// the median and 99th percentile of the individual round trips.
func BenchmarkRoundTrip(b *testing.B) {
	tr, _ := newTree(b, false)
	c := dial(b, startServer(b, tr).Port())
	ops := []struct {
		name string
		op   func(i int) error
	}{
		{"GET_DEVICE", func(int) error { _, err := c.GetDevice("mhi0"); return err }},
		{"SET_DEVICE", func(i int) error {
			_, err := c.SetDevice("mhi0", genl.SetRequest{TimeoutMs: u32(uint32(5000 + i%2))})
			return err
		}},
	}
	for _, o := range ops {
		b.Run(o.name, func(b *testing.B) {
			d := make([]time.Duration, 0, 4096)
			i := 0
			for b.Loop() {
				start := time.Now()
				if err := o.op(i); err != nil {
					b.Fatal(err)
				}
				d = append(d, time.Since(start))
				i++
			}
			p50, p99 := percentiles(d)
			b.ReportMetric(float64(p50.Nanoseconds()), "p50-ns")
			b.ReportMetric(float64(p99.Nanoseconds()), "p99-ns")
		})
	}
}

// TestRoundTripLatency times 2000 GET_DEVICE and 2000 SET_DEVICE round
// trips and logs their median and 99th percentile (run with -v; skipped
// with -short). It asserts only a generous bound, as a smoke test.
func TestRoundTripLatency(t *testing.T) {
	if testing.Short() {
		t.Skip("latency measurement skipped in -short mode")
	}
	tr, _ := newTree(t, false)
	c := dial(t, startServer(t, tr).Port())
	const n = 2000
	get := roundTrips(t, n, func() error { _, err := c.GetDevice("mhi0"); return err })
	i := 0
	set := roundTrips(t, n, func() error {
		i++
		_, err := c.SetDevice("mhi0", genl.SetRequest{TimeoutMs: u32(uint32(5000 + i%2))})
		return err
	})
	for _, m := range []struct {
		name string
		d    []time.Duration
	}{{"GET_DEVICE", get}, {"SET_DEVICE", set}} {
		p50, p99 := percentiles(m.d)
		t.Logf("%s: %d round trips, p50 %v, p99 %v", m.name, n, p50, p99)
		if p50 > 50*time.Millisecond {
			t.Errorf("%s median %v", m.name, p50)
		}
	}
}
