package pcigeneric

import (
	"fmt"
	"hash/fnv"
	"log/slog"

	"github.com/gomhi/gomhi/mhi"
	"github.com/gomhi/gomhi/mhi/ep"
	"github.com/gomhi/gomhi/mhi/inproc"
)

// DefaultModel is the model the embedded mock modem impersonates by default.
const DefaultModel = "qcom-sdx55m"

// MockOptions configure an embedded mock modem.
type MockOptions struct {
	// Model is the device-table model to impersonate (default DefaultModel).
	Model string
	// Name names the host controller (default "mhi0").
	Name string
	// Logger receives the host's and the device's logs (nil: discard).
	Logger *slog.Logger
	// Memory is the DMA slab size in bytes (0: inproc.DefaultMemory).
	Memory int
	// IPData configures the mock modem's IP data function on the model's
	// data channel pair (IP_HW0 or IP_HW0_MBIM). The zero value is internal
	// loopback with NTB16 aggregation on IP_HW0_MBIM and raw IP on IP_HW0.
	IPData ep.IPDataConfig
	// Device, if set, adjusts the mock modem's configuration before it starts.
	Device func(*ep.Config)
}

// Mock is a mock modem in this process joined to a host controller by the
// in-process transport. The controller is not powered up yet.
type Mock struct {
	Info       *ModemInfo
	Transport  *inproc.Transport
	Controller *mhi.Controller
	// DataPair names the model's IP data channel pair ("" if it has none).
	DataPair string
	// IPData is the mock modem's function on DataPair (nil if none).
	IPData *ep.IPData
}

// DataPair returns the name of a configuration's IP data channel pair:
// IP_HW0_MBIM or IP_HW0, or "" when it has neither.
func DataPair(cfg mhi.ControllerConfig) string {
	for _, name := range []string{ep.IPDataMBIMName, ep.IPDataName} {
		if _, ok := cfg.ChannelByName(name, mhi.Uplink); ok {
			return name
		}
	}
	return ""
}

// OpenMock starts a mock modem impersonating opts.Model and builds a host
// controller for it from the same table entry. Both sides get the model's
// channel configuration plus the LOOPBACK pair the mock offers.
func OpenMock(opts MockOptions) (*Mock, error) {
	if opts.Model == "" {
		opts.Model = DefaultModel
	}
	info, ok := Model(opts.Model)
	if !ok {
		return nil, fmt.Errorf("pcigeneric: model %q: %w (see 'mhictl models')", opts.Model, ErrUnknownModel)
	}
	cfg := info.Config.WithLoopback()
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	h := fnv.New32a()
	h.Write([]byte(info.Name))
	ec := ep.Config{
		MHI:          cfg,
		SerialNumber: h.Sum32(),
		Logger:       log.With("side", "modem"),
	}
	var ipd *ep.IPData
	pair := DataPair(cfg)
	if pair != "" {
		ic := opts.IPData
		if ic == (ep.IPDataConfig{}) && pair == ep.IPDataName {
			ic.Format = ep.FormatRaw
		}
		var err error
		if ipd, err = ep.NewIPData(ic); err != nil {
			return nil, err
		}
		ec.Functions = map[string]ep.Function{pair: ipd}
	}
	if opts.Device != nil {
		opts.Device(&ec)
	}
	tr, err := inproc.New(ec, inproc.Options{Memory: opts.Memory})
	if err != nil {
		return nil, err
	}
	ctrl, err := mhi.NewController(tr, cfg, mhi.Options{Name: opts.Name, Logger: log.With("side", "host")})
	if err != nil {
		_ = tr.Close()
		return nil, err
	}
	return &Mock{Info: info, Transport: tr, Controller: ctrl, DataPair: pair, IPData: ipd}, nil
}

// Close powers the controller down and stops the mock modem.
func (m *Mock) Close() error {
	err := m.Controller.PowerDown()
	if cerr := m.Transport.Close(); err == nil {
		err = cerr
	}
	return err
}
