package mhi

import (
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gomhi/gomhi/mhi/wire"
)

// Options tune a Controller. The zero value gives sensible defaults.
type Options struct {
	// Name names the controller in logs and errors (default "mhi0").
	Name string
	// Logger receives protocol logs (default: discard).
	Logger *slog.Logger
	// PollInterval is how often event rings are checked without an interrupt,
	// a safety net against lost interrupts (default 50ms; negative disables).
	PollInterval time.Duration
	// EventQuota is the most events one pass over an event ring handles:
	// with more posted, the ring's goroutine hands the consumed slots back,
	// lets the other goroutines run and comes back for the rest (default
	// DefaultEventQuota).
	EventQuota int
	// RecoveryBackoff is the wait before the second of several consecutive
	// SYS_ERR recoveries; it doubles with every further one, up to
	// RecoveryBackoffMax (defaults DefaultRecoveryBackoff and
	// DefaultRecoveryBackoffMax). The first recovery after a quiet period
	// starts at once.
	RecoveryBackoff    time.Duration
	RecoveryBackoffMax time.Duration
	// RecoveryLimit is the number of consecutive recoveries (each one that
	// failed, or that another SYS_ERR followed within RecoveryWindow) after
	// which the controller gives up: it resets the device, enters the
	// terminal state RECOVERY_FAILED and leaves the device alone until
	// PowerDown (default DefaultRecoveryLimit; negative: never give up).
	RecoveryLimit int
	// RecoveryWindow is how long a recovered device must run without a new
	// SYS_ERR for its recoveries to stop counting as consecutive (default
	// DefaultRecoveryWindow).
	RecoveryWindow time.Duration
	// Firmware supplies the images for a device that boots in PBL or EDL
	// (firmware.go); nil refuses such a device with ErrFirmware.
	Firmware *Firmware
	// RDDMSize, if non-zero, enables RAM-dump collection (rddm.go): the
	// host keeps a receive vector table of this many bytes programmed in
	// BHIe, and a device that crashes into EE RDDM has its dump collected
	// before it is recovered (Controller.LastDump).
	RDDMSize int
	// RDDMSegmentSize is the size of one dump segment (0:
	// DefaultSegmentSize).
	RDDMSegmentSize int
	// HealthInterval is how often the host checks, in M0, that the device
	// still answers on the bus (health.go; default DefaultHealthInterval,
	// negative: never). A device that reads as all ones enters LINK_DOWN.
	HealthInterval time.Duration
	// NoM3 says the device does not support M3 (the device table's
	// no_m3, as Linux's mhi_pci_generic has for the QDU100): Suspend and
	// auto-suspend are refused with ErrNoM3. A device that ignores an M3
	// request twice in a row is treated so from then on too.
	NoM3 bool
	// ReadyTimeout, if non-zero, replaces the READY wait the
	// configuration gives (its ReadyTimeout, or its Timeout): at power-up
	// and after every reset (SetReadyTimeout changes it).
	ReadyTimeout time.Duration
}

// Defaults of the recovery options.
const (
	DefaultRecoveryBackoff    = 10 * time.Millisecond
	DefaultRecoveryBackoffMax = 5 * time.Second
	DefaultRecoveryLimit      = 5
	DefaultRecoveryWindow     = 10 * time.Second
)

// DefaultEventQuota is the default Options.EventQuota: as many events as
// a NAPI poll's usual weight.
const DefaultEventQuota = 64

// BadEventRingRPLimit is the number of consecutive looks at an event ring
// (interrupts or polls) that find its read pointer outside the ring after
// which the host stops waiting for the device to repair it and recovers the
// device as from SYS_ERR.
const BadEventRingRPLimit = 32

// pm states of the controller (host view).
type pmState int

const (
	pmDisabled pmState = iota
	pmPowerUp
	pmM0
	pmM3
	pmSysErr
	pmShutdown
	pmFailed
	pmLinkDown
)

var pmNames = []string{"DISABLED", "POWER_UP", "M0", "M3", "SYS_ERR_PROCESS", "SHUTDOWN", "RECOVERY_FAILED", PMLinkDown}

// PMRecoveryFailed is the name of the terminal host state PMState reports
// once SYS_ERR recovery has given up (Options.RecoveryLimit).
const PMRecoveryFailed = "RECOVERY_FAILED"

func (p pmState) String() string { return pmNames[p] }

