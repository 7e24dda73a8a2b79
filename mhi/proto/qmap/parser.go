package qmap

// Packet is one IP packet delivered by a Parser.
type Packet struct {
	// Data is the IP packet without MAP header, MAPv5 header, trailer or
	// padding: a view into the parsed buffer, valid only while the caller
	// keeps that buffer unchanged, with capacity clipped to its length.
	Data []byte
	// Mux is the mux id from the MAP header.
	Mux uint8
	// Csum is the checksum offload information (zero with CsumNone).
	Csum Csum
}

// Parser splits downlink QMAP aggregates into packets. The zero value
// expects no checksum offload and IPv4/IPv6 packets.
//
// Accepted input follows rmnet's deaggregation: frames follow each other
// from offset 0; a frame occupies HeaderLen + payload length bytes, plus
// TrailerLen with CsumV4, plus V5HeaderLen for a CsumV5 data frame; a frame
// that runs past the end, or a zero payload length, ends the walk; CsumV5
// data frames must have the next-header bit and a checksum offload header;
// the packet's first nibble must be 4 or 6. In addition the pad length
// must not exceed the payload length. Command frames are counted (and
// handed to OnCommand if set), never delivered. Frame alignment is not
// checked.
type Parser struct {
	// Csum is the checksum offload framing negotiated with the device.
	Csum CsumMode
	// AnyProtocol delivers packets whatever their first nibble instead of
	// counting those that are not IPv4 or IPv6 as ErrBadIPVersion.
	AnyProtocol bool
	// OnCommand, if not nil, receives the mux id and the payload (padding
	// removed; decode it with ParseCommand) of each command frame. The
	// payload is a view into the parsed buffer.
	OnCommand func(mux uint8, payload []byte)
	// Stats accumulates over all Parse calls.
	Stats Stats
}

// Parse walks one aggregate in b and calls fn for every valid data packet,
// in order. Parse never panics and does not allocate. Malformed frames are
// dropped and counted in p.Stats, the frames around them still delivered
// where their length can be trusted; a truncated frame or a zero length
// ends the walk. Parse returns the number of packets delivered and the first
// problem found (one of the parse error sentinels, unwrapped), or nil.
func (p *Parser) Parse(b []byte, fn func(Packet)) (int, error) {
	var first error
	fail := func(err error) {
		*p.Stats.counter(err)++
		if first == nil {
			first = err
		}
	}
	p.Stats.Aggregates++
	if len(b) < HeaderLen {
		fail(ErrShort)
		return 0, first
	}
	trailer := 0
	if p.Csum == CsumV4 {
		trailer = TrailerLen
	}
	delivered := 0
	for off := 0; off < len(b); {
		rest := b[off:]
		if len(rest) < HeaderLen {
			fail(ErrTruncated)
			break
		}
		cmd := rest[0]&FlagCommand != 0
		pad := int(rest[0] & PadMask)
		mux := rest[1]
		plen := int(be.Uint16(rest[2:]))
		if plen == 0 {
			fail(ErrZeroLength)
			break
		}
		hdr := HeaderLen
		if p.Csum == CsumV5 && !cmd {
			hdr += V5HeaderLen
		}
		flen := hdr + plen + trailer
		if flen > len(rest) {
			fail(ErrTruncated)
			break
		}
		frame := rest[:flen]
		off += flen
		p.Stats.Frames++
		if pad > plen {
			fail(ErrBadPad)
			continue
		}
		n := plen - pad
		payload := frame[hdr : hdr+n : hdr+n]
		if cmd {
			p.Stats.CommandFrames++
			if p.OnCommand != nil {
				p.OnCommand(mux, payload)
			}
			continue
		}
		var cs Csum
		if p.Csum == CsumV5 {
			if frame[0]&FlagNextHeader == 0 || frame[HeaderLen]>>1 != V5TypeCsumOffload {
				fail(ErrBadNextHeader)
				continue
			}
			cs.Valid = frame[HeaderLen+1]&V5CsumValid != 0
		}
		if n == 0 {
			fail(ErrZeroLength)
			continue
		}
		if !p.AnyProtocol {
			if v := payload[0] >> 4; v != 4 && v != 6 {
				fail(ErrBadIPVersion)
				continue
			}
		}
		if trailer != 0 {
			t := frame[hdr+n:]
			cs.Valid = t[1]&TrailerCsumValid != 0
			cs.Start = be.Uint16(t[2:])
			cs.Length = be.Uint16(t[4:])
			cs.Value = be.Uint16(t[6:])
		}
		delivered++
		p.Stats.Packets++
		p.Stats.Bytes += uint64(n)
		fn(Packet{Data: payload, Mux: mux, Csum: cs})
	}
	return delivered, first
}
