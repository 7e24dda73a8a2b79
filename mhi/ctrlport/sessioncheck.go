package ctrlport

import (
	"errors"
	"fmt"
	"net/netip"
)

// This file checks what a modem assigns to a session before any of it
// reaches the host: the modem is not trusted, and an address, route or
// MTU it makes up would otherwise be applied to the host's interface
// (docs/CONTROL.md, "What the host accepts from the modem").

// ErrBadSessionConfig: the modem assigned a configuration the host
// refuses (an address that is not a unicast host address, a prefix too
// short, an MTU out of range, too many DNS servers, no address at all).
// The error names the value; nothing of the configuration is applied.
var ErrBadSessionConfig = errors.New("ctrlport: the modem assigned an invalid configuration")

// Limits of a session's configuration.
const (
	// MinIPv4Prefix and MinIPv6Prefix are the shortest prefixes accepted
	// for a session's address: a shorter one would put a large part of
	// the Internet on the modem's link.
	MinIPv4Prefix = 8
	MinIPv6Prefix = 32
	// MinSessionMTU is the smallest MTU accepted for an IPv4-only session
	// (the datagram size every IPv4 host must accept), MinSessionMTU6 for
	// a session with IPv6 (IPv6's minimum link MTU), MaxSessionMTU the
	// largest (the network device's, mhinet.MaxMTU).
	MinSessionMTU  = 576
	MinSessionMTU6 = 1280
	MaxSessionMTU  = 65535 - 28
	// MaxSessionDNS is the most DNS servers accepted per address family.
	MaxSessionDNS = 8
)

func badConfig(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrBadSessionConfig, fmt.Sprintf(format, args...))
}

// CheckSessionConfig checks what a modem assigned to a session and
// returns it normalised, or an error wrapping ErrBadSessionConfig that
// names the first value refused. Unspecified DNS servers and gateways
// (0.0.0.0, ::) mean "none" and are dropped, as is a gateway of a family
// without an address. Refused:
//
//   - an address that is not a unicast host address of its family:
//     unspecified, loopback, multicast, link-local, IPv4 0.0.0.0/8 and
//     240.0.0.0/4 (255.255.255.255 included), an IPv4-mapped IPv6
//     address, or the network or broadcast address of its IPv4 subnet;
//   - a prefix shorter than MinIPv4Prefix / MinIPv6Prefix;
//   - a gateway or DNS server that is loopback, multicast, IPv4 link-local,
//     0.0.0.0/8 or 240.0.0.0/4, or IPv4-mapped (an IPv6 link-local
//     gateway or DNS server is fine: routers use them);
//   - more than MaxSessionDNS DNS servers of a family;
//   - an MTU outside MinSessionMTU (MinSessionMTU6 with an IPv6 address)
//     .. MaxSessionMTU (0 is "none");
//   - no address at all.
func CheckSessionConfig(cfg SessionConfig) (SessionConfig, error) {
	if cfg.IPv4.IsValid() {
		if err := checkHostPrefix(cfg.IPv4, true); err != nil {
			return cfg, err
		}
	}
	if cfg.IPv6.IsValid() {
		if err := checkHostPrefix(cfg.IPv6, false); err != nil {
			return cfg, err
		}
	}
	if !cfg.IPv4.IsValid() && !cfg.IPv6.IsValid() {
		return cfg, badConfig("no address for the session (IP type %q)", cfg.IPType)
	}
	var err error
	if cfg.Gateway4, err = checkPeer(cfg.Gateway4, true, cfg.IPv4.IsValid(), "IPv4 gateway"); err != nil {
		return cfg, err
	}
	if cfg.Gateway6, err = checkPeer(cfg.Gateway6, false, cfg.IPv6.IsValid(), "IPv6 gateway"); err != nil {
		return cfg, err
	}
	if cfg.DNS4, err = checkDNS(cfg.DNS4, true); err != nil {
		return cfg, err
	}
	if cfg.DNS6, err = checkDNS(cfg.DNS6, false); err != nil {
		return cfg, err
	}
	if cfg.MTU != 0 {
		lo, with := MinSessionMTU, ""
		if cfg.IPv6.IsValid() {
			lo, with = MinSessionMTU6, " with IPv6"
		}
		if cfg.MTU < lo || cfg.MTU > MaxSessionMTU {
			return cfg, badConfig("MTU %d%s, valid range %d..%d", cfg.MTU, with, lo, MaxSessionMTU)
		}
	}
	return cfg, nil
}

