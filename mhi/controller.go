package mhi

import (
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
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
}

// pm states of the controller (host view).
type pmState int

const (
	pmDisabled pmState = iota
	pmPowerUp
	pmM0
	pmM3
	pmSysErr
	pmShutdown
)

var pmNames = []string{"DISABLED", "POWER_UP", "M0", "M3", "SYS_ERR_PROCESS", "SHUTDOWN"}

func (p pmState) String() string { return pmNames[p] }

// Controller is the host side of one MHI device: it owns the context arrays,
// the command ring, the event rings and the channels, and drives the device
// through the MHI state machine over a Transport.
type Controller struct {
	t    Transport
	cfg  ControllerConfig
	name string
	log  *slog.Logger
	poll time.Duration

	// Offsets published by the device, read at power-up.
	regLen, chdbOff, erdbOff, bhiOff uint32

	chCtx, erCtx, cmdCtx DMABuffer
	allocated            bool

	cmd        commandRing
	eventRings []*EventRing
	channels   [MaxDoorbellChannels]*Channel

	// mu guards the fields below and is the lock for state waits (cond).
	mu        sync.Mutex
	cond      *sync.Cond
	pm        pmState
	devState  State // last state announced by the device
	ee        ExecEnv
	eeSeen    bool // a mission-mode EE event arrived since the last M0 request
	listeners []func(StatusEvent)

	// procMu is held (read) while an event ring is processed and (write)
	// while the rings are reset, so processing never sees a ring mid-reset.
	procMu sync.RWMutex

	recoverCh chan struct{}
	stop      chan struct{}
	wg        sync.WaitGroup

	stats ControllerStats
}

// StatusKind says what a StatusEvent reports.
type StatusKind int

// Status event kinds delivered to the listeners added with OnStatus.
const (
	StatusSysErr    StatusKind = iota // the device entered SYS_ERR; channels were aborted
	StatusRecovered                   // recovery finished; channels were restarted
	StatusRecoveryFailed
	StatusEE // the execution environment changed
)

// StatusEvent is a notification from the controller to its clients.
type StatusEvent struct {
	Kind StatusKind
	EE   ExecEnv
	Err  error
}

// NewController builds a controller for the device behind t, configured by
// cfg. Nothing is written to the device until PowerUp.
func NewController(t Transport, cfg ControllerConfig, opts Options) (*Controller, error) {
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
		recoverCh: make(chan struct{}, 1),
	}
	if c.name == "" {
		c.name = "mhi0"
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	c.log = c.log.With("dev", c.name)
	if c.poll == 0 {
		c.poll = 50 * time.Millisecond
	}
	c.cond = sync.NewCond(&c.mu)
	for _, chc := range cfg.Channels {
		c.channels[chc.Num] = &Channel{ctrl: c, cfg: chc}
	}
	return c, nil
}

// Name returns the controller's name.
func (c *Controller) Name() string { return c.name }

// Config returns the controller's configuration.
func (c *Controller) Config() ControllerConfig {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cfg
}

// Transport returns the transport the controller drives.
func (c *Controller) Transport() Transport { return c.t }

// OnStatus adds f to the listeners of status events (SYS_ERR, recovery,
// EE changes), called in the order they were added from the controller's
// goroutines. f must not block.
func (c *Controller) OnStatus(f func(StatusEvent)) {
	c.mu.Lock()
	c.listeners = append(c.listeners, f)
	c.mu.Unlock()
}

func (c *Controller) notify(ev StatusEvent) {
	c.mu.Lock()
	fs := c.listeners
	c.mu.Unlock()
	for _, f := range fs {
		f(ev)
	}
}

// Channel returns channel num, or an error wrapping ErrNoChannel.
func (c *Controller) Channel(num uint8) (*Channel, error) {
	if int(num) >= len(c.channels) || c.channels[num] == nil {
		return nil, fmt.Errorf("%s: channel %d: %w", c.name, num, ErrNoChannel)
	}
	return c.channels[num], nil
}

// ChannelPair returns the uplink and downlink channels with the given name.
func (c *Controller) ChannelPair(name string) (ul, dl *Channel, err error) {
	u, ok1 := c.cfg.ChannelByName(name, Uplink)
	d, ok2 := c.cfg.ChannelByName(name, Downlink)
	if !ok1 || !ok2 {
		return nil, nil, fmt.Errorf("%s: channel pair %q: %w", c.name, name, ErrNoChannel)
	}
	return c.channels[u.Num], c.channels[d.Num], nil
}

// State returns the MHI state last announced by the device and the
// execution environment.
func (c *Controller) State() (State, ExecEnv) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.devState, c.ee
}

// Stats returns a snapshot of the controller's counters.
func (c *Controller) Stats() ControllerStatsSnapshot { return c.stats.snapshot() }

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

// write64 writes a 64-bit register pair, high half first.
func (c *Controller) write64(lowOff uint32, v uint64) error {
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
}

func (s *ControllerStats) snapshot() ControllerStatsSnapshot {
	return ControllerStatsSnapshot{
		Interrupts: s.Interrupts.Load(), Doorbells: s.Doorbells.Load(), Events: s.Events.Load(),
		EventsByPoll: s.EventsByPoll.Load(), Commands: s.Commands.Load(), StateChanges: s.StateChanges.Load(),
		BadEventRingRP: s.BadEventRingRP.Load(), BadEventPtr: s.BadEventPtr.Load(),
		UnknownChannel: s.UnknownChannel.Load(), BadCode: s.BadCode.Load(), LengthClamped: s.LengthClamped.Load(),
		UnknownEvent: s.UnknownEvent.Load(), StaleCompletion: s.StaleCompletion.Load(),
		SysErrs: s.SysErrs.Load(), Recoveries: s.Recoveries.Load(), SoCResets: s.SoCResets.Load(),
	}
}

// DeviceErrors returns the number of device misbehaviours detected.
func (s ControllerStatsSnapshot) DeviceErrors() uint64 {
	return s.BadEventRingRP + s.BadEventPtr + s.UnknownChannel + s.BadCode + s.LengthClamped + s.UnknownEvent
}
