package mhinet

import (
	"fmt"
	"sync"

	"github.com/gomhi/gomhi/mhi/proto/framing"
	"github.com/gomhi/gomhi/mhi/proto/qmap"
)

// framing.QMAP: QMAP (rmnet MAP) aggregates, as mhi_net with rmnet.
func init() {
	registerFormat(framing.QMAP, newQMAPFraming)
}

var (
	_ framer     = (*qmapFraming)(nil)
	_ aggregator = (*qmapFraming)(nil)
)

// qmapFraming parses received QMAP aggregates (MAPv1, with the MAPv4
// checksum trailer or the MAPv5 checksum header, per Config.QMAPCsum) and
// transmits QMAP frames on Config.Session: one per element, or with
// aggregation up to Config.TXAggMaxPackets. The uplink carries the
// negotiated checksum framing as rmnet's egress does — with MAPv4 the
// 4-byte UL checksum header, with MAPv5 the MAPv5 header — and asks for
// no offload: the host computed the checksums.
type qmapFraming struct {
	// Receive side (Device.chainMu), and mu for parserStats; mu is taken
	// around the parser only.
	//
	// lockorder: Device.chainMu → qmapFraming.mu
	mu     sync.Mutex
	parser qmap.Parser
	watch  *rxWatch

	// Transmit side (txPath.mu).
	cfg qmap.Config
	w   qmap.Writer
}

func newQMAPFraming(cfg *Config, _ *counters) framer {
	f := &qmapFraming{cfg: qmap.Config{Mux: cfg.Session, MaxPackets: cfg.TXAggMaxPackets,
		Csum: cfg.QMAPCsum, Uplink: true}, watch: newRxWatch(cfg)}
	f.parser.Csum = cfg.QMAPCsum
	return f
}

// parse cuts the packets out of one QMAP aggregate.
func (f *qmapFraming) parse(data []byte, b *rxBuffer, batch []Packet) []Packet {
	f.mu.Lock()
	_, _ = f.parser.Parse(data, func(p qmap.Packet) {
		n := f.watch.seen(p.Mux)
		batch = append(batch, Packet{Data: p.Data, Mux: p.Mux, Session: n, buf: b})
	})
	f.mu.Unlock()
	return batch
}

func (f *qmapFraming) parserStats() (s Stats) {
	f.mu.Lock()
	s.QMAP = f.parser.Stats
	f.mu.Unlock()
	s.TxSession, s.TxSessionFollows = uint64(f.watch.session()), f.watch.follows.Load()
	return s
}

func (f *qmapFraming) frameLen(n int) (int, error) { return qmap.FrameLen(f.cfg, n) }

func (f *qmapFraming) encode(dst, p []byte, wire uint8) (int, error) {
	f.cfg.Mux = wire
	c := f.cfg
	c.MaxPackets = 1
	err := f.w.Reset(dst, c)
	if err == nil {
		err = f.w.Add(p)
	}
	if err != nil {
		return 0, fmt.Errorf("mhinet: transmit: %w", err)
	}
	return f.w.Finish(), nil
}

func (f *qmapFraming) zcHeadroom() (int, error) {
	switch f.cfg.Csum {
	case qmap.CsumV4:
		return qmap.HeaderLen + qmap.ULHeaderLen, nil
	case qmap.CsumV5:
		return qmap.HeaderLen + qmap.V5HeaderLen, nil
	}
	return qmap.HeaderLen, nil
}

// zcFrame writes the MAP header (and the MAPv4 UL checksum header or the
// MAPv5 checksum header, offload not requested) in front of the packet
// and pads it to four bytes.
func (f *qmapFraming) zcFrame(frame []byte, n int) (int, error) {
	headroom := qmap.HeaderLen
	pad := (4 - n%4) % 4
	h := qmap.Header{Pad: uint8(pad), Mux: f.watch.session(), Len: uint16(n + pad)}
	switch f.cfg.Csum {
	case qmap.CsumV4:
		headroom += qmap.ULHeaderLen
		qmap.PutULHeader(frame[qmap.HeaderLen:headroom], qmap.Csum{})
	case qmap.CsumV5:
		headroom += qmap.V5HeaderLen
		h.NextHeader = true
		c := frame[qmap.HeaderLen:headroom]
		c[0], c[1], c[2], c[3] = qmap.V5TypeCsumOffload<<1, 0, 0, 0
	}
	if err := h.Put(frame); err != nil {
		return 0, fmt.Errorf("mhinet: transmit: %w", err)
	}
	end := headroom + n
	clear(frame[end : end+pad])
	return end + pad, nil
}

func (f *qmapFraming) aggFrameLen(n int) (int, error) { return qmap.FrameLen(f.cfg, n) }

func (f *qmapFraming) base() uint8 { return f.watch.session() }

func (f *qmapFraming) wire(n uint8) (uint8, bool) { return f.watch.wire(n) }

func (f *qmapFraming) aggReset(buf []byte, wire uint8) error {
	f.cfg.Mux = wire
	return f.w.Reset(buf, f.cfg)
}

// aggAdd adds p as a frame on mux id wire, with the uplink checksum
// framing Add would give it (the MAPv4 UL header all zero; otherwise
// offload not requested).
func (f *qmapFraming) aggAdd(p []byte, wire uint8) error {
	if f.cfg.Csum == qmap.CsumV4 {
		return f.w.AddPacket(p, wire, qmap.Csum{})
	}
	return f.w.AddPacket(p, wire, qmap.Csum{Length: uint16(len(p))})
}

func (f *qmapFraming) aggFinish() int { return f.w.Finish() }
