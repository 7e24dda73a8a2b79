package tun_test

import (
	"net/netip"
	"testing"

	"github.com/jsimonetti/rtnetlink/v2"

	"github.com/gomhi/gomhi/mhinet/tun"
	"golang.org/x/sys/unix"
)

// ifAddrs lists the interface's addresses.
func ifAddrs(t *testing.T, index int) map[netip.Prefix]bool {
	t.Helper()
	c, err := rtnetlink.Dial(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	addrs, err := c.Address.List()
	if err != nil {
		t.Fatal(err)
	}
	out := map[netip.Prefix]bool{}
	for _, a := range addrs {
		if int(a.Index) != index || a.Attributes == nil {
			continue
		}
		ip, _ := netip.AddrFromSlice(a.Attributes.Address)
		out[netip.PrefixFrom(ip.Unmap(), int(a.PrefixLength))] = true
	}
	return out
}

// ifRoutes lists the destinations of the main table's routes through the
// interface.
func ifRoutes(t *testing.T, index int) map[netip.Prefix]bool {
	t.Helper()
	c, err := rtnetlink.Dial(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rs, err := c.Route.List()
	if err != nil {
		t.Fatal(err)
	}
	out := map[netip.Prefix]bool{}
	for _, r := range rs {
		if int(r.Attributes.OutIface) != index || r.Table != unix.RT_TABLE_MAIN || r.Attributes.Dst == nil {
			continue
		}
		ip, _ := netip.AddrFromSlice(r.Attributes.Dst)
		out[netip.PrefixFrom(ip.Unmap(), int(r.DstLength))] = true
	}
	return out
}

// A session's addresses and peer routes come and go; what is not there is
// skipped on removal.
func TestInterfaceAddrsRoutes(t *testing.T) {
	enterNetns(t)
	ifc := openTUN(t) // 198.18.0.1/24, IPv6 off
	p32 := netip.MustParsePrefix("10.64.0.7/32")
	gw := netip.MustParsePrefix("10.64.0.8/32")
	if err := ifc.Configure(tun.Config{Up: true, Addrs: []netip.Prefix{p32}}); err != nil {
		t.Fatal(err)
	}
	if err := ifc.AddRoutes([]netip.Prefix{gw}); err != nil {
		t.Fatal(err)
	}
	if err := ifc.AddRoutes([]netip.Prefix{gw}); err != nil {
		t.Fatalf("adding a route twice: %v", err)
	}
	if a := ifAddrs(t, ifc.Index()); !a[p32] || !a[localNet] {
		t.Fatalf("addresses %v", a)
	}
	if r := ifRoutes(t, ifc.Index()); !r[gw] {
		t.Fatalf("routes %v", r)
	}
	if err := ifc.RemoveRoutes([]netip.Prefix{gw}); err != nil {
		t.Fatal(err)
	}
	if err := ifc.RemoveAddrs([]netip.Prefix{p32, netip.MustParsePrefix("10.9.9.9/24")}); err != nil {
		t.Fatal(err)
	}
	if a := ifAddrs(t, ifc.Index()); a[p32] || !a[localNet] {
		t.Fatalf("addresses after removal %v", a)
	}
	if r := ifRoutes(t, ifc.Index()); r[gw] {
		t.Fatalf("routes after removal %v", r)
	}
	if err := ifc.RemoveRoutes([]netip.Prefix{gw}); err != nil {
		t.Fatalf("removing a missing route: %v", err)
	}
}
