package tun

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/jsimonetti/rtnetlink/v2"
	"golang.org/x/sys/unix"
)

// RemoveAddrs removes addresses from the interface (what a disconnected
// data session assigned). Addresses that are not there are skipped.
func (i *Interface) RemoveAddrs(addrs []netip.Prefix) error {
	for _, p := range addrs {
		if !p.IsValid() {
			return fmt.Errorf("%w: %s: address %v", ErrInvalidConfig, i.name, p)
		}
	}
	return i.rtnl("remove addresses", func(c *rtnetlink.Conn) error {
		var errs []error
		for _, p := range addrs {
			m := i.addrMessage(p)
			if err := c.Address.Delete(m); err != nil && !errors.Is(err, unix.EADDRNOTAVAIL) && !errors.Is(err, unix.ENOENT) {
				errs = append(errs, fmt.Errorf("%w: %s: remove address %v: %w", ErrNetlink, i.name, p, err))
			}
		}
		return errors.Join(errs...)
	})
}

// AddRoutes adds link-scope routes to dsts through the interface (a peer
// outside the interface address's prefix, such as a gateway a /32
// session address cannot reach on its own). Existing routes are kept.
func (i *Interface) AddRoutes(dsts []netip.Prefix) error {
	return i.rtnl("add routes", func(c *rtnetlink.Conn) error {
		for _, d := range dsts {
			if err := c.Route.Add(i.routeMessage(d)); err != nil && !errors.Is(err, unix.EEXIST) {
				return fmt.Errorf("%w: %s: add route %v: %w", ErrNetlink, i.name, d, err)
			}
		}
		return nil
	})
}

// RemoveRoutes removes routes AddRoutes added; missing ones are skipped.
func (i *Interface) RemoveRoutes(dsts []netip.Prefix) error {
	return i.rtnl("remove routes", func(c *rtnetlink.Conn) error {
		var errs []error
		for _, d := range dsts {
			if err := c.Route.Delete(i.routeMessage(d)); err != nil && !errors.Is(err, unix.ESRCH) && !errors.Is(err, unix.ENOENT) {
				errs = append(errs, fmt.Errorf("%w: %s: remove route %v: %w", ErrNetlink, i.name, d, err))
			}
		}
		return errors.Join(errs...)
	})
}

// rtnl runs fn with an rtnetlink connection in the interface's namespace.
func (i *Interface) rtnl(op string, fn func(c *rtnetlink.Conn) error) error {
	if i.closed.Load() {
		return i.closedErr(op)
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.inNS(func() error {
		c, err := rtnetlink.Dial(nil)
		if err != nil {
			return fmt.Errorf("%w: %s: dial: %w", ErrNetlink, i.name, err)
		}
		defer c.Close()
		return fn(c)
	})
}

// addrMessage is the RTM_NEWADDR/DELADDR message for p on the interface.
func (i *Interface) addrMessage(p netip.Prefix) *rtnetlink.AddressMessage {
	a := p.Addr().Unmap()
	bits := p.Bits()
	if p.Addr().Is4In6() {
		bits -= 96
	}
	ip := net.IP(a.AsSlice())
	m := &rtnetlink.AddressMessage{
		Family:       unix.AF_INET,
		PrefixLength: uint8(bits),
		Scope:        unix.RT_SCOPE_UNIVERSE,
		Index:        i.index,
		Attributes:   &rtnetlink.AddressAttributes{Address: ip, Local: ip},
	}
	if a.Is6() {
		m.Family = unix.AF_INET6
		m.Flags = unix.IFA_F_NODAD
		m.Attributes.Local = nil
	}
	return m
}

// routeMessage is a link-scope unicast route to d through the interface
// in the main table.
func (i *Interface) routeMessage(d netip.Prefix) *rtnetlink.RouteMessage {
	bits := d.Bits()
	if d.Addr().Is4In6() {
		bits -= 96
	}
	a := d.Addr().Unmap()
	d = netip.PrefixFrom(a, bits).Masked()
	a = d.Addr()
	fam := uint8(unix.AF_INET)
	if a.Is6() {
		fam = unix.AF_INET6
	}
	return &rtnetlink.RouteMessage{
		Family:    fam,
		DstLength: uint8(bits),
		Table:     unix.RT_TABLE_MAIN,
		Protocol:  unix.RTPROT_STATIC,
		Scope:     unix.RT_SCOPE_LINK,
		Type:      unix.RTN_UNICAST,
		Attributes: rtnetlink.RouteAttributes{
			Dst:      net.IP(a.AsSlice()),
			OutIface: i.index,
			Table:    unix.RT_TABLE_MAIN,
		},
	}
}