// checkHostPrefix checks a session's own address and prefix.
func checkHostPrefix(p netip.Prefix, want4 bool) error {
	a := p.Addr()
	fam, minBits := "IPv6", MinIPv6Prefix
	if want4 {
		fam, minBits = "IPv4", MinIPv4Prefix
	}
	if a.Is4() != want4 {
		return badConfig("%s address %v: not an %s address", fam, p, fam)
	}
	if why := notUnicast(a); why != "" {
		return badConfig("%s address %v: %s", fam, p, why)
	}
	if a.IsLinkLocalUnicast() {
		return badConfig("%s address %v: link-local", fam, p)
	}
	if p.Bits() < minBits {
		return badConfig("%s address %v: prefix shorter than /%d", fam, p, minBits)
	}
	if want4 && p.Bits() <= 30 {
		net := p.Masked().Addr()
		b := net.As4()
		host := uint32(1)<<(32-p.Bits()) - 1
		u := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
		bc := u | host
		if a == net {
			return badConfig("%s address %v: the subnet's network address", fam, p)
		}
		if a == netip.AddrFrom4([4]byte{byte(bc >> 24), byte(bc >> 16), byte(bc >> 8), byte(bc)}) {
			return badConfig("%s address %v: the subnet's broadcast address", fam, p)
		}
	}
	return nil
}

// notUnicast says why a is not a unicast address a host may talk to ("" if
// it is one; link-local is the caller's call).
func notUnicast(a netip.Addr) string {
	switch {
	case a.Is4In6():
		return "IPv4-mapped"
	case a.IsUnspecified():
		return "unspecified"
	case a.IsLoopback():
		return "loopback"
	case a.IsMulticast():
		return "multicast"
	case a.Is4() && a.As4()[0] == 0:
		return "in 0.0.0.0/8 (this network)"
	case a.Is4() && a.As4()[0] >= 240:
		if a == netip.AddrFrom4([4]byte{255, 255, 255, 255}) {
			return "the limited broadcast address"
		}
		return "in 240.0.0.0/4 (reserved)"
	}
	return ""
}

// checkPeer checks a gateway: the unspecified address, or one of a family
// without an address, is dropped.
func checkPeer(a netip.Addr, want4, haveAddr bool, what string) (netip.Addr, error) {
	if !a.IsValid() || a.IsUnspecified() || !haveAddr {
		return netip.Addr{}, nil
	}
	if a.Is4() != want4 {
		return a, badConfig("%s %v: wrong address family", what, a)
	}
	if why := notUnicast(a); why != "" {
		return a, badConfig("%s %v: %s", what, a, why)
	}
	if want4 && a.IsLinkLocalUnicast() {
		return a, badConfig("%s %v: link-local", what, a)
	}
	return a, nil
}

// checkDNS checks a family's DNS servers, dropping unspecified ones.
func checkDNS(as []netip.Addr, want4 bool) ([]netip.Addr, error) {
	fam := "IPv6"
	if want4 {
		fam = "IPv4"
	}
	var out []netip.Addr
	for _, a := range as {
		if !a.IsValid() || a.IsUnspecified() {
			continue
		}
		if len(out) == MaxSessionDNS {
			return nil, badConfig("%d %s DNS servers, at most %d", len(as), fam, MaxSessionDNS)
		}
		if _, err := checkPeer(a, want4, true, fam+" DNS server"); err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, nil
}
