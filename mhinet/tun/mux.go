package tun

import (
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/gomhi/gomhi/mhi"
	"github.com/gomhi/gomhi/mhinet"
)

// Several data sessions over one data channel: the device's Receiver is a
// Mux, which hands each packet to the receiver of its session
// (mhinet.Packet.Session) — one Bridge, with its own TUN, per session —
// and each Bridge transmits on its session (BridgeConfig.Session).

// Mux is an mhinet.Receiver that routes every packet of a receive batch by
// its session number (mhinet.Packet.Session) to the receiver Set for that
// session. Each receiver is called at most once per batch, with its
// session's packets in the order they came; a batch of one session (the
// usual case) goes through as it is. Packets of a session with no receiver
// are released and counted (MuxStats.UnknownSession, and the session's
// RxDropped), never given to another session's receiver. Routing does not
// allocate: the Mux keeps one scratch slice per session across batches.
//
// Set and Remove are safe while Receive runs; a Receive already under
// way may still hand one batch to the receiver it looked up. Receive
// calls are serialised (the device makes them from one goroutine).
type Mux struct {
	recv [256]atomic.Pointer[muxEntry]
	sess [256]muxSession

	unknown  atomic.Uint64
	mismatch atomic.Uint64
	batches  atomic.Uint64
	split    atomic.Uint64

	// setMu serialises Set, Remove and SetPrefixes (the fold of a
	// replaced receiver's counters, the prefixes and the guard built from
	// them).
	setMu    sync.Mutex
	prefixes [256][]netip.Prefix
	// guard is nil unless two sessions or more have prefixes.
	guard atomic.Pointer[muxGuard]

	// Receive's state, under rxMu.
	rxMu    sync.Mutex
	scratch [256][]mhinet.Packet
	got     [256]mhinet.Receiver // the receiver looked up for this batch
	seen    [4]uint64            // sessions met in this batch (bitmap)
	order   []uint8              // those sessions, first met first
}

// muxEntry is one session's receiver.
type muxEntry struct {
	r mhinet.Receiver
}

// muxSession is one session's counters: what the Mux delivered or
// dropped, and what receivers since replaced or removed counted
// themselves (SessionCounter), so the session's totals never go back.
type muxSession struct {
	rxPackets, rxBytes, rxDropped atomic.Uint64
	used                          atomic.Bool
	gone                          SessionStats // under Mux.setMu
}

// MuxStats is a snapshot of a Mux's own counters.
type MuxStats struct {
	// UnknownSession counts received packets of a session with no
	// receiver: released, delivered nowhere.
	UnknownSession uint64 `json:"rx_session_unknown"`
	// SessionMismatch counts received packets addressed into another
	// session's prefixes (SetPrefixes) and none of their own: a device
	// that put one session's packet in another's NDP (or under its mux
	// id). Released, delivered nowhere.
	SessionMismatch uint64 `json:"rx_session_mismatch"`
	// Batches counts the receive batches routed; SplitBatches those that
	// held more than one session (or an unknown one) and were split.
	Batches      uint64 `json:"rx_batches"`
	SplitBatches uint64 `json:"rx_batches_split"`
}

// SessionStats is one session's traffic on the host. RxPackets and
// RxBytes count the packets the Mux handed to the session's receiver;
// RxDropped the session's packets that arrived with no receiver set (also
// in MuxStats.UnknownSession) plus those its receiver failed to deliver
// (a Bridge's WriteErrors). TxPackets, TxBytes and TxDropped are the
// session's uplink as its receiver counts it (a Bridge's UplinkPackets,
// UplinkBytes and UplinkDropped), including receivers since removed.
type SessionStats struct {
	RxPackets uint64 `json:"rx_packets"`
	RxBytes   uint64 `json:"rx_bytes"`
	TxPackets uint64 `json:"tx_packets"`
	TxBytes   uint64 `json:"tx_bytes"`
	RxDropped uint64 `json:"rx_dropped"`
	TxDropped uint64 `json:"tx_dropped"`
}

// add returns s plus o.
func (s SessionStats) add(o SessionStats) SessionStats {
	return SessionStats{
		RxPackets: s.RxPackets + o.RxPackets, RxBytes: s.RxBytes + o.RxBytes,
		TxPackets: s.TxPackets + o.TxPackets, TxBytes: s.TxBytes + o.TxBytes,
		RxDropped: s.RxDropped + o.RxDropped, TxDropped: s.TxDropped + o.TxDropped,
	}
}

// SessionCounter is a receiver that counts its session's traffic itself
// (a Bridge does: its uplink, and the downlink it failed to write);
// Mux.SessionStats adds what it reports to the Mux's own counts.
type SessionCounter interface {
	SessionCounts() SessionStats
}

var _ mhinet.Receiver = (*Mux)(nil)

// NewMux returns a Mux with no receivers.
func NewMux() *Mux {
	return &Mux{order: make([]uint8, 0, 256)}
}

