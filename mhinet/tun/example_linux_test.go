package tun_test

import (
	"context"
	"log"
	"net/netip"

	"github.com/gomhi/gomhi/mhinet"
	"github.com/gomhi/gomhi/mhinet/tun"
	"github.com/gomhi/gomhi/pcigeneric/mock"
)

// A TUN interface joined to a network device on the mock modem (as root).
func Example() {
	m, err := mock.Open(mock.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	if err := m.Controller.PowerUp(); err != nil {
		log.Fatal(err)
	}

	ifc, err := tun.Open("mhi%d")
	if err != nil {
		log.Fatal(err) // errors.Is(err, tun.ErrNoTUN) without root
	}
	defer ifc.Close()
	if err := ifc.Configure(tun.Config{MTU: 1500, Up: true, Addrs: []netip.Prefix{netip.MustParsePrefix("198.18.0.1/24")}, DisableIPv6: true}); err != nil {
		log.Fatal(err)
	}
	b, dev, err := tun.Connect(ifc, m.Controller, mhinet.Config{Pair: m.DataPair}, tun.BridgeConfig{})
	if err != nil {
		log.Fatal(err)
	}
	if err := dev.Up(); err != nil {
		log.Fatal(err)
	}
	defer dev.Down()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go b.Run(ctx) // until cancel; b.Stats() counts both ways
}
