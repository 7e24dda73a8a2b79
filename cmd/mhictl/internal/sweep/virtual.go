package sweep

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gomhi/gomhi/mhi"
	"github.com/gomhi/gomhi/mhi/ep"
	"github.com/gomhi/gomhi/mhi/ep/ipdata"
	"github.com/gomhi/gomhi/mhi/simclock"
	"github.com/gomhi/gomhi/mhi/wire"
	"github.com/gomhi/gomhi/mhinet"
	"github.com/gomhi/gomhi/pcigeneric/mock"
)

// In timing mode (Options.Timing) every point runs on a system of its own —
// a fresh mock modem and host, and a discrete-event clock — so that its
// figures depend on nothing but the profile, the point and the number of
// packets, whichever worker runs it and in whatever order. The clock's
// events run on one goroutine per point; points run in parallel.

// virtualNTBAlign is the datagram alignment of the modelled modem's NTBs
// (docs/FIDELITY.md: the cliff hypothesis).
const virtualNTBAlign = 8

// virtualFlushTimer is the modelled modem's aggregation timeout: an
// aggregate not full leaves at most this long after its first packet. With
// a receive queue (ingress_queue) every batch's last aggregate leaves with
// the batch and the timer never runs out.
const virtualFlushTimer = time.Millisecond

// errStalled: an iteration in virtual time stopped delivering.
var errStalled = errors.New("sweep: the simulation stopped delivering packets")

// runVirtual runs the sweep in virtual time.
func runVirtual(ctx context.Context, o *Options, rep *Report) error {
	m, err := newModel(o.Timing)
	if err != nil {
		return err
	}
	type job struct {
		idx       int
		mru, size int
	}
	var jobs []job
	for _, mru := range o.MRUs {
		for _, size := range o.Sizes {
			jobs = append(jobs, job{len(jobs), mru, size})
		}
	}
	points := make([]Point, len(jobs))
	errs := make([]error, len(jobs))
	workers := o.Parallel
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	workers = min(workers, len(jobs))
	var (
		next     atomic.Int64
		progMu   sync.Mutex
		progDone int
		wg       sync.WaitGroup
	)
	total := len(jobs) * o.Iterations
	progress := func() {
		if o.Progress == nil {
			return
		}
		progMu.Lock()
		progDone++
		o.Progress(progDone, total)
		progMu.Unlock()
	}
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= len(jobs) || ctx.Err() != nil {
					return
				}
				j := jobs[i]
				points[j.idx], errs[j.idx] = simulatePoint(ctx, o, &m, j.mru, j.size, progress)
			}
		}()
	}
	wg.Wait()
	for i, p := range points {
		if errs[i] != nil {
			return fmt.Errorf("sweep: MRU %d, size %d: %w", jobs[i].mru, jobs[i].size, errs[i])
		}
		rep.Points = append(rep.Points, p)
	}
	return ctx.Err()
}

// simHost is the host's side of the simulation: it takes the modem's
// interrupts, runs the host's real interrupt handling on the clock when
// the modelled host is free, and charges the modelled time of what that
// handling did.
type simHost struct {
	clk   *simclock.Scheduler
	m     *model
	mru   int
	ctrl  *mhi.Controller
	dev   *ep.Device
	dl    *mhi.Channel
	dlNum uint8
	rx    *counter

	svc     *simclock.Timer // the host's interrupt handling
	wake    *simclock.Timer // the modem noticing what the host posted
	pending atomic.Uint64   // vectors raised, not handled yet
	free    atomic.Int64    // virtual time (ns) until which the host is busy

	// The iteration in progress (run on the clock's goroutine).
	target   uint64        // rx count that ends it
	active   bool          // an iteration waits for target
	end      time.Duration // when its last packet was delivered
	done     chan struct{}
	cpu      time.Duration // real time spent in the host's handling
	services uint64
}

func newSimHost(clk *simclock.Scheduler, m *model, mru int) *simHost {
	h := &simHost{clk: clk, m: m, mru: mru}
	h.svc = clk.NewTimer(h.service)
	h.wake = clk.NewTimer(func() {
		if h.dev != nil {
			h.dev.Wake(h.dlNum)
		}
	})
	return h
}

// interrupt is the transport's interrupt sink: the vector is handled when
// the host is free.
func (h *simHost) interrupt(vector int) {
	h.pending.Or(1 << uint(vector))
	if !h.svc.Pending() {
		h.svc.ResetAt(time.Duration(h.free.Load()))
	}
}

