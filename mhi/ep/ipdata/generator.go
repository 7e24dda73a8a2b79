package ipdata

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"github.com/gomhi/gomhi/mhi/ep"
	"github.com/gomhi/gomhi/mhi/proto/ntb"
	"github.com/gomhi/gomhi/mhi/proto/qmap"
	"github.com/gomhi/gomhi/mhi/simclock"
	"github.com/gomhi/gomhi/mhi/wire"
)

// Sizes of the packets the generator builds.
const (
	// GenHeaderLen is the IPv4 and UDP header length of a generated packet.
	GenHeaderLen = 20 + 8
	// GenMinPacket is the smallest generated packet: headers and the
	// 8-byte sequence number.
	GenMinPacket = GenHeaderLen + 8
	// GenMaxPacket is the largest generated packet (the IPv4 total length
	// limit).
	GenMaxPacket = 0xFFFF
	// DefaultGenPacket is the packet size when GeneratorConfig.Sizes is empty.
	DefaultGenPacket = 1500
)

// GeneratorConfig describes a generator run.
type GeneratorConfig struct {
	// Count is the number of packets to send; 0 runs until StopGenerator.
	Count int
	// Rate is the offered rate in packets per second; 0 sends as fast as
	// the host takes them.
	Rate float64
	// Sizes are the IP packet sizes, GenMinPacket…GenMaxPacket and small
	// enough for one aggregate; they are used in turn (default 1500).
	Sizes []int
	// Weights, if not empty, has one positive weight per size: sizes are
	// then picked by smooth weighted round robin (a size of weight 3 comes
	// three times as often as one of weight 1, evenly spread).
	Weights []int
	// Src and Dst are the IPv4 addresses (defaults 10.0.0.1 and 10.0.0.2).
	Src, Dst [4]byte
	// SrcPort and DstPort are the UDP ports (defaults 5000 and 5001).
	SrcPort, DstPort uint16
	// Link, if set, is the link the packets arrive on at the modem, at its
	// line rate (Rate is then ignored). It needs a device with a Clock:
	// the generator then runs in virtual time, and a packet that arrives
	// while every downlink buffer of the modem is taken is lost, as on a
	// link that does not wait (counted in DroppedOverrun, not in Count:
	// Count counts the packets the modem took in).
	Link *Link
	// Ingress, if set with a Link, is the modem's receive queue between
	// the link and its aggregator, and the generator runs in batches (see
	// Ingress).
	Ingress *Ingress
	// Sessions, if more than 1, spreads the packets over sessions
	// 0…Sessions−1 round robin (packet i on session i mod Sessions), each
	// gated and counted on its own session, all with the same addresses;
	// 0 or 1 sends on session 0. Only a generator in real time (no Link)
	// spreads; at most NumSessions.
	Sessions int
}

// Ingress is the modem's receive queue in virtual time: packets arriving
// on the link wait in it until the modem's downlink is idle (nothing
// queued for the host), then the modem takes all of them at once as one
// batch, aggregates them, and sends the batch's last aggregate with the
// batch however full it is. A packet that arrives when the queue has no
// room for it is lost (GeneratorConfig.Link's overrun drop).
type Ingress struct {
	// Bytes is the queue's capacity.
	Bytes int
	// Block is its allocation unit: a packet takes its size plus
	// FrameHeader, rounded up to a multiple of Block (at least 1).
	Block int
	// FrameHeader is what the queue stores of the link's framing with
	// each packet (14 for an Ethernet header).
	FrameHeader int
}

// slot returns the queue room a packet of n IP bytes takes.
func (in *Ingress) slot(n int) int {
	b := max(in.Block, 1)
	return (n + in.FrameHeader + b - 1) / b * b
}

// Link is a link that delivers generated packets to the modem at its line
// rate: a packet of n IP bytes occupies it for (n+FrameOverhead)×8 bits.
type Link struct {
	// BitsPerSecond is the line rate.
	BitsPerSecond float64
	// FrameOverhead is what the link adds to each IP packet on the wire:
	// for Ethernet, 14 header + 4 FCS + 8 preamble and start delimiter +
	// 12 inter-frame gap = 38 bytes (EthernetOverhead).
	FrameOverhead int
}

