package sysfs

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/gomhi/gomhi/mhi/ctrlport"
)

// Port is one control port of a device, as the tree lists it.
type Port struct {
	// Name is the port's name as Linux's wwan core gives it (wwan0mbim0,
	// wwan0qmi0, wwan0at0…).
	Name string
	// Path is what a tool opens: the port's stable symbolic link (or its
	// pseudo-terminal when it has none).
	Path string
	// Stats returns the port's counters: a struct whose integer fields
	// with JSON names become stats/ports/<name>/<field> (nil: none).
	Stats func() any
}

// addControl adds the device's control ports (ports/<name>, read-only,
// reading the path a tool opens, with counters under stats/ports/<name>),
// its data session (session/…, counters under stats/session) and extra
// counter groups (stats/<group>).
func addControl(dir *Dir, d Device) {
	stats := dir.Mkdir("stats")
	if len(d.Ports) > 0 {
		ports := dir.Mkdir("ports")
		pstats := stats.Mkdir("ports")
		for _, p := range d.Ports {
			ports.Add(StringAttr(p.Name, "path of the control port a tool opens (mbimcli -d, qmicli -d, a terminal)",
				func() string { return p.Path }))
			if p.Stats != nil {
				pstats.Mkdir(p.Name).Add(counterAttrs("ports", p.Stats)...)
			}
		}
	}
	if s := d.Session; s != nil {
		dir.Mkdir("session").Add(sessionAttrs(s)...)
		stats.Mkdir("session").Add(counterAttrs("session", func() any { return s.Stats() })...)
	}
	for name, f := range d.Stats {
		stats.Mkdir(name).Add(counterAttrs(name, f)...)
	}
}

// CommandAttr builds a write-only String attribute (0200) whose writes
// are handed to do, trimmed of surrounding white space.
func CommandAttr(name, doc string, do func(string) error) *Attr {
	return &Attr{Name: name, Type: String, Mode: 0o200, Doc: doc, set: do}
}

func joinAddrs(as []netip.Addr) string {
	s := make([]string, len(as))
	for i, a := range as {
		s[i] = a.String()
	}
	return strings.Join(s, " ")
}

func validString[T interface {
	IsValid() bool
	String() string
}](v T) string {
	if !v.IsValid() {
		return ""
	}
	return v.String()
}

// sessionAttrs are the attributes of session/: the state and what the
// session configured, connect and disconnect.
func sessionAttrs(s *ctrlport.Session) []*Attr {
	st := func(f func(ctrlport.SessionState) string) func() string {
		return func() string { return f(s.State()) }
	}
	return []*Attr{
		StringAttr("state", "data session: connected or disconnected", st(func(c ctrlport.SessionState) string { return c.State })),
		StringAttr("protocol", "control protocol the session is driven over (mbim, qmi)", st(func(c ctrlport.SessionState) string { return c.Protocol })),
		StringAttr("apn", "access point name of the connected session", st(func(c ctrlport.SessionState) string { return c.APN })),
		StringAttr("ip_type", "IP type of the connected session (ipv4, ipv6, ipv4v6)", st(func(c ctrlport.SessionState) string { return c.IPType })),
		StringAttr("ipv4", "IPv4 address/prefix the network assigned", st(func(c ctrlport.SessionState) string { return validString(c.IPv4) })),
		StringAttr("gateway4", "IPv4 gateway", st(func(c ctrlport.SessionState) string { return validString(c.Gateway4) })),
		StringAttr("dns4", "IPv4 DNS servers, space-separated", st(func(c ctrlport.SessionState) string { return joinAddrs(c.DNS4) })),
		StringAttr("ipv6", "IPv6 address/prefix the network assigned", st(func(c ctrlport.SessionState) string { return validString(c.IPv6) })),
		StringAttr("gateway6", "IPv6 gateway", st(func(c ctrlport.SessionState) string { return validString(c.Gateway6) })),
		StringAttr("dns6", "IPv6 DNS servers, space-separated", st(func(c ctrlport.SessionState) string { return joinAddrs(c.DNS6) })),
		UintAttr("mtu", "MTU the network assigned (0: none)", func() uint64 { return uint64(max(s.State().MTU, 0)) }, nil, 0, 0),
		StringAttr("interface", "network interface the session configured (empty without --tun)", st(func(c ctrlport.SessionState) string { return c.Interface })),
		StringAttr("last_error", "why the last connect or disconnect failed", st(func(c ctrlport.SessionState) string { return c.LastError })),
		CommandAttr("connect", `write "APN [ipv4|ipv6|ipv4v6]": connect the data session and configure the interface`,
			func(v string) error { return sessionConnect(s, v) }),
		ActionAttr("disconnect", "write 1: disconnect the data session and remove its addresses",
			func() error { _, err := s.Disconnect(context.Background()); return sessionErr(err) }),
	}
}

// sessionConnect parses "APN [IP_TYPE]" and connects.
func sessionConnect(s *ctrlport.Session, v string) error {
	f := strings.Fields(v)
	if len(f) < 1 || len(f) > 2 {
		return fmt.Errorf("connect: want \"APN [ipv4|ipv6|ipv4v6]\", not %q: %w", v, ErrInvalid)
	}
	req := ctrlport.SessionRequest{APN: f[0]}
	if len(f) == 2 {
		req.IPType = f[1]
	}
	_, err := s.Connect(context.Background(), req)
	return sessionErr(err)
}

// sessionErr maps session errors to the tree's: an invalid request is
// ErrInvalid, a session already connected ErrBusy; the rest pass as they
// are (the servers report them as I/O errors with their message).
func sessionErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ctrlport.ErrSessionRequest):
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	case errors.Is(err, ctrlport.ErrSessionActive):
		return fmt.Errorf("%w: %w", ErrBusy, err)
	}
	return err
}
