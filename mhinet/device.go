// Package mhinet is the network device over a pair of MHI data channels
// (IP_HW0 100/101, or IP_HW0_MBIM): a pool of MRU-sized receive buffers,
// overflow chaining, de-aggregation of raw IP, MBIM NTB and QMAP transfers
// into packets, a transmit path, counters, and live MRU and MTU changes.
package mhinet

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/gomhi/gomhi/mhi"
	"github.com/gomhi/gomhi/mhi/proto/framing"
	"github.com/gomhi/gomhi/mhi/proto/qmap"
	"github.com/gomhi/gomhi/mhi/wire"
)

// ErrDown: the device is not up.
var ErrDown = errors.New("mhinet: device is down")

// ErrBusy: no transmit buffer or ring element is free; retry after
// completions.
var ErrBusy = errors.New("mhinet: transmit ring full")

// ErrSession: the session number cannot be carried: its wire id (the
// session base plus the number) passes 255, or the format carries no
// session id (raw IP takes session 0 alone).
var ErrSession = errors.New("mhinet: session number out of range")

// Config configures a Device. The zero value gives a raw IP device on IP_HW0
// with a 32 KiB MRU.
type Config struct {
	// Pair names the channel pair (default "IP_HW0").
	Pair string
	// Format is the framing on the channels: raw IP (framing.RawIP, the
	// zero value), MBIM (framing.NTB16 or NTB32: either is received, NTB16
	// transmitted, as mhi_wwan_mbim) or QMAP (framing.QMAP).
	Format framing.Format
	// MRU is the receive buffer size (default DefaultMRU).
	MRU int
	// MTU is the largest packet Transmit accepts (default DefaultMTU).
	MTU int
	// PoolBuffers is the number of receive buffers (default twice the
	// downlink ring's usable elements, so a full ring can be re-posted while
	// the receiver still holds the previous one).
	PoolBuffers int
	// MaxReassembly bounds an aggregate that arrives over several elements
	// (default 256 KiB); longer chains are dropped and counted.
	MaxReassembly int
	// MaxChainElements bounds the number of elements (receive buffers) one
	// chained transfer may hold: a chain that reaches it before its last
	// element is dropped (RxChainTooLong) and its buffers go back to the
	// pool at once. Default: what an honest modem can need for a
	// MaxReassembly-byte aggregate, ceil(MaxReassembly/MRU) + 2, and never
	// more than half of PoolBuffers (at least 1), so a chain can never hold
	// the buffers the refill needs. A value set here must be within
	// 1…max(1, PoolBuffers/2) (wire.ErrConfig otherwise); the half-pool
	// bound also caps it after an MRU change.
	MaxChainElements int
	// RxCopy says whether received transfers are copied out of DMA memory
	// before delivery (see RxCopyMode; default RxCopyAuto: copy unless the
	// transport's device is trusted).
	RxCopy RxCopyMode
	// TXAggregate packs transmitted packets into aggregates (MBIM and
	// QMAP formats) bounded by TXAggMaxBytes and TXAggMaxPackets; a partly
	// filled aggregate waits up to TXAggTimeout for the next Transmit call.
	TXAggregate bool
	// TXAggMaxBytes is the largest aggregate, framing included (default
	// DefaultTXAggMaxBytes; at most TXBufferSize). A packet that does not
	// fit an empty aggregate of this size travels alone.
	TXAggMaxBytes int
	// TXAggMaxPackets is the most packets in one aggregate (default
	// DefaultTXAggMaxPackets).
	TXAggMaxPackets int
	// TXAggTimeout is how long a partly filled aggregate waits for more
	// packets before it is sent (default DefaultTXAggTimeout; negative:
	// it is sent at the end of each Transmit call).
	TXAggTimeout time.Duration
	// TXBufferSize is the size of each transmit buffer (default: MTU plus
	// the format's header, or TXAggMaxBytes with TXAggregate if larger).
	// A size set here must hold an MTU-sized packet with its framing and,
	// with TXAggregate, TXAggMaxBytes; New and SetMTU fail otherwise
	// (wire.ErrConfig).
	TXBufferSize int
	// TXZeroCopy provides pinned zero-copy transmit slots (TXBuffer,
	// TransmitZC), one per usable uplink element.
	TXZeroCopy bool
	// TXZeroCopyNoFallback keeps TransmitZC zero-copy however many slots
	// the modem holds, instead of copying once half the ring is pending
	// (the behaviour before vhost-net's fix; for comparison).
	TXZeroCopyNoFallback bool
	// TXZeroCopyNotify hands released zero-copy buffers back to the
	// caller on TXReleased instead of to the free list.
	TXZeroCopyNotify bool
	// Session is the session base: the wire id (MBIM session id, QMAP mux
	// id) of session 0. Session N goes out as Session+N
	// (TransmitSession), and a received wire id w ≥ Session is session
	// w−Session (Packet.Session); a wire id below the base is taken as
	// session w.
	Session uint8
	// FollowSession makes the base follow the wire id the modem sends
	// the downlink on, from its first packet: a modem that numbers its
	// sessions from mux id 112 (the SDX72 in MBIM mode) gets its uplink on
	// 112 too. A wire id within FollowSpan above the base is one of the
	// base's sessions and moves nothing; one below the base or FollowSpan
	// or more above it becomes the new base. Counted in TxSessionFollows.
	FollowSession bool
	// QMAPCsum is the QMAP checksum offload framing, both ways, as rmnet's
	// INGRESS_ and EGRESS_MAP_CKSUMV4/V5 flags: CsumV4 is the downlink
	// trailer and the uplink checksum header, CsumV5 the MAPv5 header.
	// The uplink never asks the modem to compute a checksum.
	QMAPCsum qmap.CsumMode
	// Logger receives the device's logs (nil: discard).
	Logger *slog.Logger
}

