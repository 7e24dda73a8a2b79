package sysfs

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
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
	switch {
	case d.Sessions != nil:
		addSessions(dir, stats, d)
	case d.Session != nil:
		s := d.Session
		dir.Mkdir("session").Add(sessionAttrs(s, s.Connect, s.Disconnect)...)
		stats.Mkdir("session").Add(counterAttrs("session", func() any { return s.Stats() })...)
	}
	for name, f := range d.Stats {
		stats.Mkdir(name).Add(counterAttrs(name, f)...)
	}
}

// addSessions adds session/ and stats/session (session 0, as a device
// with one session shows it) and sessions/<N>/, stats/sessions/<N>/ for
// every session of d.Sessions.
func addSessions(dir, stats *Dir, d Device) {
	ss := d.Sessions
	ops := func(n int) (connect func(context.Context, ctrlport.SessionRequest) (ctrlport.SessionState, error), disconnect func(context.Context) (ctrlport.SessionState, error)) {
		return func(ctx context.Context, r ctrlport.SessionRequest) (ctrlport.SessionState, error) {
				return ss.Connect(ctx, n, r)
			},
			func(ctx context.Context) (ctrlport.SessionState, error) { return ss.Disconnect(ctx, n) }
	}
	all := ss.All()
	c0, d0 := ops(0)
	dir.Mkdir("session").Add(sessionAttrs(all[0], c0, d0)...)
	stats.Mkdir("session").Add(counterAttrs("session", func() any { return all[0].Stats() })...)
	sdir, sstats := dir.Mkdir("sessions"), stats.Mkdir("sessions")
	if d.SessionsStats != nil {
		sstats.Add(counterAttrs("sessions", d.SessionsStats)...)
	}
	var mstats *Dir
	if d.ModemSessions != nil {
		mstats = stats.Mkdir("modem_sessions")
	}
	for i, s := range all {
		name := strconv.Itoa(i)
		if mstats != nil {
			n := uint8(i)
			mstats.Mkdir(name).Add(counterAttrs("modem_sessions", func() any { return d.ModemSessions(n) })...)
		}
		c, dc := ops(i)
		sdir.Mkdir(name).Add(sessionAttrs(s, c, dc)...)
		st := sstats.Mkdir(name)
		st.Add(counterAttrs("session", func() any { return s.Stats() })...)
		if d.SessionData != nil {
			n := uint8(i)
			st.Add(counterAttrs("sessions", func() any { return d.SessionData(n) })...)
		}
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

// sessionAttrs are the attributes of session/ and sessions/<N>/: the
// state and what the session configured, connect and disconnect (through
// connect and disconnect: the session's own, or its set's, which checks
// the number).
func sessionAttrs(s *ctrlport.Session, connect func(context.Context, ctrlport.SessionRequest) (ctrlport.SessionState, error),
	disconnect func(context.Context) (ctrlport.SessionState, error)) []*Attr {
	st := func(f func(ctrlport.SessionState) string) func() string {
		return func() string { return f(s.State()) }
	}
	return []*Attr{
		UintAttr("number", "session number (MBIM SessionId; the QMAP mux id less the model's base)", func() uint64 { return uint64(s.Number()) }, nil, 0, 0),
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
		StringAttr("interface", "network interface the session configured (empty without --tun, or while a session N > 0 is disconnected)", st(func(c ctrlport.SessionState) string { return c.Interface })),
		StringAttr("last_error", "why the last connect or disconnect failed", st(func(c ctrlport.SessionState) string { return c.LastError })),
		CommandAttr("connect", `write "APN [ipv4|ipv6|ipv4v6 [INTERFACE]]": connect the data session and configure its interface (INTERFACE: a session N > 0's own TUN, default <tun>.<N>)`,
			func(v string) error { return sessionConnect(connect, v) }),
		ActionAttr("disconnect", "write 1: disconnect the data session and remove its addresses (a session N > 0: its interface too)",
			func() error { _, err := disconnect(context.Background()); return sessionErr(err) }),
	}
}

// sessionConnect parses "APN [IP_TYPE [INTERFACE]]" and connects.
func sessionConnect(connect func(context.Context, ctrlport.SessionRequest) (ctrlport.SessionState, error), v string) error {
	f := strings.Fields(v)
	if len(f) < 1 || len(f) > 3 {
		return fmt.Errorf("connect: want \"APN [ipv4|ipv6|ipv4v6 [INTERFACE]]\", not %q: %w", v, ErrInvalid)
	}
	req := ctrlport.SessionRequest{APN: f[0]}
	if len(f) >= 2 {
		req.IPType = f[1]
	}
	if len(f) == 3 {
		req.Interface = f[2]
	}
	_, err := connect(context.Background(), req)
	return sessionErr(err)
}

// sessionErr maps session errors to the tree's: an invalid request, a
// session number beyond the limit or one not connected is ErrInvalid, a
// session already connected or an interface name in use ErrBusy; the
// rest pass as they are (the servers report them as I/O errors with
// their message).
func sessionErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ctrlport.ErrSessionRequest), errors.Is(err, ctrlport.ErrSessionLimit), errors.Is(err, ctrlport.ErrSessionNotConnected):
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	case errors.Is(err, ctrlport.ErrSessionActive), errors.Is(err, ctrlport.ErrInterfaceTaken):
		return fmt.Errorf("%w: %w", ErrBusy, err)
	}
	return err
}