// Set makes r the receiver of session n, replacing any other (whose
// counters stay in the session's totals). A nil r removes it.
func (m *Mux) Set(n uint8, r mhinet.Receiver) {
	if r == nil {
		m.Remove(n)
		return
	}
	m.setMu.Lock()
	defer m.setMu.Unlock()
	m.sess[n].used.Store(true)
	m.foldLocked(n, m.recv[n].Swap(&muxEntry{r: r}))
}

// Remove takes session n's receiver away: from then on the session's
// packets are released and counted in UnknownSession. Remove a Bridge
// before stopping it (Run's end writes what it queued), and count on its
// counters only up to here.
func (m *Mux) Remove(n uint8) {
	m.setMu.Lock()
	defer m.setMu.Unlock()
	m.foldLocked(n, m.recv[n].Swap(nil))
}

// foldLocked keeps the counters of session n's former receiver old.
func (m *Mux) foldLocked(n uint8, old *muxEntry) {
	if old == nil {
		return
	}
	if c, ok := old.r.(SessionCounter); ok {
		m.sess[n].gone = m.sess[n].gone.add(c.SessionCounts())
	}
}

// Receiver returns session n's receiver (nil: none).
func (m *Mux) Receiver(n uint8) mhinet.Receiver {
	if e := m.recv[n].Load(); e != nil {
		return e.r
	}
	return nil
}

// Sessions appends to dst the sessions that have a receiver, in order.
func (m *Mux) Sessions(dst []uint8) []uint8 {
	for n := range m.recv {
		if m.recv[n].Load() != nil {
			dst = append(dst, uint8(n))
		}
	}
	return dst
}

// Stats returns a snapshot of the Mux's own counters.
func (m *Mux) Stats() MuxStats {
	return MuxStats{UnknownSession: m.unknown.Load(), SessionMismatch: m.mismatch.Load(),
		Batches: m.batches.Load(), SplitBatches: m.split.Load()}
}

// SessionStats returns session n's counters (see SessionStats), and
// false for a session that never had a receiver nor a packet.
func (m *Mux) SessionStats(n uint8) (SessionStats, bool) {
	s := &m.sess[n]
	m.setMu.Lock()
	st := s.gone
	e := m.recv[n].Load()
	m.setMu.Unlock()
	if e != nil {
		if c, ok := e.r.(SessionCounter); ok {
			st = st.add(c.SessionCounts())
		}
	}
	st.RxPackets += s.rxPackets.Load()
	st.RxBytes += s.rxBytes.Load()
	st.RxDropped += s.rxDropped.Load()
	return st, s.used.Load()
}

// Receive routes a batch (it implements mhinet.Receiver).
func (m *Mux) Receive(pkts []mhinet.Packet) {
	if len(pkts) == 0 {
		return
	}
	m.batches.Add(1)
	g := m.guard.Load()
	first := pkts[0].Session
	one := g == nil // with a guard every packet is looked at (route)
	for i := 1; i < len(pkts) && one; i++ {
		one = pkts[i].Session == first
	}
	if one {
		if e := m.recv[first].Load(); e != nil {
			m.deliver(first, e.r, pkts)
			return
		}
	}
	m.split.Add(1)
	m.rxMu.Lock()
	defer m.rxMu.Unlock()
	for _, p := range pkts {
		m.route(p, g)
	}
	for _, n := range m.order {
		if r := m.got[n]; r != nil {
			m.deliver(n, r, m.scratch[n])
			clear(m.scratch[n]) // drop the references into receive buffers
			m.scratch[n] = m.scratch[n][:0]
		}
		m.got[n] = nil
		m.seen[n/64] &^= 1 << (n % 64)
	}
	m.order = m.order[:0]
}

// route puts p in its session's scratch slice, looking the session's
// receiver up on its first packet of the batch, or drops it: a packet of
// a session with no receiver, or one g says is addressed to another
// session.
func (m *Mux) route(p mhinet.Packet, g *muxGuard) {
	n := p.Session
	if g != nil && g.foreign(n, p.Data) {
		p.Release()
		m.mismatch.Add(1)
		m.sess[n].used.Store(true)
		m.sess[n].rxDropped.Add(1)
		return
	}
	if m.seen[n/64]&(1<<(n%64)) == 0 {
		m.seen[n/64] |= 1 << (n % 64)
		m.order = append(m.order, n)
		if e := m.recv[n].Load(); e != nil {
			m.got[n] = e.r
		}
	}
	if m.got[n] == nil {
		m.drop(n, p)
		return
	}
	m.scratch[n] = append(m.scratch[n], p)
}

// drop releases a packet of session n, which has no receiver.
func (m *Mux) drop(n uint8, p mhinet.Packet) {
	p.Release()
	m.unknown.Add(1)
	m.sess[n].used.Store(true)
	m.sess[n].rxDropped.Add(1)
}