// Device is a network device on one MHI channel pair.
type Device struct {
	ctrl   *mhi.Controller
	ul, dl *mhi.Channel
	cfg    Config
	rx     Receiver
	log    *slog.Logger

	// Lock order, with the mhi locks it meets: a lock may be taken while
	// an earlier one is held, never while a later one is (checked by
	// internal/archtest's TestLockOrder, which reads these lines; mhi's
	// own order is stated on mhi.Controller):
	//
	// lockorder: Device.ctl → mhi.Controller.chanOps
	// lockorder: mhi.EventRing.mu → Device.chainMu → gsoTx.mu → txPath.mu → Device.rxMu → RxPool.mu → Device.stateMu → mhi.Channel.mu
	//
	// ctl is the outermost: Up, Down, SetMRU and SetMTU hold it across the
	// channels' Start, Stop and Reset, so before every lock of mhi. The
	// data-path locks come after mhi's event ring (the completion handlers
	// onDL and txPath.onComplete run under it; Stop and Reset drain the
	// rings with ctl held) and before mhi's channel lock (refill and
	// transmit queue buffers under rxMu and txPath.mu). chainMu comes
	// first among them because the Receiver, and a pool's refill woken by
	// a buffer released (RxPool.onPut), run under it: a Receiver may
	// transmit. RxPool.mu and stateMu are taken around their fields only.
	// The check cannot see the calls through function values (handlers,
	// onPut, the Receiver), which this order therefore states by hand.

	// ctl serialises Up, Down, SetMRU and SetMTU.
	ctl sync.Mutex

	// stateMu guards up, refill, mru, mtu and dlStopped.
	stateMu sync.Mutex
	up      bool
	refill  bool // posting receive buffers is allowed
	mru     int
	mtu     int

	// dlStopped (under stateMu): a failed MRU change left the downlink
	// channel reset and not started again (the controller, recovering,
	// does not restart a channel that was reset); recovery or the next
	// SetMRU starts it.
	dlStopped bool

	// receive side; see rx.go
	rxMu     sync.Mutex // guards pool, oldPool, poolGen, posted and xfers: pool changes against refill
	pool     *RxPool
	oldPool  *RxPool // the pool being replaced by an MRU change
	poolGen  uint32
	posted   int
	xfers    []mhi.Transfer
	reasm    *RxPool
	rxCopy   bool       // copy-on-receive, resolved from cfg.RxCopy
	chainMu  sync.Mutex // guards chain, chainLen, skipping, batch and the framing's parser
	chain    []fragment
	chainLen int
	skipping bool // dropping the rest of a transfer whose head was dropped
	batch    []Packet

	// framer is the data format at work (see framing.go), chosen by
	// cfg.Format.
	framer framer

	// chainWarn rate-limits the warning for dropped chains.
	chainWarn rateLimiter

	// transmit side; see tx.go
	tx txPath
	// software segmentation in front of it; see gso_tx.go
	gsoTx gsoTx

	c counters
}

