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

// Parser splits downlink QMAP aggregates (with Uplink, uplink ones) into
// packets. The zero value expects no checksum offload and IPv4/IPv6
// packets.
//
// Accepted input follows rmnet's deaggregation: frames follow each other
// from offset 0; a frame occupies HeaderLen + payload length bytes, plus
// TrailerLen with CsumV4 downlink, plus ULHeaderLen for a CsumV4 uplink
// data frame, plus V5HeaderLen for a CsumV5 data frame; a frame
// that runs past the end, or a zero payload length, ends the walk; CsumV5
// data frames must have the next-header bit and a checksum offload header;
// the packet's first nibble must be 4 or 6. In addition the pad length
// must not exceed the payload length. Command frames are counted (and
// handed to OnCommand if set), never delivered. Frame alignment is not
// checked.
type Parser struct {
	// Csum is the checksum offload framing negotiated with the device.
	Csum CsumMode
	// Uplink parses frames as a host sends them (the modem's side): with
	// CsumV4 a 4-byte checksum header after the MAP header of data frames
	// and no trailer.
	Uplink bool
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
	w := qmapWalk{p: p}
	p.Stats.Aggregates++
	if len(b) < HeaderLen {
		w.fail(ErrShort)
		return 0, w.first
	}
	trailer := 0
	if p.Csum == CsumV4 && !p.Uplink {
		trailer = TrailerLen
	}
	for off := 0; off < len(b); {
		// The MAP header: a frame cut short or of zero length ends the
		// walk, since nothing after it can be trusted.
		rest := b[off:]
		if len(rest) < HeaderLen {
			w.fail(ErrTruncated)
			break
		}
		cmd := rest[0]&FlagCommand != 0
		pad := int(rest[0] & PadMask)
		mux := rest[1]
		plen := int(be.Uint16(rest[2:]))
		if plen == 0 {
			w.fail(ErrZeroLength)
			break
		}
		hdr := HeaderLen
		switch {
		case p.Csum == CsumV5 && !cmd:
			hdr += V5HeaderLen
		case p.Csum == CsumV4 && p.Uplink && !cmd:
			hdr += ULHeaderLen
		}
		flen := hdr + plen + trailer
		if flen > len(rest) {
			w.fail(ErrTruncated)
			break
		}
		// A whole frame: counted, and its payload, padding removed, goes
		// to OnCommand or dataFrame.
		frame := rest[:flen]
		off += flen
		p.Stats.Frames++
		if pad > plen {
			w.fail(ErrBadPad)
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
		w.dataFrame(frame, hdr, payload, mux, fn)
	}
	return w.delivered, w.first
}

// qmapWalk is the state of one Parse call.
type qmapWalk struct {
	p         *Parser
	delivered int
	first     error // the first problem found
}

// fail counts a problem and keeps it if it is the first.
func (w *qmapWalk) fail(err error) {
	*w.p.Stats.counter(err)++
	if w.first == nil {
		w.first = err
	}
}

// dataFrame checks a data frame (whose payload, padding removed, starts
// hdr bytes in): its MAPv5 checksum header (CsumV5) and its payload (not
// empty, IPv4 or IPv6 unless AnyProtocol); it reads its CsumV4 trailer
// (or uplink header) and delivers the packet.
func (w *qmapWalk) dataFrame(frame []byte, hdr int, payload []byte, mux uint8, fn func(Packet)) {
	var cs Csum
	if w.p.Csum == CsumV5 {
		if frame[0]&FlagNextHeader == 0 || frame[HeaderLen]>>1 != V5TypeCsumOffload {
			w.fail(ErrBadNextHeader)
			return
		}
		cs.Valid = frame[HeaderLen+1]&V5CsumValid != 0
	}
	n := len(payload)
	if n == 0 {
		w.fail(ErrZeroLength)
		return
	}
	if !w.p.AnyProtocol {
		if v := payload[0] >> 4; v != 4 && v != 6 {
			w.fail(ErrBadIPVersion)
			return
		}
	}
	switch {
	case w.p.Csum == CsumV4 && w.p.Uplink:
		h := frame[HeaderLen:]
		info := be.Uint16(h[2:])
		cs.Valid = info&ULCsumEnabled != 0
		cs.UDP = info&ULCsumUDP != 0
		cs.Offset = info & ULCsumOffsetMask
		cs.Start = be.Uint16(h)
	case w.p.Csum == CsumV4:
		// After the payload length's bytes, padding included, as rmnet
		// reads it: the frame's last TrailerLen bytes.
		t := frame[len(frame)-TrailerLen:]
		cs.Valid = t[1]&TrailerCsumValid != 0
		cs.Start = be.Uint16(t[2:])
		cs.Length = be.Uint16(t[4:])
		cs.Value = be.Uint16(t[6:])
	}
	w.delivered++
	w.p.Stats.Packets++
	w.p.Stats.Bytes += uint64(n)
	fn(Packet{Data: payload, Mux: mux, Csum: cs})
}
