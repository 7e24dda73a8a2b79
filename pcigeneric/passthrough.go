package pcigeneric

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/gomhi/gomhi/mhi"
	"github.com/gomhi/gomhi/pcigeneric/vfio"
)

// PassthroughOptions configure OpenPassthrough.
type PassthroughOptions struct {
	// SysfsRoot is the sysfs mount (default DefaultRoot).
	SysfsRoot string
	// Name names the host controller (default "mhi0").
	Name string
	// Logger receives the host's logs (nil: discard).
	Logger *slog.Logger
	// FirmwareDir holds the images the model's table entry names, for a
	// modem that boots in PBL or EDL (FirmwareFromDir).
	FirmwareDir string
	// RDDMSize enables RAM-dump collection (mhi.Options.RDDMSize).
	RDDMSize int
}

// Passthrough is a real modem bound to vfio-pci and driven from user
// space: the device found in sysfs, its VFIO transport and a host
// controller configured from the device table by the IDs it reports.
type Passthrough struct {
	Modem      *Modem
	Transport  *vfio.Transport
	Controller *mhi.Controller
}

// OpenPassthrough opens the modem at addr (which must be bound to vfio-pci:
// `mhictl bind ADDR`), picks its configuration by its vendor, device and
// subsystem IDs, maps its MHI BAR, and builds a host controller on it. The
// controller is not powered up.
func OpenPassthrough(addr string, opts PassthroughOptions) (*Passthrough, error) {
	if opts.SysfsRoot == "" {
		opts.SysfsRoot = DefaultRoot
	}
	m, err := DeviceAt(opts.SysfsRoot, addr)
	if err != nil {
		return nil, err
	}
	if m.Info == nil {
		return nil, fmt.Errorf("pcigeneric: %s: %w", addr, ErrNotModem)
	}
	info := m.Info
	dev, err := vfio.Open(m.Address, vfio.Options{SysfsRoot: opts.SysfsRoot, DMAWidth: info.DMAWidth, Logger: opts.Logger})
	if err != nil {
		return nil, err
	}
	// One vector per event ring plus the BHI/state vector, as Linux asks;
	// with fewer, every ring shares vector 0 (the controller handles both).
	tr, err := vfio.NewTransport(dev, info.BAR, 1+len(info.Config.EventRings))
	if errors.Is(err, vfio.ErrInvalid) {
		tr, err = vfio.NewTransport(dev, info.BAR, 1)
	}
	if err != nil {
		_ = dev.Close()
		return nil, err
	}
	ctrl, err := mhi.NewController(tr, info.Config, mhi.Options{Name: opts.Name, Logger: opts.Logger, NoM3: info.NoM3,
		Firmware: FirmwareFromDir(info, opts.FirmwareDir), RDDMSize: opts.RDDMSize})
	if err != nil {
		_ = tr.Close()
		return nil, err
	}
	return &Passthrough{Modem: m, Transport: tr, Controller: ctrl}, nil
}

// Close powers the controller down and releases the device.
func (p *Passthrough) Close() error {
	err := p.Controller.PowerDown()
	if cerr := p.Transport.Close(); err == nil {
		err = cerr
	}
	return err
}