// New builds a device on ctrl's channel pair. rx receives every packet. The
// device is down until Up.
func New(ctrl *mhi.Controller, cfg Config, rx Receiver) (*Device, error) {
	if cfg.Pair == "" {
		cfg.Pair = "IP_HW0"
	}
	if cfg.MRU == 0 {
		cfg.MRU = DefaultMRU
	}
	if cfg.MTU == 0 {
		cfg.MTU = DefaultMTU
	}
	if err := ValidateMRU(cfg.MRU); err != nil {
		return nil, err
	}
	if err := ValidateMTU(cfg.MTU); err != nil {
		return nil, err
	}
	if newFramers[cfg.Format] == nil {
		return nil, fmt.Errorf("mhinet: unknown format %d", cfg.Format)
	}
	if rx == nil {
		return nil, errors.New("mhinet: a Receiver is required")
	}
	ul, dl, err := ctrl.ChannelPair(cfg.Pair)
	if err != nil {
		return nil, err
	}
	if cfg.PoolBuffers == 0 {
		cfg.PoolBuffers = 2 * (dl.Config().Elements - 1)
	}
	if cfg.PoolBuffers < 1 {
		return nil, fmt.Errorf("mhinet: %d receive buffers", cfg.PoolBuffers)
	}
	if err := cfg.transmitDefaults(); err != nil {
		return nil, err
	}
	if cfg.MaxReassembly == 0 {
		cfg.MaxReassembly = 256 << 10
	}
	if cfg.MaxReassembly < 0 {
		return nil, fmt.Errorf("mhinet: MaxReassembly %d bytes: %w", cfg.MaxReassembly, wire.ErrConfig)
	}
	if limit := max(1, cfg.PoolBuffers/2); cfg.MaxChainElements < 0 || cfg.MaxChainElements > limit {
		return nil, fmt.Errorf("mhinet: MaxChainElements %d: want 0 (derived) or 1…%d (half of %d receive buffers): %w",
			cfg.MaxChainElements, limit, cfg.PoolBuffers, wire.ErrConfig)
	}
	if cfg.RxCopy > RxCopyOff {
		return nil, fmt.Errorf("mhinet: receive copy mode %d: %w", cfg.RxCopy, wire.ErrConfig)
	}
	d := &Device{ctrl: ctrl, ul: ul, dl: dl, cfg: cfg, rx: rx, mru: cfg.MRU, mtu: cfg.MTU, log: cfg.Logger}
	if d.log == nil {
		d.log = slog.New(slog.DiscardHandler)
	}
	d.log = d.log.With("dev", ctrl.Name(), "pair", cfg.Pair)
	d.rxCopy = resolveRxCopy(cfg.RxCopy, ctrl.Transport())
	d.xfers = make([]mhi.Transfer, 0, dl.Config().Elements)
	d.chain = make([]fragment, 0, max(1, cfg.PoolBuffers/2)+1)
	d.batch = make([]Packet, 0, 64)
	d.reasm = newReassemblyPool(4, cfg.MaxReassembly)
	d.framer = newFramer(&d.cfg, &d.c)
	if err := d.tx.init(d); err != nil {
		return nil, err
	}
	if err := d.tx.checkSize(cfg.MTU); err != nil {
		return nil, err
	}
	ctrl.OnStatus(d.onStatus)
	return d, nil
}

