// Package sweep measures how the MRU — the size of the receive buffers the
// host posts — changes throughput when the modem aggregates packets: for
// every MRU and packet size of a grid it pushes packets through the mock
// modem and gomhi's network device and reports packets/s, MB/s, and what
// each packet cost in ring elements, events and overflow chains.
package sweep

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"github.com/gomhi/gomhi/mhi"
	"github.com/gomhi/gomhi/mhi/ep/ipdata"
	"github.com/gomhi/gomhi/mhi/proto/framing"
	"github.com/gomhi/gomhi/mhi/proto/ntb"
	"github.com/gomhi/gomhi/mhi/proto/qmap"
	"github.com/gomhi/gomhi/mhinet"
	"github.com/gomhi/gomhi/pcigeneric"
	"github.com/gomhi/gomhi/pcigeneric/mock"
)

// Mode says where the packets come from.
type Mode string

// Sweep modes.
const (
	// Generator: the modem generates downlink packets (as the external
	// packet generator of the MRU thread did) and the host receives them.
	Generator Mode = "generator"
	// Loopback: the host transmits, the modem loops every packet back
	// aggregated (its internal loopback mode), the host receives.
	Loopback Mode = "loopback"
)

// The default grid: the packet sizes of the MRU thread and the MRUs worth
// comparing (Linux's 3500, 16 KiB, the modem's 32 KiB, the protocol's max).
var (
	DefaultSizes = []int{64, 128, 256, 512, 1024, 1262, 1263, 1280, 1428, 1500, 1518}
	DefaultMRUs  = []int{3500, 16384, 32768, 65535}
	QuickSizes   = []int{64, 512, 1262, 1263, 1500}
	QuickMRUs    = []int{3500, 32768}
)

// Defaults of the options.
const (
	DefaultPackets    = 1_000_000
	DefaultIterations = 10
	QuickPackets      = 20_000
	QuickIterations   = 3
)

// ErrNotConserved: packets went missing without a named counter.
var ErrNotConserved = errors.New("sweep: packets not conserved")

// Options configure a sweep.
type Options struct {
	Model      string         // modem model the mock impersonates (default telit-fn990)
	Format     framing.Format // framing, the host's and the modem's
	Mode       Mode           // Generator (default) or Loopback
	Sizes      []int          // IP packet sizes in bytes
	MRUs       []int          // receive buffer sizes
	Packets    int            // packets per point and iteration
	Iterations int            // iterations per point
	// MaxDatagrams and MaxAggregate are the modem's aggregation limits
	// (default 32 packets, 32768 bytes).
	MaxDatagrams, MaxAggregate int
	// Stall ends an iteration that delivers nothing for this long (default 5s).
	Stall time.Duration
	// Progress, if set, is called after every iteration.
	Progress func(done, total int)
	Logger   *slog.Logger
	// Target, if set, is the modem to sweep instead of an in-process mock
	// the sweep opens itself (a modem served by another process over
	// vfio-user, say). Model must name its model; MaxDatagrams and
	// MaxAggregate must be the modem's (they are not applied to it).
	Target *Target
	// Timing, if set, runs the sweep in virtual time with this timing
	// profile (docs/FIDELITY.md): the generator sends on the profile's
	// link at its line rate, Sizes are the MRU thread's packet sizes
	// (Ethernet frames without FCS: the datagrams are FrameHeader bytes
	// shorter), and every point reports the modelled packets/s and
	// percentage of the line rate, and the host's real CPU time per
	// packet. Generator mode only; not with a Target. Without it (nil)
	// the sweep runs in real time (wall clock).
	Timing *Profile
	// Parallel is the number of points simulated at once in timing mode
	// (default: GOMAXPROCS).
	Parallel int
}

// Target is a modem and a host controller for it that the caller opened
// and powered up, and closes after Run.
type Target struct {
	// Controller is the host controller, in M0.
	Controller *mhi.Controller
	// Pair names the IP data channel pair (IP_HW0 or IP_HW0_MBIM).
	Pair string
	// IPData is the modem's IP data function if it lives in this process;
	// nil for a modem out of reach (another process). Without it only
	// Loopback mode runs, a probe packet first checks that the modem loops
	// packets back in Format (ErrModemMismatch), and a packet the modem
	// drops counts as lost, its counters being out of reach.
	IPData *ipdata.Function
}

