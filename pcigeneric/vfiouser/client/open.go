package client

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"syscall"

	"github.com/gomhi/gomhi/mhi"
	"github.com/gomhi/gomhi/pcigeneric"
	"github.com/gomhi/gomhi/pcigeneric/vfiouser/protocol"
)

// Errors of Open.
var (
	// ErrNoServer: nothing serves at the socket path (no such file, or a
	// socket nobody listens on). Start one with 'mhictl modem serve'.
	ErrNoServer = errors.New("vfiouser: no vfio-user server")
)

// OpenOptions configure Open.
type OpenOptions struct {
	// Name names the host controller (default "mhi0").
	Name string
	// Logger receives the host's logs (nil: discard).
	Logger *slog.Logger
	// Client configures the client transport (DMA memory, vectors, reply
	// timeout).
	Client Options
	// FirmwareDir holds the images the model's table entry names, for a
	// modem that boots in PBL or EDL (pcigeneric.FirmwareFromDir).
	FirmwareDir string
	// RDDMSize enables RAM-dump collection (mhi.Options.RDDMSize).
	RDDMSize int
}

// Remote is a modem served over vfio-user by another process (such as
// 'mhictl modem serve') joined to gomhi's host stack: the device-table entry
// its config-space IDs select, the client transport and a host controller.
// It is the vfio-user counterpart of pcigeneric.Passthrough (a real modem
// through VFIO) and mock.Mock (the mock modem in this process).
type Remote struct {
	// Path is the server's unix socket.
	Path string
	// Entry is the device-table entry matching the function's IDs.
	Entry pcigeneric.Entry
	// Info is the model (Entry.Info).
	Info *pcigeneric.ModemInfo
	// Transport is the vfio-user client.
	Transport *Transport
	// Controller is the host controller, not powered up yet.
	Controller *mhi.Controller
	// DataPair names the model's IP data channel pair ("" if none).
	DataPair string
}

// Open connects to the vfio-user server at the unix socket path, looks the
// model up in the device table by the vendor, device and subsystem IDs in
// the function's config space, and builds a host controller for it on the
// client transport: the model's channels plus the LOOPBACK pair the mock
// modem offers. The controller is not powered up. Errors wrap ErrNoServer,
// protocol.ErrNotSocket, pcigeneric.ErrUnknownModel or the transport's errors.
func Open(path string, opts OpenOptions) (*Remote, error) {
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("%w at %s (start one with 'mhictl modem serve --socket %s'): %w", ErrNoServer, path, path, err)
	case err != nil:
		return nil, fmt.Errorf("vfiouser: %s: %w", path, err)
	case fi.Mode()&fs.ModeSocket == 0:
		return nil, fmt.Errorf("%w: %s is a %s", protocol.ErrNotSocket, path, protocol.FileKind(fi.Mode()))
	}
	tr, err := Dial(path, opts.Client)
	if errors.Is(err, syscall.ECONNREFUSED) {
		return nil, fmt.Errorf("%w listening on %s (a stale socket?): %w", ErrNoServer, path, err)
	}
	if err != nil {
		return nil, err
	}
	v, d, sv, sd := tr.IDs()
	e, ok := pcigeneric.Lookup(v, d, sv, sd)
	if !ok {
		_ = tr.Close()
		return nil, fmt.Errorf("vfiouser: %s: function %04x:%04x %04x:%04x: %w", path, v, d, sv, sd, pcigeneric.ErrUnknownModel)
	}
	cfg := e.Info.Config.WithLoopback()
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ctrl, err := mhi.NewController(tr, cfg, mhi.Options{Name: opts.Name, Logger: log, NoM3: e.Info.NoM3,
		Firmware: pcigeneric.FirmwareFromDir(e.Info, opts.FirmwareDir), RDDMSize: opts.RDDMSize})
	if err != nil {
		_ = tr.Close()
		return nil, err
	}
	return &Remote{Path: path, Entry: e, Info: e.Info, Transport: tr, Controller: ctrl, DataPair: pcigeneric.DataPair(cfg)}, nil
}

// Close powers the controller down and disconnects from the server, which
// then discards its modem (the next client gets a fresh one).
func (r *Remote) Close() error {
	err := r.Controller.PowerDown()
	if cerr := r.Transport.Close(); err == nil {
		err = cerr
	}
	return err
}
