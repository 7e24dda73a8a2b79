// Package ep is the device side of gomhi: a mock MHI modem that answers the
// host the way a Qualcomm SDX55 running Linux's MHI endpoint stack does.
//
// A Device owns a register file (the host reads and writes it through
// ReadRegister and WriteRegister), reads contexts and rings from host memory
// through a bounds-checked HostMemory, writes completions and events back,
// and raises MSI vectors through an Interrupter. It runs concurrently with
// the host, like hardware: New starts its goroutines and Close stops them.
//
// It speaks the wire formats of mhi/wire, which the host stack (mhi) shares,
// and links nothing of the host: as in Linux, where drivers/bus/mhi/ep and
// drivers/bus/mhi/host share only common.h.
package ep

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gomhi/gomhi/mhi/simclock"
	"github.com/gomhi/gomhi/mhi/wire"
)

// Default values applied by New to zero fields of Config.
const (
	DefaultRegLen            = 0x1000
	DefaultReadyDelay        = time.Millisecond
	DefaultDLQueueDepth      = 4
	DefaultBurstPollInterval = 500 * time.Microsecond
	DefaultBurstIdlePolls    = 8
)

// Register-layout offsets the device publishes in CHDBOFF, ERDBOFF, BHIOFF,
// BHIEOFF and DEBUGOFF. With a 0x1000-byte register space they pass every
// check the Linux host makes on them.
const (
	ChannelDoorbellOffset = 0x400
	EventDoorbellOffset   = 0x800
	BHIOffset             = 0x100
	BHIEOffset            = 0x300
	DebugOffset           = 0x380
	DebugSize             = 0x80
)

// ErrClosed is returned by operations on a device that has been closed.
var ErrClosed = errors.New("ep: device closed")

// Config configures a mock modem.
type Config struct {
	// MHI lists the channels and event rings the device offers.
	MHI wire.ControllerConfig
	// RegLen is the size of the MHI register space (default 0x1000, at
	// least 0x1000 so that all doorbell arrays fit).
	RegLen uint32
	// SerialNumber is published in BHI SERIALNU.
	SerialNumber uint32
	// OEMPKHash is published in BHI OEMPKHASH[0..15].
	OEMPKHash [wire.BHIOEMPKHashRegs]uint32
	// SoCHWVersion is published in SOC_HW_VERSION.
	SoCHWVersion uint32
	// ReadyDelay is the time from a reset to READY (zero means
	// DefaultReadyDelay).
	ReadyDelay time.Duration
	// Logger receives Debug records for protocol events and Warn records
	// for host misbehaviour; nil discards them.
	Logger *slog.Logger
	// Functions attaches a Function to channel pairs by name. A pair named
	// "LOOPBACK" without an entry gets the built-in Loopback; other pairs
	// without an entry consume and count uplink transfers. A Function
	// implementing PipeAttacher learns its Pipe when New builds the device;
	// attach an IPData to "IP_HW0" or "IP_HW0_MBIM".
	Functions map[string]Function
	// DLQueueDepth is the number of downlink transfers a channel holds
	// before Pipe.Send blocks (zero means DefaultDLQueueDepth).
	DLQueueDepth int
	// BurstPollInterval is how often a burst-mode channel re-reads its
	// context write pointer while it polls (zero means the default).
	BurstPollInterval time.Duration
	// BurstIdlePolls is the number of empty polls after which a burst-mode
	// channel posts DB_MODE and waits for a doorbell (zero means the
	// default).
	BurstIdlePolls int
	// Clock, if set, runs the device's data path in virtual time: the
	// channels' work (doorbells, queued downlink data, burst polls),
	// interrupt moderation, the IP data function's flush timer and its
	// generator become events of this discrete-event clock and run on the
	// goroutine that runs its events, one at a time; nothing of the data
	// path sleeps or reads the wall clock. The control path (state
	// machine, commands) keeps its goroutine and wall-clock timeouts.
	// Without a Clock (the default) the device runs in real time.
	Clock *simclock.Scheduler
	// Timing is what the data path takes in virtual time (used only with
	// Clock); the zero value takes none.
	Timing Timing
	// Boot configures the boot ROM: the EE the device starts in, the
	// images it accepts over BHI and BHIe, RDDM (bootrom.go).
	Boot BootConfig
	// Observer, if set, is told everything the device observes of its
	// host: register accesses, contexts, elements, and the events,
	// state changes and interrupts it answers with (observer.go). Nil
	// observes nothing and costs nothing.
	Observer Observer
	// NoM3 makes the device one that does not support M3, as the QDU100
	// (Linux's no_m3): a host's M3 request is ignored — the device stays
	// in M0, posts no state change and counts the request in
	// Stats.M3Refused — so a host that suspends it times out.
	NoM3 bool
}