// Controller is the host side of one MHI device: it owns the context arrays,
// the command ring, the event rings and the channels, and drives the device
// through the MHI state machine over a Transport.
type Controller struct {
	t    Transport
	cfg  wire.ControllerConfig
	name string
	log  *slog.Logger
	poll time.Duration
	// quota is Options.EventQuota with its default applied.
	quota int

	// Offsets published by the device, read and checked at power-up.
	regLen, chdbOff, erdbOff, bhiOff uint32

	recBackoff, recBackoffMax, recWindow time.Duration
	recLimit                             int

	// Firmware download (firmware.go): the images, and the full image kept
	// for BHIe between the BHI download and the device's EE SBL.
	fw       *Firmware
	fbcImage []byte
	fbcName  string
	rddm     rddmState
	pmAuto   autoSuspend
	// noM3: suspend is refused (Options.NoM3, or learned); readyTO
	// overrides the READY wait (Options.ReadyTimeout, SetReadyTimeout).
	noM3      atomic.Bool
	m3Ignored atomic.Int32 // M3 requests in a row the device ignored
	readyTO   atomic.Int64

	chCtx, erCtx, cmdCtx DMABuffer
	allocated            bool

	cmd        commandRing
	eventRings []*EventRing
	channels   [wire.MaxDoorbellChannels]*Channel

	// Lock order, for the controller's locks and those of its command
	// ring, event rings and channels: a lock may be taken while an
	// earlier one is held, never while a later one is (checked by
	// internal/archtest's TestLockOrder, which reads this line):
	//
	// lockorder: Controller.life → Controller.chanOps → commandRing.issue → Controller.procMu → EventRing.mu → commandRing.mu → Channel.mu → Controller.gate → Controller.mu
	//
	// life is the outermost (PowerUp and the teardown run everything
	// below under it). chanOps is held by a client's Start, Stop and Reset
	// and by a recovery across the commands they send (issue), the event
	// rings they drain (procMu, EventRing.mu) and the channels they touch.
	// An event ring is processed under procMu (read) and its mu; handling
	// its events takes the command ring's mu and the channels' mu. A
	// channel rings its doorbell under its mu, through gate. mu is the
	// innermost: nothing is taken while it is held.
	//
	// What the check cannot see, the callbacks: a channel's completion
	// handler runs with what the event goroutine holds (procMu,
	// EventRing.mu) or the caller that aborts the channel (chanOps in
	// Reset and recovery, life in PowerDown), never with Channel.mu or a
	// later lock; a status listener gets StatusSysErr with chanOps held
	// (the recovery's) and StatusEE with procMu and EventRing.mu held, the
	// other kinds with none of these locks. A handler, and a listener of
	// StatusSysErr or StatusEE, must therefore not call Start, Stop,
	// Reset, PowerUp or PowerDown (a client's own locks taken there go
	// after EventRing.mu and before Channel.mu: mhinet.Device states its
	// own).

	// life serialises PowerUp and PowerDown.
	life sync.Mutex
	// gate is held (read) around every device write of the data path
	// (doorbells, commands, SoC reset) and taken (write) as a barrier once
	// the controller is SHUTDOWN or RECOVERY_FAILED: after it, no such write
	// reaches the device.
	gate sync.RWMutex
	// halted is set in SHUTDOWN, RECOVERY_FAILED and LINK_DOWN: interrupts
	// and event rings are ignored and nothing is written to the device.
	halted atomic.Bool

	// mu guards the fields below and is the lock for state waits (cond).
	mu        sync.Mutex
	cond      *sync.Cond
	pm        pmState
	pmNow     atomic.Int32 // pm, readable without mu
	stop      chan struct{}
	stopped   bool // stop is closed
	rec       recoveryState
	devState  wire.State // last state announced by the device
	ee        wire.ExecEnv
	eeSeen    bool  // a mission-mode EE event arrived since the last M0 request
	gone      error // why the device is in LINK_DOWN (health.go), until PowerDown
	health    time.Duration
	listeners []statusListener
	nextID    int

	// procMu is held (read) while an event ring is processed and (write)
	// while the rings are reset, so processing never sees a ring mid-reset.
	procMu sync.RWMutex

	// chanOps is held (read) by a client's Start, Stop and Reset for their
	// whole run and (write) by a SYS_ERR recovery from the moment it takes
	// stock of the channels until it has restarted them, so that no client
	// command interleaves with the reset, the context rewrite and the
	// restart.
	chanOps sync.RWMutex

	recoverCh chan struct{}
	wg        sync.WaitGroup

	stats ControllerStats
}