// transmitDefaults fills in and checks the transmit buffer and
// aggregation settings; the error wraps wire.ErrConfig.
func (cfg *Config) transmitDefaults() error {
	if cfg.TXAggMaxBytes == 0 {
		cfg.TXAggMaxBytes = DefaultTXAggMaxBytes
	}
	if cfg.TXAggMaxPackets == 0 {
		cfg.TXAggMaxPackets = DefaultTXAggMaxPackets
	}
	if cfg.TXAggTimeout == 0 {
		cfg.TXAggTimeout = DefaultTXAggTimeout
	}
	if cfg.TXAggMaxBytes < 64 || cfg.TXAggMaxBytes > wire.MaxTRELength || cfg.TXAggMaxPackets < 1 || cfg.TXAggMaxPackets > 0xFFFF {
		return fmt.Errorf("mhinet: TXAggMaxBytes %d (64…%d), TXAggMaxPackets %d (1…65535): %w",
			cfg.TXAggMaxBytes, wire.MaxTRELength, cfg.TXAggMaxPackets, wire.ErrConfig)
	}
	if cfg.TXBufferSize < 0 || cfg.TXBufferSize > wire.MaxTRELength {
		return fmt.Errorf("mhinet: TXBufferSize %d (0: default, or up to %d): %w",
			cfg.TXBufferSize, wire.MaxTRELength, wire.ErrConfig)
	}
	return nil
}

// onStatus follows the controller through SYS_ERR (or a SoC reset): every
// posted buffer came back aborted, so after recovery, when the controller
// has restarted the channels, the ring is filled again.
func (d *Device) onStatus(ev mhi.StatusEvent) {
	if ev.Kind == mhi.StatusSysErr || ev.Kind == mhi.StatusLinkDown {
		// The transfer in progress is lost with the device's state (or
		// with the device).
		d.abandonChain()
	}
	if ev.Kind == mhi.StatusRecovered && d.IsUp() {
		d.c.recoveries.Add(1)
		d.stateMu.Lock()
		stopped := d.dlStopped
		d.stateMu.Unlock()
		if stopped {
			// On the controller's recovery goroutine, so that the start
			// cannot race the next recovery's restart of the channels
			// (an MRU change holding ctl across a new SYS_ERR delays the
			// next recovery by at most the command timeout).
			d.ctl.Lock()
			if err := d.restartStoppedDownlink(); err != nil {
				d.log.Warn("downlink not restarted after recovery", "err", err)
			}
			d.ctl.Unlock()
		}
		d.refillRing(true)
	}
}

// startDownlink starts the downlink channel after an MRU change or a
// recovery. It is a variable so that a test can make the start fail, as a
// SYS_ERR arriving during the change does.
var startDownlink = func(ch *mhi.Channel) error { return ch.Start(nil) }

// restartStoppedDownlink starts the downlink a failed MRU change left
// stopped, if any, and fills its ring; ctl must be held.
func (d *Device) restartStoppedDownlink() error {
	d.stateMu.Lock()
	stopped := d.up && d.dlStopped
	d.stateMu.Unlock()
	if !stopped {
		return nil
	}
	if err := startDownlink(d.dl); err != nil {
		return fmt.Errorf("mhinet: restart downlink: %w", err)
	}
	d.stateMu.Lock()
	d.dlStopped = false
	d.stateMu.Unlock()
	d.refillRing(true)
	return nil
}

// Config returns the device's configuration (with the current MRU and MTU).
func (d *Device) Config() Config {
	d.stateMu.Lock()
	defer d.stateMu.Unlock()
	c := d.cfg
	c.MRU, c.MTU = d.mru, d.mtu
	c.RxCopy = RxCopyOff
	if d.rxCopy {
		c.RxCopy = RxCopyOn
	}
	return c
}

// RxCopy reports whether received transfers are copied out of DMA memory
// before delivery (the resolved Config.RxCopy).
func (d *Device) RxCopy() bool { return d.rxCopy }

// MRU returns the current receive buffer size.
func (d *Device) MRU() int {
	d.stateMu.Lock()
	defer d.stateMu.Unlock()
	return d.mru
}

// MTU returns the current largest transmit packet.
func (d *Device) MTU() int {
	d.stateMu.Lock()
	defer d.stateMu.Unlock()
	return d.mtu
}

// IsUp reports whether the device is up.
func (d *Device) IsUp() bool {
	d.stateMu.Lock()
	defer d.stateMu.Unlock()
	return d.up
}

