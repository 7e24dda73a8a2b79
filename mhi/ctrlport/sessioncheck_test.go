package ctrlport_test

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/gomhi/gomhi/mhi/ctrlport"
	"github.com/gomhi/gomhi/mhi/ep/modem"
	"github.com/gomhi/gomhi/mhinet"
)

// TestCheckSessionConfig: what real modems assign passes (and is
// normalised); the limits agree with the network device's.
func TestCheckSessionConfig(t *testing.T) {
	if ctrlport.MaxSessionMTU != mhinet.MaxMTU {
		t.Fatalf("MaxSessionMTU %d, the network device's MaxMTU %d", ctrlport.MaxSessionMTU, mhinet.MaxMTU)
	}
	a := netip.MustParseAddr
	p := netip.MustParsePrefix
	for _, c := range []struct {
		name string
		in   ctrlport.SessionConfig
		want ctrlport.SessionConfig
	}{
		{"the mock's", ctrlport.SessionConfig{IPv4: modem.DefaultIPv4, Gateway4: modem.DefaultGateway4, DNS4: []netip.Addr{modem.DefaultGateway4},
			IPv6: modem.DefaultIPv6, Gateway6: modem.DefaultGateway6, MTU: 1500},
			ctrlport.SessionConfig{IPv4: modem.DefaultIPv4, Gateway4: modem.DefaultGateway4, DNS4: []netip.Addr{modem.DefaultGateway4},
				IPv6: modem.DefaultIPv6, Gateway6: modem.DefaultGateway6, MTU: 1500}},
		{"a /32 with a gateway outside, 0.0.0.0 as second DNS", ctrlport.SessionConfig{IPv4: p("10.64.12.7/32"), Gateway4: a("10.64.12.8"),
			DNS4: []netip.Addr{a("10.177.0.34"), a("0.0.0.0")}, MTU: 1430},
			ctrlport.SessionConfig{IPv4: p("10.64.12.7/32"), Gateway4: a("10.64.12.8"), DNS4: []netip.Addr{a("10.177.0.34")}, MTU: 1430}},
		{"a /30 host, no gateway (0.0.0.0), no MTU", ctrlport.SessionConfig{IPv4: p("100.64.0.2/30"), Gateway4: a("0.0.0.0")},
			ctrlport.SessionConfig{IPv4: p("100.64.0.2/30")}},
		{"IPv6 only, a link-local gateway and DNS", ctrlport.SessionConfig{IPv6: p("2a01:598:a1:1::1/64"), Gateway6: a("fe80::1"),
			DNS6: []netip.Addr{a("fe80::53"), a("::")}, MTU: 1280},
			ctrlport.SessionConfig{IPv6: p("2a01:598:a1:1::1/64"), Gateway6: a("fe80::1"), DNS6: []netip.Addr{a("fe80::53")}, MTU: 1280}},
		{"a gateway of a family without an address is dropped", ctrlport.SessionConfig{IPv4: p("10.1.2.3/24"), Gateway6: a("fe80::1")},
			ctrlport.SessionConfig{IPv4: p("10.1.2.3/24")}},
	} {
		got, err := ctrlport.CheckSessionConfig(c.in)
		if err != nil || !sameConfig(got, c.want) {
			t.Errorf("%s: %+v, %v; want %+v", c.name, got, err, c.want)
		}
	}
	for _, bad := range []ctrlport.SessionConfig{
		{},
		{IPv4: p("10.1.2.3/24"), DNS4: []netip.Addr{a("10.0.0.1"), a("10.0.0.2"), a("10.0.0.3"), a("10.0.0.4"), a("10.0.0.5"),
			a("10.0.0.6"), a("10.0.0.7"), a("10.0.0.8"), a("10.0.0.9")}},
		{IPv4: p("10.1.2.0/24")},
		{IPv4: p("10.1.2.3/24"), MTU: 575},
		{IPv4: p("10.1.2.3/24"), IPv6: p("fd00::1/64"), MTU: 1279},
		{IPv4: p("10.1.2.3/24"), Gateway4: a("169.254.1.1")},
		{IPv6: p("fd00::1/64"), DNS6: []netip.Addr{a("ff02::fb")}},
	} {
		if _, err := ctrlport.CheckSessionConfig(bad); !errors.Is(err, ctrlport.ErrBadSessionConfig) {
			t.Errorf("%+v: %v, want ErrBadSessionConfig", bad, err)
		}
	}
}