// counters is what the host's cost is computed from.
func (h *simHost) counters() (elements, posted, packets, bytes uint64) {
	if h.dl != nil {
		st := h.dl.Stats()
		elements, posted = st.Completed.Load(), st.Queued.Load()
	}
	return elements, posted, h.rx.pkts.Load(), h.rx.bytes.Load()
}

// service handles the pending vectors with the host's real code and makes
// the modelled host busy for what it did.
func (h *simHost) service() {
	vecs := h.pending.Swap(0)
	if vecs == 0 {
		return
	}
	_, q0, p0, _ := h.counters()
	t0 := time.Now()
	for v := vecs; v != 0; v &= v - 1 {
		h.ctrl.ProcessInterrupt(bits.TrailingZeros64(v))
	}
	h.cpu += time.Since(t0)
	h.services++
	_, q1, p1, _ := h.counters()
	now := h.clk.Now()
	free := now + h.m.hostCost(p1-p0, q1-q0, h.mru)
	h.free.Store(int64(free))
	// The modem sees the buffers the host posted once the host is done.
	if q1 != q0 {
		h.wake.ResetAt(free)
	}
	if h.pending.Load() != 0 {
		h.svc.ResetAt(free)
	}
	if h.active && p1 >= h.target {
		h.active = false
		h.end = free
		close(h.done)
	}
}

// simulatePoint opens a system in virtual time, runs the point's
// iterations and closes it.
func simulatePoint(ctx context.Context, o *Options, m *model, mru, size int, progress func()) (Point, error) {
	p := Point{MRU: mru, Size: size, IPSize: size - FrameHeader, Iterations: o.Iterations}
	s, err := openSimSystem(ctx, o, m, mru, p.IPSize)
	defer s.close()
	if err != nil {
		return p, err
	}
	p.RingMemory = (s.dl.Config().Elements - 1) * mru
	return s.runIterations(ctx, o, p, progress)
}

// simSystem is one point's system in virtual time: the clock, the mock
// modem and the host's network device on it.
type simSystem struct {
	m       *model
	clk     *simclock.Scheduler
	h       *simHost
	mock    *mock.Mock
	dev     *mhinet.Device
	dl      *mhi.Channel
	closers []func() // undo what was opened, run last first
}

// close undoes what openSimSystem did, in reverse order.
func (s *simSystem) close() {
	for i := len(s.closers) - 1; i >= 0; i-- {
		s.closers[i]()
	}
}

// openSimSystem starts a clock, opens a mock modem on it with the
// model's timing, powers it up and brings up the network device with
// MRU mru, and waits until the downlink runs. The returned system is
// never nil: close it even on error.
func openSimSystem(ctx context.Context, o *Options, m *model, mru, ipSize int) (*simSystem, error) {
	s := &simSystem{m: m, clk: simclock.New()}
	clk := s.clk
	sctx, stop := context.WithCancel(ctx)
	s.closers = append(s.closers, stop)
	served := make(chan struct{})
	go func() {
		defer close(served)
		clk.Serve(sctx)
	}()
	s.closers = append(s.closers, func() { stop(); <-served })

	h := newSimHost(clk, m, mru)
	s.h = h
	h.rx = &counter{}
	mk, err := mock.Open(simMockOptions(o, m, clk, h))
	if err != nil {
		return s, err
	}
	s.mock = mk
	s.closers = append(s.closers, func() { mk.Close() })
	if mk.IPData == nil {
		return s, fmt.Errorf("sweep: model %s has no IP data channel", o.Model)
	}
	// The clock's goroutine reads these (service, wake): set them there.
	if err := clk.Call(ctx, func() { h.ctrl, h.dev = mk.Controller, mk.Transport.Device() }); err != nil {
		return s, err
	}
	if err := mk.Controller.PowerUp(); err != nil {
		return s, err
	}
	dev, err := mhinet.New(mk.Controller, mhinet.Config{
		Pair: mk.DataPair, Format: o.Format, MRU: mru, MTU: max(ipSize, mhinet.DefaultMTU), Logger: o.Logger,
	}, h.rx)
	if err != nil {
		return s, err
	}
	if err := dev.Up(); err != nil {
		return s, err
	}
	s.dev = dev
	s.closers = append(s.closers, func() { dev.Down() })
	// The modem lets a started channel move data once it has posted the
	// START completion, on its control goroutine (real time): wait for it.
	if err := waitDownlinkRunning(ctx, mk.Transport.Device(), mk.DataPair, o.Stall); err != nil {
		return s, err
	}
	_, dl, _ := mk.Controller.ChannelPair(mk.DataPair)
	if err := clk.Call(ctx, func() { h.dl, h.dlNum = dl, dl.Num() }); err != nil {
		return s, err
	}
	s.dl = dl
	return s, nil
}

