package ep

import (
	"errors"

	"github.com/gomhi/gomhi/mhi/proto/ntb"
	"github.com/gomhi/gomhi/mhi/proto/qmap"
)

// Outcomes of aggWriter.add other than success. They are internal: an
// IPData turns them into flushes or named drops.
var (
	errAggFull     = errors.New("ep: aggregate full")
	errAggLimit    = errors.New("ep: aggregate datagram limit")
	errAggTooLarge = errors.New("ep: packet does not fit an empty aggregate")
	errAggEmpty    = errors.New("ep: empty packet")
	// errAggNoReserve: the writer cannot reserve room for a packet to be
	// written in place; copy it in with add.
	errAggNoReserve = errors.New("ep: aggregate writer cannot reserve in place")
)

// aggWriter builds one downlink aggregate in place in a reserved queue
// buffer. Implementations must not allocate in the steady state.
type aggWriter interface {
	// reset opens an empty aggregate in buf.
	reset(buf []byte) error
	// add copies one IP packet in, or reports one of the errAgg… outcomes
	// and leaves the aggregate unchanged.
	add(pkt []byte) error
	// reserve adds a packet of n bytes without writing it and returns its
	// bytes to be written in place, or fails as add does, or with
	// errAggNoReserve when the writer cannot do that.
	reserve(n int) ([]byte, error)
	// finish closes the aggregate and returns its length.
	finish() int
	// count returns the number of packets in the open aggregate.
	count() int
}

// ntbAgg aggregates into an MBIM NTB16 or NTB32.
type ntbAgg struct {
	w   ntb.Writer
	cfg ntb.Config
}

func (a *ntbAgg) reset(buf []byte) error { return a.w.Reset(buf, a.cfg) }
func (a *ntbAgg) finish() int            { return a.w.Finish() }
func (a *ntbAgg) count() int             { return a.w.Count() }

func (a *ntbAgg) add(pkt []byte) error { return ntbErr(a.w.Add(pkt)) }

func (a *ntbAgg) reserve(n int) ([]byte, error) {
	b, err := a.w.Append(n)
	return b, ntbErr(err)
}

// ntbErr maps the NTB writer's errors to the errAgg… outcomes.
func ntbErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ntb.ErrFull):
		return errAggFull
	case errors.Is(err, ntb.ErrLimit):
		return errAggLimit
	case errors.Is(err, ntb.ErrEmpty):
		return errAggEmpty
	}
	return errAggTooLarge
}

// qmapAgg aggregates QMAP (rmnet MAP) frames back to back.
type qmapAgg struct {
	w   qmap.Writer
	cfg qmap.Config
}

func (a *qmapAgg) reset(buf []byte) error { return a.w.Reset(buf, a.cfg) }
func (a *qmapAgg) finish() int            { return a.w.Finish() }
func (a *qmapAgg) count() int             { return a.w.Count() }

func (a *qmapAgg) reserve(int) ([]byte, error) { return nil, errAggNoReserve }

func (a *qmapAgg) add(pkt []byte) error {
	err := a.w.Add(pkt)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, qmap.ErrFull):
		return errAggFull
	case errors.Is(err, qmap.ErrLimit):
		return errAggLimit
	case errors.Is(err, qmap.ErrEmpty):
		return errAggEmpty
	}
	return errAggTooLarge
}

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

func (a *rawAgg) reserve(int) ([]byte, error) { return nil, errAggNoReserve }

func (a *rawAgg) add(pkt []byte) error {
	switch {
	case len(pkt) == 0:
		return errAggEmpty
	case a.one:
		return errAggLimit
	case len(pkt) > len(a.buf):
		return errAggTooLarge
	}
	a.n = copy(a.buf, pkt)
	a.one = true
	return nil
}

func (a *rawAgg) finish() int { return a.n }

func (a *rawAgg) count() int {
	if a.one {
		return 1
	}
	return 0
}
