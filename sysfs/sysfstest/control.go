package sysfstest

import (
	"path/filepath"
	"testing"

	"github.com/gomhi/gomhi/mhi/ctrlport"
	"github.com/gomhi/gomhi/mhi/ep/modem"
	"github.com/gomhi/gomhi/pcigeneric/mock"
	"github.com/gomhi/gomhi/sysfs"
)

// ControlDevice is a powered-up mock modem of a model with an MBIM pair,
// started with modem.Config.RequireConnect, its network device, its MBIM
// port (a PTY with a link in a temporary directory) and a data session
// over it without a host side.
type ControlDevice struct {
	Device
	Port    *ctrlport.Port
	Session *ctrlport.Session
}

// Binding returns the tree binding of d: the device, its port (as
// "wwan0mbim0"), its session and the mock's counters as stats/modem.
func (d ControlDevice) Binding() sysfs.Device {
	b := d.Device.Binding()
	b.Ports = []sysfs.Port{{Name: "wwan0mbim0", Path: d.Port.Link(), Stats: func() any { return d.Port.Stats() }}}
	b.Session = d.Session
	b.Stats = map[string]func() any{"modem": func() any { return d.Mock.Functions.Stats() }}
	return b
}

// NewControlDevice starts a ControlDevice named name impersonating model
// ("telit-fn990" if empty). Everything is torn down by tb.Cleanup.
func NewControlDevice(tb testing.TB, name, model string) ControlDevice {
	tb.Helper()
	if model == "" {
		model = "telit-fn990"
	}
	m := startMock(tb, mock.Options{Name: name, Model: model, Modem: modem.Config{RequireConnect: true}})
	n := startNet(tb, m)
	p, err := ctrlport.Open(m.Controller, "MBIM", ctrlport.Options{Link: filepath.Join(tb.TempDir(), "wwan0mbim0")})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = p.Close() })
	s := ctrlport.NewSession(ctrlport.NewMBIMSession(p.Pair()), ctrlport.SessionOptions{})
	tb.Cleanup(s.Close)
	return ControlDevice{Device: Device{Mock: m, Net: n}, Port: p, Session: s}
}
