package ipdata

import (
	"errors"
	"sync/atomic"

	"github.com/gomhi/gomhi/mhi/proto/framing"
	"github.com/gomhi/gomhi/mhi/proto/ntb"
	"github.com/gomhi/gomhi/mhi/proto/qmap"
)

// errAggNoReserve: the writer cannot reserve room for a packet to be
// written in place; copy it in with Add. It is internal, as are an
// aggWriter's framing.Writer outcomes (full, limit, too large, empty),
// which an Function turns into flushes or named drops.
var errAggNoReserve = errors.New("ipdata: aggregate writer cannot reserve in place")

// aggWriter builds one downlink aggregate in place in a reserved queue
// buffer: a framing.Writer (Add, Count, Finish) that it opens itself.
// Implementations must not allocate in the steady state.
type aggWriter interface {
	framing.Writer
	// reset opens an empty aggregate in buf.
	reset(buf []byte) error
	// addTo is Add for a packet of wire id wire (an NTB's NDP session, a
	// QMAP mux id; raw IP has none and ignores it).
	addTo(pkt []byte, wire uint8) error
	// reserve adds a packet of n bytes for wire id wire without writing
	// it and returns its bytes to be written in place, or fails as Add
	// does, or with errAggNoReserve when the writer cannot do that.
	reserve(n int, wire uint8) ([]byte, error)
}

// ntbAgg aggregates into an MBIM NTB16 or NTB32.
type ntbAgg struct {
	ntb.Writer
	cfg ntb.Config
	// glitchEvery > 0 makes every glitchEvery-th NTB skip ahead in its
	// wSequence (Config.NTBSequenceGlitch), counted in glitches.
	glitchEvery int
	opened      int
	glitches    *atomic.Uint64
}

// ntbGlitchSkip is how far a glitching NTB's wSequence jumps ahead.
const ntbGlitchSkip = 5

func (a *ntbAgg) reset(buf []byte) error {
	if err := a.Reset(buf, a.cfg); err != nil {
		return err
	}
	if a.glitchEvery > 0 {
		a.opened++
		if a.opened%a.glitchEvery == 0 {
			a.SetSequence(a.Sequence() + ntbGlitchSkip)
			a.glitches.Add(1)
		}
	}
	return nil
}

func (a *ntbAgg) addTo(pkt []byte, wire uint8) error { return a.AddSession(pkt, wire) }

func (a *ntbAgg) reserve(n int, wire uint8) ([]byte, error) { return a.AppendSession(n, wire) }

// qmapAgg aggregates QMAP (rmnet MAP) frames back to back.
type qmapAgg struct {
	qmap.Writer
	cfg qmap.Config
}

func (a *qmapAgg) reset(buf []byte) error { return a.Reset(buf, a.cfg) }

// addTo adds a data frame on mux id wire with the downlink checksum
// information Add gives.
func (a *qmapAgg) addTo(pkt []byte, wire uint8) error {
	return a.AddPacket(pkt, wire, qmap.Csum{Valid: a.cfg.CsumValid, Length: uint16(len(pkt))})
}

func (a *qmapAgg) reserve(int, uint8) ([]byte, error) { return nil, errAggNoReserve }

// rawAgg puts exactly one IP packet in a transfer, as mhi_net's raw-IP
// mode expects.
type rawAgg struct {
	buf []byte
	n   int
	one bool
}

func (a *rawAgg) reset(buf []byte) error {
	a.buf, a.n, a.one = buf, 0, false
	return nil
}

func (a *rawAgg) reserve(int, uint8) ([]byte, error) { return nil, errAggNoReserve }

// addTo is Add: raw IP carries one session and no wire id.
func (a *rawAgg) addTo(pkt []byte, _ uint8) error { return a.Add(pkt) }

// Add copies pkt in as the transfer's one packet.
func (a *rawAgg) Add(pkt []byte) error {
	switch {
	case len(pkt) == 0:
		return framing.ErrEmpty
	case a.one:
		return framing.ErrLimit
	case len(pkt) > len(a.buf):
		return framing.ErrTooLarge
	}
	a.n = copy(a.buf, pkt)
	a.one = true
	return nil
}

// Finish returns the transfer's length.
func (a *rawAgg) Finish() int { return a.n }

// Count returns 1 once the packet is in, else 0.
func (a *rawAgg) Count() int {
	if a.one {
		return 1
	}
	return 0
}
