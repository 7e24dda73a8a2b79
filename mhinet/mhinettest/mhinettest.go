// Package mhinettest builds the rigs of the tests that run the host stack
// against the mock modem in one process, as httptest builds servers: a
// mock modem (pcigeneric/mock) or a bare ep.Device joined to a host
// controller by the in-process transport (mhi/inproc) and, if asked, a
// network device on its IP data channels. The test's cleanups tear it
// all down, in reverse order.
package mhinettest

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/gomhi/gomhi/mhi"
	"github.com/gomhi/gomhi/mhi/ep"
	"github.com/gomhi/gomhi/mhi/ep/ipdata"
	"github.com/gomhi/gomhi/mhi/ep/quirk"
	"github.com/gomhi/gomhi/mhi/inproc"
	"github.com/gomhi/gomhi/mhi/wire"
	"github.com/gomhi/gomhi/mhinet"
	"github.com/gomhi/gomhi/pcigeneric"
	"github.com/gomhi/gomhi/pcigeneric/mock"
)

// Options shape a Rig. The zero value is the mock modem of
// mock.DefaultModel and its controller, left down, without a network
// device.
type Options struct {
	// Model is the device-table model the mock modem impersonates, with
	// the functions on its channel pairs (default mock.DefaultModel).
	Model string
	// IPData configures the mock modem's IP data function, as
	// mock.Options.IPData (nil: internal loopback in the pair's framing).
	IPData *ipdata.Config
	// Quirks are the field failures the mock modem reproduces, as
	// mock.Options.Quirks (docs/QUIRKS.md).
	Quirks quirk.Set
	// DataFunction, if set, replaces the mock modem's IP data function on
	// its data pair (an Echo, say); IPData then only shapes what the
	// mock builds and replaces.
	DataFunction ep.Function
	// MHI, if set, replaces the model: the device is a bare ep.Device
	// offering this channel configuration, with no functions but those
	// Device gives it, and the controller is built for the same
	// configuration. Model, IPData and Quirks must be unset.
	MHI *wire.ControllerConfig
	// Device, if set, adjusts the device's configuration before it
	// starts.
	Device func(*ep.Config)
	// Host, if set, adjusts the controller's options before it is built
	// (with a model, after mock.Open's defaults; with MHI, from zero).
	Host func(*mhi.Options)
	// Net, if set, asks for a network device with this configuration:
	// the controller is powered up, and the device built on Net.Pair
	// (default the model's data pair) and brought up.
	Net *mhinet.Config
	// Receiver receives the network device's packets (nil: each is
	// released at once).
	Receiver mhinet.Receiver
	// Connect, if set, builds the network device in place of mhinet.New,
	// for a receiver built with it (tun.Connect's bridge); Receiver is
	// then unused.
	Connect func(*mhi.Controller, mhinet.Config) (*mhinet.Device, error)
}

// Rig is a device joined to a host controller in this process.
type Rig struct {
	// Mock is the mock modem (nil with Options.MHI).
	Mock *mock.Mock
	// Transport joins Device to Controller.
	Transport *inproc.Transport
	// Controller is the host controller, powered up if a network device
	// was asked for.
	Controller *mhi.Controller
	// Device is the device side.
	Device *ep.Device
	// IPData is the mock modem's IP data function (nil if none).
	IPData *ipdata.Function
	// Net is the network device, up (nil without Options.Net).
	Net *mhinet.Device
}

// New builds the rig o describes; what fails fails tb, and tb's cleanups
// take the network device down, then power the controller down and stop
// the device.
func New(tb testing.TB, o Options) *Rig {
	tb.Helper()
	r := &Rig{}
	if o.MHI != nil {
		if o.Model != "" || o.IPData != nil || len(o.Quirks) > 0 {
			tb.Fatal("mhinettest: Options.MHI with a model, IPData or quirks")
		}
		r.Transport, r.Controller = bare(tb, *o.MHI, o.Device, o.Host)
	} else {
		m, err := mock.Open(mock.Options{Model: o.Model, IPData: o.IPData, Quirks: o.Quirks, Device: withData(o.DataFunction, o.Device), Host: o.Host})
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { _ = m.Close() })
		r.Mock, r.Transport, r.Controller, r.IPData = m, m.Transport, m.Controller, m.IPData
	}
	r.Device = r.Transport.Device()
	if o.Net != nil {
		r.Net = r.up(tb, *o.Net, o.Receiver, o.Connect)
	}
	return r
}

// withData returns the device adjustment that puts f on the data pair
// and then applies dev.
func withData(f ep.Function, dev func(*ep.Config)) func(*ep.Config) {
	if f == nil {
		return dev
	}
	return func(ec *ep.Config) {
		pair := pcigeneric.DataPair(ec.MHI)
		fns := make(map[string]ep.Function, len(ec.Functions))
		for name, g := range ec.Functions {
			fns[name] = g
		}
		fns[pair] = f
		ec.Functions = fns
		if dev != nil {
			dev(ec)
		}
	}
}

// Echo is an ep.Function that sends every uplink transfer back unchanged
// as a downlink transfer: what the host framed (its NTBs with their NDP
// session ids, its QMAP frames with their mux ids) comes back as it went,
// so a test sees its own wire ids again. Use it with a format whose
// uplink and downlink framing agree (NTB16, QMAP without checksum
// offload).
type Echo struct {
	transfers atomic.Uint64
}

// Receive implements ep.Function.
func (e *Echo) Receive(ctx context.Context, p *ep.Pipe, transfer []byte) error {
	if err := p.Send(ctx, transfer); err != nil {
		return err
	}
	e.transfers.Add(1)
	return nil
}

// Transfers returns the number of transfers echoed.
func (e *Echo) Transfers() uint64 { return e.transfers.Load() }

// bare builds a bare device offering cfg and a controller for it.
func bare(tb testing.TB, cfg wire.ControllerConfig, dev func(*ep.Config), host func(*mhi.Options)) (*inproc.Transport, *mhi.Controller) {
	tb.Helper()
	ec := ep.Config{MHI: cfg}
	if dev != nil {
		dev(&ec)
	}
	tr, err := inproc.New(ec, inproc.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	var opts mhi.Options
	if host != nil {
		host(&opts)
	}
	ctrl, err := mhi.NewController(tr, cfg, opts)
	if err != nil {
		_ = tr.Close()
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		_ = ctrl.PowerDown()
		_ = tr.Close()
	})
	return tr, ctrl
}

// up powers the controller up and brings up a network device with cfg.
func (r *Rig) up(tb testing.TB, cfg mhinet.Config, rx mhinet.Receiver, connect func(*mhi.Controller, mhinet.Config) (*mhinet.Device, error)) *mhinet.Device {
	tb.Helper()
	if err := r.Controller.PowerUp(); err != nil {
		tb.Fatal(err)
	}
	if cfg.Pair == "" && r.Mock != nil {
		cfg.Pair = r.Mock.DataPair
	}
	if connect == nil {
		if rx == nil {
			rx = mhinet.ReceiverFunc(releaseAll)
		}
		connect = func(ctrl *mhi.Controller, cfg mhinet.Config) (*mhinet.Device, error) {
			return mhinet.New(ctrl, cfg, rx)
		}
	}
	d, err := connect(r.Controller, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	if err := d.Up(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = d.Down() })
	return d
}

// releaseAll releases every packet at once.
func releaseAll(pkts []mhinet.Packet) {
	for _, p := range pkts {
		p.Release()
	}
}
