// Package ipdata is the modem's IP data function: what the modem does with
// the packets on its data channels — answer, loop back, generate, shape —
// and how it frames them. Function is the ep.Function behind the IP_HW0 /
// IP_HW0_MBIM pair; Gate is what it asks whether data may flow (the modem's
// state, mhi/ep/modem, answers).
package ipdata

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gomhi/gomhi/mhi/ep"
	"github.com/gomhi/gomhi/mhi/proto/framing"
	"github.com/gomhi/gomhi/mhi/proto/ntb"
	"github.com/gomhi/gomhi/mhi/proto/qmap"
	"github.com/gomhi/gomhi/mhi/wire"
)

// Name and MBIMName are the channel pair names (100/101) an
// Function is normally attached to: raw IP / QMAP for mhi_net, MBIM NTBs for
// mhi_wwan_mbim.
const (
	Name     = "IP_HW0"
	MBIMName = "IP_HW0_MBIM"
)

// Defaults applied by New to zero fields of Config.
const (
	// DefaultMaxDatagrams is the most packets the modem puts in one
	// downlink aggregate.
	DefaultMaxDatagrams = 32
	// DefaultMaxAggregate is the modem's own downlink buffer size: the
	// largest aggregate it builds, whatever the host's buffer size.
	DefaultMaxAggregate = 32768
	// DefaultFlushTimer is the safety flush: an aggregate is sent at the
	// latest this long after its first packet.
	DefaultFlushTimer = time.Millisecond
	// MaxAggregate bounds Config.MaxAggregate.
	MaxAggregate = 1 << 20
)

// Mode is what an Function does with the packets it carries.
type Mode uint32

// Modes.
const (
	// ModeLoopback (the default) sends every uplink packet back on the
	// downlink, aggregated: the modem's internal loopback.
	ModeLoopback Mode = iota
	// ModeGenerator sends generated packets on the downlink; uplink
	// packets are consumed and counted (DroppedSunk).
	ModeGenerator
	// ModeResponder answers, as a modem's network would: every ICMP and
	// ICMPv6 echo request gets its echo reply, every UDP datagram to port
	// EchoPort comes back with addresses and ports swapped, whatever the
	// destination address; other packets are counted (DroppedNotAnswered).
	ModeResponder
)

