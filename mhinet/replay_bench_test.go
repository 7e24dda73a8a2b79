package mhinet_test

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhi"
	"github.com/gomhi/gomhi/mhi/ep"
	"github.com/gomhi/gomhi/mhi/ep/ipdata"
	"github.com/gomhi/gomhi/mhi/proto/framing"
	"github.com/gomhi/gomhi/mhi/proto/ntb"
	"github.com/gomhi/gomhi/mhi/simclock"
	"github.com/gomhi/gomhi/mhi/testenv/poll"
	"github.com/gomhi/gomhi/mhi/wire"
	"github.com/gomhi/gomhi/mhinet"
	"github.com/gomhi/gomhi/pcigeneric/mock"
)

// replayHost runs the host's interrupt handling on a discrete-event clock
// and times it: the device side (the mock modem replaying prebuilt
// aggregates) runs on the same goroutine but outside the timed calls, so
// hostTime is the host's work alone.
type replayHost struct {
	clk      *simclock.Scheduler
	ctrl     *mhi.Controller
	svc      *simclock.Timer
	pending  atomic.Uint64
	hostTime time.Duration
	after    func() // runs after every host round (the feeder)
}

func (h *replayHost) interrupt(vector int) {
	h.pending.Or(1 << uint(vector))
	if !h.svc.Pending() {
		h.svc.Reset(0)
	}
}

func (h *replayHost) service() {
	vecs := h.pending.Swap(0)
	t0 := time.Now()
	for v := vecs; v != 0; v &= v - 1 {
		h.ctrl.ProcessInterrupt(bits.TrailingZeros64(v))
	}
	h.hostTime += time.Since(t0)
	if h.after != nil {
		h.after()
	}
}

// prebuiltNTB returns one NTB16 of as many size-byte IPv4 datagrams as fit
// 32 KiB (at most 32), as the modem aggregates them, and its datagram count.
func prebuiltNTB(b testing.TB, size int) ([]byte, int) {
	buf := make([]byte, ipdata.DefaultMaxAggregate)
	var w ntb.Writer
	if err := w.Reset(buf, ntb.Config{}); err != nil {
		b.Fatal(err)
	}
	pkt := make([]byte, size)
	pkt[0] = 0x45
	pkt[2], pkt[3] = byte(size>>8), byte(size)
	for w.Add(pkt) == nil {
	}
	n := w.Count()
	return buf[:w.Finish()], n
}

// BenchmarkHostReplay measures the host alone on the downlink: a replay
// device (the mock modem's DL channel fed with one prebuilt NTB, over and
// over, in virtual time) writes aggregates into the host's buffers and
// posts their events; the host handles the interrupts, walks the event
// ring, chains, de-aggregates, delivers every packet to a receiver that
// releases it, and refills. One op is one packet. host-ns/pkt is the real
// time of the host's interrupt handling per packet (nothing else runs on
// its goroutine meanwhile); allocs/pkt counts the whole process's
// allocations; copy-ns/pkt is copy() of the same packet size through a
// buffer as large as the receive pool, in the same run, and host/copy the
// ratio of the two per byte.
func BenchmarkHostReplay(b *testing.B) {
	for _, c := range []struct{ mru, size int }{{32768, 64}, {32768, 1500}, {3500, 64}, {3500, 1500}} {
		b.Run(fmt.Sprintf("mru%d/%dB", c.mru, c.size), func(b *testing.B) { benchHostReplay(b, c.mru, c.size) })
	}
}

func benchHostReplay(b *testing.B, mru, size int) {
	run, perAgg := replaySetup(b, mru, size)
	run(uint64(20 * perAgg)) // warm up: pools, rings, caches
	b.ResetTimer()
	host, mallocs := run(uint64(b.N))
	b.StopTimer()
	hostNs := float64(host.Nanoseconds()) / float64(b.N)
	b.ReportMetric(hostNs, "host-ns/pkt")
	b.ReportMetric(float64(mallocs)/float64(b.N), "allocs/pkt")

	// copy() of the same bytes from where the packets sit: one after the
	// other in buffers of mru bytes, across as much memory as the pool
	// (254 buffers), written first so that it is real memory.
	const buffers = 254
	pool := make([]byte, buffers*mru)
	for i := range pool {
		pool[i] = byte(i)
	}
	dst := make([]byte, size)
	slot := (size + 3) &^ 3
	perBuf := max(1, min(perAgg, mru/slot))
	t0 := time.Now()
	for i := range b.N {
		off := (i/perBuf)%buffers*mru + i%perBuf*slot
		copy(dst, pool[off:off+size])
	}
	copyNs := float64(time.Since(t0).Nanoseconds()) / float64(b.N)
	b.ReportMetric(copyNs, "copy-ns/pkt")
	b.ReportMetric(hostNs/copyNs, "host/copy")
}