// deliver hands session n's packets to r, counting them.
func (m *Mux) deliver(n uint8, r mhinet.Receiver, pkts []mhinet.Packet) {
	bytes := 0
	for _, p := range pkts {
		bytes += len(p.Data)
	}
	s := &m.sess[n]
	s.rxPackets.Add(uint64(len(pkts)))
	s.rxBytes.Add(uint64(bytes))
	r.Receive(pkts)
}

// AddSession builds session cfg.Session's bridge on tun for dev, a device
// whose Receiver is mux, and sets it as the session's receiver: packets of
// the session go to it from then on (before, they were counted in
// UnknownSession). The device may be up and other sessions' bridges
// running. Run the bridge next; to end the session, mux.Remove, then stop
// its Run and close tun. It fails, wrapping mhinet.ErrSession, when dev
// cannot carry the session, and with ErrSessionTaken when the session has
// a receiver already.
func AddSession(mux *Mux, dev *mhinet.Device, tun Device, cfg BridgeConfig) (*Bridge, error) {
	if _, err := dev.SessionWire(cfg.Session); err != nil {
		return nil, fmt.Errorf("tun: bridge: %w", err)
	}
	b := NewBridge(tun, cfg)
	b.Attach(dev)
	mux.setMu.Lock()
	defer mux.setMu.Unlock()
	if mux.recv[cfg.Session].Load() != nil {
		return nil, fmt.Errorf("tun: bridge: session %d: %w", cfg.Session, ErrSessionTaken)
	}
	mux.sess[cfg.Session].used.Store(true)
	mux.recv[cfg.Session].Store(&muxEntry{r: b})
	return b, nil
}

// ConnectMux is Connect for several sessions: it builds a Mux, the device
// with the Mux as its Receiver (devCfg.MTU, when zero, becomes the TUN's
// MTU, capped at mhinet.MaxMTU), and session cfg.Session's bridge on tun
// (AddSession). The device is down; call Up on it, then Run the bridge;
// add the other sessions with AddSession.
func ConnectMux(tun Device, ctrl *mhi.Controller, devCfg mhinet.Config, cfg BridgeConfig) (*Mux, *Bridge, *mhinet.Device, error) {
	mux := NewMux()
	if devCfg.MTU == 0 {
		devCfg.MTU = min(tun.MTU(), mhinet.MaxMTU)
	}
	dev, err := mhinet.New(ctrl, devCfg, mux)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("tun: bridge: %w", err)
	}
	b, err := AddSession(mux, dev, tun, cfg)
	if err != nil {
		return nil, nil, nil, err
	}
	return mux, b, dev, nil
}

// SetPrefixes records the prefixes session n's addresses are in (what its
// interface was given; nil when it has none). Once two sessions or more
// have prefixes, a received packet of session n addressed into another
// session's prefixes and none of n's own is dropped and counted
// (MuxStats.SessionMismatch, the session's RxDropped) instead of being
// handed to n's receiver: the host would take it on the wrong
// interface, delivering one session's traffic through another. Packets
// to addresses no session claims pass (a routed network behind the
// session).
func (m *Mux) SetPrefixes(n uint8, ps []netip.Prefix) {
	m.setMu.Lock()
	defer m.setMu.Unlock()
	m.prefixes[n] = m.prefixes[n][:0]
	for _, p := range ps {
		if p.IsValid() {
			m.prefixes[n] = append(m.prefixes[n], p.Masked())
		}
	}
	g := &muxGuard{}
	sessions := 0
	for i, list := range m.prefixes {
		if len(list) > 0 {
			sessions++
		}
		for _, p := range list {
			g.entries = append(g.entries, guardEntry{n: uint8(i), p: p})
		}
	}
	if sessions < 2 {
		g = nil
	}
	m.guard.Store(g)
}

// muxGuard is the sessions' prefixes, read by Receive: built whole by
// SetPrefixes, never changed after.
type muxGuard struct {
	entries []guardEntry
}

type guardEntry struct {
	n uint8
	p netip.Prefix
}

// foreign reports whether pkt, a packet of session n, is addressed into
// another session's prefixes and none of n's own.
func (g *muxGuard) foreign(n uint8, pkt []byte) bool {
	dst, ok := destination(pkt)
	if !ok {
		return false
	}
	other := false
	for _, e := range g.entries {
		if e.p.Contains(dst) {
			if e.n == n {
				return false
			}
			other = true
		}
	}
	return other
}

// destination returns an IP packet's destination address.
func destination(pkt []byte) (netip.Addr, bool) {
	switch {
	case len(pkt) >= 20 && pkt[0]>>4 == 4:
		return netip.AddrFrom4([4]byte(pkt[16:20])), true
	case len(pkt) >= 40 && pkt[0]>>4 == 6:
		return netip.AddrFrom16([16]byte(pkt[24:40])), true
	}
	return netip.Addr{}, false
}
