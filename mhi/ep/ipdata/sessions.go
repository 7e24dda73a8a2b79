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

// sessCounters are one session's counters kept outside Function.mu:
// what is counted where the lock is not held (drops, generated packets,
// shaped uplink packets). seen marks a session that has had traffic (a
// row of SessionStats). The packets that reach an aggregate are counted
// under the lock, in aggSessions.
type sessCounters struct {
	seen                           atomic.Bool
	ulPackets, ulBytes, genPackets atomic.Uint64
	dropped, dropGate              atomic.Uint64
}

// mark records that the session has had traffic.
func (c *sessCounters) mark() {
	if !c.seen.Load() {
		c.seen.Store(true)
	}
}

// aggSessions counts, per session, the packets that reach an aggregate:
// those of the open aggregate (its session's Pending) and the totals of
// the aggregates already settled. Guarded by Function.mu, so that a
// packet costs plain additions, no atomic operation; SessionStats reads
// it under the lock.
type aggSessions struct {
	n       int // sessions in the open aggregate
	touched [NumSessions]uint8
	open    [NumSessions]aggTally
	done    [NumSessions]sessTotals
}

// aggTally is one session's packets in the open aggregate: all of them
// (cnt, their bytes) and the uplink packets among them (ul, their uplink
// bytes: a responder's answer differs in size from its question).
type aggTally struct {
	cnt, ul        uint32
	bytes, ulBytes uint64
}

// sessTotals are one session's settled aggregates' counts: the uplink
// packets that went into them, and the packets and bytes committed to the
// downlink queue.
type sessTotals struct {
	ulPackets, ulBytes, dlPackets, dlBytes uint64
}

// add counts a packet of n bytes of session s into the open aggregate, an
// uplink packet of ul bytes (ul ≥ 0) or a generated one (ul < 0). It
// reports whether the packet is its session's first in the aggregate.
func (a *aggSessions) add(s uint8, n, ul int) (first bool) {
	o := &a.open[s]
	if o.cnt == 0 {
		a.touched[a.n] = s
		a.n++
		first = true
	}
	o.cnt++
	o.bytes += uint64(n)
	if ul >= 0 {
		o.ul++
		o.ulBytes += uint64(ul)
	}
	return first
}

// settle moves the open aggregate's tally into the sessions' totals:
// sent (committed to the downlink queue) or dropped (counted in sc's
// Dropped); it empties the tally.
func (a *aggSessions) settle(sc *[NumSessions]sessCounters, sent bool) {
	for _, s := range a.touched[:a.n] {
		o, d := &a.open[s], &a.done[s]
		d.ulPackets += uint64(o.ul)
		d.ulBytes += o.ulBytes
		if sent {
			d.dlPackets += uint64(o.cnt)
			d.dlBytes += o.bytes
		} else {
			sc[s].dropped.Add(uint64(o.cnt))
		}
		*o = aggTally{}
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

// countUL counts an uplink packet of n bytes on session s that does not
// reach an aggregate (those are counted in aggSessions).
func (f *Function) countUL(s uint8, n int) {
	f.sessUL(s, n)
	f.st.ulPackets.Add(1)
}

// sessUL counts an uplink packet of n bytes in session s's counters only.
func (f *Function) sessUL(s uint8, n int) {
	c := &f.sess[s]
	c.mark()
	c.ulPackets.Add(1)
	c.ulBytes.Add(uint64(n))
}

// dropPut counts a packet of session s that put drops under reason; ul
// ≥ 0 is its uplink length (put counts an uplink packet's session's UL
// counters; ULPackets is Receive's), ul < 0 a packet not from the uplink.
func (f *Function) dropPut(s uint8, reason *atomic.Uint64, ul int) {
	if ul >= 0 {
		f.sessUL(s, ul)
	}
	f.drop(s, reason, 1)
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
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := range f.sess {
		if f.sess[i].seen.Load() {
			out = append(out, f.sessionStatsLocked(uint8(i)))
		}
	}
	return out
}

// SessionStatsOf returns session n's counters (all zero, with Session
// and Wire set, if it has had no traffic).
func (f *Function) SessionStatsOf(n uint8) SessionStats {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.sessionStatsLocked(n)
}

// sessionStatsLocked is SessionStatsOf with f.mu held.
func (f *Function) sessionStatsLocked(n uint8) SessionStats {
	c, o, d := &f.sess[n], &f.aggS.open[n], &f.aggS.done[n]
	return SessionStats{
		Session:      n,
		Wire:         f.base + n,
		ULPackets:    c.ulPackets.Load() + d.ulPackets + uint64(o.ul),
		ULBytes:      c.ulBytes.Load() + d.ulBytes + o.ulBytes,
		GenPackets:   c.genPackets.Load(),
		DLPackets:    d.dlPackets,
		DLBytes:      d.dlBytes,
		Pending:      uint64(o.cnt),
		Dropped:      c.dropped.Load(),
		DroppedGated: c.dropGate.Load(),
	}
}