// replaySetup opens the host and the replay device for packets of size
// bytes in aggregates of perAgg, and returns a function that replays n
// packets and returns the host's time and the process's allocations.
func replaySetup(b testing.TB, mru, size int) (run func(n uint64) (time.Duration, uint64), perAgg int) {
	clk := simclock.New()
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan struct{})
	go func() { defer close(served); clk.Serve(ctx) }()
	b.Cleanup(func() { stop(); <-served })

	h := &replayHost{clk: clk}
	h.svc = clk.NewTimer(h.service)
	m, err := mock.Open(mock.Options{
		Model:         "telit-fn990",
		Device:        func(c *ep.Config) { c.Clock = clk },
		Host:          func(o *mhi.Options) { o.PollInterval = -1 },
		InterruptSink: h.interrupt,
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = m.Close() })
	h.ctrl = m.Controller
	if err := m.Controller.PowerUp(); err != nil {
		b.Fatal(err)
	}
	rx := &countingRx{}
	d, err := mhinet.New(m.Controller, mhinet.Config{Pair: m.DataPair, Format: framing.NTB16, MRU: mru}, rx)
	if err != nil {
		b.Fatal(err)
	}
	if err := d.Up(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = d.Down() })
	pipe, _ := m.Transport.Device().Pipe(m.DataPair)
	// The modem lets the channel move data once it has posted the START
	// completion (on its control goroutine): wait for that.
	if !poll.Until(5*time.Second, func() bool { return pipe.DownlinkState() == wire.ChannelRunning }) {
		b.Fatalf("downlink %s after 5s", pipe.DownlinkState())
	}
	var agg []byte
	agg, perAgg = prebuiltNTB(b, size)

	// The feeder keeps the modem's downlink queue full of the prebuilt
	// aggregate (each TrySend copies it into a reused queue buffer).
	var target, queued uint64
	var feed *simclock.Timer
	fill := func() {
		for queued < target {
			err := pipe.TrySend(agg)
			if errors.Is(err, wire.ErrRingFull) {
				feed.Reset(50 * time.Microsecond) // look again later
				return
			}
			if err != nil {
				b.Error(err)
				return
			}
			queued += uint64(perAgg)
		}
	}
	feed = clk.NewTimer(fill)
	h.after = fill
	run = func(n uint64) (host time.Duration, mallocs uint64) {
		var ms runtime.MemStats
		start := rx.n.Load()
		var h0 time.Duration
		if err := clk.Call(ctx, func() { h0 = h.hostTime }); err != nil {
			b.Fatal(err)
		}
		runtime.ReadMemStats(&ms)
		m0 := ms.Mallocs
		_ = clk.Call(ctx, func() {
			target = queued + n
			fill()
		})
		// Not poll: a benchmark's wait in its timed loop, every 50 µs; poll's pauses (up to 20 ms) would count as time per op.
		deadline := time.Now().Add(time.Minute)
		for rx.n.Load()-start < n {
			if time.Now().After(deadline) {
				b.Fatalf("received %d of %d", rx.n.Load()-start, n)
			}
			time.Sleep(50 * time.Microsecond)
		}
		runtime.ReadMemStats(&ms)
		var h1 time.Duration
		_ = clk.Call(ctx, func() { h1 = h.hostTime })
		return h1 - h0, ms.Mallocs - m0
	}
	return run, perAgg
}

// BenchmarkElementCost measures what one more ring element costs the host:
// the same aggregates (NTBs of 32 64-byte packets, 1938 bytes) replayed
// into 32 KiB buffers (one element each) and into 256-byte buffers (eight
// elements each, chained and reassembled); element-ns is the difference
// per extra element. The timing model has no parameter for it (the
// table it is fitted to cannot see the host; docs/FIDELITY.md says so).
func BenchmarkElementCost(b *testing.B) {
	const n = 400_000
	var perAgg [2]float64
	for i, mru := range []int{32768, 256} {
		run, _ := replaySetup(b, mru, 64)
		run(20 * 32)
		host, _ := run(n)
		perAgg[i] = float64(host.Nanoseconds()) / n * 32
	}
	elems := float64((1938 + 255) / 256)
	for b.Loop() {
	}
	b.ReportMetric((perAgg[1]-perAgg[0])/(elems-1), "element-ns")
	b.ReportMetric(perAgg[0], "ntb-ns@32k")
	b.ReportMetric(perAgg[1], "ntb-ns@256")
}

// BenchmarkBufferCost measures preparing a receive buffer of each MRU's
// size for the device: zeroing it, taken in turn from a pool of 254 (the
// receive pool's size), per KiB. Go's allocator zeroes what it hands out;
// Linux's does not zero packet buffers but maps them for the device, on
// a non-coherent machine a cache operation over the whole buffer: both
// cost in proportion to the size.
func BenchmarkBufferCost(b *testing.B) {
	for _, n := range []int{3500, 16384, 32768, 65535} {
		b.Run(fmt.Sprintf("%dB", n), func(b *testing.B) {
			pool := make([][]byte, 254)
			for i := range pool {
				pool[i] = make([]byte, n)
			}
			i := 0
			for b.Loop() {
				clear(pool[i])
				i = (i + 1) % len(pool)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/(float64(n)/1024), "ns/KiB")
		})
	}
}
