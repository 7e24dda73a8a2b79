package ctrlport_test

import (
	"context"
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhi/ep"
	"github.com/gomhi/gomhi/mhi/ep/modem"
	"github.com/gomhi/gomhi/mhi/testenv/poll"
	"github.com/gomhi/gomhi/pcigeneric/mock"
)

// testIdentity is what the mock modem of these tests says about itself.
var testIdentity = modem.Identity{Manufacturer: "Telit", Model: "FN990", Firmware: "LE.1.2.3-gomhi-test",
	Hardware: "rev 2", IMEI: "351234567890123", IMSI: "001019876543210", ICCID: "8900112233445566778",
	ProviderID: "00101", ProviderName: "Test Net"}

type mockModem struct {
	mock  *mock.Mock
	modem *modem.Modem
	mbim  *modem.MBIM
}

// startMock starts an in-process mock modem of a model with MBIM channels,
// with a modem.MBIM on its "MBIM" pair, and powers the host controller up.
func startMock(t testing.TB, mc modem.Config, mo modem.MBIMOptions) *mockModem {
	t.Helper()
	if mc.Identity == (modem.Identity{}) {
		mc.Identity = testIdentity
	}
	m, err := modem.New(mc)
	if err != nil {
		t.Fatal(err)
	}
	fn, err := modem.NewMBIM(m, mo)
	if err != nil {
		t.Fatal(err)
	}
	mock, err := mock.Open(mock.Options{Model: "telit-fn990", Device: func(c *ep.Config) {
		if c.Functions == nil {
			c.Functions = map[string]ep.Function{}
		}
		c.Functions[modem.MBIMName] = fn
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mock.Close() })
	if err := mock.Controller.PowerUp(); err != nil {
		t.Fatal(err)
	}
	return &mockModem{mock: mock, modem: m, mbim: fn}
}

func ctx(t testing.TB) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(cancel)
	return c
}

// waitFor polls cond for up to 5 s.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	poll.Wait(t, 5*time.Second, cond, func() string { return "timed out waiting for " + what })
}