// withDefaults returns cfg with zero fields replaced by their defaults.
func (cfg Config) withDefaults() Config {
	if cfg.RegLen == 0 {
		cfg.RegLen = DefaultRegLen
	}
	if cfg.ReadyDelay <= 0 {
		cfg.ReadyDelay = DefaultReadyDelay
	}
	if cfg.DLQueueDepth <= 0 {
		cfg.DLQueueDepth = DefaultDLQueueDepth
	}
	if cfg.BurstPollInterval <= 0 {
		cfg.BurstPollInterval = DefaultBurstPollInterval
	}
	if cfg.BurstIdlePolls <= 0 {
		cfg.BurstIdlePolls = DefaultBurstIdlePolls
	}
	return cfg
}

// validate checks a configuration that already has its defaults.
func (cfg *Config) validate() error {
	if err := cfg.MHI.Validate(); err != nil {
		return fmt.Errorf("ep: %w", err)
	}
	if cfg.Boot.Start < BootAMSS || cfg.Boot.Start > BootPBL {
		return fmt.Errorf("ep: %w: boot start %d", wire.ErrConfig, int(cfg.Boot.Start))
	}
	if cfg.RegLen < DefaultRegLen || cfg.RegLen%4 != 0 {
		return fmt.Errorf("ep: %w: register length 0x%x, want a multiple of 4 >= 0x%x",
			wire.ErrConfig, cfg.RegLen, DefaultRegLen)
	}
	return nil
}

// Device is a mock MHI modem. All exported methods are safe for concurrent
// use.
type Device struct {
	cfg Config
	mem HostMemory
	irq Interrupter
	log *slog.Logger
	// debug caches whether Debug records are wanted, to keep the hot path
	// free of argument boxing.
	debug bool

	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup // device goroutines
	timers sync.WaitGroup // pending interrupt-moderation timers

	closeOnce sync.Once

	// goMu guards goClosed: goFunc adds to wg only before Close waits.
	// Nothing is taken while it is held.
	//
	// lockorder: Device.goMu
	goMu     sync.Mutex
	goClosed bool

	// ctrlMu serialises state-machine work: the control goroutine and
	// Reset hold it while they change the device's state. It is the
	// device's outermost lock (see the lock order on channel).
	ctrlMu   sync.Mutex
	ctrlKick chan struct{}

	// regMu guards the register file and everything below it up to the
	// next blank line. It is the innermost of the device's locks: a
	// doorbell latched under it wakes the channel's worker (poke) without
	// a lock of ours.
	//
	// lockorder: channel.work → eventRing.mu → Device.regMu
	regMu        sync.Mutex
	regs         registerFile
	state        wire.State
	ee           wire.ExecEnv
	sess         *session
	readyPending bool
	readyAt      time.Time
	neverReady   bool
	pending      controlRequests
	erSignals    []signal // per event ring: the host rang its doorbell
	boot         bootState

	stateNow atomic.Uint32 // mirror of state for lock-free checks

	channels [wire.MaxDoorbellChannels]*channel // by channel number; nil = not offered
	chanList []*channel
	pipes    map[string]*Pipe

	faults faultState
	stats  counters

	dumpOnce    sync.Once
	defaultDump []byte

	// afterResumeEvent, if set (by tests), runs on the control goroutine
	// between the M0 event of a resume from M3 and the channels' wake-up.
	afterResumeEvent atomic.Pointer[func()]
}

// New validates cfg, builds a device on host memory mem raising interrupts
// through irq, and starts it. The device begins in RESET and becomes READY
// after cfg.ReadyDelay.
func New(cfg Config, mem HostMemory, irq Interrupter) (*Device, error) {
	if mem == nil || irq == nil {
		return nil, fmt.Errorf("ep: %w: host memory and interrupter are required", wire.ErrConfig)
	}
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	d := &Device{
		cfg:      cfg,
		mem:      mem,
		irq:      irq,
		log:      log,
		debug:    log.Enabled(context.Background(), slog.LevelDebug),
		ctrlKick: make(chan struct{}, 1),
		pipes:    map[string]*Pipe{},
	}
	d.startEELocked()
	d.ctx, d.cancel = context.WithCancel(context.Background())
	nER := len(cfg.MHI.EventRings)
	d.regs.init(&d.cfg, nER)
	d.erSignals = make([]signal, nER)
	d.stats.eventsPosted = make([]atomic.Uint64, nER)
	d.buildChannels()
	d.setStateLocked(wire.StateReset)
	d.readyPending = true
	d.readyAt = time.Now().Add(cfg.ReadyDelay)

	d.wg.Add(1)
	go d.controlLoop()
	for _, c := range d.chanList {
		if cfg.Clock != nil {
			c.vinit(cfg.Clock)
			continue
		}
		d.wg.Add(1)
		go c.run()
	}
	d.log.Debug("mhi-ep: device started", "channels", len(d.chanList), "event_rings", nER)
	return d, nil
}