// EthernetOverhead is the wire overhead of an IP packet on Ethernet: the
// 14-byte header, the 4-byte FCS, the 8-byte preamble and start-of-frame
// delimiter and the 12-byte inter-frame gap.
const EthernetOverhead = 14 + 4 + 8 + 12

// Spacing returns the time a packet of n IP bytes occupies the link,
// rounded to the nanosecond.
func (l *Link) Spacing(n int) time.Duration {
	return time.Duration(math.Round(float64(n+l.FrameOverhead) * 8 * 1e9 / l.BitsPerSecond))
}

// genRun is one generator run.
type genRun struct {
	cfg    GeneratorConfig
	cancel context.CancelFunc
	done   chan struct{}
	sent   atomic.Uint64
	err    error // why it ended early; read after done
	v      *vgen // the run in virtual time, if it is one
}

// genPacket is a generated packet to be written into an aggregate: its
// sequence number and the run's addresses and ports; scratch holds it for
// a writer that cannot take it in place.
type genPacket struct {
	seq     uint64
	cfg     *GeneratorConfig
	scratch []byte
	// The headers of the last size written, with identification and
	// checksum zero (tmplLen 0: none yet), and the ones' complement sum
	// of their 16-bit words: a packet's header is the template with its
	// identification and the checksum that sum plus it gives.
	tmplLen int
	tmpl    [GenHeaderLen]byte
	tmplSum uint32
}

// put writes the packet, len(b) bytes, as putGenPacket does, from the
// template of its size.
func (g *genPacket) put(b []byte) {
	n := len(b)
	if n != g.tmplLen {
		putGenHeaders(g.tmpl[:], n, g.cfg)
		be := binary.BigEndian
		g.tmplSum = 0
		for i := 0; i < 20; i += 2 {
			g.tmplSum += uint32(be.Uint16(g.tmpl[i:]))
		}
		g.tmplLen = n
	}
	copy(b, g.tmpl[:])
	be := binary.BigEndian
	id := uint16(g.seq)
	be.PutUint16(b[4:], id)
	sum := g.tmplSum + uint32(id)
	for sum>>16 != 0 {
		sum = sum&0xFFFF + sum>>16
	}
	be.PutUint16(b[10:], ^uint16(sum))
	be.PutUint64(b[28:], g.seq)
	fill := int(byte(g.seq))
	copy(b[GenMinPacket:], genRamp[fill+GenMinPacket:fill+n])
}

// StartGenerator switches to ModeGenerator and starts sending cfg.Count
// generated IPv4/UDP packets on the downlink at cfg.Rate, aggregated like
// looped packets. When the host posts no downlink buffers the generator
// waits: it slows down, it never drops. Uplink packets received meanwhile
// are consumed and counted as DroppedSunk. The function returns to
// the mode it had before (loopback or responder) when the run ends (all
// sent, StopGenerator, device closed).
func (f *Function) StartGenerator(cfg GeneratorConfig) error {
	p := f.pipe.Load()
	if p == nil {
		return ErrNotAttached
	}
	if err := f.checkGenerator(&cfg); err != nil {
		return err
	}
	f.genMu.Lock()
	defer f.genMu.Unlock()
	if f.gen != nil {
		select {
		case <-f.gen.done:
		default:
			return ErrGeneratorRunning
		}
	}
	ctx, cancel := context.WithCancel(p.Context()) // ends with the device too
	g := &genRun{cfg: cfg, cancel: cancel, done: make(chan struct{})}
	f.gen = g
	f.mode.Store(uint32(ModeGenerator))
	if clk := p.Clock(); clk != nil {
		f.startVirtualGenerator(ctx, clk, p, g)
		return nil
	}
	go f.runGenerator(ctx, p, g)
	return nil
}

