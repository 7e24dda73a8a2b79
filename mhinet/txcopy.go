package mhinet

import (
	"errors"

	"github.com/gomhi/gomhi/mhi"
)

// Transmit by copy: each packet is framed into a transmit buffer of its
// own, or with TXAggregate packed into the open aggregate (txagg.go).
// Transmit sends every packet this way, TransmitZC those it does not lend.

// errTooLong: a packet does not fit a transmit buffer (the caller counts
// it in TxTooLong).
var errTooLong = errors.New("mhinet: packet longer than the transmit buffer")

// copyPacket sends p, a packet within the MTU, by copy: into the open
// aggregate with TXAggregate, else into a free transmit buffer, which
// becomes an element of b. A packet that does not fit a buffer is counted
// in TxTooLong (txDropped); without a free buffer or element b.err is
// ErrBusy.
func (t *txPath) copyPacket(b *txBatch, p []byte) txOutcome {
	if t.agg.on() {
		return t.aggAdd(b, p)
	}
	if len(b.xs) >= b.room || len(t.free) == 0 {
		b.err = ErrBusy
		return txAgain
	}
	bi := t.free[len(t.free)-1]
	n, err := t.fillOne(&t.bufs[bi], p, b.wire)
	if errors.Is(err, errTooLong) {
		t.d.c.txTooLong.Add(1)
		return txDropped
	}
	if err != nil {
		b.err = err
		return txAgain
	}
	t.free = t.free[:len(t.free)-1]
	b.xs = append(b.xs, mhi.Transfer{IOVA: t.bufs[bi].dma.IOVA, Len: n, Flags: mhi.FlagEOT, Cookie: uint64(bi)})
	return txSent
}

// fillOne encodes one packet (valid, within the MTU) on wire id wire into
// b. It fails with errTooLong, and writes nothing, if p does not fit the
// buffer.
func (t *txPath) fillOne(b *txBuffer, p []byte, wire uint8) (int, error) {
	if len(p) > len(b.dma.Bytes) {
		return 0, errTooLong
	}
	n, err := t.f.encode(b.dma.Bytes, p, wire)
	if err != nil {
		return 0, err
	}
	b.pkts, b.bytes = 1, len(p)
	return n, nil
}
