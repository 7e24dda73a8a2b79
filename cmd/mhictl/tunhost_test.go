package main

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/gomhi/gomhi/mhi/ctrlport"
	"github.com/gomhi/gomhi/mhinet/tun"
)

// TestTunHostNeverConfiguresPartially: when the host cannot apply all of a
// session's configuration (here the kernel refuses its IPv6 address, IPv6
// being off on the interface), nothing of it stays on the TUN — not the
// IPv4 address added first, not the route, not the MTU — once the session
// has undone it (Remove, as ctrlport.Session does after a failed Apply).
// Runs as root in a network namespace of its own.
func TestTunHostNeverConfiguresPartially(t *testing.T) {
	if !inNetns(t) {
		return
	}
	const name = "gomhipart0"
	ifc, err := tun.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer ifc.Close()
	if err := os.WriteFile("/proc/sys/net/ipv6/conf/"+name+"/disable_ipv6", []byte("1\n"), 0); err != nil {
		t.Fatal(err)
	}
	mtu0 := ifc.MTU()
	static := netip.MustParsePrefix("10.9.9.1/24")
	if err := ifc.Configure(tun.Config{Up: true, Addrs: []netip.Prefix{static}}); err != nil {
		t.Fatal(err)
	}
	h := &tunHost{ifc: ifc, setMTU: ifc.SetMTU, static: []netip.Prefix{static}}
	cfg := ctrlport.SessionConfig{
		IPv4: netip.MustParsePrefix("198.18.0.1/32"), Gateway4: netip.MustParseAddr("198.18.0.2"),
		IPv6: netip.MustParsePrefix("fd00:6d68:6900::1/64"), MTU: 1400,
	}
	err = h.Apply(cfg)
	t.Logf("Apply: %v", err)
	if err == nil {
		t.Fatal("Apply succeeded with IPv6 off on the interface")
	}
	if err := h.Remove(cfg); err != nil {
		t.Fatalf("Remove after the failed Apply: %v", err)
	}
	n, err := net.InterfaceByName(name)
	if err != nil {
		t.Fatal(err)
	}
	addrs, err := n.Addrs()
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, a := range addrs {
		left = append(left, a.String())
	}
	if got := strings.Join(left, " "); got != static.String() {
		t.Errorf("addresses on %s after the failed session: %q, want only the static %s", name, got, static)
	}
	if n.MTU != mtu0 || ifc.MTU() != mtu0 {
		t.Errorf("MTU %d (interface says %d) after the failed session, want %d", ifc.MTU(), n.MTU, mtu0)
	}
	routes, err := os.ReadFile("/proc/net/route")
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	if strings.Contains(string(routes), "020012C6") { // 198.18.0.2, little-endian hex
		t.Errorf("the route to the gateway stayed:\n%s", routes)
	}
}

// TestTunHostClaimsPrefixes: a session's interface tells the device's
// demultiplexer the prefixes its addresses are in once Apply succeeded
// (with the static ones), only the static ones after Remove, and nothing
// of a failed Apply's. Runs as root in a network namespace of its own.
func TestTunHostClaimsPrefixes(t *testing.T) {
	if !inNetns(t) {
		return
	}
	ifc, err := tun.Open("gomhiclaim0")
	if err != nil {
		t.Fatal(err)
	}
	defer ifc.Close()
	static := netip.MustParsePrefix("10.9.9.1/24")
	var claims []string
	h := &tunHost{ifc: ifc, setMTU: ifc.SetMTU, static: []netip.Prefix{static},
		claim: func(ps []netip.Prefix) { claims = append(claims, fmt.Sprint(ps)) }}
	cfg := ctrlport.SessionConfig{IPv4: netip.MustParsePrefix("198.18.1.1/24"), Gateway4: netip.MustParseAddr("198.18.1.2")}
	if err := h.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	if err := h.Remove(cfg); err != nil {
		t.Fatal(err)
	}
	if err := h.Apply(ctrlport.SessionConfig{IPv4: netip.MustParsePrefix("198.18.1.1/24"), MTU: 70000}); err == nil {
		t.Fatal("Apply of an MTU of 70000 succeeded")
	}
	if got := strings.Join(claims, " "); got != "[10.9.9.1/24 198.18.1.1/24] [10.9.9.1/24]" {
		t.Errorf("claims %q", got)
	}
}