// checkGenerator applies defaults and validates cfg.
func (f *Function) checkGenerator(cfg *GeneratorConfig) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("ipdata: generator: %w: "+format, append([]any{wire.ErrConfig}, args...)...)
	}
	if cfg.Count < 0 || cfg.Rate < 0 {
		return bad("count %d, rate %g", cfg.Count, cfg.Rate)
	}
	if cfg.Sessions < 0 || cfg.Sessions > NumSessions || (cfg.Sessions > 1 && cfg.Link != nil) {
		return bad("%d sessions (0…%d, and one with a Link)", cfg.Sessions, NumSessions)
	}
	if l := cfg.Link; l != nil {
		if f.pipeClock() == nil {
			return bad("a link generator runs in virtual time: the device needs a Clock")
		}
		if !(l.BitsPerSecond > 0) || l.FrameOverhead < 0 {
			return bad("link of %g bit/s, frame overhead %d bytes", l.BitsPerSecond, l.FrameOverhead)
		}
		cfg.Link = &Link{BitsPerSecond: l.BitsPerSecond, FrameOverhead: l.FrameOverhead}
	}
	if in := cfg.Ingress; in != nil {
		if cfg.Link == nil {
			return bad("an ingress queue needs a link")
		}
		if in.Bytes <= 0 || in.Block < 0 || in.FrameHeader < 0 {
			return bad("ingress queue of %d bytes, block %d, frame header %d", in.Bytes, in.Block, in.FrameHeader)
		}
		cfg.Ingress = &Ingress{Bytes: in.Bytes, Block: in.Block, FrameHeader: in.FrameHeader}
	}
	if len(cfg.Sizes) == 0 {
		cfg.Sizes = []int{DefaultGenPacket}
	}
	cfg.Sizes = append([]int(nil), cfg.Sizes...)
	if len(cfg.Weights) != 0 {
		if len(cfg.Weights) != len(cfg.Sizes) {
			return bad("%d weights for %d sizes", len(cfg.Weights), len(cfg.Sizes))
		}
		cfg.Weights = append([]int(nil), cfg.Weights...)
		for _, w := range cfg.Weights {
			if w <= 0 {
				return bad("weight %d", w)
			}
		}
	}
	for _, n := range cfg.Sizes {
		if n < GenMinPacket || n > GenMaxPacket {
			return bad("packet size %d not in %d…%d", n, GenMinPacket, GenMaxPacket)
		}
		if !f.fitsEmpty(n) {
			return bad("packet size %d does not fit a %d-byte %s aggregate", n, f.cfg.MaxAggregate, f.cfg.Format)
		}
		if in := cfg.Ingress; in != nil && in.slot(n) > in.Bytes {
			return bad("packet size %d does not fit a %d-byte ingress queue", n, in.Bytes)
		}
	}
	if cfg.Src == ([4]byte{}) {
		cfg.Src = [4]byte{10, 0, 0, 1}
	}
	if cfg.Dst == ([4]byte{}) {
		cfg.Dst = [4]byte{10, 0, 0, 2}
	}
	if cfg.SrcPort == 0 {
		cfg.SrcPort = 5000
	}
	if cfg.DstPort == 0 {
		cfg.DstPort = 5001
	}
	return nil
}

// fitsEmpty reports whether a packet of n bytes fits an empty aggregate.
func (f *Function) fitsEmpty(n int) bool {
	switch a := f.agg.(type) {
	case *ntbAgg:
		size, err := ntb.Size(a.cfg, []int{n})
		return err == nil && size <= f.cfg.MaxAggregate
	case *qmapAgg:
		size, err := qmap.FrameLen(a.cfg, n)
		return err == nil && size <= f.cfg.MaxAggregate
	}
	return true
}

// StopGenerator ends the running generator, if any, and waits for it.
func (f *Function) StopGenerator() {
	f.genMu.Lock()
	g := f.gen
	f.genMu.Unlock()
	if g != nil {
		g.cancel()
		if g.v != nil {
			g.v.timer.Reset(0) // it notices the cancel when it runs
		}
		<-g.done
	}
}

// GeneratorDone returns a channel closed when the current (or last)
// generator run ends; nil if none was started.
func (f *Function) GeneratorDone() <-chan struct{} {
	f.genMu.Lock()
	defer f.genMu.Unlock()
	if f.gen == nil {
		return nil
	}
	return f.gen.done
}

// WaitGenerator waits until the current (or last) generator run ends and
// returns the number of packets it sent, or ctx's error.
func (f *Function) WaitGenerator(ctx context.Context) (uint64, error) {
	f.genMu.Lock()
	g := f.gen
	f.genMu.Unlock()
	if g == nil {
		return 0, nil
	}
	select {
	case <-g.done:
		return g.sent.Load(), nil
	case <-ctx.Done():
		return g.sent.Load(), ctx.Err()
	}
}

