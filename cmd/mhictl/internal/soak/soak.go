// Package soak is the harness behind 'mhictl soak': it runs generator and
// loopback traffic at full rate through the real stack (a mock modem, the
// host controller, the mhinet network device and the attribute tree) for a
// long time while it changes the MRU through the attribute tree, injects
// SYS_ERR, stops and starts channels and, over vfio-user, kills and
// restarts the modem's process. It checks continuously that every packet
// sent is delivered or counted in a named drop counter, that memory,
// goroutines and file descriptors stay flat, and that no channel gets
// stuck, and it stops at the first violation.
//
// It is a harness, not a library: only mhictl imports it.
package soak

import (
	"errors"
	"fmt"
	"log/slog"
	"os/exec"
	"time"

	"github.com/gomhi/gomhi/mhi/ep/ipdata"
	"github.com/gomhi/gomhi/mhi/proto/framing"
	"github.com/gomhi/gomhi/mhinet"
	"github.com/gomhi/gomhi/pcigeneric"
)

// Transport says how the host reaches the mock modem.
type Transport string

// Transports.
const (
	// Inproc runs the mock modem in this process (mock.Open).
	Inproc Transport = "inproc"
	// VFIOUser runs the mock modem in another process ('mhictl modem
	// serve') and reaches it over a vfio-user socket; the soak kills and
	// restarts that process.
	VFIOUser Transport = "vfio-user"
)

// Defaults of Options.
const (
	DefaultModel        = "telit-fn990"
	DefaultPhasePackets = 100_000
	DefaultCheckEvery   = time.Second
	DefaultStall        = 15 * time.Second
	DefaultSettle       = 10 * time.Second
	// DefaultSysErrGap is the least time between two SYS_ERR bursts. It is
	// longer than the host's recovery window (mhi.DefaultRecoveryWindow,
	// 10 s): recoveries closer together count as consecutive, and after
	// mhi.DefaultRecoveryLimit of them the host gives up by design.
	DefaultSysErrGap = 11 * time.Second
)

// Default fault rates: mean extra time (exponential) after the least gap.
var (
	DefaultMRUs  = []int{3500, 16384, 32768, 65535, 2048}
	DefaultSizes = []int{64, 1500, 128, 576, 1262, 1263, 256, 1024, 40, 1400}
)

// Options configure a soak run. At least one of Duration and Packets must
// be set; the run ends at whichever comes first.
type Options struct {
	// Duration ends the run after this long (0: no limit).
	Duration time.Duration
	// Packets ends the run after this many data packets (0: no limit).
	Packets uint64
	// Transport is Inproc (default) or VFIOUser.
	Transport Transport
	// Model is the modem the mock impersonates (default telit-fn990).
	Model string
	// Format is the data channel framing (default: the model's own,
	// pcigeneric.PairFormat).
	Format framing.Format
	// FormatSet says Format was chosen (the zero value is raw IP).
	FormatSet bool
	// Seed seeds every random choice: fault times, MRU order,
	// LOOPBACK payloads (default 1).
	Seed uint64
	// PhasePackets is the number of data packets in one phase (default
	// 100 000): the MRU changes once per phase, in its middle, and
	// conservation is checked exactly at its end.
	PhasePackets uint64
	// MRUs are the MRUs written to devices/<dev>/mru in turn.
	MRUs []int
	// Sizes are the data packet sizes, used in turn.
	Sizes []int
	// SysErrGap is the least time between two SYS_ERR bursts (default
	// DefaultSysErrGap; negative: no SYS_ERR). A burst is one to three
	// SYS_ERRs 0.3–2 s apart. Over vfio-user the modem is out of reach
	// and the fault is a SoC reset written to devices/<dev>/soc_reset.
	SysErrGap time.Duration
	// RestartGap is the least time between two restarts (Down, Up) of the
	// data channels (default 3 s; negative: none).
	RestartGap time.Duration
	// LoopbackRestartGap is the least time between two restarts of the
	// LOOPBACK pair's client (default 3 s; negative: none).
	LoopbackRestartGap time.Duration
	// ModemRestartGap is the least time between two kills of the served
	// modem's process (vfio-user only; default 5 s; negative: none).
	ModemRestartGap time.Duration
	// CheckEvery is the interval of the continuous checks and of the
	// resource samples (default 1 s).
	CheckEvery time.Duration
	// Warmup is the time after which resources must stay flat (default:
	// a quarter of Duration, at least 10 s and at most 5 min; 15 s
	// without Duration). The warm-up also lasts until every MRU was
	// used once; a garbage collection ends it (forced if none
	// happened yet).
	Warmup time.Duration
	// Stall is how long a channel with work outstanding may go without
	// progress (default 15 s).
	Stall time.Duration
	// Settle bounds the wait, at the end of a phase, for every packet to
	// be delivered or counted (default 10 s).
	Settle time.Duration
	// Slack is what resources may grow after the warm-up (zero fields:
	// defaults, see Slack).
	Slack Slack
	// ServeCommand builds the command that serves the mock modem on a
	// vfio-user socket (VFIOUser only): it must run 'mhictl modem serve
	// --socket SOCKET --ip-mode loopback --json-log' with the model and
	// format given (the soak asks it for its counters with SIGUSR1 and
	// reads them, MsgIPDataStats, from its standard output).
	ServeCommand func(socket, model string, format framing.Format) *exec.Cmd
	// Logger receives the stack's logs (nil: discard).
	Logger *slog.Logger
	// Progress, if set, is called after every sample.
	Progress func(Sample)

	sabotage sabotage // deliberate bugs, for the package's own tests
}

