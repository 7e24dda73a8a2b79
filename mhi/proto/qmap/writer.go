package qmap

import (
	"fmt"

	"github.com/gomhi/gomhi/mhi/proto/framing"
)

// Config describes the aggregates a Writer builds. The zero value writes
// frames for mux id 0 without checksum offload, padded to 4 bytes, at most
// 32 per aggregate.
type Config struct {
	Mux        uint8    // mux id Add uses
	Csum       CsumMode // checksum offload framing
	CsumValid  bool     // checksum-valid bit Add sets (CsumV4 trailer, CsumV5 header)
	Align      int      // power of two (1…64) every frame length is padded to; 0 means 4
	MaxPackets int      // frames per aggregate (commands included); 0 means 32
	// Uplink builds frames as the host sends them: with CsumV4 a 4-byte
	// checksum header after the MAP header of data frames, no trailer.
	// Add then writes an all-zero header (the host computed the
	// checksum), whatever CsumValid says; AddPacket writes cs.
	Uplink bool
}

type layout struct {
	mode   CsumMode
	uplink bool
	align  int
	max    int
}

func newLayout(c Config) (layout, error) {
	l := layout{mode: c.Csum, uplink: c.Uplink, align: c.Align, max: c.MaxPackets}
	if c.Csum > CsumV5 {
		return l, fmt.Errorf("%w: checksum mode %d", ErrBadConfig, c.Csum)
	}
	if l.align == 0 {
		l.align = DefaultAlign
	}
	if !isPow2(l.align) || l.align > MaxPad+1 {
		return l, fmt.Errorf("%w: Align %d is not a power of two in 1…%d", ErrBadConfig, c.Align, MaxPad+1)
	}
	if l.max == 0 {
		l.max = DefaultMaxPackets
	}
	if l.max < 1 {
		return l, fmt.Errorf("%w: MaxPackets %d", ErrBadConfig, c.MaxPackets)
	}
	return l, nil
}

// frame returns the pad length and the total frame length for a payload
// (IP packet or command) of n bytes.
func (l *layout) frame(n int, data bool) (pad, total int) {
	fixed := HeaderLen + l.extra(data)
	pad = (l.align - (fixed+n)%l.align) % l.align
	return pad, fixed + n + pad
}

// extra returns the bytes the checksum framing adds to a frame besides
// the MAP header: the DL v4 trailer, the UL v4 header, the MAPv5 header.
func (l *layout) extra(data bool) int {
	switch {
	case l.mode == CsumV4 && !l.uplink:
		return TrailerLen
	case l.mode == CsumV4 && data:
		return ULHeaderLen
	case l.mode == CsumV5 && data:
		return V5HeaderLen
	}
	return 0
}

// FrameLen returns the number of bytes a data frame carrying an n-byte
// packet occupies with cfg, or an error for an invalid cfg, n ≤ 0, or a
// payload over MaxPayload.
func FrameLen(cfg Config, n int) (int, error) {
	l, err := newLayout(cfg)
	if err != nil {
		return 0, err
	}
	if n <= 0 {
		return 0, framing.ErrEmpty
	}
	pad, total := l.frame(n, true)
	if n+pad > MaxPayload {
		return 0, fmt.Errorf("%w: %d-byte packet", framing.ErrTooLarge, n)
	}
	return total, nil
}

// Size returns the exact length of an aggregate of data frames carrying
// packets of the given lengths. It fails for an invalid cfg, a length ≤ 0
// (framing.ErrEmpty), a payload over MaxPayload (framing.ErrTooLarge) or
// more than MaxPackets lengths (framing.ErrLimit).
func Size(cfg Config, lens []int) (int, error) {
	l, err := newLayout(cfg)
	if err != nil {
		return 0, err
	}
	if len(lens) > l.max {
		return 0, fmt.Errorf("%w: %d packets, limit %d", framing.ErrLimit, len(lens), l.max)
	}
	total := 0
	for i, n := range lens {
		if n <= 0 {
			return 0, fmt.Errorf("%w: packet %d has length %d", framing.ErrEmpty, i, n)
		}
		pad, t := l.frame(n, true)
		if n+pad > MaxPayload {
			return 0, fmt.Errorf("%w: packet %d has length %d", framing.ErrTooLarge, i, n)
		}
		total += t
	}
	return total, nil
}

// Fit returns how many of the packets with the given lengths, in order, fit
// in one aggregate in a buffer of bufLen bytes, and that aggregate's
// length. It stops at the first packet that does not fit, at MaxPackets and
// at a length ≤ 0 or too large for a frame. It does not allocate unless cfg
// is invalid.
func Fit(cfg Config, bufLen int, lens []int) (n, size int, err error) {
	l, err := newLayout(cfg)
	if err != nil {
		return 0, 0, err
	}
	for i, dl := range lens {
		if i == l.max || dl <= 0 || dl > MaxPayload {
			break
		}
		pad, t := l.frame(dl, true)
		if dl+pad > MaxPayload || t > bufLen-size {
			break
		}
		size += t
		n = i + 1
	}
	return n, size, nil
}

// Writer builds one QMAP aggregate at a time in a caller-owned buffer. The
// zero value is ready for Reset.
type Writer struct {
	l     layout
	mux   uint8
	valid bool
	buf   []byte
	off   int
	n     int
	open  bool
}

var _ framing.Writer = (*Writer)(nil)