// StatusKind says what a StatusEvent reports.
type StatusKind int

// Status event kinds delivered to the listeners added with OnStatus.
const (
	StatusSysErr         StatusKind = iota // the device entered SYS_ERR; channels were aborted
	StatusRecovered                        // recovery finished; channels were restarted
	StatusRecoveryFailed                   // one recovery attempt failed; another follows after a backoff
	StatusEE                               // the execution environment changed
	// StatusFailed: recovery gave up (Options.RecoveryLimit); the
	// controller is in RECOVERY_FAILED, the device was reset and is left
	// alone until PowerDown. Err wraps ErrRecoveryFailed.
	StatusFailed
	// StatusLinkDown: the device stopped answering on the bus (health.go);
	// the controller is in LINK_DOWN, every channel was aborted and the
	// device is left alone until PowerDown. Err wraps ErrLinkDown.
	StatusLinkDown
)

// StatusEvent is a notification from the controller to its clients.
type StatusEvent struct {
	Kind StatusKind
	EE   wire.ExecEnv
	Err  error
}

// NewController builds a controller for the device behind t, configured by
// cfg. Nothing is written to the device until PowerUp.
func NewController(t Transport, cfg wire.ControllerConfig, opts Options) (*Controller, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 8 * time.Second
	}
	c := &Controller{
		t:         t,
		cfg:       cfg,
		name:      opts.Name,
		log:       opts.Logger,
		poll:      opts.PollInterval,
		quota:     opts.EventQuota,
		recoverCh: make(chan struct{}, 1),
	}
	if c.name == "" {
		c.name = "mhi0"
	}
	if c.quota <= 0 {
		c.quota = DefaultEventQuota
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	c.log = c.log.With("dev", c.name)
	if c.poll == 0 {
		c.poll = 50 * time.Millisecond
	}
	c.recBackoff, c.recBackoffMax = opts.RecoveryBackoff, opts.RecoveryBackoffMax
	if c.recBackoff <= 0 {
		c.recBackoff = DefaultRecoveryBackoff
	}
	if c.recBackoffMax <= 0 {
		c.recBackoffMax = DefaultRecoveryBackoffMax
	}
	c.recBackoffMax = max(c.recBackoffMax, c.recBackoff)
	c.recLimit = opts.RecoveryLimit
	c.noM3.Store(opts.NoM3)
	c.readyTO.Store(int64(max(opts.ReadyTimeout, 0)))
	if c.recLimit == 0 {
		c.recLimit = DefaultRecoveryLimit
	}
	c.health = opts.HealthInterval
	if c.health == 0 {
		c.health = DefaultHealthInterval
	}
	c.recWindow = opts.RecoveryWindow
	if c.recWindow <= 0 {
		c.recWindow = DefaultRecoveryWindow
	}
	c.pmAuto.kick = make(chan struct{}, 1)
	c.fw = opts.Firmware
	c.rddm.size, c.rddm.segSize = opts.RDDMSize, opts.RDDMSegmentSize
	c.cond = sync.NewCond(&c.mu)
	for _, chc := range cfg.Channels {
		c.channels[chc.Num] = &Channel{ctrl: c, cfg: chc,
			errFull: fmt.Errorf("%s: channel %d: not enough free elements in the transfer ring of %d: %w", c.name, chc.Num, chc.Elements, wire.ErrRingFull)}
	}
	return c, nil
}

// Name returns the controller's name.
func (c *Controller) Name() string { return c.name }

// Config returns the controller's configuration.
func (c *Controller) Config() wire.ControllerConfig {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cfg
}

// Transport returns the transport the controller drives.
func (c *Controller) Transport() Transport { return c.t }

// statusListener is one function added with OnStatus.
type statusListener struct {
	id int
	f  func(StatusEvent)
}

// OnStatus adds f to the listeners of status events (SYS_ERR, recovery,
// EE changes), called in the order they were added from the controller's
// goroutines. f must not block. The returned function removes f (a client
// that closes must call it, or the controller keeps it, and all it holds,
// alive); it may be called more than once.
func (c *Controller) OnStatus(f func(StatusEvent)) (remove func()) {
	c.mu.Lock()
	c.nextID++
	id := c.nextID
	c.listeners = append(c.listeners, statusListener{id: id, f: f})
	c.mu.Unlock()
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		for i, l := range c.listeners {
			if l.id == id {
				// A new slice: notify may be ranging over the old one.
				c.listeners = append(c.listeners[:i:i], c.listeners[i+1:]...)
				return
			}
		}
	}
}