// Slack bounds resource growth after the warm-up. A resource is flat when
// the maximum over the last half of the run is at most the maximum over
// the warm-up plus its slack; during the run, a sample more than twice the
// slack above the warm-up maximum stops it at once.
type Slack struct {
	// RSSBytes is added to the warm-up maximum of VmRSS (default: 32 MiB
	// or a quarter of that maximum, whichever is larger).
	RSSBytes int64
	// Goroutines (default 16).
	Goroutines int
	// FDs (default 8).
	FDs int
}

// sabotage breaks the harness or the stack on purpose, so the package's
// tests can see each check fail with a message that names the violation.
type sabotage struct {
	skipCountEvery  uint64 // the receiver loses every n-th packet without counting it
	leakPerMRU      bool   // one goroutine leaked per MRU change
	leakFDPerMRU    bool   // one file descriptor leaked per MRU change
	stallDataAfter  time.Duration
	stallDataDevice bool // after stallDataAfter, stop the downlink channel behind mhinet's back
}

// Errors.
var (
	// ErrViolation: the run found a violation (the Summary says which).
	ErrViolation = errors.New("soak: violation")
	// ErrOptions: the options are invalid.
	ErrOptions = errors.New("soak: invalid options")
)

// optionsError returns an ErrOptions error with the message format.
func optionsError(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrOptions}, args...)...)
}

func (o *Options) defaults() error {
	if o.Duration <= 0 && o.Packets == 0 {
		return optionsError("set a duration or a packet count")
	}
	if err := o.transportDefaults(); err != nil {
		return err
	}
	if err := o.modelDefaults(); err != nil {
		return err
	}
	if err := o.trafficDefaults(); err != nil {
		return err
	}
	o.timingDefaults()
	if o.Slack.Goroutines <= 0 {
		o.Slack.Goroutines = 16
	}
	if o.Slack.FDs <= 0 {
		o.Slack.FDs = 8
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// transportDefaults defaults and checks the transport.
func (o *Options) transportDefaults() error {
	if o.Transport == "" {
		o.Transport = Inproc
	}
	if o.Transport != Inproc && o.Transport != VFIOUser {
		return optionsError("transport %q, want %s or %s", o.Transport, Inproc, VFIOUser)
	}
	if o.Transport == VFIOUser && o.ServeCommand == nil {
		return optionsError("vfio-user needs a command that serves the modem")
	}
	return nil
}

// modelDefaults defaults and checks the model and the data channel's
// framing (by default the one of the model's data channel).
func (o *Options) modelDefaults() error {
	if o.Model == "" {
		o.Model = DefaultModel
	}
	info, ok := pcigeneric.Model(o.Model)
	if !ok {
		return optionsError("model %q: %w", o.Model, pcigeneric.ErrUnknownModel)
	}
	pair := pcigeneric.DataPair(info.Config)
	if pair == "" {
		return optionsError("model %s has no IP data channel", o.Model)
	}
	if !o.FormatSet {
		o.Format = pcigeneric.PairFormat(pair)
	}
	if !o.Format.Valid() {
		return optionsError("format %d", o.Format)
	}
	return nil
}

// trafficDefaults defaults and checks the seed, the phase length, the
// MRUs and the packet sizes.
func (o *Options) trafficDefaults() error {
	if o.Seed == 0 {
		o.Seed = 1
	}
	if o.PhasePackets == 0 {
		o.PhasePackets = DefaultPhasePackets
	}
	if o.PhasePackets < 2 || o.PhasePackets > 1<<24 {
		return optionsError("%d packets per phase, want 2..%d", o.PhasePackets, 1<<24)
	}
	if len(o.MRUs) == 0 {
		o.MRUs = DefaultMRUs
	}
	for _, m := range o.MRUs {
		if err := mhinet.ValidateMRU(m); err != nil {
			return optionsError("%v", err)
		}
	}
	if len(o.Sizes) == 0 {
		o.Sizes = DefaultSizes
	}
	for _, s := range o.Sizes {
		if s < ipdata.GenMinPacket || s > mhinet.DefaultMTU {
			return optionsError("packet size %d, want %d..%d", s, ipdata.GenMinPacket, mhinet.DefaultMTU)
		}
	}
	return nil
}

// timingDefaults defaults the fault gaps and the check intervals.
func (o *Options) timingDefaults() {
	if o.SysErrGap == 0 {
		o.SysErrGap = DefaultSysErrGap
	}
	if o.RestartGap == 0 {
		o.RestartGap = 3 * time.Second
	}
	if o.LoopbackRestartGap == 0 {
		o.LoopbackRestartGap = 3 * time.Second
	}
	if o.ModemRestartGap == 0 {
		o.ModemRestartGap = 5 * time.Second
	}
	if o.CheckEvery <= 0 {
		o.CheckEvery = DefaultCheckEvery
	}
	if o.Warmup <= 0 {
		o.Warmup = 15 * time.Second
		if o.Duration > 0 {
			o.Warmup = min(max(o.Duration/4, 10*time.Second), 5*time.Minute)
		}
	}
	if o.Stall <= 0 {
		o.Stall = DefaultStall
	}
	if o.Settle <= 0 {
		o.Settle = DefaultSettle
	}
}

// Validate checks the options (with defaults applied to a copy).
func (o Options) Validate() error { return o.defaults() }

// Messages of a served modem ('mhictl modem serve --json-log') that carry
// its IP data counters (ipdata.Stats, as the "stats" attribute of a JSON
// log line on standard output): on SIGUSR1 those of the current session,
// and at exit those of the last one, after its modem stopped.
const (
	MsgIPDataStats = "ip_data_stats"
	MsgIPDataFinal = "ip_data_final"
)