// simMockOptions configures the mock modem of a point: the model's
// timing on clock clk, interrupts to h, and the host polling nothing.
func simMockOptions(o *Options, m *model, clk *simclock.Scheduler, h *simHost) mock.Options {
	return mock.Options{
		Model: o.Model, Logger: o.Logger,
		IPData: &ipdata.Config{
			Format: o.Format, MaxDatagrams: o.MaxDatagrams, MaxAggregate: o.MaxAggregate,
			NTBDatagramAlign: virtualNTBAlign, FlushTimer: virtualFlushTimer,
		},
		Device: func(c *ep.Config) {
			c.Clock = clk
			c.Timing = m.modemTiming()
			c.DLQueueDepth = virtualDLQueueDepth
		},
		Host:          func(ho *mhi.Options) { ho.PollInterval = -1 },
		InterruptSink: h.interrupt,
	}
}

// runIterations runs the point's iterations on s and fills p's figures.
func (s *simSystem) runIterations(ctx context.Context, o *Options, p Point, progress func()) (Point, error) {
	var tot delta
	var pps, pct, mbps []float64
	line := LineRatePPS(s.m.linkRate, p.Size)
	for it := 0; it < o.Iterations; it++ {
		d, err := s.h.iteration(ctx, o, s.mock.IPData, s.dev, p.IPSize)
		if err != nil {
			return p, fmt.Errorf("iteration %d: %w", it+1, err)
		}
		secs := d.elapsed.Seconds()
		r := float64(d.delivered) / secs
		pps = append(pps, r)
		pct = append(pct, 100*r/line)
		mbps = append(mbps, float64(d.bytes)/secs/1e6)
		tot.add(d)
		progress()
	}
	lr := summarize(pct)
	p.PPS, p.LineRatePct, p.MBps = summarize(pps), &lr, summarize(mbps)
	p.PoolMemory = s.dev.Stats().PoolMemory
	tot.fill(&p)
	if tot.delivered > 0 {
		p.HostCPUNsPerPacket = float64(tot.hostCPU.Nanoseconds()) / float64(tot.delivered)
	}
	return p, nil
}

// iterSnapshot is what an iteration's figures are the difference of,
// taken on the clock's goroutine before and after it.
type iterSnapshot struct {
	snapshot               // the counters the wall-clock runner reads too
	cpu      time.Duration // real time spent in the host's handling so far
	start    time.Duration // when the iteration started, in virtual time
}

// snapshot reads the counters of an iteration's snapshot but its start
// (on the clock's goroutine).
func (h *simHost) snapshot(ipd *ipdata.Function, dev *mhinet.Device) iterSnapshot {
	var s iterSnapshot
	_, _, s.rxPkts, s.rxBytes = h.counters()
	s.events = h.dl.EventRingEvents()
	s.modem = ipd.Stats()
	s.host = dev.Stats()
	s.cpu = h.cpu
	return s
}

// iteration lets the generator put n packets into the modem at the
// link's line rate and waits, in virtual time, for all of them to be
// delivered. Packets the modem had no buffer for are dropped and counted.
func (h *simHost) iteration(ctx context.Context, o *Options, ipd *ipdata.Function, dev *mhinet.Device, ipSize int) (delta, error) {
	// Start from a quiet system: nothing scheduled.
	if err := h.quiesce(ctx); err != nil {
		return delta{}, err
	}
	before, err := h.startIteration(ctx, o, ipd, dev, ipSize)
	if err != nil {
		return delta{}, err
	}
	stalled, err := h.waitIteration(ctx, o, ipd)
	if err != nil {
		return delta{}, err
	}
	var after iterSnapshot
	_ = h.clk.Call(ctx, func() { after = h.snapshot(ipd, dev) })
	if h.end < 0 {
		return delta{}, fmt.Errorf("sweep: the generator did not start")
	}
	return h.iterationDelta(o, ipd, before, after, stalled)
}