// String returns "loopback" or "generator".
func (m Mode) String() string {
	switch m {
	case ModeLoopback:
		return "loopback"
	case ModeGenerator:
		return "generator"
	case ModeResponder:
		return "responder"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// Config configures an Function.
type Config struct {
	// Format frames the downlink and, unless UplinkRaw, the uplink: one
	// packet per transfer (framing.RawIP, the zero value), MBIM NTB16 or
	// NTB32 aggregates, or QMAP aggregates (mux QMAPMux, checksum framing
	// QMAPCsum).
	Format framing.Format
	// UplinkRaw says the host sends one raw IP packet per uplink transfer
	// whatever Format the downlink uses.
	UplinkRaw bool
	// MaxDatagrams is the most packets in one aggregate (zero means
	// DefaultMaxDatagrams). Ignored by framing.RawIP.
	MaxDatagrams int
	// MaxAggregate is the largest aggregate in bytes (zero means
	// DefaultMaxAggregate; at most 65535 for NTB16). Aggregates larger
	// than the host's buffers are written across several of them with
	// OVERFLOW completions.
	MaxAggregate int
	// Session is the MBIM session id (wire id) of session 0's NDPs: the
	// base of the session numbering. Session N's packets go in the NDP
	// signed Session+N, and an uplink NDP signed w carries session
	// w−Session (w when w < Session, unless StrictSession).
	Session uint8
	// NTBDatagramAlign is the alignment of datagrams in an NTB (zero means
	// the codec's default, 4).
	NTBDatagramAlign int
	// QMAPMux is the mux id of session 0's QMAP frames, the base of the
	// numbering as Session is for NTBs: session N's frames carry mux id
	// QMAPMux+N.
	QMAPMux uint8
	// QMAPCsum is the checksum offload framing of QMAP frames, both ways:
	// CsumV4 is the downlink trailer and the uplink checksum header (as
	// rmnet's INGRESS_ and EGRESS_MAP_CKSUMV4), CsumV5 the MAPv5 header.
	// An uplink frame whose header asks for the checksum gets it computed
	// before the packet goes on (ULCsumComputed, ULCsumBad).
	QMAPCsum qmap.CsumMode
	// QMAPCsumValid sets the checksum-valid bit of downlink frames.
	QMAPCsumValid bool
	// FlushTimer is the safety flush delay (zero means DefaultFlushTimer,
	// negative disables it).
	FlushTimer time.Duration
	// NoIdleFlush keeps a partly filled aggregate open when the uplink
	// goes idle; it then leaves on size, count or the timer only.
	NoIdleFlush bool
	// WindowTimer runs the flush timer per aggregation window instead of
	// per aggregate: the first packet after the timer (or an idle flush)
	// opens a window and arms it; an aggregate that closes on its packet
	// or byte limit inside the window does not re-arm it, so the packets
	// that did not fit leave with the window, at most FlushTimer after it
	// opened, in an aggregate of their own however few they are. (By
	// default every aggregate gets FlushTimer from its own first packet.)
	WindowTimer bool
	// Responder starts the function in ModeResponder instead of
	// ModeLoopback.
	Responder bool
	// Shape makes the modem a slow consumer of one uplink flow (see
	// ShapeConfig and SetLendRegion); the zero value shapes nothing.
	Shape ShapeConfig
	// NetworkMTU, if non-zero, is the MTU of the network behind the
	// modem: uplink packets longer than it are dropped, silently as a
	// real network does, and counted in DroppedOverMTU (the mtu-1400
	// quirk).
	NetworkMTU int
	// StrictSession drops uplink packets whose MBIM session (NDP
	// signature) or QMAP mux id is below the one the modem numbers its
	// sessions from (Session, QMAPMux), counted in DroppedSession, as a
	// modem whose sessions start at mux id 112 would with the host's
	// session 0 (the sdx72-mux-112 quirk). Without it such a wire id w
	// is taken as session w.
	StrictSession bool
	// NTBSequenceGlitch, if non-zero, makes every NTBSequenceGlitch-th
	// downlink NTB skip ahead in its wSequence (counted in
	// NTBSequenceGlitches), as the firmware behind mhi_wwan_mbim's
	// "sequence number glitch" storms does (the ntb-sequence-glitch quirk).
	NTBSequenceGlitch int
	// Gate, when set, is asked for every packet whether IP data may flow
	// (a Modem with RequireConnect: only while a session is connected).
	// Packets it refuses, uplink and generated alike, are dropped and
	// counted in DroppedGated. When it is also a SessionGate, each packet
	// is asked about on its own session.
	Gate Gate
}

// Function is the Function of an IP data channel pair (IP_HW0 or
// IP_HW0_MBIM, channels 100/101): a modem in internal loopback, or a
// packet generator, aggregating downlink packets the way a Qualcomm modem
// does (by default up to 32 packets in a 32 KiB aggregate, NTB or QMAP;
// one per transfer with raw IP, the zero Format).
//
// Downlink aggregates are built in place in the downlink queue's buffers
// (Pipe.Reserve) and sent when they hold MaxDatagrams packets, when the
// next packet does not fit MaxAggregate, when the uplink goes idle, or
// when the flush timer expires. Every packet belongs to a session (the
// uplink NDP's session or QMAP mux id less the base, see Config.Session)
// and goes back on it: one aggregate interleaves sessions, an NDP per
// session in an NTB, a mux id per frame in QMAP; raw IP has session 0
// only. All methods are safe for concurrent use.
type Function struct {
	cfg      Config
	pipe     atomic.Pointer[ep.Pipe]
	mode     atomic.Uint32
	idleMode atomic.Uint32 // the mode to return to after a generator run
	reply    []byte        // responder scratch (the uplink worker's only)
	csumBuf  []byte        // uplink checksum offload scratch (likewise)

	// mu guards the open aggregate. It is taken by Receive and Idle (under
	// the uplink channel's work) and by the flush timer, and held while
	// the aggregate is reserved in and committed to the downlink queue
	// (its channel's mu).
	//
	// lockorder: ep.channel.work → Function.mu → ep.channel.mu
	mu       sync.Mutex
	agg      aggWriter
	cur      ep.DLBuffer
	curPipe  *ep.Pipe // the pipe cur was reserved on
	open     bool
	aggSeq   uint64 // aggregates opened
	timer    flushTimer
	timerFor uint64 // aggSeq the timer was armed for
	window   bool   // WindowTimer: a window is open (its timer armed)

	// Uplink parsing: used only by the uplink worker (Receive).
	ntbP  ntb.Parser
	qmapP qmap.Parser

	// statMu guards the parser snapshots; nothing is taken while it is
	// held. Stats takes it, which the control functions call under their
	// mu (MBIMOptions and QMIOptions.PacketStatistics, by function value).
	//
	// lockorder: ep.channel.work → modem.MBIM.mu → Function.statMu
	// lockorder: modem.QMI.mu → Function.statMu
	statMu   sync.Mutex
	ntbSnap  ntb.Stats
	qmapSnap qmap.Stats

	// genMu guards gen; StartGenerator holds it while it sets the
	// downlink queue's onSpace (under the channel's mu).
	//
	// lockorder: Function.genMu → ep.channel.mu
	genMu sync.Mutex
	gen   *genRun

	shp shaper

	st ipCounters

	// Sessions: the numbering's base (wireBase), the Gate as a
	// SessionGate (nil when it is not one), the counters per session
	// kept outside mu (atomics), and those of the packets that reach an
	// aggregate, the open one's and the settled ones' totals (guarded by
	// mu: plain additions per packet; SessionStats takes mu).
	base  uint8
	sgate SessionGate
	sess  [NumSessions]sessCounters
	aggS  aggSessions
}

// ipCounters are an Function's counters.
type ipCounters struct {
	ulTransfers, ulBytes, ulPackets, ulMalformed atomic.Uint64
	genPackets                                   atomic.Uint64
	dlAggregates, dlPackets, dlBytes             atomic.Uint64
	dlMixed                                      atomic.Uint64
	pending                                      atomic.Int64
	flushFull, flushSize, flushIdle, flushTimer  atomic.Uint64
	droppedSunk, droppedAborted, droppedTooLarge atomic.Uint64
	droppedEmpty, droppedReset                   atomic.Uint64
	droppedNotAnswered, answered                 atomic.Uint64
	droppedShaped, shapedSent, lentReleased      atomic.Uint64
	lendErrors, droppedGated                     atomic.Uint64
	droppedOverrun                               atomic.Uint64
	droppedOverMTU, droppedSession, ntbGlitches  atomic.Uint64
	ulCsumComputed, ulCsumBad                    atomic.Uint64
	shapedQueued, lentHeld                       atomic.Int64
}

// Stats is a snapshot of an Function's counters. Conservation: every
// packet in (ULPackets + GenPackets) is out (DLPackets), waiting in the
// open aggregate (Pending), or dropped under a named reason (Dropped).
// Packets in aggregates already committed to the downlink queue are out;
// the device counts queued transfers an MHI reset drops
// (Stats.DLDroppedOnReset) and partial ones a channel reset drops
// (Stats.DLPartialDropped).
type Stats struct {
	ULTransfers uint64 // uplink transfers received
	ULBytes     uint64 // their bytes
	ULPackets   uint64 // IP packets found in them (malformed parts excluded)
	ULMalformed uint64 // uplink transfers with at least one malformed part
	// ULCsumComputed counts uplink QMAP packets whose checksum the modem
	// computed because their checksum header asked for it; ULCsumBad
	// those that asked with offsets outside the packet or a protocol
	// other than TCP and UDP (passed on unchanged).
	ULCsumComputed uint64
	ULCsumBad      uint64
	GenPackets     uint64 // packets the generator produced

	DLAggregates uint64 // downlink aggregates (transfers) queued
	// DLMixedAggregates counts those holding packets of more than one
	// data session (an NDP per session in one NTB, several mux ids in one
	// QMAP buffer).
	DLMixedAggregates uint64
	DLPackets         uint64 // packets in them: the sum of datagrams per aggregate
	DLBytes           uint64 // their bytes, framing included
	Pending           uint64 // packets in the aggregate still open

	// DLDroppedQueued counts the packets of aggregates already queued
	// (and counted in DLPackets) that the device later dropped: an MHI
	// reset (SYS_ERR recovery, power-down) drops the whole downlink
	// queue, a channel reset the aggregate it had partly written into
	// host buffers (Stats.DLDroppedOnReset and DLPartialDropped count
	// the same aggregates as transfers). Of DLPackets, DLPackets −
	// DLDroppedQueued reached the host's buffers whole, or are still
	// queued.
	DLDroppedQueued uint64

	FlushFull  uint64 // aggregates sent holding MaxDatagrams (every raw-IP transfer)
	FlushSize  uint64 // aggregates sent because the next packet did not fit
	FlushIdle  uint64 // aggregates sent because the uplink (or the generator) went idle
	FlushTimer uint64 // aggregates sent by the safety timer

	DroppedSunk     uint64 // uplink packets consumed while the generator ran
	DroppedAborted  uint64 // uplink packets after a channel stop or reset cut a transfer short
	DroppedTooLarge uint64 // packets that do not fit an empty aggregate
	DroppedEmpty    uint64 // empty uplink transfers (raw IP or UplinkRaw)
	DroppedReset    uint64 // packets of an aggregate whose queue an MHI reset dropped
	// DroppedNotAnswered counts uplink packets ModeResponder does not
	// answer; Answered those it does (the answers go out as DLPackets).
	DroppedNotAnswered uint64
	Answered           uint64

	// DroppedShaped counts packets of the shaped flow dropped because its
	// queue was full, because a lent slot could not be read back, because
	// the lend region they were lent under was cleared or replaced
	// (ClearLendRegion, SetLendRegion, an uplink channel reset: stale
	// lends are dropped unread), or because the device they arrived on
	// closed.
	DroppedShaped uint64
	// ShapedQueued is the number of shaped packets waiting; ShapedSent
	// those the shaper has passed on (as ULPackets they were counted on
	// arrival, so conservation holds with ShapedQueued as pending).
	ShapedQueued uint64
	ShapedSent   uint64
	// LentHeld is the number of lent zero-copy slots the shaper holds;
	// LentReleased the releases written to the host's ring; LendErrors
	// failed accesses to the lend region (bounds, ring full).
	LentHeld     uint64
	LentReleased uint64
	LendErrors   uint64

	// DroppedGated counts packets (uplink and generated) dropped because
	// the Gate refused them: no data session was connected.
	DroppedGated uint64

	// DroppedOverMTU counts uplink packets longer than NetworkMTU;
	// DroppedSession those on a session other than the modem's
	// (StrictSession).
	DroppedOverMTU uint64
	DroppedSession uint64
	// NTBSequenceGlitches counts downlink NTBs whose wSequence skipped
	// ahead (NTBSequenceGlitch).
	NTBSequenceGlitches uint64

	// DroppedOverrun counts generated packets that arrived on the
	// generator's link (GeneratorConfig.Link) while every downlink buffer
	// of the modem was taken: a link does not wait, so they are lost.
	DroppedOverrun uint64

	// NTB is the uplink NTB parser's counters, malformation reasons
	// included (see ntb.Reasons).
	NTB ntb.Stats
	// QMAP is the uplink QMAP parser's counters (see qmap.Reasons).
	QMAP qmap.Stats

	// Sessions are the counters per session, one row per session that
	// has had traffic (SessionStats), so that whatever logs or reports
	// Stats (mhictl modem serve's ip_data lines, the lab's summary)
	// carries them too.
	Sessions []SessionStats
}

// Dropped returns the packets dropped for any reason.
func (s Stats) Dropped() uint64 {
	return s.DroppedSunk + s.DroppedAborted + s.DroppedTooLarge + s.DroppedEmpty + s.DroppedReset +
		s.DroppedNotAnswered + s.DroppedShaped + s.DroppedGated + s.DroppedOverrun + s.DroppedOverMTU + s.DroppedSession
}

// DeaggErrors returns the malformations the uplink parsers counted.
func (s Stats) DeaggErrors() uint64 { return s.NTB.Errors() + s.QMAP.Errors() }

// AvgDatagrams returns the average number of packets per downlink aggregate.
func (s Stats) AvgDatagrams() float64 {
	if s.DLAggregates == 0 {
		return 0
	}
	return float64(s.DLPackets) / float64(s.DLAggregates)
}

// Errors of Function methods.
var (
	// ErrGeneratorRunning: StartGenerator while a generator runs.
	ErrGeneratorRunning = errors.New("ipdata: generator already running")
	// ErrNotAttached: the Function is not attached to a device's pipe yet.
	ErrNotAttached = errors.New("ipdata: function not attached to a device")
)

// New validates cfg, applies its defaults and returns the Function.
// Attach it with Config.Functions under the pair's name, e.g.
// Functions: map[string]Function{MBIMName: ipd}.
func New(cfg Config) (*Function, error) {
	if cfg.MaxDatagrams == 0 {
		cfg.MaxDatagrams = DefaultMaxDatagrams
	}
	if cfg.MaxAggregate == 0 {
		cfg.MaxAggregate = DefaultMaxAggregate
	}
	if cfg.FlushTimer == 0 {
		cfg.FlushTimer = DefaultFlushTimer
	}
	bad := func(format string, args ...any) (*Function, error) {
		return nil, fmt.Errorf("ipdata: %w: "+format, append([]any{wire.ErrConfig}, args...)...)
	}
	if cfg.MaxDatagrams < 1 || cfg.MaxAggregate < 1 || cfg.MaxAggregate > MaxAggregate {
		return bad("MaxDatagrams %d, MaxAggregate %d (want ≥ 1 and 1…%d)", cfg.MaxDatagrams, cfg.MaxAggregate, MaxAggregate)
	}
	if err := validShape(&cfg.Shape); err != nil {
		return bad("shape: %v", err)
	}
	f := &Function{cfg: cfg, base: wireBase(&cfg)}
	f.sgate, _ = cfg.Gate.(SessionGate)
	if cfg.Responder {
		f.mode.Store(uint32(ModeResponder))
		f.idleMode.Store(uint32(ModeResponder))
	}
	switch cfg.Format {
	case framing.NTB16, framing.NTB32:
		nc := ntb.Config{NTB32: cfg.Format == framing.NTB32, Session: cfg.Session, MaxDatagrams: cfg.MaxDatagrams,
			DatagramAlign: cfg.NTBDatagramAlign}
		if cfg.Format == framing.NTB16 && cfg.MaxAggregate > 0xFFFF {
			return bad("MaxAggregate %d exceeds the NTB16 limit 65535", cfg.MaxAggregate)
		}
		if _, err := ntb.Size(nc, nil); err != nil {
			return bad("%v", err)
		}
		if _, _, err := ntb.Fit(nc, cfg.MaxAggregate, nil); err != nil {
			return bad("MaxAggregate %d: %v", cfg.MaxAggregate, err)
		}
		f.agg = &ntbAgg{cfg: nc, glitchEvery: cfg.NTBSequenceGlitch, glitches: &f.st.ntbGlitches}
	case framing.QMAP:
		qc := qmap.Config{Mux: cfg.QMAPMux, Csum: cfg.QMAPCsum, CsumValid: cfg.QMAPCsumValid,
			MaxPackets: cfg.MaxDatagrams}
		if _, err := qmap.Size(qc, nil); err != nil {
			return bad("%v", err)
		}
		f.agg = &qmapAgg{cfg: qc}
		f.qmapP.Csum, f.qmapP.Uplink = cfg.QMAPCsum, true
	case framing.RawIP:
		f.agg = &rawAgg{}
	default:
		return bad("unknown format %d", cfg.Format)
	}
	f.timer = time.AfterFunc(time.Hour, f.onTimer)
	f.timer.Stop()
	return f, nil
}

// Config returns the configuration with its defaults applied.
func (f *Function) Config() Config { return f.cfg }

// Attach implements PipeAttacher. On a device with a Clock the flush timer
// becomes one of the clock's events.
func (f *Function) Attach(p *ep.Pipe) {
	if !f.pipe.CompareAndSwap(nil, p) {
		return
	}
	if clk := p.Clock(); clk != nil {
		f.mu.Lock()
		f.timer.Stop()
		f.timer = clk.NewTimer(f.onTimer)
		f.mu.Unlock()
	}
}

// flushTimer is the flush timer: a *time.Timer in real time, a
// *simclock.Timer in virtual time.
type flushTimer interface {
	Reset(d time.Duration) bool
	Stop() bool
}

// Mode returns what the function does now.
func (f *Function) Mode() Mode { return Mode(f.mode.Load()) }

// Stats returns a snapshot of the counters.
func (f *Function) Stats() Stats {
	c := &f.st
	s := Stats{
		ULTransfers:         c.ulTransfers.Load(),
		ULBytes:             c.ulBytes.Load(),
		ULPackets:           c.ulPackets.Load(),
		ULMalformed:         c.ulMalformed.Load(),
		ULCsumComputed:      c.ulCsumComputed.Load(),
		ULCsumBad:           c.ulCsumBad.Load(),
		GenPackets:          c.genPackets.Load(),
		DLAggregates:        c.dlAggregates.Load(),
		DLMixedAggregates:   c.dlMixed.Load(),
		DLPackets:           c.dlPackets.Load(),
		DLBytes:             c.dlBytes.Load(),
		Pending:             uint64(max(c.pending.Load(), 0)),
		FlushFull:           c.flushFull.Load(),
		FlushSize:           c.flushSize.Load(),
		FlushIdle:           c.flushIdle.Load(),
		FlushTimer:          c.flushTimer.Load(),
		DroppedSunk:         c.droppedSunk.Load(),
		DroppedAborted:      c.droppedAborted.Load(),
		DroppedTooLarge:     c.droppedTooLarge.Load(),
		DroppedEmpty:        c.droppedEmpty.Load(),
		DroppedReset:        c.droppedReset.Load(),
		DroppedNotAnswered:  c.droppedNotAnswered.Load(),
		Answered:            c.answered.Load(),
		DroppedShaped:       c.droppedShaped.Load(),
		ShapedQueued:        uint64(max(c.shapedQueued.Load(), 0)),
		ShapedSent:          c.shapedSent.Load(),
		LentHeld:            uint64(max(c.lentHeld.Load(), 0)),
		LentReleased:        c.lentReleased.Load(),
		LendErrors:          c.lendErrors.Load(),
		DroppedGated:        c.droppedGated.Load(),
		DroppedOverrun:      c.droppedOverrun.Load(),
		DroppedOverMTU:      c.droppedOverMTU.Load(),
		DroppedSession:      c.droppedSession.Load(),
		NTBSequenceGlitches: c.ntbGlitches.Load(),
	}
	if p := f.pipe.Load(); p != nil {
		s.DLDroppedQueued = p.DLDroppedUnits()
	}
	f.statMu.Lock()
	s.NTB, s.QMAP = f.ntbSnap, f.qmapSnap
	f.statMu.Unlock()
	s.Sessions = f.SessionStats()
	return s
}

// ulReceive is the state of one Receive call, shared with the parser
// callbacks.
type ulReceive struct {
	f       *Function
	ctx     context.Context
	p       *ep.Pipe
	sink    bool
	respond bool
	taken   int   // packets accounted for
	aborted bool  // ctx ended while waiting for downlink room
	err     error // why

	// The transfer, and whether it sits in a lent zero-copy slot (at
	// iova base) that a shaped packet of it now holds.
	transfer []byte
	lent     bool
	held     bool
	// sess is the session of the packet at hand; wrongSession says its
	// wire id is below the base (Config.StrictSession).
	sess         uint8
	wrongSession bool
	base         uint64
	slot         int
	tag          uint16
	gen          uint64
}

// setWire numbers the packet at hand by the wire id it came on.
func (r *ulReceive) setWire(w uint8) {
	n, ok := r.f.sessionOf(w)
	r.sess, r.wrongSession = n, !ok
}

// drop counts the packet at hand, of n bytes, as taken and dropped under reason.
func (r *ulReceive) drop(n int, reason *atomic.Uint64) {
	r.taken++
	r.f.countUL(r.sess, n)
	r.f.drop(r.sess, reason, 1)
}

// packet handles one uplink packet. inTransfer tells whether pkt is a
// view into r.transfer (a lent slot may then be held instead of copied).
func (r *ulReceive) packet(pkt []byte, inTransfer bool) {
	f := r.f
	switch {
	case r.aborted && r.taken == 0:
		return // the whole transfer is delivered again
	case r.aborted:
		r.drop(len(pkt), &f.st.droppedAborted)
		return
	case r.wrongSession:
		r.drop(len(pkt), &f.st.droppedSession)
		return
	case !f.allowed(r.sess):
		r.drop(len(pkt), &f.st.droppedGated)
		return
	case f.cfg.NetworkMTU > 0 && len(pkt) > f.cfg.NetworkMTU:
		r.drop(len(pkt), &f.st.droppedOverMTU)
		return
	case f.cfg.Shape.UDPPort != 0 && f.shapedFlow(pkt):
		if f.enqueueShaped(r.p, r.transfer, pkt, r.sess, r.lent && !r.held && inTransfer, r.base, r.slot, r.tag, r.gen) {
			r.held = true
		}
		r.taken++
		return
	case r.sink:
		r.drop(len(pkt), &f.st.droppedSunk)
		return
	}
	ulLen := len(pkt)
	if r.respond {
		if f.reply == nil {
			f.reply = make([]byte, 1<<16)
		}
		n, ok := answer(f.reply, pkt)
		if !ok {
			r.drop(ulLen, &f.st.droppedNotAnswered)
			return
		}
		pkt = f.reply[:n]
		f.st.answered.Add(1)
	}
	if err := f.add(r.ctx, r.p, pkt, r.sess, ulLen); err != nil {
		r.aborted, r.err = true, err
		if r.taken > 0 {
			r.drop(ulLen, &f.st.droppedAborted)
		}
		return
	}
	r.taken++
	f.st.ulPackets.Add(1) // its session's, add counted
}

// Receive implements Function: it splits the uplink transfer into IP
// packets according to the format and, in loopback mode, adds each to the
// downlink aggregate, blocking while the downlink queue is full. Malformed
// parts are counted by reason and dropped; the rest is looped. If the
// channel stops before the first packet found room, the transfer is left
// for redelivery; after that, the rest of it is counted as DroppedAborted.
func (f *Function) Receive(ctx context.Context, p *ep.Pipe, transfer []byte) error {
	mode := f.Mode()
	r := ulReceive{f: f, ctx: ctx, p: p, sink: mode == ModeGenerator, respond: mode == ModeResponder, transfer: transfer}
	r.base, r.slot, r.tag, r.gen, r.lent = f.lentSlot(p)
	var parseErr error
	switch {
	case f.cfg.UplinkRaw || f.cfg.Format == framing.RawIP:
		r.packet(transfer, true)
	case f.cfg.Format == framing.QMAP:
		before := f.qmapP.Stats
		_, parseErr = f.qmapP.Parse(transfer, func(pk qmap.Packet) {
			data, computed := f.ulChecksum(pk)
			r.setWire(pk.Mux)
			r.packet(data, !computed)
		})
		if r.aborted && r.taken == 0 {
			f.qmapP.Stats = before
		}
		f.statMu.Lock()
		f.qmapSnap = f.qmapP.Stats
		f.statMu.Unlock()
	default:
		before := f.ntbP.Stats
		_, parseErr = f.ntbP.Parse(transfer, func(d []byte, sid uint8) {
			r.setWire(sid)
			r.packet(d, true)
		})
		if r.aborted && r.taken == 0 {
			f.ntbP.Stats = before
		}
		f.statMu.Lock()
		f.ntbSnap = f.ntbP.Stats
		f.statMu.Unlock()
	}
	if r.aborted && r.taken == 0 {
		// Nothing of it was taken: the device delivers it again when the
		// channel runs again (or counts it as discarded if it does not).
		return r.err
	}
	if r.lent && !r.held {
		// Done with the lent slot before its element completes.
		f.release(p, r.slot, r.tag, r.gen)
	}
	f.st.ulTransfers.Add(1)
	f.st.ulBytes.Add(uint64(len(transfer)))
	if parseErr != nil {
		f.st.ulMalformed.Add(1)
	}
	return nil
}

// Idle implements Idler: the uplink ran dry, so the open aggregate leaves
// now (unless NoIdleFlush).
func (f *Function) Idle(*ep.Pipe) {
	if f.cfg.NoIdleFlush {
		return
	}
	f.flushOpen(&f.st.flushIdle)
}

// Flush sends the open aggregate now, if it holds any packet.
func (f *Function) Flush() { f.flushOpen(&f.st.flushIdle) }

// flushOpen sends the open aggregate, counting the flush in cause; it
// also ends an aggregation window (WindowTimer).
func (f *Function) flushOpen(cause *atomic.Uint64) {
	f.mu.Lock()
	if f.window {
		f.window = false
		f.timer.Stop()
	}
	if f.open && f.agg.Count() > 0 {
		f.flushLocked(cause)
	}
	f.mu.Unlock()
}

// onTimer is the safety flush, or the end of a window (WindowTimer).
func (f *Function) onTimer() {
	f.mu.Lock()
	switch {
	case f.cfg.WindowTimer:
		f.window = false
		if f.open && f.agg.Count() > 0 {
			f.flushLocked(&f.st.flushTimer)
		}
	case f.open && f.agg.Count() > 0 && f.timerFor == f.aggSeq:
		f.flushLocked(&f.st.flushTimer)
	}
	f.mu.Unlock()
}

// bufSize is the size of the queue buffer reserved for an aggregate that
// starts with a packet of n bytes.
func (f *Function) bufSize(n int) int {
	if f.cfg.Format == framing.RawIP {
		return max(n, f.cfg.MaxAggregate)
	}
	return f.cfg.MaxAggregate
}

// add puts one packet of session sess into the open aggregate, opening
// one in a reserved downlink buffer when needed (blocking while the queue
// is full) and flushing as the limits say. ul ≥ 0 says the packet answers
// (or is) an uplink packet of ul bytes, which add counts in its session's
// UL counters (not in Stats.ULPackets); ul < 0 (noUL), that it was
// counted before. It fails only when ctx ends or the device closes while
// it waits for room; the packet is then not accounted for.
func (f *Function) add(ctx context.Context, p *ep.Pipe, pkt []byte, sess uint8, ul int) error {
	if len(pkt) == 0 {
		f.dropPut(sess, &f.st.droppedEmpty, ul)
		return nil
	}
	return f.put(ctx, p, len(pkt), pkt, nil, sess, ul, true)
}

// noUL is add's and put's ul for a packet whose uplink side, if any, is
// counted elsewhere (generated, shaped).
const noUL = -1

// errNoBuffer: put without blocking found the downlink queue full.
var errNoBuffer = errors.New("ipdata: no downlink buffer free")

// put adds one packet of n bytes to the open aggregate, like add: the
// bytes of pkt, or, with gen, a generated packet written in place into the
// aggregate (when the format's writer can reserve room for it; otherwise
// through gen's scratch buffer), on session sess, with add's ul. Without
// block it fails with errNoBuffer instead of waiting for a downlink
// buffer, accounting for nothing.
func (f *Function) put(ctx context.Context, p *ep.Pipe, n int, pkt []byte, gen *genPacket, sess uint8, ul int, block bool) error {
	f.mu.Lock()
	err := f.putLocked(ctx, p, n, pkt, gen, sess, ul, block)
	f.mu.Unlock()
	return err
}

// putGenerated puts generated packets of the given sizes into aggregates
// like put (without blocking), sequence numbers from gen.seq on, holding
// f.mu across them; it returns how many it put, stopping at the first
// errNoBuffer (not returned) or other error.
func (f *Function) putGenerated(ctx context.Context, p *ep.Pipe, sizes []int, gen *genPacket) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, n := range sizes {
		if err := f.putLocked(ctx, p, n, nil, gen, genSession, noUL, false); err != nil {
			if err == errNoBuffer {
				err = nil
			}
			return i, err
		}
		gen.seq++
	}
	return len(sizes), nil
}

// putLocked is put with f.mu held; it may release it while it waits for
// a downlink buffer, and holds it again when it returns.
func (f *Function) putLocked(ctx context.Context, p *ep.Pipe, n int, pkt []byte, gen *genPacket, sess uint8, ul int, block bool) error {
	for {
		if !f.open {
			f.mu.Unlock()
			b, err := f.reserveAggregate(ctx, p, n, block)
			f.mu.Lock()
			if err != nil {
				return err
			}
			if f.open { // another producer opened one meanwhile
				p.Release(b)
				continue
			}
			if err := f.agg.reset(b.Buf); err != nil {
				// Ruled out by New's checks.
				p.Release(b)
				f.dropPut(sess, &f.st.droppedTooLarge, ul)
				return nil
			}
			f.cur, f.curPipe, f.open = b, p, true
			f.aggSeq++
		}
		switch err := f.addToAggregateLocked(n, pkt, gen, f.base+sess); {
		case err == nil:
			f.cur.AddPacket(n)
			f.addedLocked(sess, n, ul)
			return nil
		case errors.Is(err, framing.ErrFull) || errors.Is(err, framing.ErrLimit):
			if f.agg.Count() == 0 {
				// Cannot happen for a fresh aggregate; be safe.
				f.dropPut(sess, &f.st.droppedTooLarge, ul)
				return nil
			}
			cause := &f.st.flushSize
			if errors.Is(err, framing.ErrLimit) {
				cause = &f.st.flushFull
			}
			f.flushLocked(cause)
		case errors.Is(err, framing.ErrEmpty):
			f.dropPut(sess, &f.st.droppedEmpty, ul)
			return nil
		default: // too large even for an empty aggregate
			f.dropPut(sess, &f.st.droppedTooLarge, ul)
			return nil
		}
	}
}

// reserveAggregate reserves a downlink buffer for a new aggregate whose
// first packet has n bytes. Without block a full queue is errNoBuffer.
func (f *Function) reserveAggregate(ctx context.Context, p *ep.Pipe, n int, block bool) (ep.DLBuffer, error) {
	if block {
		return p.Reserve(ctx, f.bufSize(n))
	}
	b, err := p.TryReserve(f.bufSize(n))
	if errors.Is(err, wire.ErrRingFull) {
		err = errNoBuffer
	}
	return b, err
}

// addToAggregateLocked writes one packet of n bytes for wire id wire into
// the open aggregate: pkt, or gen's packet generated in place (or through
// its scratch buffer when the writer cannot reserve room). It returns the
// aggregate writer's verdict. f.mu must be held and an aggregate open.
func (f *Function) addToAggregateLocked(n int, pkt []byte, gen *genPacket, wire uint8) error {
	if gen == nil {
		return f.agg.addTo(pkt, wire)
	}
	dst, err := f.agg.reserve(n, wire)
	switch err {
	case errAggNoReserve:
		gen.put(gen.scratch[:n])
		return f.agg.addTo(gen.scratch[:n], wire)
	case nil:
		gen.put(dst)
	}
	return err
}

// addedLocked accounts for a packet of session sess, of n bytes (and
// add's ul), just added to the open aggregate and applies the flush rules: with WindowTimer the first packet outside a
// window opens one and arms the timer; a full aggregate (every packet, for
// raw IP) is flushed; otherwise an aggregate's first packet arms the flush
// timer. f.mu must be held.
func (f *Function) addedLocked(sess uint8, n, ul int) {
	f.st.pending.Add(1)
	if f.aggS.add(sess, n, ul) {
		f.sess[sess].mark()
	}
	if f.cfg.WindowTimer && !f.window && f.cfg.FlushTimer > 0 {
		f.window = true
		f.timer.Reset(f.cfg.FlushTimer)
	}
	switch {
	case f.agg.Count() >= f.cfg.MaxDatagrams || f.cfg.Format == framing.RawIP:
		f.flushLocked(&f.st.flushFull)
	case f.agg.Count() == 1 && f.cfg.FlushTimer > 0 && !f.cfg.WindowTimer:
		f.timerFor = f.aggSeq
		f.timer.Reset(f.cfg.FlushTimer)
	}
}

// flushLocked finishes the open aggregate and commits it to the downlink
// queue. f.mu must be held and an aggregate open.
func (f *Function) flushLocked(cause *atomic.Uint64) {
	n := f.agg.Finish()
	cnt := f.agg.Count()
	b, p := f.cur, f.curPipe
	f.cur, f.curPipe, f.open = ep.DLBuffer{}, nil, false
	f.st.pending.Add(-int64(cnt))
	b.Units = cnt
	if err := p.Commit(b, n); err != nil {
		f.st.droppedReset.Add(uint64(cnt))
		f.aggS.settle(&f.sess, false)
		return
	}
	if f.aggS.n > 1 {
		f.st.dlMixed.Add(1)
	}
	f.aggS.settle(&f.sess, true)
	cause.Add(1)
	f.st.dlAggregates.Add(1)
	f.st.dlPackets.Add(uint64(cnt))
	f.st.dlBytes.Add(uint64(n))
}
