package mock

import (
	"fmt"
	"log/slog"

	"github.com/gomhi/gomhi/mhi"
	"github.com/gomhi/gomhi/mhi/ep"
	"github.com/gomhi/gomhi/mhi/ep/ipdata"
	"github.com/gomhi/gomhi/mhi/ep/modem"
	"github.com/gomhi/gomhi/mhi/ep/quirk"
	"github.com/gomhi/gomhi/mhi/inproc"
	"github.com/gomhi/gomhi/pcigeneric"
)

// DefaultModel is the model the embedded mock modem impersonates by default.
const DefaultModel = "qcom-sdx55m"

// Options configure an embedded mock modem.
type Options struct {
	// Model is the device-table model to impersonate (default DefaultModel).
	Model string
	// Name names the host controller (default "mhi0").
	Name string
	// Logger receives the host's and the device's logs (nil: discard).
	Logger *slog.Logger
	// Memory is the DMA slab size in bytes (0: inproc.DefaultMemory).
	Memory int
	// IPData configures the mock modem's IP data function on the model's
	// data channel pair (IP_HW0 or IP_HW0_MBIM), in the framing given by
	// its Format (whose zero value is raw IP). Nil is internal loopback in
	// the pair's own framing (pcigeneric.PairFormat): NTB16 aggregation on
	// IP_HW0_MBIM, raw IP on IP_HW0.
	IPData *ipdata.Config
	// Modem overrides the mock modem's cellular configuration: identity
	// fields set here replace the ones derived from the device-table
	// entry (Identity); addressing, radio and signal as in
	// modem.Config (defaults: 198.18.0.1/24 via 198.18.0.2,
	// fd00:6d68:6900::1/64 via ::2, MTU 1500). Its RequireConnect gates
	// the mock's IP data on a connected session, as a real modem does:
	// until a session is connected over a control channel (MBIM CONNECT),
	// and after it is disconnected, every IP packet is dropped and counted
	// (ipdata.Stats.DroppedGated).
	Modem modem.Config
	// Device, if set, adjusts the mock modem's configuration before it starts.
	Device func(*ep.Config)
	// Host, if set, adjusts the host controller's options before it is built.
	Host func(*mhi.Options)
	// InterruptSink, if set, receives the mock modem's interrupts instead
	// of the host controller's handler (inproc.Options.InterruptSink): for
	// a driver that runs the host in virtual time.
	InterruptSink func(vector int)
	// FirmwareDir holds the images the model names, for a mock that boots
	// in PBL (ep.BootConfig.Start); RDDMSize enables RAM-dump collection.
	FirmwareDir string
	RDDMSize    int
	// Quirks are the field failures the mock reproduces (mhi/ep/quirk,
	// docs/QUIRKS.md).
	Quirks quirk.Set
}

// Mock is a mock modem in this process joined to a host controller by the
// in-process transport. The controller is not powered up yet.
type Mock struct {
	Info *pcigeneric.ModemInfo
	// Entry is the device-table entry the mock impersonates (the model's
	// first): its product name gives the modem's identity.
	Entry      pcigeneric.Entry
	Transport  *inproc.Transport
	Controller *mhi.Controller
	// DataPair names the model's IP data channel pair ("" if it has none).
	DataPair string
	// IPData is the mock modem's function on DataPair (nil if none).
	IPData *ipdata.Function
	// Modem is the mock modem's cellular state: identity, registration,
	// the data session that gates IP data with Modem.RequireConnect.
	Modem *modem.Modem
	// Functions are the mock modem's functions (IP data, MBIM…) and
	// their counters.
	Functions *Functions
}

// Open starts a mock modem impersonating opts.Model and builds a host
// controller for it from the same table entry. Both sides get the model's
// channel configuration plus the LOOPBACK pair the mock offers.
func Open(opts Options) (*Mock, error) {
	if opts.Model == "" {
		opts.Model = DefaultModel
	}
	info, ok := pcigeneric.Model(opts.Model)
	if !ok {
		return nil, fmt.Errorf("pcigeneric: model %q: %w (see 'mhictl models')", opts.Model, pcigeneric.ErrUnknownModel)
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	entry := pcigeneric.Entry{Product: info.Name, Info: info}
	if es := pcigeneric.EntriesFor(info.Name); len(es) > 0 {
		entry = es[0]
	}
	ec, fns, err := NewConfig(entry, ModemOptions{
		IPData: opts.IPData, Modem: opts.Modem, Logger: log.With("side", "modem"), Quirks: opts.Quirks,
	})
	if err != nil {
		return nil, err
	}
	cfg := ec.MHI
	if opts.Device != nil {
		opts.Device(&ec)
	}
	tr, err := inproc.New(ec, inproc.Options{Memory: opts.Memory, InterruptSink: opts.InterruptSink})
	if err != nil {
		return nil, err
	}
	fns.Start(tr.Device())
	hostOpts := mhi.Options{Name: opts.Name, Logger: log.With("side", "host"), NoM3: info.NoM3,
		Firmware: pcigeneric.FirmwareFromDir(info, opts.FirmwareDir), RDDMSize: opts.RDDMSize}
	if opts.Host != nil {
		opts.Host(&hostOpts)
	}
	ctrl, err := mhi.NewController(tr, cfg, hostOpts)
	if err != nil {
		_ = tr.Close()
		return nil, err
	}
	return &Mock{Info: info, Entry: entry, Transport: tr, Controller: ctrl, DataPair: fns.DataPair, IPData: fns.IPData,
		Modem: fns.Modem, Functions: fns}, nil
}

// Close powers the controller down and stops the mock modem.
func (m *Mock) Close() error {
	err := m.Controller.PowerDown()
	if cerr := m.Transport.Close(); err == nil {
		err = cerr
	}
	return err
}