// GeneratorErr returns why the last generator run ended early (nil when
// it sent all it was asked to, or is still running, or none was started).
func (f *Function) GeneratorErr() error {
	f.genMu.Lock()
	g := f.gen
	f.genMu.Unlock()
	if g == nil {
		return nil
	}
	select {
	case <-g.done:
		return g.err
	default:
		return nil
	}
}

// GeneratorSent returns the number of packets the current (or last)
// generator run has put into downlink aggregates.
func (f *Function) GeneratorSent() uint64 {
	f.genMu.Lock()
	defer f.genMu.Unlock()
	if f.gen == nil {
		return 0
	}
	return f.gen.sent.Load()
}

// runGenerator is the generator goroutine.
func (f *Function) runGenerator(ctx context.Context, p *ep.Pipe, g *genRun) {
	defer close(g.done)
	defer g.cancel()
	defer func() { f.mode.Store(f.idleMode.Load()) }()
	cfg := g.cfg
	maxSize := 0
	for _, n := range cfg.Sizes {
		maxSize = max(maxSize, n)
	}
	gp := genPacket{cfg: &cfg, scratch: make([]byte, maxSize)}
	pick := newSizePicker(cfg.Sizes, cfg.Weights)
	var interval time.Duration
	if cfg.Rate > 0 {
		interval = time.Duration(float64(time.Second) / cfg.Rate)
	}
	sleep := time.NewTimer(time.Hour)
	sleep.Stop()
	defer sleep.Stop()
	start := time.Now()
	for i := uint64(0); cfg.Count == 0 || i < uint64(cfg.Count); i++ {
		if interval > 0 {
			due := start.Add(time.Duration(i) * interval)
			if wait := time.Until(due); wait > 0 {
				// Nothing more is due for now: let the aggregate go.
				f.Flush()
				sleep.Reset(wait)
				select {
				case <-sleep.C:
				case <-ctx.Done():
					g.err = ctx.Err()
					return
				}
			}
		}
		n := pick.next()
		sess := genSession
		if cfg.Sessions > 1 {
			sess = uint8(i % uint64(cfg.Sessions))
		}
		if !f.allowed(sess) {
			// No session: the network sends nothing; the packet is
			// generated in name only and counted as gated.
			g.sent.Add(1)
			f.countGen(sess, 1)
			f.drop(sess, &f.st.droppedGated, 1)
			continue
		}
		gp.seq = i
		if err := f.put(ctx, p, n, nil, &gp, sess, noUL, true); err != nil {
			g.err = err
			break
		}
		g.sent.Add(1)
		f.countGen(sess, 1)
	}
	f.Flush()
}

// pipeClock returns the clock of the device the function is attached to.
func (f *Function) pipeClock() *simclock.Scheduler {
	if p := f.pipe.Load(); p != nil {
		return p.Clock()
	}
	return nil
}

// vgen is a generator run in virtual time: one event of the clock takes in
// every packet due before the next other event, so the packets of a burst
// cost no event each, and their order with everything else is exact.
type vgen struct {
	f       *Function
	p       *ep.Pipe
	g       *genRun
	ctx     context.Context
	clk     *simclock.Scheduler
	timer   *simclock.Timer
	pick    *sizePicker
	gp      genPacket
	next    time.Duration // when the next packet arrives (with a spacing)
	size    int           // its size
	taken   uint64        // packets the modem took in
	offered uint64
	done    bool
	// With an Ingress queue: the packets waiting in it (their sizes in
	// fifo, in arrival order), the room they take, and the sequence
	// number of the next packet the modem takes.
	fifo      []int
	fifoBytes int
	seq       uint64
}