// buildChannels creates one channel per configured channel and one Pipe per
// channel name, attaching the configured Function.
func (d *Device) buildChannels() {
	for _, cc := range d.cfg.MHI.Channels {
		c := newChannel(d, cc)
		d.channels[cc.Num] = c
		d.chanList = append(d.chanList, c)
		p := d.pipes[cc.Name]
		if p == nil {
			p = &Pipe{d: d, name: cc.Name}
			d.pipes[cc.Name] = p
		}
		if cc.Dir == wire.Uplink {
			p.ul = c
		} else {
			p.dl = c
		}
		c.pipe = p
	}
	for name, p := range d.pipes {
		fn := d.cfg.Functions[name]
		if fn == nil && name == LoopbackName {
			fn = Loopback{}
		}
		p.fn = fn
		if a, ok := fn.(PipeAttacher); ok {
			a.Attach(p)
		}
	}
}

// Close stops every goroutine of the device and waits for them. It is
// idempotent and always returns nil.
func (d *Device) Close() error {
	d.closeOnce.Do(func() {
		d.cancel()
		d.goMu.Lock()
		d.goClosed = true
		d.goMu.Unlock()
		d.wg.Wait()
		d.regMu.Lock()
		s := d.sess
		d.regMu.Unlock()
		if s != nil {
			s.cancel()
			d.stopModeration(s)
		}
		for _, c := range d.chanList {
			c.vstop()
		}
		d.timers.Wait()
		d.log.Debug("mhi-ep: device closed")
	})
	return nil
}

// goFunc runs fn(d.ctx) on a goroutine of the device, which Close stops
// (through the context) and waits for. It reports false, and runs
// nothing, once Close has begun.
func (d *Device) goFunc(fn func(ctx context.Context)) bool {
	d.goMu.Lock()
	defer d.goMu.Unlock()
	if d.goClosed {
		return false
	}
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		fn(d.ctx)
	}()
	return true
}

// Reset performs a function-level reset, as the transport's reset does: the
// same as the host setting MHICTRL.RESET, and in addition every
// host-programmed register returns to its power-on value. It returns when
// the reset is done; the device becomes READY ReadyDelay later.
func (d *Device) Reset() {
	if d.ctx.Err() != nil {
		return
	}
	d.regMu.Lock()
	d.abortSessionLocked()
	d.regMu.Unlock()
	d.ctrlMu.Lock()
	d.doReset(true)
	d.ctrlMu.Unlock()
	d.kickControl()
}

// State returns the device's current MHI state.
func (d *Device) State() wire.State { return wire.State(d.stateNow.Load()) }

// Pipe returns the channel pair with the given name.
func (d *Device) Pipe(name string) (*Pipe, bool) {
	p, ok := d.pipes[name]
	return p, ok
}

// QueueDL queues data as one downlink transfer on channel ch, blocking while
// the channel's queue is full or the channel is not started, until ctx is
// done. The data is copied.
func (d *Device) QueueDL(ctx context.Context, ch uint8, data []byte) error {
	c := d.channelByNum(ch)
	if c == nil || c.cfg.Dir != wire.Downlink {
		return fmt.Errorf("ep: %w: channel %d is not a downlink channel of this device", wire.ErrNoChannel, ch)
	}
	return c.enqueue(ctx, data, true)
}

// channelByNum returns the channel numbered n, or nil.
func (d *Device) channelByNum(n uint8) *channel {
	if int(n) >= len(d.channels) {
		return nil
	}
	return d.channels[n]
}

// kickControl wakes the control goroutine without blocking.
func (d *Device) kickControl() {
	select {
	case d.ctrlKick <- struct{}{}:
	default:
	}
}

// setStateLocked records the device state; regMu must be held.
func (d *Device) setStateLocked(s wire.State) {
	d.state = s
	d.stateNow.Store(uint32(s))
	if d.observing() {
		d.observe(Observation{Kind: ObserveState, Value: uint64(s)})
	}
}

// raise signals vector to the host unless a DropInterrupts fault eats it.
func (d *Device) raise(vector int) {
	if d.faults.takeDroppedInterrupt() {
		d.stats.interruptsDropped.Add(1)
		d.stats.faultsInjected.Add(1)
		if d.debug {
			d.log.Debug("mhi-ep: interrupt dropped (fault)", "vector", vector)
		}
		return
	}
	d.stats.interruptsRaised.Add(1)
	if d.observing() {
		d.observe(Observation{Kind: ObserveInterrupt, Value: uint64(vector)})
	}
	d.irq.Raise(vector)
}

// boundsViolation counts and logs host memory the device could not use.
func (d *Device) boundsViolation(msg string, args ...any) {
	d.stats.boundsViolations.Add(1)
	d.log.Warn("mhi-ep: "+msg, args...)
}