// Up allocates the pools, starts both channels and posts the receive
// buffers. The controller must be powered up.
func (d *Device) Up() error {
	d.ctl.Lock()
	defer d.ctl.Unlock()
	if d.IsUp() {
		return nil
	}
	mem := d.ctrl.Transport()
	pool, err := newRxPool(mem, d.cfg.PoolBuffers, d.MRU(), d.rxCopy)
	if err != nil {
		return err
	}
	if err := d.tx.alloc(mem, d.MTU()); err != nil {
		pool.Free()
		return err
	}
	d.rxMu.Lock()
	d.setPool(pool)
	d.rxMu.Unlock()
	if err := d.ul.Start(d.tx.onComplete); err != nil {
		d.freeAll()
		return fmt.Errorf("mhinet: start uplink: %w", err)
	}
	if err := d.dl.Start(d.onDL); err != nil {
		_ = d.ul.Reset()
		d.freeAll()
		return fmt.Errorf("mhinet: start downlink: %w", err)
	}
	d.stateMu.Lock()
	d.up, d.refill, d.dlStopped = true, true, false
	d.stateMu.Unlock()
	d.refillRing(true)
	return nil
}

// Down resets both channels (every posted buffer comes back) and frees
// the pools once their packets are released.
func (d *Device) Down() error {
	d.ctl.Lock()
	defer d.ctl.Unlock()
	if !d.IsUp() {
		return nil
	}
	d.stateMu.Lock()
	d.up = false
	dlStopped := d.dlStopped
	d.stateMu.Unlock()
	d.tx.wake() // a caller waiting after ErrBusy finds ErrDown
	// Stop before the reset: the modem finishes the downlink transfer it
	// is writing (the ring is still refilled meanwhile) and the host
	// handles every completion posted before the stop, so what the modem
	// delivered is delivered; a reset alone marks the channel disabled
	// first and discards those completions as stale, with their packets.
	// A channel a SYS_ERR recovery has disabled refuses the stop: the
	// reset follows anyway.
	if !dlStopped {
		_ = d.dl.Stop()
	}
	_ = d.ul.Stop()
	d.stateMu.Lock()
	d.refill = false
	d.dlStopped = false
	d.stateMu.Unlock()
	var dlErr error
	if !dlStopped { // else already reset
		dlErr = d.dl.Reset()
	}
	err := errors.Join(dlErr, d.ul.Reset())
	// The reset returned every posted buffer, which ends a chain in
	// progress; a chain with no buffer posted behind it is abandoned here,
	// so its buffers are not pinned for good.
	d.abandonChain()
	d.freeAll()
	return err
}

func (d *Device) freeAll() {
	d.rxMu.Lock()
	if d.pool != nil {
		d.pool.retire()
		d.pool = nil
	}
	d.rxMu.Unlock()
	d.tx.release()
}

// setPool installs a new receive pool; called with rxMu held.
func (d *Device) setPool(p *RxPool) {
	p.maxChain = chainLimit(d.cfg.MaxChainElements, d.cfg.MaxReassembly, p.mru, len(p.bufs))
	d.poolGen++
	p.onPut = func() { d.refillRing(false) }
	d.pool = p
}