// startVirtualGenerator starts a generator run as events of clk: packets
// arrive at the link's line rate (or cfg.Rate), or, with neither, as fast
// as the modem has downlink buffers for them.
func (f *Function) startVirtualGenerator(ctx context.Context, clk *simclock.Scheduler, p *ep.Pipe, g *genRun) {
	maxSize := 0
	for _, n := range g.cfg.Sizes {
		maxSize = max(maxSize, n)
	}
	v := &vgen{f: f, p: p, g: g, ctx: ctx, clk: clk, pick: newSizePicker(g.cfg.Sizes, g.cfg.Weights)}
	v.gp = genPacket{cfg: &g.cfg, scratch: make([]byte, maxSize)}
	v.timer = clk.NewTimer(v.run)
	v.size = v.pick.next()
	v.next = clk.Now()
	g.v = v
	// A stop or the device's closing is noticed when the run's event runs.
	context.AfterFunc(ctx, func() { v.timer.Reset(0) })
	if g.cfg.Ingress != nil {
		v.timer = clk.NewTimer(v.runIngress)
		v.fifo = make([]int, 0, 64)
		// A transfer that leaves the queue may leave the downlink idle.
		p.OnDLSpace(func() { v.timer.Reset(0) })
	}
	if g.cfg.Link == nil && g.cfg.Rate == 0 {
		p.OnDLSpace(func() {
			if !v.timer.Pending() {
				v.timer.Reset(0)
			}
		})
	}
	v.timer.Reset(0)
}

// spacing is the time between the arrival of a packet of n bytes and the
// next one; 0 without a link or a rate.
func (v *vgen) spacing(n int) time.Duration {
	switch {
	case v.g.cfg.Link != nil:
		return v.g.cfg.Link.Spacing(n)
	case v.g.cfg.Rate > 0:
		return time.Duration(math.Round(1e9 / v.g.cfg.Rate))
	}
	return 0
}

// run is the run's event: it takes in the packets due now and before the
// next other event, then waits for the next arrival (or, without a
// spacing, for downlink room).
func (v *vgen) run() {
	if v.done {
		return
	}
	f, g, cfg := v.f, v.g, &v.g.cfg
	blocked := false // no downlink buffer until the next other event
	v.next = max(v.next, v.clk.Now())
	for {
		if v.ctx.Err() != nil {
			v.finish(v.ctx.Err())
			return
		}
		if cfg.Count > 0 && v.taken >= uint64(cfg.Count) {
			v.finish(nil)
			return
		}
		sp := v.spacing(v.size)
		if sp > 0 {
			advanced, at, ok := v.clk.AdvanceBefore(v.next)
			if !advanced {
				v.timer.ResetAt(v.next) // what is due first runs first
				return
			}
			if blocked {
				if !ok {
					// Nothing will ever free a downlink buffer.
					v.finish(errNoBuffer)
					return
				}
				// Every packet that arrives before the next event is
				// lost: only an event can free a buffer.
				v.dropUntil(at, sp)
				continue
			}
		}
		v.gp.seq = v.offered
		if !f.allowed(genSession) {
			g.sent.Add(1)
			f.countGen(genSession, 1)
			f.drop(genSession, &f.st.droppedGated, 1)
			v.taken++
		} else {
			err := f.put(v.ctx, v.p, v.size, nil, &v.gp, genSession, noUL, false)
			switch {
			case err == nil:
				g.sent.Add(1)
				f.countGen(genSession, 1)
				v.taken++
			case err == errNoBuffer && sp > 0:
				f.countGen(genSession, 1)
				f.drop(genSession, &f.st.droppedOverrun, 1)
				blocked = true
			case err == errNoBuffer:
				return // onSpace runs the event again
			default:
				v.finish(err)
				return
			}
		}
		v.offered++
		v.next += sp
		v.size = v.pick.next()
	}
}

// runIngress is the run's event with an Ingress queue: the packets that
// arrived since the last event join the queue or are lost; when the
// modem's downlink is idle, the queue leaves as one batch.
func (v *vgen) runIngress() {
	if v.done {
		return
	}
	if err := v.ctx.Err(); err != nil {
		v.finish(err)
		return
	}
	now := v.clk.Now()
	v.arrive(now)
	if len(v.fifo) > 0 && v.downlinkIdle() {
		if err := v.sendBatch(); err != nil {
			v.finish(err)
			return
		}
	}
	cfg := &v.g.cfg
	if cfg.Count > 0 && v.taken >= uint64(cfg.Count) {
		if len(v.fifo) == 0 {
			v.finish(nil)
		}
		return // the downlink's going idle wakes the run (onSpace)
	}
	if len(v.fifo) == 0 || v.downlinkIdle() {
		// The next arrival matters now; otherwise it is counted when the
		// downlink goes idle.
		v.timer.ResetAt(max(v.next, now))
	}
}

