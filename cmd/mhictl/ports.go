package main

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"

	"github.com/gomhi/gomhi/mhi"
	"github.com/gomhi/gomhi/mhi/ctrlport"
	"github.com/gomhi/gomhi/mhinet/tun"
	"github.com/gomhi/gomhi/pcigeneric"
	"github.com/gomhi/gomhi/pcigeneric/mock"
	"github.com/gomhi/gomhi/sysfs"
)

// This file is `mhictl up`'s part on the modem's control channels: a
// port (a raw pseudo-terminal with a stable link in the run directory)
// for every MBIM, QMI and AT pair of the model, and the data session
// driven over the MBIM one (QMI where there is no MBIM), configuring the
// TUN interface.

// systemRunDir is where root's `mhictl up` puts its per-device run
// directories (the netlink run file lives there too).
const systemRunDir = "/run/gomhi"

// defaultRunDir is the run directory of device dev: /run/gomhi/<dev> for
// root, $XDG_RUNTIME_DIR/gomhi/<dev> for other users (a per-user
// directory under the system's temporary directory without it).
func defaultRunDir(dev string) string {
	if os.Geteuid() == 0 {
		return filepath.Join(systemRunDir, dev)
	}
	if x := os.Getenv("XDG_RUNTIME_DIR"); x != "" {
		return filepath.Join(x, "gomhi", dev)
	}
	return filepath.Join(os.TempDir(), "gomhi-"+strconv.Itoa(os.Getuid()), dev)
}

// wwanIndex is the wwan device number a device name implies, as Linux
// numbers wwan devices: the trailing digits of "mhi1" → 1 (0 without).
func wwanIndex(dev string) int {
	i := len(dev)
	for i > 0 && dev[i-1] >= '0' && dev[i-1] <= '9' {
		i--
	}
	n, err := strconv.Atoi(dev[i:])
	if err != nil {
		return 0
	}
	return n
}

// controlPlane is what `mhictl up` opened on the control channels.
type controlPlane struct {
	dir      string
	made     []string // directories created, deepest last
	ports    []*ctrlport.Port
	pairs    []string // the pair of each port
	binds    []sysfs.Port
	session  *ctrlport.Session  // session 0 of sessions
	sessions *ctrlport.Sessions // nil without an MBIM or QMI channel
	closeOne sync.Once
}

// mkdirs creates dir and missing parents with mode 0755 whatever the
// umask, returning the directories it created.
func mkdirs(dir string) ([]string, error) {
	var missing []string
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if _, err := os.Lstat(d); err == nil {
			break
		} else if !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		missing = append(missing, d)
		if d == filepath.Dir(d) {
			break
		}
	}
	var made []string
	for i := len(missing) - 1; i >= 0; i-- {
		d := missing[i]
		if err := os.Mkdir(d, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return made, fmt.Errorf("run directory %s: %w", d, err)
		}
		made = append(made, d)
		if err := os.Chmod(d, 0o755); err != nil {
			return made, fmt.Errorf("run directory %s: %w", d, err)
		}
	}
	return made, nil
}

// openControlPorts opens a port for every control pair of the model
// (MBIM, QMI, DUN, DUN2), named as Linux names them, with its link in
// runDir. A pair that fails to open is reported and skipped: the data
// path does not depend on it.
func openControlPorts(ctrl *mhi.Controller, info *pcigeneric.ModemInfo, dev, runDir string, log *slog.Logger, out upLog) (*controlPlane, error) {
	pairs := pcigeneric.ControlPairs(info.Config)
	cp := &controlPlane{dir: runDir}
	if len(pairs) == 0 {
		return cp, nil
	}
	made, err := mkdirs(runDir)
	cp.made = made
	if err != nil {
		cp.close()
		return nil, fmt.Errorf("--run-dir: %w", err)
	}
	names := ctrlport.PortNames(wwanIndex(dev), pairs)
	for i, pair := range pairs {
		link := filepath.Join(runDir, names[i])
		p, err := ctrlport.Open(ctrl, pair, ctrlport.Options{Link: link, Logger: log})
		if err != nil {
			out.printf("control port %s (%s): not opened: %v", names[i], pair, err)
			continue
		}
		cp.ports = append(cp.ports, p)
		cp.pairs = append(cp.pairs, pair)
		cp.binds = append(cp.binds, sysfs.Port{Name: names[i], Path: p.Link(), Stats: func() any { return p.Stats() }})
		out.printf("control port %s (%s): %s → %s", names[i], pair, p.Link(), p.Path())
	}
	return cp, nil
}

// port returns the port on pair ("" and nil if none).
func (cp *controlPlane) port(pair string) *ctrlport.Port {
	for i, p := range cp.pairs {
		if p == pair {
			return cp.ports[i]
		}
	}
	return nil
}

// close stops the session and the ports (removing their links) and
// removes the run directories it created, if empty.
func (cp *controlPlane) close() {
	cp.closeOne.Do(func() {
		if cp.sessions != nil {
			cp.sessions.Close()
		}
		for _, p := range cp.ports {
			_ = p.Close()
		}
		for i := len(cp.made) - 1; i >= 0; i-- {
			if cp.made[i] == systemRunDir {
				continue // shared with the netlink run file
			}
			_ = os.Remove(cp.made[i]) // fails, harmlessly, when not empty
		}
	})
}