// Errors of a sweep on a Target.
var (
	// ErrNoGenerator: generator mode on a Target whose modem's generator is
	// out of reach (Target.IPData nil).
	ErrNoGenerator = errors.New("sweep: the modem's generator is out of reach: sweep it in loopback mode")
	// ErrModemMismatch: the Target's modem did not loop the probe packet
	// back unchanged in the sweep's format.
	ErrModemMismatch = errors.New("sweep: the modem does not loop packets back in the sweep's format")
)

// Summary is the spread of one measure over the iterations of a point.
type Summary struct {
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
	Avg    float64 `json:"avg"`
	Median float64 `json:"median"`
}

// Point is the result for one MRU and packet size.
type Point struct {
	MRU  int `json:"mru"`
	Size int `json:"size"`
	// IPSize is the IP datagram size (in timing mode Size is the frame
	// size on the generator's link, FrameHeader bytes more).
	IPSize     int     `json:"ip_size"`
	Iterations int     `json:"iterations"`
	PPS        Summary `json:"pps"`
	MBps       Summary `json:"mb_per_s"`
	// LineRatePct is packets/s as a percentage of the link's line rate
	// for frames of Size (timing mode only).
	LineRatePct *Summary `json:"line_rate_pct,omitempty"`
	// HostCPUNsPerPacket is the real time the host's code took per
	// delivered packet (timing mode only: measured around the host's
	// interrupt handling, which runs alone on its goroutine).
	HostCPUNsPerPacket float64 `json:"host_cpu_ns_per_packet,omitempty"`

	// Costs per delivered packet, over all iterations.
	ElementsPerPacket  float64 `json:"elements_per_packet"`
	EventsPerPacket    float64 `json:"events_per_packet"`
	ChainsPerPacket    float64 `json:"overflow_chains_per_packet"`
	OverflowsPerPacket float64 `json:"overflow_events_per_packet"`
	PacketsPerTransfer float64 `json:"packets_per_transfer"`

	// RingMemory is the memory of the posted ring (usable elements × MRU);
	// PoolMemory all receive buffers the host holds.
	RingMemory int `json:"ring_memory_bytes"`
	PoolMemory int `json:"pool_memory_bytes"`

	Sent      uint64            `json:"sent"`
	Delivered uint64            `json:"delivered"`
	Dropped   uint64            `json:"dropped"`
	Drops     map[string]uint64 `json:"drops,omitempty"`
	Conserved bool              `json:"conserved"`
}

// Report is a whole sweep.
type Report struct {
	Model  string `json:"model"`
	Format string `json:"format"`
	Mode   Mode   `json:"mode"`
	// Timing is the timing profile's name, or "wallclock".
	Timing  string        `json:"timing"`
	Packets int           `json:"packets_per_iteration"`
	Elapsed time.Duration `json:"elapsed_ns"`
	Points  []Point       `json:"points"`
	// Reference is the measured table the timing profile was fitted to
	// (the MRU thread's), printed beside the model's figures.
	Reference []Row `json:"reference,omitempty"`
}

// Wallclock is Report.Timing of a sweep in real time.
const Wallclock = "wallclock"

// Conserved reports whether every point conserved its packets.
func (r *Report) Conserved() bool {
	for _, p := range r.Points {
		if !p.Conserved {
			return false
		}
	}
	return true
}

// Validate checks the options (with defaults applied to a copy) and says
// what is wrong, before anything runs.
func (o Options) Validate() error { return o.defaults() }

