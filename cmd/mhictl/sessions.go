package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"

	"github.com/gomhi/gomhi/mhi/ctrlport"
	"github.com/gomhi/gomhi/mhinet"
	"github.com/gomhi/gomhi/mhinet/tun"
)

// This file is `mhictl up`'s several data sessions: session 0 is
// configured on the --tun interface (tunHost); a session N > 0 gets its
// own TUN interface, <tun>.<N> or the name `mhictl connect --interface`
// gives, with a bridge that is session N's receiver in the device's
// tun.Mux and transmits on session N; the interface is made when the
// session connects and removed when it ends.

// sessionNet is what up's sessions N > 0 need to make their interfaces:
// the device and its Mux, the --tun name they are named after, the
// offloads, and the context their bridges run under.
type sessionNet struct {
	ctx     context.Context
	mux     *tun.Mux
	dev     *mhinet.Device
	tunName string
	gso     bool
	gro     bool
	log     *slog.Logger
	out     upLog
}

// sessionTUN is the host side of a session N > 0 (a
// ctrlport.HostPreparer): Prepare makes its TUN interface and bridge,
// Apply and Remove configure its addresses, routes and MTU (a tunHost),
// Release removes the bridge from the Mux and the interface.
type sessionTUN struct {
	sn *sessionNet
	n  uint8

	mu   sync.Mutex
	name string
	host *tunHost
	stop func() error // removes the bridge and the interface
}

var _ ctrlport.HostPreparer = (*sessionTUN)(nil)

// defaultSessionInterface is the name of session n's interface when
// `mhictl connect` gives none: <tun>.<N>.
func defaultSessionInterface(tunName string, n uint8) string {
	return fmt.Sprintf("%s.%d", tunName, n)
}

// Interface returns the session's interface while it has one.
func (h *sessionTUN) Interface() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.name
}

// Prepare makes the session's TUN interface (name, or <tun>.<N>), up,
// with the device's MTU, and its bridge, set as session N's receiver and
// running. A name in use is ctrlport.ErrInterfaceTaken; on any failure
// nothing is left.
func (h *sessionTUN) Prepare(name string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stop != nil {
		return fmt.Errorf("%w: session %d has its interface %s already", ctrlport.ErrSessionActive, h.n, h.name)
	}
	if name == "" {
		name = defaultSessionInterface(h.sn.tunName, h.n)
	}
	if err := ctrlport.ValidInterfaceName(name); err != nil {
		return err
	}
	if _, err := net.InterfaceByName(name); err == nil {
		return fmt.Errorf("%w: an interface %s exists", ctrlport.ErrInterfaceTaken, name)
	}
	ifc, err := tun.OpenWith(name, tun.OpenOptions{GSO: h.sn.gso})
	if err != nil {
		return fmt.Errorf("session %d: interface %s: %w", h.n, name, err)
	}
	mtu := h.sn.dev.MTU()
	if err := ifc.Configure(tun.Config{MTU: mtu, Up: true}); err != nil {
		return errors.Join(fmt.Errorf("session %d: interface %s: %w", h.n, name, err), ifc.Close())
	}
	b, err := tun.AddSession(h.sn.mux, h.sn.dev, ifc, tun.BridgeConfig{Logger: h.sn.log, NoGRO: !h.sn.gro, Session: h.n})
	if err != nil {
		return errors.Join(fmt.Errorf("session %d: %w", h.n, err), ifc.Close())
	}
	ctx, cancel := context.WithCancel(h.sn.ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := b.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
			h.sn.out.printf("session %d: bridge %s: %v", h.n, name, err)
		}
	}()
	h.stop = func() error {
		h.sn.mux.Remove(h.n)
		cancel()
		<-done
		return ifc.Close()
	}
	// The session's MTU applies to its interface only: the device's MTU
	// (session 0's, --tun) bounds every session's packets.
	setMTU := func(m int) error { return ifc.SetMTU(min(m, h.sn.dev.MTU())) }
	n, mux := h.n, h.sn.mux
	h.host = &tunHost{ifc: ifc, setMTU: setMTU, claim: func(ps []netip.Prefix) { mux.SetPrefixes(n, ps) }}
	h.name = name
	h.sn.out.printf("session %d: interface %s up, mtu %d, offloads %v", h.n, name, mtu, ifc.Offloads())
	return nil
}

