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

// FollowSpan is how many wire ids above the session base FollowSession
// takes as the base's sessions (0..FollowSpan−1); a downlink wire id
// outside them moves the base.
const FollowSpan = 32

// session returns the session base: the wire id of session 0.
func (w *rxWatch) session() uint8 { return uint8(w.tx.Load()) }

// wire returns the wire id of session n, or false when base + n passes
// 255.
func (w *rxWatch) wire(n uint8) (uint8, bool) {
	v := int(w.session()) + int(n)
	return uint8(v), v <= 0xFF
}

// sessionOf returns the session number of a packet received on wire id
// sid: sid − base, or sid when it is below the base.
func (w *rxWatch) sessionOf(sid uint8) uint8 {
	if base := w.session(); sid >= base {
		return sid - base
	}
	return sid
}

// seen notes a downlink packet on wire id sid and returns its session
// number: with FollowSession a wire id below the base, or FollowSpan or
// more above it, becomes the base. Called under the framing's receive
// lock.
func (w *rxWatch) seen(sid uint8) uint8 {
	if !w.follow {
		return w.sessionOf(sid)
	}
	if old := uint8(w.tx.Load()); sid < old || int(sid)-int(old) >= FollowSpan {
		w.tx.Store(uint32(sid))
		w.follows.Add(1)
		w.log.Info("the modem sends the data session as mux id/session "+strconv.Itoa(int(sid))+"; the uplink follows it",
			"from", old, "to", sid)
	}
	return w.sessionOf(sid)
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