func (c *Controller) notify(ev StatusEvent) {
	c.mu.Lock()
	ls := c.listeners
	c.mu.Unlock()
	for _, l := range ls {
		l.f(ev)
	}
}

// Channel returns channel num, or an error wrapping wire.ErrNoChannel.
func (c *Controller) Channel(num uint8) (*Channel, error) {
	if int(num) >= len(c.channels) || c.channels[num] == nil {
		return nil, fmt.Errorf("%s: channel %d: %w", c.name, num, wire.ErrNoChannel)
	}
	return c.channels[num], nil
}

// ChannelPair returns the uplink and downlink channels with the given name.
func (c *Controller) ChannelPair(name string) (ul, dl *Channel, err error) {
	u, ok1 := c.cfg.ChannelByName(name, wire.Uplink)
	d, ok2 := c.cfg.ChannelByName(name, wire.Downlink)
	if !ok1 || !ok2 {
		return nil, nil, fmt.Errorf("%s: channel pair %q: %w", c.name, name, wire.ErrNoChannel)
	}
	return c.channels[u.Num], c.channels[d.Num], nil
}

// State returns the MHI state last announced by the device and the
// execution environment.
func (c *Controller) State() (wire.State, wire.ExecEnv) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.devState, c.ee
}

// Stats returns a snapshot of the controller's counters.
func (c *Controller) Stats() ControllerStatsSnapshot {
	s := c.stats.snapshot()
	r := c.Recovery()
	s.RecoveryConsecutive = uint64(r.Consecutive)
	s.RecoveryBackoffMs = uint64(r.Backoff.Milliseconds())
	if r.Failed {
		s.RecoveryFailed = 1
	}
	if c.LinkDown() != nil {
		s.LinkDown = 1
	}
	return s
}

// PMState returns the host's power-management state: DISABLED, POWER_UP,
// M0, M3, SYS_ERR_PROCESS (recovering), SHUTDOWN, RECOVERY_FAILED
// (PMRecoveryFailed) or LINK_DOWN (PMLinkDown); the last two are terminal
// until PowerDown.
func (c *Controller) PMState() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pm.String()
}

// BARSizer is implemented by transports that know the size of the MHI
// BAR. The controller checks every offset the device publishes (MHIREGLEN,
// CHDBOFF, ERDBOFF, BHIOFF, BHIEOFF) against it before any access there.
type BARSizer interface {
	// BARSize returns the size of the MHI BAR in bytes (0: unknown).
	BARSize() uint64
}

// barSize returns the transport's BAR size, 0 when it does not know it.
func (c *Controller) barSize() uint64 {
	if s, ok := c.t.(BARSizer); ok {
		return s.BARSize()
	}
	return 0
}

// setPMLocked changes the host state; c.mu must be held.
func (c *Controller) setPMLocked(p pmState) {
	c.pm = p
	c.pmNow.Store(int32(p))
	c.halted.Store(p == pmShutdown || p == pmFailed || p == pmLinkDown)
	c.cond.Broadcast()
}

// closeStopLocked closes the stop channel of the running power cycle, once.
func (c *Controller) closeStopLocked() {
	if c.stop != nil && !c.stopped {
		close(c.stop)
		c.stopped = true
	}
}

func (c *Controller) read(off uint32) (uint32, error) {
	v, err := c.t.Read32(off)
	if err != nil {
		return 0, fmt.Errorf("%s: read register 0x%x: %w", c.name, off, err)
	}
	return v, nil
}

func (c *Controller) write(off, v uint32) error {
	if err := c.t.Write32(off, v); err != nil {
		return fmt.Errorf("%s: write register 0x%x: %w", c.name, off, err)
	}
	return nil
}

// write64 writes a 64-bit register pair, high half first (in one
// operation when the transport is a PairWriter).
func (c *Controller) write64(lowOff uint32, v uint64) error {
	if pw, ok := c.t.(PairWriter); ok {
		if err := pw.WritePair32(lowOff+4, uint32(v>>32), lowOff, uint32(v)); err != nil {
			return fmt.Errorf("%s: write register pair 0x%x: %w", c.name, lowOff, err)
		}
		return nil
	}
	if err := c.write(lowOff+4, uint32(v>>32)); err != nil {
		return err
	}
	return c.write(lowOff, uint32(v))
}

