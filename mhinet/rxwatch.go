package mhinet

import (
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"
)

// rxWatch is what the aggregate framings (NTB, QMAP) learn from the
// downlink: the session the modem numbers its data with, which the uplink
// follows (Config.FollowSession: a modem whose sessions start at mux id
// 112, as the SDX72 in MBIM mode), and NTB sequence glitches, counted and
// logged at most once per glitchLogInterval (mhi_wwan_mbim logged every
// one until Linux 6.14 silenced them).
type rxWatch struct {
	follow  bool
	log     *slog.Logger
	tx      atomic.Uint32 // the session (mux id) transmitted on
	follows atomic.Uint64

	// Under the framing's receive lock.
	lastGlitchLog time.Time
	unlogged      uint64
}

// glitchLogInterval is the least time between two logs of NTB sequence
// glitches; the ones in between are counted and reported with the next.
const glitchLogInterval = 10 * time.Second

func newRxWatch(cfg *Config) *rxWatch {
	w := &rxWatch{follow: cfg.FollowSession, log: cfg.Logger}
	if w.log == nil {
		w.log = slog.New(slog.DiscardHandler)
	}
	w.tx.Store(uint32(cfg.Session))
	return w
}

// session returns the session (mux id) to transmit on.
func (w *rxWatch) session() uint8 { return uint8(w.tx.Load()) }

// seen notes a downlink packet on session sid: with FollowSession the
// uplink moves to it. Called under the framing's receive lock.
func (w *rxWatch) seen(sid uint8) {
	if !w.follow {
		return
	}
	if old := uint8(w.tx.Load()); old != sid {
		w.tx.Store(uint32(sid))
		w.follows.Add(1)
		w.log.Info("the modem sends the data session as mux id/session "+strconv.Itoa(int(sid))+"; the uplink follows it",
			"from", old, "to", sid)
	}
}

// glitches notes n new NTB sequence glitches (wSequence not following the
// previous NTH's), logging them rate-limited. Called under the framing's
// receive lock.
func (w *rxWatch) glitches(n uint64, total uint64) {
	w.unlogged += n
	now := time.Now()
	if now.Sub(w.lastGlitchLog) < glitchLogInterval {
		return
	}
	w.log.Warn("NTB sequence number glitches (the modem's NTB numbering skipped; the datagrams were delivered)",
		"since_last_log", w.unlogged, "total", total, "next_log_in_at_least", glitchLogInterval)
	w.lastGlitchLog, w.unlogged = now, 0
}