// downlinkIdle reports whether the modem has nothing queued for the host
// and no aggregate open.
func (v *vgen) downlinkIdle() bool {
	idle := v.p.DLQueued() == 0
	v.f.mu.Lock()
	idle = idle && !(v.f.open && v.f.agg.Count() > 0)
	v.f.mu.Unlock()
	return idle
}

// arrive puts the packets that arrived by now into the ingress queue, in
// order, as long as there is room; the others are lost.
func (v *vgen) arrive(now time.Duration) {
	f, g, cfg, in := v.f, v.g, &v.g.cfg, v.g.cfg.Ingress
	for v.next <= now && (cfg.Count == 0 || v.taken < uint64(cfg.Count)) {
		sp := v.spacing(v.size)
		slot := in.slot(v.size)
		if len(cfg.Sizes) == 1 {
			// One size: count the arrivals due, take what fits, lose the
			// rest.
			due := uint64((now-v.next)/sp) + 1
			take := min(due, uint64((in.Bytes-v.fifoBytes)/slot))
			if cfg.Count > 0 {
				take = min(take, uint64(cfg.Count)-v.taken)
			}
			for range take {
				v.fifo = append(v.fifo, v.size)
			}
			v.fifoBytes += int(take) * slot
			v.taken += take
			g.sent.Add(take)
			lost := due - take
			if cfg.Count > 0 && v.taken >= uint64(cfg.Count) {
				lost = 0 // the run offers nothing after its last packet
				due = take
			}
			f.countGen(genSession, take+lost)
			f.drop(genSession, &f.st.droppedOverrun, lost)
			v.offered += due
			v.next += time.Duration(due) * sp
			return
		}
		if v.fifoBytes+slot <= in.Bytes {
			v.fifo = append(v.fifo, v.size)
			v.fifoBytes += slot
			v.taken++
			g.sent.Add(1)
		} else {
			f.drop(genSession, &f.st.droppedOverrun, 1)
		}
		f.countGen(genSession, 1)
		v.offered++
		v.next += sp
		v.size = v.pick.next()
	}
}

// sendBatch aggregates the packets of the ingress queue and sends the
// last aggregate with them. Packets for which the downlink has no
// transfer slot left stay queued for the next batch.
func (v *vgen) sendBatch() error {
	f := v.f
	sent := len(v.fifo)
	// The batch leaves the queue at one instant of the clock: the session
	// gate lets all of it through or none.
	if !f.allowed(genSession) {
		f.drop(genSession, &f.st.droppedGated, uint64(sent))
	} else {
		v.gp.seq = v.seq
		var err error
		sent, err = f.putGenerated(v.ctx, v.p, v.fifo, &v.gp)
		v.seq = v.gp.seq
		if err != nil {
			return err
		}
	}
	bytes := 0
	if len(v.g.cfg.Sizes) == 1 {
		bytes = sent * v.g.cfg.Ingress.slot(v.g.cfg.Sizes[0])
	} else {
		for _, n := range v.fifo[:sent] {
			bytes += v.g.cfg.Ingress.slot(n)
		}
	}
	rest := copy(v.fifo, v.fifo[sent:])
	v.fifo, v.fifoBytes = v.fifo[:rest], v.fifoBytes-bytes
	f.Flush()
	return nil
}

// dropUntil counts as lost every packet that arrives before at, the first
// of them due now, and leaves the run at the first arrival at or after at.
func (v *vgen) dropUntil(at, sp time.Duration) {
	f := v.f
	n := uint64(0)
	if len(v.g.cfg.Sizes) == 1 {
		// One size: the arrivals are evenly spaced.
		k := (at - v.next + sp - 1) / sp
		n = uint64(k)
		v.next += time.Duration(k) * sp
	} else {
		for v.next < at {
			n++
			v.next += v.spacing(v.size)
			v.size = v.pick.next()
		}
	}
	v.offered += n
	f.countGen(genSession, n)
	f.drop(genSession, &f.st.droppedOverrun, n)
}