// startIteration takes the snapshot before an iteration and starts the
// generator, on the clock's goroutine. If the generator does not start
// the iteration is over at once, with h.end -1.
func (h *simHost) startIteration(ctx context.Context, o *Options, ipd *ipdata.Function, dev *mhinet.Device, ipSize int) (iterSnapshot, error) {
	var before iterSnapshot
	h.done = make(chan struct{})
	err := h.clk.Call(ctx, func() {
		before = h.snapshot(ipd, dev)
		before.start = h.clk.Now()
		h.target = before.rxPkts + uint64(o.Packets)
		h.active = true
		if err := ipd.StartGenerator(ipdata.GeneratorConfig{
			Count: o.Packets, Sizes: []int{ipSize}, Link: h.m.link(), Ingress: h.m.ingressQueue(),
		}); err != nil {
			h.active = false
			close(h.done)
			h.end = -1
		}
	})
	return before, err
}

// waitIteration waits for the iteration's last packet, watching for a
// simulation that stops moving (a model or code fault: it would otherwise
// wait forever), then for the generator to end, and stops it if it does
// not or the simulation stalled.
func (h *simHost) waitIteration(ctx context.Context, o *Options, ipd *ipdata.Function) (stalled bool, err error) {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	last, lastMove := h.rx.pkts.Load(), time.Now()
wait:
	for {
		select {
		case <-h.done:
			break wait
		case <-ctx.Done():
			ipd.StopGenerator()
			return false, ctx.Err()
		case <-tick.C:
			if n := h.rx.pkts.Load(); n != last {
				last, lastMove = n, time.Now()
			} else if time.Since(lastMove) > o.Stall && h.clk.Pending() == 0 {
				stalled = true
				break wait
			}
		}
	}
	wctx, cancel := context.WithTimeout(ctx, o.Stall)
	_, werr := ipd.WaitGenerator(wctx)
	cancel()
	if werr != nil || stalled {
		ipd.StopGenerator()
	}
	return stalled, nil
}

// iterationDelta computes an iteration's figures from the snapshots
// before and after it, and fails it if it stalled with packets neither
// delivered nor counted as dropped.
func (h *simHost) iterationDelta(o *Options, ipd *ipdata.Function, before, after iterSnapshot, stalled bool) (delta, error) {
	d := between(before.snapshot, after.snapshot)
	d.elapsed = h.end - before.start
	d.sent = uint64(o.Packets) + after.modem.DroppedOverrun - before.modem.DroppedOverrun
	d.hostCPU = after.cpu - before.cpu
	if stalled {
		d.elapsed = h.clk.Now() - before.start
	}
	if stalled && d.delivered+drops(d.drops).total() < d.sent {
		if gerr := ipd.GeneratorErr(); gerr != nil {
			return d, fmt.Errorf("%w: %d of %d packets delivered; the generator ended: %w", errStalled, d.delivered, d.sent, gerr)
		}
		return d, fmt.Errorf("%w: %d of %d packets delivered", errStalled, d.delivered, d.sent)
	}
	return d, nil
}

// waitDownlinkRunning waits (in real time, at most limit) until the
// modem's downlink channel of pair is running.
func waitDownlinkRunning(ctx context.Context, d *ep.Device, pair string, limit time.Duration) error {
	pipe, ok := d.Pipe(pair)
	if !ok {
		return fmt.Errorf("sweep: the modem has no pipe %s", pair)
	}
	deadline := time.Now().Add(limit)
	for pipe.DownlinkState() != wire.ChannelRunning {
		if time.Now().After(deadline) {
			return fmt.Errorf("sweep: the modem's downlink of %s is %s after %v", pair, pipe.DownlinkState(), limit)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		time.Sleep(100 * time.Microsecond)
	}
	return nil
}

// quiesce waits until nothing is scheduled on the clock: the system is at
// rest (a burst channel stops polling after its idle polls).
func (h *simHost) quiesce(ctx context.Context) error {
	for i := 0; ; i++ {
		var idle bool
		if err := h.clk.Call(ctx, func() { idle = h.clk.Pending() == 0 }); err != nil {
			return err
		}
		if idle {
			return nil
		}
		if i > 1000 {
			return fmt.Errorf("sweep: the simulation does not come to rest (%d events pending)", h.clk.Pending())
		}
		time.Sleep(100 * time.Microsecond)
	}
}
