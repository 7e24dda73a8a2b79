package mhinet

import "errors"

// framing is one data format at work on a device: how a received transfer
// becomes packets, and how packets become uplink elements, copied one per
// element, framed in place in a zero-copy slot's headroom or (with an
// aggregator, see below) packed into aggregates. New builds one per device
// from the format's formatSpec; receive, transmit, aggregation and
// zero-copy all go through it, so nothing else in the package knows the
// formats.
//
// Adding a format touches one file: framing_NAME.go declares the Format
// constant, a type implementing framing (and aggregator if the format
// aggregates uplink packets), and registers the format in an init function.
//
// The receive method runs under Device.chainMu, the transmit methods under
// txPath.mu: an implementation keeps the two sides' state apart.
// parserStats may run at any time. No method allocates.
type framing interface {
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
	// encode frames one packet p into dst, which holds at least len(p)
	// bytes, and returns the element length.
	encode(dst, p []byte) (int, error)

	// zcHeadroom is the room the format's header needs in front of a
	// zero-copy packet, or why the format cannot transmit in place.
	zcHeadroom() (int, error)
	// zcFrame writes the header into frame (headroom, then the n-byte
	// packet, then at least 8 spare bytes) and returns the element
	// length.
	zcFrame(frame []byte, n int) (int, error)
}

// aggregator is implemented by framings that pack several uplink packets
// into one element (MBIM NTB, QMAP), for Config.TXAggregate. It builds one
// aggregate at a time, in place in a transmit buffer.
type aggregator interface {
	// aggFrameLen is the length of an aggregate that holds one n-byte
	// packet.
	aggFrameLen(n int) (int, error)
	// aggReset opens an empty aggregate in buf.
	aggReset(buf []byte) error
	// aggAdd copies one packet in, or leaves the aggregate unchanged and
	// reports errAggFull (p does not fit the rest of the buffer),
	// errAggLimit (the aggregate holds its most packets), errAggTooLarge
	// (p would not fit an empty aggregate either) or the writer's error.
	aggAdd(p []byte) error
	// aggFinish closes the aggregate and returns its length.
	aggFinish() int
}

// Outcomes of aggregator.aggAdd other than success.
var (
	errAggFull     = errors.New("mhinet: packet does not fit the rest of the aggregate")
	errAggLimit    = errors.New("mhinet: aggregate holds its most packets")
	errAggTooLarge = errors.New("mhinet: packet does not fit an empty aggregate")
)

// aggOutcome turns a writer's answer to adding a packet into aggAdd's:
// full, limit and tooLarge are the writer's own errors for those
// outcomes; any other error is returned as it is.
func aggOutcome(err, full, limit, tooLarge error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, full):
		return errAggFull
	case errors.Is(err, limit):
		return errAggLimit
	case errors.Is(err, tooLarge):
		return errAggTooLarge
	}
	return err
}

// newFraming builds the framing of a device with cfg (defaults applied,
// cfg.Format registered).
func newFraming(cfg *Config, c *counters) framing {
	return cfg.Format.spec().newFraming(cfg, c)
}
