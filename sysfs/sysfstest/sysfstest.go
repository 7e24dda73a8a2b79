// Package sysfstest builds attribute trees bound to the embedded mock modem,
// for the tests of the tree and of the servers that serve it (FUSE,
// netlink), like nltest does for netlink.
package sysfstest

import (
	"testing"

	"github.com/gomhi/gomhi/mhinet"
	"github.com/gomhi/gomhi/pcigeneric/mock"
	"github.com/gomhi/gomhi/sysfs"
)

// Device is a powered-up mock modem and, unless it was made without, its
// network device (whose receiver releases every packet at once).
type Device struct {
	Mock *mock.Mock
	Net  *mhinet.Device
}

// Binding returns the tree binding of d.
func (d Device) Binding() sysfs.Device {
	return sysfs.Device{Controller: d.Mock.Controller, Net: d.Net, Model: d.Mock.Info.Name}
}

// NewDevice starts a mock modem named name, powers it up and, with withNet,
// brings its network device up. Everything is torn down by tb.Cleanup.
func NewDevice(tb testing.TB, name string, withNet bool) Device {
	tb.Helper()
	d := Device{Mock: startMock(tb, mock.Options{Name: name})}
	if withNet {
		d.Net = startNet(tb, d.Mock)
	}
	return d
}

// startMock opens a mock modem with opts and powers it up; tb.Cleanup
// closes it.
func startMock(tb testing.TB, opts mock.Options) *mock.Mock {
	tb.Helper()
	m, err := mock.Open(opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = m.Close() })
	if err := m.Controller.PowerUp(); err != nil {
		tb.Fatal(err)
	}
	return m
}

// startNet brings up the network device of m's data pair, with a receiver
// that releases every packet at once; tb.Cleanup takes it down.
func startNet(tb testing.TB, m *mock.Mock) *mhinet.Device {
	tb.Helper()
	n, err := mhinet.New(m.Controller, mhinet.Config{Pair: m.DataPair}, mhinet.ReceiverFunc(func(p []mhinet.Packet) {
		for _, x := range p {
			x.Release()
		}
	}))
	if err != nil {
		tb.Fatal(err)
	}
	if err := n.Up(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = n.Down() })
	return n
}

// NewTree returns a tree with one device, "mhi0", with its network device.
func NewTree(tb testing.TB) (*sysfs.Tree, Device) {
	tb.Helper()
	d := NewDevice(tb, "mhi0", true)
	t := sysfs.NewTree()
	t.AddDevice("mhi0", d.Binding())
	return t, d
}