// Reset starts a new, empty aggregate in buf with the settings in cfg.
// Bytes of buf beyond the aggregate's length are never written.
func (w *Writer) Reset(buf []byte, cfg Config) error {
	w.open, w.off, w.n = false, 0, 0
	l, err := newLayout(cfg)
	if err != nil {
		return err
	}
	w.l, w.mux, w.valid = l, cfg.Mux, cfg.CsumValid
	w.buf, w.off, w.n = buf, 0, 0
	w.open = true
	return nil
}

// Count returns the number of frames in the open aggregate.
func (w *Writer) Count() int { return w.n }

// Len returns the aggregate's current length.
func (w *Writer) Len() int { return w.off }

// Fits reports whether a data frame carrying an n-byte packet can still be added.
func (w *Writer) Fits(n int) bool {
	if !w.open || w.n >= w.l.max || n <= 0 || n > MaxPayload {
		return false
	}
	pad, t := w.l.frame(n, true)
	return n+pad <= MaxPayload && t <= len(w.buf)-w.off
}

// Add appends a data frame for packet with the Config's mux id and
// checksum-valid bit (a CsumV4 trailer gets Start 0, Length len(packet),
// Value 0; a CsumV4 uplink header is all zero). See AddPacket for the
// errors.
func (w *Writer) Add(packet []byte) error {
	if w.l.uplink && w.l.mode == CsumV4 {
		return w.AddPacket(packet, w.mux, Csum{})
	}
	return w.AddPacket(packet, w.mux, Csum{Valid: w.valid, Length: uint16(len(packet))})
}

// AddPacket appends a data frame for packet on mux id mux with checksum
// information cs (only Valid is used with CsumV5; with CsumV4 the fields
// of the trailer, or of the uplink header; nothing with CsumNone; see
// [Csum]). It fails as [framing.Writer]'s Add says (framing.ErrLimit: the
// aggregate holds MaxPackets frames; framing.ErrTooLarge also: the payload
// exceeds MaxPayload), leaving the aggregate unchanged.
func (w *Writer) AddPacket(packet []byte, mux uint8, cs Csum) error {
	if len(packet) == 0 {
		if !w.open {
			return framing.ErrNotOpen
		}
		return framing.ErrEmpty
	}
	start, pad, end, err := w.reserve(len(packet), true)
	if err != nil {
		return err
	}
	b := w.buf[start:end]
	p := HeaderLen
	b[0] = byte(pad)
	b[1] = mux
	be.PutUint16(b[2:], uint16(len(packet)+pad))
	switch {
	case w.l.mode == CsumV5:
		b[0] |= FlagNextHeader
		b[4] = V5TypeCsumOffload << 1
		b[5] = 0
		if cs.Valid {
			b[5] = V5CsumValid
		}
		b[6], b[7] = 0, 0
		p += V5HeaderLen
	case w.l.mode == CsumV4 && w.l.uplink:
		PutULHeader(b[HeaderLen:], cs)
		p += ULHeaderLen
	}
	p += copy(b[p:], packet)
	if w.l.mode == CsumV4 && !w.l.uplink {
		// The trailer follows the payload length's bytes, padding
		// included: rmnet reads it at the packet plus the pad length.
		t := b[len(b)-TrailerLen:]
		clear(b[p : len(b)-TrailerLen])
		t[0], t[1] = 0, 0
		if cs.Valid {
			t[1] = TrailerCsumValid
		}
		be.PutUint16(t[2:], cs.Start)
		be.PutUint16(t[4:], cs.Length)
		be.PutUint16(t[6:], cs.Value)
		return nil
	}
	clear(b[p:])
	return nil
}

// AddCommand appends a command frame on mux id mux. Errors are as for AddPacket.
func (w *Writer) AddCommand(mux uint8, c Command) error {
	start, pad, end, err := w.reserve(c.Len(), false)
	if err != nil {
		return err
	}
	b := w.buf[start:end]
	b[0] = FlagCommand | byte(pad)
	b[1] = mux
	be.PutUint16(b[2:], uint16(c.Len()+pad))
	n, _ := c.Put(b[HeaderLen:])
	clear(b[HeaderLen+n:]) // CsumV4 trailer space and padding
	return nil
}

// PutULHeader encodes the CsumV4 uplink checksum header for cs into
// b[:ULHeaderLen]: all zero unless cs.Valid; Offset is cut to 14 bits.
func PutULHeader(b []byte, cs Csum) {
	_ = b[ULHeaderLen-1]
	if !cs.Valid {
		b[0], b[1], b[2], b[3] = 0, 0, 0, 0
		return
	}
	info := uint16(ULCsumEnabled) | cs.Offset&ULCsumOffsetMask
	if cs.UDP {
		info |= ULCsumUDP
	}
	be.PutUint16(b, cs.Start)
	be.PutUint16(b[2:], info)
}

// reserve claims room for a frame with an n-byte payload.
func (w *Writer) reserve(n int, data bool) (start, pad, end int, err error) {
	if !w.open {
		return 0, 0, 0, framing.ErrNotOpen
	}
	if w.n >= w.l.max {
		return 0, 0, 0, framing.ErrLimit
	}
	if n > MaxPayload {
		return 0, 0, 0, framing.ErrTooLarge
	}
	pad, t := w.l.frame(n, data)
	if n+pad > MaxPayload || t > len(w.buf) {
		return 0, 0, 0, framing.ErrTooLarge
	}
	if t > len(w.buf)-w.off {
		return 0, 0, 0, framing.ErrFull
	}
	start = w.off
	w.off += t
	w.n++
	return start, pad, w.off, nil
}

// Finish closes the aggregate and returns its length: the aggregate is
// buf[:n]. An aggregate without frames has length 0. Calling Finish again
// returns the same length.
func (w *Writer) Finish() (n int) {
	w.open = false
	return w.off
}