// Apply configures the session's interface (tunHost.Apply).
func (h *sessionTUN) Apply(cfg ctrlport.SessionConfig) error {
	h.mu.Lock()
	host := h.host
	h.mu.Unlock()
	if host == nil {
		return fmt.Errorf("session %d: no interface prepared", h.n)
	}
	return host.Apply(cfg)
}

// Remove removes the addresses and routes Apply added.
func (h *sessionTUN) Remove(cfg ctrlport.SessionConfig) error {
	h.mu.Lock()
	host := h.host
	h.mu.Unlock()
	if host == nil {
		return nil
	}
	return host.Remove(cfg)
}

// Release removes the bridge and the interface Prepare made.
func (h *sessionTUN) Release() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stop == nil {
		return nil
	}
	err := h.stop()
	if err == nil {
		h.sn.out.printf("session %d: interface %s removed", h.n, h.name)
	}
	h.stop, h.host, h.name = nil, nil, ""
	return err
}

// sessionClients returns the session clients of a device's sessions on
// its MBIM port, or its QMI port where it has no MBIM (nil for a model
// with neither): one MBIM client for every session number (CONNECT's
// SessionId), or a QMI client per session, sessions N > 0 binding their
// WDS clients to mux id base + N.
func (cp *controlPlane) sessionClients(base uint8) (func(n uint8) (ctrlport.SessionClient, error), string) {
	if p := cp.port("MBIM"); p != nil {
		s0 := ctrlport.NewMBIMSession(p.Pair())
		return func(n uint8) (ctrlport.SessionClient, error) {
			if n == 0 {
				return s0, nil
			}
			return s0.Sibling(n)
		}, "MBIM"
	}
	if p := cp.port("QMI"); p != nil {
		q0 := ctrlport.NewQMISession(p.Pair())
		return func(n uint8) (ctrlport.SessionClient, error) {
			if n == 0 {
				return q0, nil
			}
			return q0.Sibling(n, ctrlport.MuxBinding(base, n)), nil
		}, "QMI"
	}
	return nil, ""
}

// startSessions starts the device's data sessions 0..limit-1, session
// 0 configuring host0 (nil: none), sessions N > 0 their own interfaces
// when sn has a --tun name. It does nothing for a model without an MBIM
// or QMI channel.
func (cp *controlPlane) startSessions(limit int, base uint8, host0 ctrlport.HostConfigurer, sn *sessionNet, log *slog.Logger, out upLog) error {
	clients, over := cp.sessionClients(base)
	if clients == nil {
		if len(cp.ports) > 0 {
			out.printf("data session: not driven (the model has no MBIM or QMI control channel)")
		}
		return nil
	}
	ss, err := ctrlport.NewSessions(ctrlport.SessionsOptions{Limit: limit, Client: clients, Logger: log,
		Host: func(n uint8) ctrlport.HostConfigurer {
			switch {
			case n == 0:
				return host0
			case sn != nil && sn.tunName != "":
				return &sessionTUN{sn: sn, n: n}
			}
			return nil
		}})
	if err != nil {
		return err
	}
	cp.sessions = ss
	cp.session, _ = ss.Get(0)
	out.printf("data session over %s: 'mhictl connect DEV --apn APN' connects it; sessions 0..%d ('--session N')", over, ss.Limit()-1)
	return nil
}

// muxCounters are the tree's bindings of mux's counters: one session's
// (stats/sessions/<N>/: its packets delivered, sent and dropped) and the
// Mux's own (stats/sessions/: rx_session_unknown…).
func muxCounters(mux *tun.Mux) (session func(n uint8) any, own func() any) {
	return func(n uint8) any { st, _ := mux.SessionStats(n); return st },
		func() any { return mux.Stats() }
}