// finish ends the run: a partly filled aggregate leaves with its flush
// timer (or now, without one).
func (v *vgen) finish(err error) {
	v.done = true
	f := v.f
	v.p.OnDLSpace(nil)
	if f.cfg.FlushTimer <= 0 {
		f.Flush()
	}
	v.g.err = err
	f.mode.Store(f.idleMode.Load())
	v.g.cancel()
	close(v.g.done)
}

// sizePicker yields packet sizes in turn, or by smooth weighted round robin.
type sizePicker struct {
	sizes   []int
	weights []int
	current []int
	total   int
	i       int
}

func newSizePicker(sizes, weights []int) *sizePicker {
	sp := &sizePicker{sizes: sizes, weights: weights}
	if len(weights) > 0 {
		sp.current = make([]int, len(weights))
		for _, w := range weights {
			sp.total += w
		}
	}
	return sp
}

func (sp *sizePicker) next() int {
	if len(sp.weights) == 0 {
		n := sp.sizes[sp.i]
		sp.i = (sp.i + 1) % len(sp.sizes)
		return n
	}
	best := 0
	for k, w := range sp.weights {
		sp.current[k] += w
		if sp.current[k] > sp.current[best] {
			best = k
		}
	}
	sp.current[best] -= sp.total
	return sp.sizes[best]
}

// putGenPacket writes a generated IPv4/UDP packet of len(b) bytes with
// sequence number seq: valid IPv4 header (checksum, total length, DF, TTL
// 64), UDP header (length, checksum 0 = none), seq as 8 big-endian bytes,
// then a pattern derived from seq.
func putGenPacket(b []byte, seq uint64, cfg *GeneratorConfig) {
	be := binary.BigEndian
	n := len(b)
	putGenHeaders(b, n, cfg)
	be.PutUint16(b[4:], uint16(seq))
	be.PutUint16(b[10:], ipv4Checksum(b[:20]))
	be.PutUint64(b[28:], seq)
	// The pattern byte at i is byte(seq)+byte(i): a slice of the ramp.
	fill := int(byte(seq))
	copy(b[GenMinPacket:], genRamp[fill+GenMinPacket:fill+n])
}

// putGenHeaders writes the IPv4 and UDP headers (b[:GenHeaderLen]) of a
// generated packet of n bytes with identification and checksum zero.
func putGenHeaders(b []byte, n int, cfg *GeneratorConfig) {
	be := binary.BigEndian
	b[0] = 0x45
	b[1] = 0
	be.PutUint16(b[2:], uint16(n))
	be.PutUint16(b[4:], 0)
	be.PutUint16(b[6:], 0x4000)
	b[8] = 64
	b[9] = 17
	b[10], b[11] = 0, 0
	copy(b[12:16], cfg.Src[:])
	copy(b[16:20], cfg.Dst[:])
	be.PutUint16(b[20:], cfg.SrcPort)
	be.PutUint16(b[22:], cfg.DstPort)
	be.PutUint16(b[24:], uint16(n-20))
	be.PutUint16(b[26:], 0)
}

// genRamp[i] is byte(i): the generator's payload patterns are slices of it.
var genRamp = func() *[256 + GenMaxPacket]byte {
	var r [256 + GenMaxPacket]byte
	for i := range r {
		r[i] = byte(i)
	}
	return &r
}()

// ipv4Checksum returns the Internet checksum of an IPv4 header: the value
// to store when its checksum field is zero, 0 when the field is right.
func ipv4Checksum(h []byte) uint16 { return checksum(0, h) }

// GeneratedSeq checks that pkt is a packet the generator built (IPv4, UDP,
// header checksum and lengths right, payload pattern intact) and returns
// its sequence number.
func GeneratedSeq(pkt []byte) (uint64, bool) {
	be := binary.BigEndian
	if len(pkt) < GenMinPacket || pkt[0] != 0x45 || pkt[9] != 17 ||
		int(be.Uint16(pkt[2:])) != len(pkt) || int(be.Uint16(pkt[24:])) != len(pkt)-20 ||
		ipv4Checksum(pkt[:20]) != 0 {
		return 0, false
	}
	seq := be.Uint64(pkt[28:])
	fill := byte(seq)
	for i := GenMinPacket; i < len(pkt); i++ {
		if pkt[i] != fill+byte(i) {
			return 0, false
		}
	}
	return seq, true
}
