package tun_test

import (
	"errors"
	"net/netip"
	"runtime"
	"testing"

	"github.com/jsimonetti/rtnetlink/v2"
	"golang.org/x/sys/unix"

	"github.com/gomhi/gomhi/mhi/testenv"
	"github.com/gomhi/gomhi/mhinet/tun"
)

// Addresses from the benchmarking range 198.18.0.0/15: the TUN's own, a
// peer routed through it, and the /24 between them.
var (
	localAddr = netip.MustParseAddr("198.18.0.1")
	peerAddr  = netip.MustParseAddr("198.18.0.2")
	localNet  = netip.PrefixFrom(localAddr, 24)
)

// requireTUN skips tests that need root and /dev/net/tun.
func requireTUN(t testing.TB) {
	t.Helper()
	testenv.NeedRoot(t, "TUN, network namespaces")
	testenv.NeedPath(t, "/dev/net/tun")
}

// enterNetns moves the calling goroutine — the test's own — to a fresh
// network namespace for the rest of its life. The thread stays locked, so
// the runtime discards it when the test ends instead of reusing it. TUN
// interfaces, sockets and netlink connections made by the test goroutine
// live in the new namespace and vanish with it; goroutines the test starts
// run elsewhere, so everything namespaced is created here first.
func enterNetns(t testing.TB) {
	t.Helper()
	requireTUN(t)
	runtime.LockOSThread()
	if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
		t.Fatalf("unshare(CLONE_NEWNET): %v", err)
	}
	c, err := rtnetlink.Dial(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// lo is index 1 in a fresh namespace.
	if err := c.Link.Set(&rtnetlink.LinkMessage{Family: unix.AF_UNSPEC, Index: 1, Flags: unix.IFF_UP, Change: unix.IFF_UP}); err != nil {
		t.Fatalf("lo up: %v", err)
	}
}

// openTUN opens and configures a TUN with 198.18.0.1/24, MTU 1500, IPv6
// off, up; Close runs at cleanup.
func openTUN(t testing.TB) *tun.Interface {
	t.Helper()
	ifc, err := tun.Open("mhi%d")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := ifc.Close(); err != nil && !errors.Is(err, tun.ErrClosed) {
			t.Errorf("close: %v", err)
		}
	})
	if err := ifc.Configure(tun.Config{MTU: 1500, Up: true, Addrs: []netip.Prefix{localNet}, DisableIPv6: true}); err != nil {
		t.Fatal(err)
	}
	return ifc
}

// link returns the interface's rtnetlink view (ok false when absent).
func link(t testing.TB, index int) (rtnetlink.LinkMessage, bool) {
	t.Helper()
	c, err := rtnetlink.Dial(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	links, err := c.Link.List()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range links {
		if int(l.Index) == index {
			return l, true
		}
	}
	return rtnetlink.LinkMessage{}, false
}
