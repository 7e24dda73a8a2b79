package mhinet

import "github.com/gomhi/gomhi/mhi/proto/framing"

// framing.RawIP: one IP packet per transfer, as Linux's mhi_net without
// rmnet; the default of a zero Config.
func init() {
	registerFormat(framing.RawIP, func(_ *Config, c *counters) framer { return &rawFraming{c: c} })
}

var _ framer = (*rawFraming)(nil)

// rawFraming carries one bare IP packet per element, both ways. It does
// not aggregate.
type rawFraming struct {
	c *counters
}

// parse takes the transfer as one packet if it starts like an IPv4 or
// IPv6 header.
func (f *rawFraming) parse(data []byte, b *rxBuffer, batch []Packet) []Packet {
	switch {
	case len(data) == 0:
		f.c.rxEmpty.Add(1)
	case data[0]>>4 != 4 && data[0]>>4 != 6:
		f.c.rxBadPacket.Add(1)
	default:
		batch = append(batch, Packet{Data: data[:len(data):len(data)], buf: b})
	}
	return batch
}

func (f *rawFraming) parserStats() Stats { return Stats{} }

func (f *rawFraming) frameLen(n int) (int, error) { return n, nil }

func (f *rawFraming) encode(dst, p []byte, _ uint8) (int, error) { return copy(dst, p), nil }

// base: raw IP carries no wire id.
func (f *rawFraming) base() uint8 { return 0 }

// wire: raw IP carries session 0 alone (the element has no place for a
// wire id).
func (f *rawFraming) wire(n uint8) (uint8, bool) { return 0, n == 0 }

func (f *rawFraming) zcHeadroom() (int, error) { return 0, nil }

func (f *rawFraming) zcFrame(_ []byte, n int) (int, error) { return n, nil }
