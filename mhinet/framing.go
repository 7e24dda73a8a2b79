package mhinet

import (
	"fmt"

	"github.com/gomhi/gomhi/mhi/proto/framing"
)

// framer is one data format (a framing.Format) at work on a device: how a
// received transfer becomes packets, and how packets become uplink
// elements, copied one per element, framed in place in a zero-copy slot's
// headroom or (with an aggregator, see below) packed into aggregates. New
// builds one per device with the function its format registered (see
// registerFormat); receive, transmit, aggregation and zero-copy all go
// through it, so nothing else in the package knows the formats.
//
// Adding a format touches one file besides the value in
// mhi/proto/framing: framing_NAME.go declares a type implementing framer
// (and aggregator if the format aggregates uplink packets), and registers
// the format in an init function.
//
// The receive method runs under Device.chainMu, the transmit methods under
// txPath.mu: an implementation keeps the two sides' state apart.
// parserStats may run at any time. No method allocates.
type framer interface {
	// parse de-aggregates one complete received transfer, data, held by
	// b: it appends the packets found (views into data, holding b) to
	// batch and returns it. What the device wrote is untrusted: a bad
	// transfer is counted, never trusted.
	parse(data []byte, b *rxBuffer, batch []Packet) []Packet
	// parserStats returns the parser's error counters in a Stats that
	// has nothing else set (returned by value: Device.Stats does not
	// allocate).
	parserStats() Stats

	// frameLen is the length of the element that carries one n-byte
	// packet alone (encode's result).
	frameLen(n int) (int, error)
	// encode frames one packet p on wire id wire into dst, which holds
	// at least len(p) bytes, and returns the element length.
	encode(dst, p []byte, wire uint8) (int, error)

	// zcHeadroom is the room the format's header needs in front of a
	// zero-copy packet, or why the format cannot transmit in place.
	zcHeadroom() (int, error)
	// zcFrame writes the header into frame (headroom, then the n-byte
	// packet, then at least 8 spare bytes) for session 0 (the base) and
	// returns the element length.
	zcFrame(frame []byte, n int) (int, error)
	// base is the session base: the wire id of session 0 (0 for raw IP).
	base() uint8
	// wire returns the wire id of session n, or false when it passes
	// 255 (raw IP: 0, and false for n > 0).
	wire(n uint8) (uint8, bool)
}

// aggregator is implemented by framers that pack several uplink packets
// into one element (MBIM NTB, QMAP), for Config.TXAggregate. It builds one
// aggregate at a time, in place in a transmit buffer.
type aggregator interface {
	// aggFrameLen is the length of an aggregate that holds one n-byte
	// packet.
	aggFrameLen(n int) (int, error)
	// aggReset opens an empty aggregate in buf, whose first packet goes
	// on wire id wire. One aggregate holds packets of several wire ids
	// (an NDP per session in an NTB, a mux id per QMAP frame).
	aggReset(buf []byte, wire uint8) error
	// aggAdd is the codec writer's framing.Writer.Add: it copies one
	// packet on wire id wire in, or leaves the aggregate unchanged and
	// fails with one of the shared outcomes (framing.ErrFull,
	// framing.ErrLimit, framing.ErrTooLarge, …).
	aggAdd(p []byte, wire uint8) error
	// aggFinish closes the aggregate and returns its length.
	aggFinish() int
}

// newFramers builds, for each format a device speaks, the framer of a
// device with configuration cfg (defaults applied) counting into c. Each
// framing file registers its formats in an init function.
var newFramers = map[framing.Format]func(cfg *Config, c *counters) framer{}

// registerFormat registers how a device framing packets in f builds its
// framer. Registering a format twice is a programming error.
func registerFormat(f framing.Format, newFramer func(cfg *Config, c *counters) framer) {
	if _, dup := newFramers[f]; dup {
		panic(fmt.Sprintf("mhinet: format %v registered twice", f))
	}
	newFramers[f] = newFramer
}

// newFramer builds the framer of a device with cfg (defaults applied,
// cfg.Format registered).
func newFramer(cfg *Config, c *counters) framer {
	return newFramers[cfg.Format](cfg, c)
}
