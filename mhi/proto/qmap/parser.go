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
	w := qmapWalk{p: p}
	if p.Csum == CsumV4 {
		w.trailer = TrailerLen
	}
	p.Stats.Aggregates++
	if len(b) < HeaderLen {
		w.fail(ErrShort)
		return 0, w.first
	}
	for off := 0; off < len(b); {
		f, ok := w.nextFrame(b[off:])
		if !ok {
			break
		}
		off += len(f.frame)
		w.handleFrame(f, fn)
	}
	return w.delivered, w.first
}

// qmapWalk is the state of one Parse call.
type qmapWalk struct {
	p         *Parser
	trailer   int // bytes of CsumV4 trailer after a data frame's payload
	delivered int
	first     error // the first problem found
}

// qmapFrame is one frame whose length fits in the aggregate.
type qmapFrame struct {
	frame []byte // the whole frame: MAP header, MAPv5 header, payload, trailer, padding
	hdr   int    // bytes of header before the payload
	cmd   bool
	pad   int
	plen  int // payload length from the MAP header, padding included
	mux   uint8
}

// fail counts a problem and keeps it if it is the first.
func (w *qmapWalk) fail(err error) {
	*w.p.Stats.counter(err)++
	if w.first == nil {
		w.first = err
	}
}

// nextFrame reads the MAP header at the start of rest and returns the
// frame it heads. ok is false, the problem counted, when the header or
// the frame is cut short or the payload length is zero: the walk ends.
func (w *qmapWalk) nextFrame(rest []byte) (f qmapFrame, ok bool) {
	if len(rest) < HeaderLen {
		w.fail(ErrTruncated)
		return f, false
	}
	f.cmd = rest[0]&FlagCommand != 0
	f.pad = int(rest[0] & PadMask)
	f.mux = rest[1]
	f.plen = int(be.Uint16(rest[2:]))
	if f.plen == 0 {
		w.fail(ErrZeroLength)
		return f, false
	}
	f.hdr = HeaderLen
	if w.p.Csum == CsumV5 && !f.cmd {
		f.hdr += V5HeaderLen
	}
	flen := f.hdr + f.plen + w.trailer
	if flen > len(rest) {
		w.fail(ErrTruncated)
		return f, false
	}
	f.frame = rest[:flen]
	return f, true
}

// handleFrame counts a frame and hands its payload, padding removed, to
// OnCommand (a command frame) or on to dataFrame.
func (w *qmapWalk) handleFrame(f qmapFrame, fn func(Packet)) {
	w.p.Stats.Frames++
	if f.pad > f.plen {
		w.fail(ErrBadPad)
		return
	}
	n := f.plen - f.pad
	payload := f.frame[f.hdr : f.hdr+n : f.hdr+n]
	if f.cmd {
		w.p.Stats.CommandFrames++
		if w.p.OnCommand != nil {
			w.p.OnCommand(f.mux, payload)
		}
		return
	}
	w.dataFrame(f, payload, fn)
}

// dataFrame checks a data frame's MAPv5 checksum header (CsumV5), its
// payload (not empty, IPv4 or IPv6 unless AnyProtocol), reads its CsumV4
// trailer, and delivers the packet.
func (w *qmapWalk) dataFrame(f qmapFrame, payload []byte, fn func(Packet)) {
	var cs Csum
	if w.p.Csum == CsumV5 {
		if f.frame[0]&FlagNextHeader == 0 || f.frame[HeaderLen]>>1 != V5TypeCsumOffload {
			w.fail(ErrBadNextHeader)
			return
		}
		cs.Valid = f.frame[HeaderLen+1]&V5CsumValid != 0
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
	if w.trailer != 0 {
		t := f.frame[f.hdr+n:]
		cs.Valid = t[1]&TrailerCsumValid != 0
		cs.Start = be.Uint16(t[2:])
		cs.Length = be.Uint16(t[4:])
		cs.Value = be.Uint16(t[6:])
	}
	w.delivered++
	w.p.Stats.Packets++
	w.p.Stats.Bytes += uint64(n)
	fn(Packet{Data: payload, Mux: f.mux, Csum: cs})
}
