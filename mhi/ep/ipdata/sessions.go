package ipdata

import (
	"sync/atomic"

	"github.com/gomhi/gomhi/mhi/proto/framing"
)

// genSession is the session the generator sends on.
const genSession uint8 = 0

// NumSessions is how many session numbers a Function tells apart and
// counts: all 256 a wire id can name.
const NumSessions = 256

// SessionStats is a snapshot of one session's counters. A session is
// what the host and the control protocols number N (MBIM's SessionId,
// `mhictl connect --session N`); Wire is the id its downlink carries, the
// NDP signature's session byte or the QMAP mux id: the format's base
// (Config.Session, Config.QMAPMux; 0 for raw IP) plus N.
//
// Conservation per session: ULPackets + GenPackets = DLPackets + Pending
// + Dropped. DLPackets and DLBytes count the session's packets in
// aggregates committed to the downlink queue (DLBytes: IP bytes, framing
// excluded, unlike Stats.DLBytes); Dropped counts them dropped for any
// reason (summed over sessions, the Stats' Dropped… counters),
// DroppedGated the part the Gate refused. An uplink packet the modem
// answers (ModeResponder) counts as the session's UL packet and its
// answer as a DL packet. An uplink wire id below the base counts as
// session w (with StrictSession, as dropped); the generator sends on
// session 0.
type SessionStats struct {
	Session      uint8  `json:"session"`
	Wire         uint8  `json:"wire"`
	ULPackets    uint64 `json:"ul_packets"`
	ULBytes      uint64 `json:"ul_bytes"`
	GenPackets   uint64 `json:"gen_packets"`
	DLPackets    uint64 `json:"dl_packets"`
	DLBytes      uint64 `json:"dl_bytes"`
	Pending      uint64 `json:"pending"`
	Dropped      uint64 `json:"dropped"`
	DroppedGated uint64 `json:"dropped_gated"`
}

// sessCounters are one session's counters; seen marks a session that
// has had traffic (a row of SessionStats).
type sessCounters struct {
	seen                                  atomic.Bool
	ulPackets, ulBytes, genPackets        atomic.Uint64
	dlPackets, dlBytes, dropped, dropGate atomic.Uint64
	pending                               atomic.Int64
}

// mark records that the session has had traffic.
func (c *sessCounters) mark() {
	if !c.seen.Load() {
		c.seen.Store(true)
	}
}

// aggSessions tallies the packets of the open aggregate per session, so
// that a flush counts them to their sessions. Guarded by Function.mu.
type aggSessions struct {
	n       int
	touched [NumSessions]uint8
	cnt     [NumSessions]uint32
	bytes   [NumSessions]uint64
}

func (a *aggSessions) add(s uint8, n int) {
	if a.cnt[s] == 0 {
		a.touched[a.n] = s
		a.n++
	}
	a.cnt[s]++
	a.bytes[s] += uint64(n)
}

// settle moves the open aggregate's tally into the sessions' counters:
// sent (committed to the downlink queue) or dropped; it empties the tally.
func (a *aggSessions) settle(sc *[NumSessions]sessCounters, sent bool) {
	for _, s := range a.touched[:a.n] {
		c := &sc[s]
		k := a.cnt[s]
		c.pending.Add(-int64(k))
		if sent {
			c.dlPackets.Add(uint64(k))
			c.dlBytes.Add(a.bytes[s])
		} else {
			c.dropped.Add(uint64(k))
		}
		a.cnt[s], a.bytes[s] = 0, 0
	}
	a.n = 0
}

// allowed reports whether session n's data may flow: SessionGate when
// the Gate implements it, else Gate.DataAllowed for every session.
func (f *Function) allowed(n uint8) bool {
	switch {
	case f.sgate != nil:
		return f.sgate.SessionAllowed(n)
	case f.cfg.Gate != nil:
		return f.cfg.Gate.DataAllowed()
	}
	return true
}

// wireBase is the wire id of session 0: Config.QMAPMux for QMAP,
// Config.Session for NTBs, 0 for raw IP (which carries one session).
func wireBase(cfg *Config) uint8 {
	switch cfg.Format {
	case framing.QMAP:
		return cfg.QMAPMux
	case framing.NTB16, framing.NTB32:
		return cfg.Session
	}
	return 0
}

// sessionOf numbers an uplink packet that came on wire id w: N = w −
// base; a wire id below the base is session w (lenient), or, with
// StrictSession, refused (ok false).
func (f *Function) sessionOf(w uint8) (n uint8, ok bool) {
	if w >= f.base {
		return w - f.base, true
	}
	return w, !f.cfg.StrictSession
}

// countUL counts an uplink packet of n bytes on session s.
func (f *Function) countUL(s uint8, n int) {
	c := &f.sess[s]
	c.mark()
	c.ulPackets.Add(1)
	c.ulBytes.Add(uint64(n))
	f.st.ulPackets.Add(1)
}

// countGen counts k generated packets of session s.
func (f *Function) countGen(s uint8, k uint64) {
	c := &f.sess[s]
	c.mark()
	c.genPackets.Add(k)
	f.st.genPackets.Add(k)
}

// drop counts k packets of session s dropped under reason (one of the
// Function's Dropped… counters).
func (f *Function) drop(s uint8, reason *atomic.Uint64, k uint64) {
	reason.Add(k)
	c := &f.sess[s]
	c.mark()
	c.dropped.Add(k)
	if reason == &f.st.droppedGated {
		c.dropGate.Add(k)
	}
}

// SessionStats returns a snapshot of the per-session counters: one row
// per session that has had traffic, by session number (nil when none
// has).
func (f *Function) SessionStats() []SessionStats {
	var out []SessionStats
	for i := range f.sess {
		if f.sess[i].seen.Load() {
			out = append(out, f.SessionStatsOf(uint8(i)))
		}
	}
	return out
}

// SessionStatsOf returns session n's counters (all zero, with Session
// and Wire set, if it has had no traffic).
func (f *Function) SessionStatsOf(n uint8) SessionStats {
	c := &f.sess[n]
	return SessionStats{
		Session:      n,
		Wire:         f.base + n,
		ULPackets:    c.ulPackets.Load(),
		ULBytes:      c.ulBytes.Load(),
		GenPackets:   c.genPackets.Load(),
		DLPackets:    c.dlPackets.Load(),
		DLBytes:      c.dlBytes.Load(),
		Pending:      uint64(max(c.pending.Load(), 0)),
		Dropped:      c.dropped.Load(),
		DroppedGated: c.dropGate.Load(),
	}
}