// doorbell rings the doorbell at off with a 64-bit ring pointer.
func (c *Controller) doorbell(off uint32, v uint64) error {
	c.stats.Doorbells.Add(1)
	return c.write64(off, v)
}

func (c *Controller) rmw(off, mask, val uint32) error {
	v, err := c.read(off)
	if err != nil {
		return err
	}
	return c.write(off, v&^mask|val&mask)
}

// ControllerStats are the controller's counters, updated atomically.
type ControllerStats struct {
	Interrupts      atomic.Uint64
	Doorbells       atomic.Uint64
	Events          atomic.Uint64
	EventsByPoll    atomic.Uint64
	Commands        atomic.Uint64
	StateChanges    atomic.Uint64
	BadEventRingRP  atomic.Uint64
	BadEventPtr     atomic.Uint64
	UnknownChannel  atomic.Uint64
	BadCode         atomic.Uint64
	LengthClamped   atomic.Uint64
	UnknownEvent    atomic.Uint64
	StaleCompletion atomic.Uint64
	SysErrs         atomic.Uint64
	Recoveries      atomic.Uint64
	SoCResets       atomic.Uint64
	// DoorbellErrors counts doorbell writes the transport failed.
	DoorbellErrors atomic.Uint64
	// BadRegister counts register values the device published that the
	// host refused (MHIREGLEN, CHDBOFF, ERDBOFF, BHIOFF, BHIEOFF, EXECENV).
	BadRegister atomic.Uint64
	// RecoveryAttempts counts SYS_ERR recovery attempts, RecoveryFailures
	// the failed ones, RecoveryGaveUp the times the controller entered
	// RECOVERY_FAILED.
	RecoveryAttempts atomic.Uint64
	RecoveryFailures atomic.Uint64
	RecoveryGaveUp   atomic.Uint64
	// DeviceErrorRecoveries counts recoveries the host started itself for
	// a device fault other than SYS_ERR (an event ring read pointer left
	// outside its ring, an M3 or M0 the device never acknowledged).
	DeviceErrorRecoveries atomic.Uint64
	// StateTimeouts counts M3 and M0 transitions the device did not
	// acknowledge in time after power-up.
	StateTimeouts atomic.Uint64
	// FirmwareImages counts images downloaded (BHI and BHIe),
	// FirmwareErrors downloads that failed.
	FirmwareImages atomic.Uint64
	FirmwareErrors atomic.Uint64
	// Dumps counts RAM dumps collected, DumpErrors collections that failed.
	Dumps      atomic.Uint64
	DumpErrors atomic.Uint64
	// Suspends counts M3 entries the device acknowledged, Resumes its
	// returns to M0 from M3, AutoSuspends the suspends the idle timer made.
	Suspends     atomic.Uint64
	Resumes      atomic.Uint64
	AutoSuspends atomic.Uint64
	// SuspendsRefused counts suspends refused because the device has no
	// M3 (ErrNoM3); SlowReadies the waits for READY that took longer
	// than ReadyNotice.
	SuspendsRefused atomic.Uint64
	SlowReadies     atomic.Uint64

	// EventPasses counts passes over an event ring that found events,
	// EventQuotaReached those that stopped at Options.EventQuota with
	// events left for the next pass.
	EventPasses       atomic.Uint64
	EventQuotaReached atomic.Uint64

	// HealthChecks counts the checks that the device still answers on
	// the bus (health.go).
	HealthChecks atomic.Uint64
}