// tunHost configures the TUN interface for a connected session: adds the
// session's addresses, a route to a gateway outside their prefix, and
// the session's MTU; removes them again on disconnect, except addresses
// given with --tun-addr.
type tunHost struct {
	ifc    *tun.Interface
	setMTU func(int) error
	static []netip.Prefix
	// claim, if set, is told the prefixes the session's addresses are in
	// (after Apply; the static ones after Remove), so that the device's
	// demultiplexer can refuse another session's packets for them
	// (tun.Mux.SetPrefixes).
	claim func([]netip.Prefix)

	mu     sync.Mutex
	addrs  []netip.Prefix
	routes []netip.Prefix
}

func (h *tunHost) Interface() string { return h.ifc.Name() }

// Apply configures the TUN for a session: the MTU first (checked by the
// bridge before anything changes), then the addresses, then the routes.
// If a step fails, what the earlier ones did is undone before it returns,
// so that a session the host cannot take leaves nothing behind (the
// session's values were checked by ctrlport.CheckSessionConfig already).
func (h *tunHost) Apply(cfg ctrlport.SessionConfig) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	var addrs, routes []netip.Prefix
	for _, a := range []struct {
		p  netip.Prefix
		gw netip.Addr
	}{{cfg.IPv4, cfg.Gateway4}, {cfg.IPv6, cfg.Gateway6}} {
		if !a.p.IsValid() {
			continue
		}
		addrs = append(addrs, a.p)
		if a.gw.IsValid() && !a.p.Masked().Contains(a.gw) {
			routes = append(routes, netip.PrefixFrom(a.gw, a.gw.BitLen()))
		}
	}
	oldMTU := h.ifc.MTU()
	mtuSet := false
	if cfg.MTU > 0 && cfg.MTU != oldMTU && h.setMTU != nil {
		if err := h.setMTU(cfg.MTU); err != nil {
			return fmt.Errorf("session MTU %d: %w", cfg.MTU, err)
		}
		mtuSet = true
	}
	// Recorded before they are added: a request that fails half-way may
	// have added some.
	h.addrs = addrs
	err := h.ifc.Configure(tun.Config{Up: true, Addrs: addrs})
	if err == nil {
		h.routes = routes
		err = h.ifc.AddRoutes(routes)
	}
	if err == nil {
		if h.claim != nil {
			h.claim(append(slices.Clone(h.static), addrs...))
		}
		return nil
	}
	undo := h.removeLocked()
	if mtuSet {
		undo = errors.Join(undo, h.setMTU(oldMTU))
	}
	if undo != nil {
		return errors.Join(err, fmt.Errorf("undoing the partial configuration: %w", undo))
	}
	return err
}

func (h *tunHost) Remove(ctrlport.SessionConfig) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.removeLocked()
}

// removeLocked removes the routes and the addresses Apply added, except
// the static ones (--tun-addr).
func (h *tunHost) removeLocked() error {
	var drop []netip.Prefix
	for _, a := range h.addrs {
		keep := false
		for _, s := range h.static {
			if s == a {
				keep = true
			}
		}
		if !keep {
			drop = append(drop, a)
		}
	}
	err := errors.Join(h.ifc.RemoveRoutes(h.routes), h.ifc.RemoveAddrs(drop))
	h.addrs, h.routes = nil, nil
	if h.claim != nil {
		h.claim(h.static)
	}
	return err
}

// tunAddrs is the static address of the TUN interface (--tun-addr), if
// any.
func tunAddrs(p netip.Prefix) []netip.Prefix {
	if !p.IsValid() {
		return nil
	}
	return []netip.Prefix{p}
}

// addrText prints the static address, or says there is none.
func addrText(p netip.Prefix) string {
	if !p.IsValid() {
		return "no address until a session is connected"
	}
	return p.String()
}

// startControl opens the control ports in the run directory and starts
// the data sessions, session 0 configuring ifc (nil without --tun),
// sessions N > 0 making their interfaces as sn says.
func startControl(f *upFlags, info *pcigeneric.ModemInfo, ctrl *mhi.Controller, ifc *tun.Interface, setMTU func(int) error,
	static netip.Prefix, sn *sessionNet, log *slog.Logger, out upLog) (*controlPlane, error) {
	dir := f.runDir
	if dir == "" {
		dir = defaultRunDir(f.name)
	}
	cp, err := openControlPorts(ctrl, info, f.name, dir, log, out)
	if err != nil {
		return nil, err
	}
	var host ctrlport.HostConfigurer
	if ifc != nil {
		th := &tunHost{ifc: ifc, setMTU: setMTU, static: tunAddrs(static)}
		if sn != nil && sn.mux != nil {
			th.claim = func(ps []netip.Prefix) { sn.mux.SetPrefixes(0, ps) }
			th.claim(th.static)
		}
		host = th
	}
	if err := cp.startSessions(f.maxSessions, info.MuxIDBase, host, sn, log, out); err != nil {
		cp.close()
		return nil, err
	}
	if f.requireConnect {
		out.printf("IP data gated: the mock passes none until a session is connected")
	}
	return cp, nil
}

// mockStats is the embedded mock's counters as a stats group ("modem"),
// nil without an embedded mock.
func mockStats(m *mock.Mock) map[string]func() any {
	if m == nil || m.Functions == nil {
		return nil
	}
	return map[string]func() any{"modem": func() any { return m.Functions.Stats() }}
}

// modemSessions is the embedded mock's counters of one session
// (stats/modem_sessions/<N>/), nil without an embedded mock.
func modemSessions(m *mock.Mock) func(n uint8) any {
	if m == nil || m.Functions == nil {
		return nil
	}
	return func(n uint8) any { return m.Functions.SessionStatsOf(n) }
}