// SetMRU changes the receive buffer size. On a running device it stops the
// downlink channel (the modem finishes the transfer in progress), resets it
// to take back the posted buffers, rebuilds the pool with the new size and
// starts the channel again; packets the modem still holds are delivered
// after the restart, and packets already delivered stay valid until
// released. The uplink keeps running. When it fails the MRU stays as it
// was; if the downlink could not be started again it is started after the
// controller's next recovery, or by the next SetMRU.
func (d *Device) SetMRU(n int) error {
	if err := ValidateMRU(n); err != nil {
		return err
	}
	d.ctl.Lock()
	defer d.ctl.Unlock()
	if !d.IsUp() {
		d.stateMu.Lock()
		d.mru = n
		d.stateMu.Unlock()
		return nil
	}
	if n == d.MRU() {
		return d.restartStoppedDownlink()
	}
	newPool, err := newRxPool(d.ctrl.Transport(), d.cfg.PoolBuffers, n, d.rxCopy)
	if err != nil {
		return err
	}
	// leftStopped records a downlink reset and not started again: refill
	// back on (posting fails until the channel runs), a restart due.
	leftStopped := func() {
		d.stateMu.Lock()
		d.refill, d.dlStopped = true, true
		d.stateMu.Unlock()
	}
	d.stateMu.Lock()
	stopped := d.dlStopped
	d.stateMu.Unlock()
	if !stopped {
		if err := d.dl.Stop(); err != nil {
			newPool.Free()
			return fmt.Errorf("mhinet: MRU change: stop downlink: %w", err)
		}
		d.stateMu.Lock()
		d.refill = false
		d.stateMu.Unlock()
		if err := d.dl.Reset(); err != nil {
			newPool.Free()
			leftStopped()
			return fmt.Errorf("mhinet: MRU change: reset downlink: %w (MRU stays %d)", err, d.MRU())
		}
	}
	d.abandonChain()
	d.rxMu.Lock()
	old := d.pool
	d.setPool(newPool)
	d.rxMu.Unlock()
	if err := startDownlink(d.dl); err != nil {
		// Nothing of the new pool was posted (refill is off): keep the
		// old one and its MRU.
		d.rxMu.Lock()
		d.setPool(old)
		d.rxMu.Unlock()
		newPool.Free()
		leftStopped()
		return fmt.Errorf("mhinet: MRU change: restart downlink: %w (MRU stays %d)", err, d.MRU())
	}
	old.retire()
	d.stateMu.Lock()
	d.mru, d.refill, d.dlStopped = n, true, false
	d.stateMu.Unlock()
	d.refillRing(true)
	d.c.mruChanges.Add(1)
	d.log.Info("MRU changed", "mru", n)
	return nil
}

// SetMTU changes the largest packet Transmit accepts. On a running device
// the transmit buffers are rebuilt once the uplink has completed what it
// holds (Transmit and TransmitZC return ErrBusy meanwhile), and the new
// MTU takes effect with them. The uplink channel is reset and restarted
// around the rebuild, so the modem forgets the zero-copy lend region:
// with TXZeroCopy, forward the new ZeroCopyRegion to the modem again, as
// after Up. It fails with an error wrapping wire.ErrConfig when a fixed
// TXBufferSize cannot hold a packet of n bytes.
func (d *Device) SetMTU(n int) error {
	if err := ValidateMTU(n); err != nil {
		return err
	}
	if err := d.tx.checkSize(n); err != nil {
		return err
	}
	d.ctl.Lock()
	defer d.ctl.Unlock()
	if d.IsUp() {
		if n == d.MTU() {
			return nil
		}
		if err := d.tx.resize(d.ctrl.Transport(), n); err != nil {
			return err
		}
	}
	d.stateMu.Lock()
	d.mtu = n
	d.stateMu.Unlock()
	return nil
}

// Stats returns a snapshot of the device's counters.
func (d *Device) Stats() Stats {
	var s Stats
	d.stateMu.Lock()
	s.MRU, s.MTU = d.mru, d.mtu
	d.stateMu.Unlock()
	d.rxMu.Lock()
	if d.pool != nil {
		s.PoolBuffers, s.PoolMemory, s.PoolFree = d.pool.Len(), d.pool.Memory(), d.pool.Available()
		s.PoolPrivateMemory, s.RxMaxChain = d.pool.PrivateMemory(), d.pool.maxChain
	}
	s.RxPosted = d.posted
	d.rxMu.Unlock()
	s.RxCopy = RxCopyOff.String()
	if d.rxCopy {
		s.RxCopy = RxCopyOn.String()
	}
	d.c.snapshot(&s)
	ps := d.framer.parserStats()
	s.NTB, s.QMAP = ps.NTB, ps.QMAP
	s.RxNTBSequenceGaps, s.TxSession, s.TxSessionFollows = ps.RxNTBSequenceGaps, ps.TxSession, ps.TxSessionFollows
	s.RxErrors += s.NTB.Errors() + s.QMAP.Errors()
	s.GSO = d.gsoTx.stats()
	return s
}
