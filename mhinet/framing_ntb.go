package mhinet

import (
	"fmt"
	"sync"

	"github.com/gomhi/gomhi/mhi/proto/framing"
	"github.com/gomhi/gomhi/mhi/proto/ntb"
)

// framing.NTB16 and framing.NTB32: MBIM, as Linux's mhi_wwan_mbim; both
// take NTB16 and NTB32 aggregates and transmit NTB16.
func init() {
	registerFormat(framing.NTB16, newNTBFraming)
	registerFormat(framing.NTB32, newNTBFraming)
}

var (
	_ framer     = (*ntbFraming)(nil)
	_ aggregator = (*ntbFraming)(nil)
)

// ntbFraming parses received NTB16 and NTB32 transfers and transmits
// NTB16: one datagram per NTB, or with aggregation up to
// Config.TXAggMaxPackets. Every transmitted NTB, whichever way it was
// built, takes the next sequence number.
type ntbFraming struct {
	// Receive side (Device.chainMu), and mu for parserStats; mu is taken
	// around the parser only.
	//
	// lockorder: Device.chainMu → ntbFraming.mu
	mu     sync.Mutex
	parser ntb.Parser
	watch  *rxWatch

	// Transmit side (txPath.mu); the session comes from watch.
	agg ntb.Config
	w   ntb.Writer
	seq uint16
}

func newNTBFraming(cfg *Config, _ *counters) framer {
	f := &ntbFraming{watch: newRxWatch(cfg), agg: ntb.Config{Session: cfg.Session, MaxDatagrams: cfg.TXAggMaxPackets}}
	f.parser.AnyProtocol = false
	return f
}

// parse cuts the datagrams out of one NTB.
func (f *ntbFraming) parse(data []byte, b *rxBuffer, batch []Packet) []Packet {
	f.mu.Lock()
	gaps := f.parser.Stats.SequenceGaps
	_, _ = f.parser.Parse(data, func(dg []byte, sid uint8) {
		n := f.watch.seen(sid)
		batch = append(batch, Packet{Data: dg, Mux: sid, Session: n, buf: b})
	})
	if n := f.parser.Stats.SequenceGaps - gaps; n > 0 {
		f.watch.glitches(n, f.parser.Stats.SequenceGaps)
	}
	f.mu.Unlock()
	return batch
}

func (f *ntbFraming) parserStats() (s Stats) {
	f.mu.Lock()
	s.NTB = f.parser.Stats
	f.mu.Unlock()
	s.RxNTBSequenceGaps = s.NTB.SequenceGaps
	s.TxSession, s.TxSessionFollows = uint64(f.watch.session()), f.watch.follows.Load()
	return s
}

func (f *ntbFraming) frameLen(n int) (int, error) { return ntb.TXHeaderLen + n, nil }

func (f *ntbFraming) encode(dst, p []byte, wire uint8) (int, error) {
	n, err := ntb.EncodeTX(dst, p, wire, f.seq)
	if err != nil {
		return 0, fmt.Errorf("mhinet: transmit: %w", err)
	}
	f.seq++
	return n, nil
}

func (f *ntbFraming) zcHeadroom() (int, error) { return ntb.TXHeaderLen, nil }

func (f *ntbFraming) zcFrame(frame []byte, n int) (int, error) {
	if err := ntb.PutTXHeader(frame, n, f.watch.session(), f.seq); err != nil {
		return 0, fmt.Errorf("mhinet: transmit: %w", err)
	}
	f.seq++
	return ntb.TXHeaderLen + n, nil
}

func (f *ntbFraming) aggFrameLen(n int) (int, error) { return ntb.Size(f.agg, []int{n}) }

func (f *ntbFraming) base() uint8 { return f.watch.session() }

func (f *ntbFraming) wire(n uint8) (uint8, bool) { return f.watch.wire(n) }

func (f *ntbFraming) aggReset(buf []byte, wire uint8) error {
	f.agg.Session = wire
	if err := f.w.Reset(buf, f.agg); err != nil {
		return err
	}
	f.w.SetSequence(f.seq)
	return nil
}

// aggAdd adds p to the NDP of wire id wire (ntb.Writer.AddSession: one
// NDP per session, up to ntb.MaxWriterNDPs; the next session is
// framing.ErrLimit, which closes the aggregate).
func (f *ntbFraming) aggAdd(p []byte, wire uint8) error {
	return f.w.AddSession(p, wire)
}

func (f *ntbFraming) aggFinish() int {
	n := f.w.Finish()
	f.seq++
	return n
}