func (o *Options) defaults() error {
	if o.Model == "" {
		o.Model = "telit-fn990"
	}
	if _, ok := pcigeneric.Model(o.Model); !ok {
		return fmt.Errorf("sweep: model %q: %w", o.Model, pcigeneric.ErrUnknownModel)
	}
	if o.Mode == "" {
		o.Mode = Generator
	}
	if o.Mode != Generator && o.Mode != Loopback {
		return fmt.Errorf("sweep: mode %q, want generator or loopback", o.Mode)
	}
	if !o.Format.Valid() {
		return fmt.Errorf("sweep: unknown format %d", o.Format)
	}
	if len(o.Sizes) == 0 {
		o.Sizes = DefaultSizes
	}
	if len(o.MRUs) == 0 {
		o.MRUs = DefaultMRUs
	}
	if o.Packets == 0 {
		o.Packets = DefaultPackets
	}
	if o.Iterations == 0 {
		o.Iterations = DefaultIterations
	}
	if o.Stall == 0 {
		o.Stall = 5 * time.Second
	}
	if o.Packets < 1 || o.Iterations < 1 {
		return fmt.Errorf("sweep: %d packets × %d iterations, want at least 1 each", o.Packets, o.Iterations)
	}
	if o.MaxDatagrams < 0 || o.MaxAggregate < 0 {
		return fmt.Errorf("sweep: aggregation limits %d packets, %d bytes: want 0 (the modem's default) or more", o.MaxDatagrams, o.MaxAggregate)
	}
	for _, m := range o.MRUs {
		if err := mhinet.ValidateMRU(m); err != nil {
			return err
		}
	}
	aggregate := cmp.Or(o.MaxAggregate, ipdata.DefaultMaxAggregate)
	for _, s := range o.Sizes {
		if s < ipdata.GenMinPacket || s > mhinet.MaxMTU {
			return fmt.Errorf("sweep: packet size %d, want %d..%d", s, ipdata.GenMinPacket, mhinet.MaxMTU)
		}
		// Every packet must fit one of the modem's aggregates.
		need := s
		switch o.Format {
		case framing.NTB16, framing.NTB32:
			need, _ = ntb.Size(ntb.Config{NTB32: o.Format == framing.NTB32}, []int{s})
		case framing.QMAP:
			need, _ = qmap.Size(qmap.Config{}, []int{s})
		}
		if o.Format != framing.RawIP && need > aggregate {
			return fmt.Errorf("sweep: a %d-byte packet needs a %d-byte %s aggregate, more than the modem's %d (MaxAggregate)", s, need, o.Format, aggregate)
		}
	}
	if o.Timing != nil {
		if err := o.Timing.Validate(); err != nil {
			return err
		}
		if o.Mode != Generator {
			return fmt.Errorf("sweep: timing profile %q: virtual time models the generator mode only", o.Timing.Name)
		}
		if o.Target != nil {
			return fmt.Errorf("sweep: timing profile %q: virtual time needs the in-process mock modem, not a target", o.Timing.Name)
		}
		for _, s := range o.Sizes {
			if ip := s - FrameHeader; ip < ipdata.GenMinPacket {
				return fmt.Errorf("sweep: packet size %d: in timing mode sizes are frames of %d header bytes and a datagram of at least %d bytes", s, FrameHeader, ipdata.GenMinPacket)
			}
		}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// loopbackTXAggregate is the uplink aggregate size of a loopback sweep.
const loopbackTXAggregate = 16 << 10

// counter is the sweep's Receiver: it counts and releases at once.
type counter struct {
	pkts, bytes atomic.Uint64
	// inspect, if set, sees every packet before it is released (the probe).
	inspect atomic.Pointer[func([]byte)]
}

func (c *counter) Receive(pkts []mhinet.Packet) {
	// Count before inspecting: the probe returns as soon as its packet is
	// inspected, and the measurement that follows must already see it
	// counted.
	var b uint64
	for _, p := range pkts {
		b += uint64(len(p.Data))
	}
	c.pkts.Add(uint64(len(pkts)))
	c.bytes.Add(b)
	inspect := c.inspect.Load()
	for _, p := range pkts {
		if inspect != nil {
			(*inspect)(p.Data)
		}
		p.Release()
	}
}

// Run runs the sweep. Points are in MRU-major order. It returns the report
// so far and an error if a point cannot be measured or ctx ends; a point
// that loses packets is reported with Conserved false.
func Run(ctx context.Context, o Options) (*Report, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	rep := &Report{Model: o.Model, Format: o.Format.String(), Mode: o.Mode, Packets: o.Packets, Timing: Wallclock}
	start := time.Now()
	defer func() { rep.Elapsed = time.Since(start) }()
	if o.Timing != nil {
		rep.Timing = o.Timing.Name
		rep.Reference = ReferenceTable(o.Timing.Name)
		return rep, runVirtual(ctx, &o, rep)
	}
	return rep, runWallclock(ctx, &o, rep)
}

// runWallclock runs the sweep in real time on o.Target, or on a mock
// modem of its own when o.Target is nil.
func runWallclock(ctx context.Context, o *Options, rep *Report) error {
	maxSize := slices.Max(o.Sizes)
	t := o.Target
	if t == nil {
		m, err := mock.Open(mock.Options{
			Model: o.Model, Logger: o.Logger,
			IPData: &ipdata.Config{Format: o.Format, MaxDatagrams: o.MaxDatagrams, MaxAggregate: o.MaxAggregate},
		})
		if err != nil {
			return err
		}
		defer m.Close()
		if t, err = mockTarget(o, m); err != nil {
			return err
		}
	}
	if t.IPData == nil && o.Mode == Generator {
		return ErrNoGenerator
	}
	rx := &counter{}
	// The loopback sweep measures the downlink MRU: the uplink aggregates
	// are as large as the host's transmit buffers (16 KiB) and leave at the
	// end of each batch, so rmnet-sized uplink limits (mhinet's defaults,
	// 4096 bytes and 16 packets) do not become the bottleneck.
	dev, err := mhinet.New(t.Controller, mhinet.Config{
		Pair: t.Pair, Format: o.Format, MRU: o.MRUs[0], MTU: max(maxSize, mhinet.DefaultMTU),
		TXAggregate: o.Mode == Loopback && o.Format != framing.RawIP, Logger: o.Logger,
		TXAggMaxBytes: loopbackTXAggregate, TXAggMaxPackets: 256, TXAggTimeout: -1,
	}, rx)
	if err != nil {
		return err
	}
	if err := dev.Up(); err != nil {
		return err
	}
	defer dev.Down()
	_, dl, _ := t.Controller.ChannelPair(t.Pair)
	ringElems := dl.Config().Elements - 1

	total := len(o.MRUs) * len(o.Sizes) * o.Iterations
	done := 0
	progress := func() {
		done++
		if o.Progress != nil {
			o.Progress(done, total)
		}
	}
	r := &runner{o: o, t: t, dev: dev, rx: rx}
	if t.IPData == nil {
		if err := r.probe(ctx); err != nil {
			return err
		}
	}
	for _, mru := range o.MRUs {
		if err := dev.SetMRU(mru); err != nil {
			return err
		}
		for _, size := range o.Sizes {
			p := Point{MRU: mru, Size: size, IPSize: size, Iterations: o.Iterations, RingMemory: ringElems * mru}
			if err := r.measurePoint(ctx, &p, progress); err != nil {
				return err
			}
			rep.Points = append(rep.Points, p)
		}
	}
	return nil
}

// mockTarget powers up the sweep's own mock modem m and returns it as
// the target.
func mockTarget(o *Options, m *mock.Mock) (*Target, error) {
	if m.IPData == nil {
		return nil, fmt.Errorf("sweep: model %s has no IP data channel", o.Model)
	}
	if err := m.Controller.PowerUp(); err != nil {
		return nil, err
	}
	return &Target{Controller: m.Controller, Pair: m.DataPair, IPData: m.IPData}, nil
}

// measurePoint runs the iterations of point p (MRU already set) and fills
// its figures, calling progress after each iteration.
func (r *runner) measurePoint(ctx context.Context, p *Point, progress func()) error {
	var pps, mbps []float64
	var tot delta
	for it := 0; it < r.o.Iterations; it++ {
		d, err := r.iteration(ctx, p.Size)
		if err != nil {
			return fmt.Errorf("sweep: MRU %d, size %d, iteration %d: %w", p.MRU, p.Size, it+1, err)
		}
		secs := d.elapsed.Seconds()
		pps = append(pps, float64(d.delivered)/secs)
		mbps = append(mbps, float64(d.bytes)/secs/1e6)
		tot.add(d)
		progress()
	}
	p.PPS, p.MBps = summarize(pps), summarize(mbps)
	p.PoolMemory = r.dev.Stats().PoolMemory
	tot.fill(p)
	return nil
}

func summarize(v []float64) Summary {
	s := slices.Clone(v)
	slices.Sort(s)
	var sum float64
	for _, x := range s {
		sum += x
	}
	med := s[len(s)/2]
	if len(s)%2 == 0 {
		med = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return Summary{Min: s[0], Max: s[len(s)-1], Avg: sum / float64(len(s)), Median: med}
}