// ControllerStatsSnapshot is a copy of ControllerStats at one moment.
type ControllerStatsSnapshot struct {
	Interrupts      uint64 `json:"interrupts"`
	Doorbells       uint64 `json:"doorbells"`
	Events          uint64 `json:"events"`
	EventsByPoll    uint64 `json:"events_by_poll"`
	Commands        uint64 `json:"commands"`
	StateChanges    uint64 `json:"state_changes"`
	BadEventRingRP  uint64 `json:"bad_event_ring_rp"`
	BadEventPtr     uint64 `json:"bad_event_ptr"`
	UnknownChannel  uint64 `json:"unknown_channel"`
	BadCode         uint64 `json:"bad_code"`
	LengthClamped   uint64 `json:"length_clamped"`
	UnknownEvent    uint64 `json:"unknown_event"`
	StaleCompletion uint64 `json:"stale_completion"`
	SysErrs         uint64 `json:"sys_errs"`
	Recoveries      uint64 `json:"recoveries"`
	SoCResets       uint64 `json:"soc_resets"`
	DoorbellErrors  uint64 `json:"doorbell_errors"`
	BadRegister     uint64 `json:"bad_register"`

	RecoveryAttempts      uint64 `json:"recovery_attempts"`
	RecoveryFailures      uint64 `json:"recovery_failures"`
	RecoveryGaveUp        uint64 `json:"recovery_gave_up"`
	DeviceErrorRecoveries uint64 `json:"device_error_recoveries"`
	StateTimeouts         uint64 `json:"state_timeouts"`
	FirmwareImages        uint64 `json:"firmware_images"`
	FirmwareErrors        uint64 `json:"firmware_errors"`
	Dumps                 uint64 `json:"dumps"`
	DumpErrors            uint64 `json:"dump_errors"`
	Suspends              uint64 `json:"suspends"`
	Resumes               uint64 `json:"resumes"`
	AutoSuspends          uint64 `json:"auto_suspends"`
	SuspendsRefused       uint64 `json:"suspends_refused"`
	SlowReadies           uint64 `json:"slow_readies"`
	// Gauges: consecutive recoveries so far, the backoff before the next
	// one, and 1 in RECOVERY_FAILED.
	RecoveryConsecutive uint64 `json:"recovery_consecutive"`
	RecoveryBackoffMs   uint64 `json:"recovery_backoff_ms"`
	RecoveryFailed      uint64 `json:"recovery_failed"`
	// HealthChecks: see ControllerStats; LinkDown is 1 in LINK_DOWN.
	HealthChecks uint64 `json:"health_checks"`
	LinkDown     uint64 `json:"link_down"`

	// EventPasses and EventQuotaReached: see ControllerStats.
	EventPasses       uint64 `json:"event_passes"`
	EventQuotaReached uint64 `json:"event_quota_reached"`
}

func (s *ControllerStats) snapshot() ControllerStatsSnapshot {
	return ControllerStatsSnapshot{
		Interrupts: s.Interrupts.Load(), Doorbells: s.Doorbells.Load(), Events: s.Events.Load(),
		EventsByPoll: s.EventsByPoll.Load(), EventPasses: s.EventPasses.Load(), EventQuotaReached: s.EventQuotaReached.Load(),
		Commands: s.Commands.Load(), StateChanges: s.StateChanges.Load(),
		BadEventRingRP: s.BadEventRingRP.Load(), BadEventPtr: s.BadEventPtr.Load(),
		UnknownChannel: s.UnknownChannel.Load(), BadCode: s.BadCode.Load(), LengthClamped: s.LengthClamped.Load(),
		UnknownEvent: s.UnknownEvent.Load(), StaleCompletion: s.StaleCompletion.Load(),
		SysErrs: s.SysErrs.Load(), Recoveries: s.Recoveries.Load(), SoCResets: s.SoCResets.Load(),
		DoorbellErrors: s.DoorbellErrors.Load(), BadRegister: s.BadRegister.Load(),
		RecoveryAttempts: s.RecoveryAttempts.Load(), RecoveryFailures: s.RecoveryFailures.Load(),
		RecoveryGaveUp: s.RecoveryGaveUp.Load(), DeviceErrorRecoveries: s.DeviceErrorRecoveries.Load(),
		StateTimeouts:  s.StateTimeouts.Load(),
		FirmwareImages: s.FirmwareImages.Load(), FirmwareErrors: s.FirmwareErrors.Load(),
		Dumps: s.Dumps.Load(), DumpErrors: s.DumpErrors.Load(),
		Suspends: s.Suspends.Load(), Resumes: s.Resumes.Load(), AutoSuspends: s.AutoSuspends.Load(),
		SuspendsRefused: s.SuspendsRefused.Load(), SlowReadies: s.SlowReadies.Load(),
		HealthChecks: s.HealthChecks.Load(),
	}
}

// DeviceErrors returns the number of device misbehaviours detected.
func (s ControllerStatsSnapshot) DeviceErrors() uint64 {
	return s.BadEventRingRP + s.BadEventPtr + s.UnknownChannel + s.BadCode + s.LengthClamped + s.UnknownEvent + s.BadRegister
}
