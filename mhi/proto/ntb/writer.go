package ntb

import (
	"fmt"
	"math"

	"github.com/gomhi/gomhi/mhi/proto/framing"
)

// Layout selects where the Writer puts the NDP.
type Layout uint8

const (
	// NDPAfter puts the NDP after the last datagram (the default). The
	// aggregate is as small as possible: NTH, datagrams, NDP.
	NDPAfter Layout = iota
	// NDPFirst puts the NDP right after the NTH and reserves room for
	// MaxDatagrams entries before the first datagram, as CDC-NCM senders and
	// the mhi_wwan_mbim uplink do. With MaxDatagrams equal to the number of
	// datagrams the reserve is exact; MaxDatagrams 1 with 4-byte datagram
	// alignment gives exactly the 28-byte mhi_wwan_mbim TX form.
	NDPFirst
)

// Config describes the aggregates a Writer builds. The zero value is an
// NTB16 with one IPS NDP for session 0, at most 32 datagrams aligned to 4
// bytes, NDP aligned to 4 bytes and placed after the datagrams.
type Config struct {
	NTB32         bool    // NTH32 and NDP32 (32-bit offsets) instead of NTH16 and NDP16
	Layout        Layout  // NDPAfter or NDPFirst
	Kind          NDPKind // NDP signature: IPS (default), DSS or NCM
	Session       uint8   // MBIM session id, byte 3 of an IPS/DSS signature
	MaxDatagrams  int     // datagrams per aggregate, at most 16380 (NTB16) or 8188 (NTB32); 0 means 32
	DatagramAlign int     // power of two (1…4096) each datagram starts on; 0 means 4
	NDPAlign      int     // power of two (4…4096) the NDP starts on; 0 means 4
}

// layout is a validated Config with the derived sizes.
type layout struct {
	ntb32          bool
	first          bool
	max            int
	dgAlign        int
	ndpAlign       int
	sig            uint32
	nthLen         int
	ndpHdr, entLen int
	ndpMin         int
	ndpOff         int // NDPFirst: offset of the NDP
	dataStart      int // offset the first datagram is placed after
	formatLimit    int // largest block the format can describe
}

func newLayout(c Config) (layout, error) {
	var l layout
	if c.NTB32 {
		l.nthLen, l.ndpHdr, l.entLen, l.ndpMin = NTH32Len, NDP32HeaderLen, NDP32EntryLen, NDP32MinLen
		l.formatLimit = maxBlock32
	} else {
		l.nthLen, l.ndpHdr, l.entLen, l.ndpMin = NTH16Len, NDP16HeaderLen, NDP16EntryLen, NDP16MinLen
		l.formatLimit = math.MaxUint16
	}
	l.ntb32 = c.NTB32
	switch c.Layout {
	case NDPAfter:
	case NDPFirst:
		l.first = true
	default:
		return l, fmt.Errorf("%w: layout %d", ErrBadConfig, c.Layout)
	}
	if c.Kind > NCM {
		return l, fmt.Errorf("%w: NDP kind %d", ErrBadConfig, c.Kind)
	}
	l.sig = NDPSignature(c.NTB32, c.Kind, c.Session)
	l.max = c.MaxDatagrams
	if l.max == 0 {
		l.max = DefaultMaxDatagrams
	}
	if l.max < 1 || l.max > maxConfigDatagrams {
		return l, fmt.Errorf("%w: MaxDatagrams %d not in 1…%d", ErrBadConfig, c.MaxDatagrams, maxConfigDatagrams)
	}
	if n := l.ndpLen(l.max); n > math.MaxUint16 {
		return l, fmt.Errorf("%w: MaxDatagrams %d needs a %v NDP of %d bytes, more than wLength can hold",
			ErrBadConfig, l.max, variant(l.ntb32), n)
	}
	l.dgAlign = c.DatagramAlign
	if l.dgAlign == 0 {
		l.dgAlign = DefaultDatagramAlign
	}
	if !isPow2(l.dgAlign) || l.dgAlign > maxAlign {
		return l, fmt.Errorf("%w: DatagramAlign %d is not a power of two in 1…%d", ErrBadConfig, c.DatagramAlign, maxAlign)
	}
	l.ndpAlign = c.NDPAlign
	if l.ndpAlign == 0 {
		l.ndpAlign = DefaultNDPAlign
	}
	if !isPow2(l.ndpAlign) || l.ndpAlign < 4 || l.ndpAlign > maxAlign {
		return l, fmt.Errorf("%w: NDPAlign %d is not a power of two in 4…%d", ErrBadConfig, c.NDPAlign, maxAlign)
	}
	if l.first {
		l.ndpOff = alignUp(l.nthLen, l.ndpAlign)
		l.dataStart = l.ndpOff + l.ndpLen(l.max)
	} else {
		l.dataStart = l.nthLen
	}
	return l, nil
}

// ndpLen is the wLength of an NDP holding n datagram entries.
func (l *layout) ndpLen(n int) int {
	return max(l.ndpMin, l.ndpHdr+l.entLen*(n+1))
}

// total is the block length of an aggregate of n datagrams whose data ends at end.
func (l *layout) total(n, end int) int {
	if l.first {
		return end
	}
	return alignUp(end, l.ndpAlign) + l.ndpLen(n)
}

// empty is the block length of an aggregate without datagrams.
func (l *layout) empty() int { return l.total(0, l.dataStart) }

// limit is the usable part of a buffer of n bytes.
func (l *layout) limit(n int) int { return min(n, l.formatLimit) }

// Size returns the exact length of the aggregate a Writer with cfg builds
// from datagrams of the given lengths, in order. It fails with
// ErrBadConfig, framing.ErrEmpty for a zero length, framing.ErrLimit for
// more than MaxDatagrams lengths, or framing.ErrTooLarge when the
// aggregate exceeds what the format can describe (65535 bytes for NTB16).
func Size(cfg Config, lens []int) (int, error) {
	l, err := newLayout(cfg)
	if err != nil {
		return 0, err
	}
	if len(lens) > l.max {
		return 0, fmt.Errorf("%w: %d datagrams, limit %d", framing.ErrLimit, len(lens), l.max)
	}
	off := l.dataStart
	for i, n := range lens {
		if n <= 0 {
			return 0, fmt.Errorf("%w: datagram %d has length %d", framing.ErrEmpty, i, n)
		}
		if n > l.formatLimit {
			return 0, fmt.Errorf("%w: datagram %d has length %d", framing.ErrTooLarge, i, n)
		}
		off = alignUp(off, l.dgAlign) + n
	}
	t := l.total(len(lens), off)
	if t > l.formatLimit {
		return 0, fmt.Errorf("%w: aggregate of %d bytes exceeds the %v limit %d", framing.ErrTooLarge, t, variant(l.ntb32), l.formatLimit)
	}
	return t, nil
}

// Fit returns how many of the datagrams with the given lengths, taken in
// order, a Writer with cfg can put into one aggregate in a buffer of bufLen
// bytes, and the length of that aggregate. It stops at the first length
// that does not fit, at MaxDatagrams, and at a length ≤ 0. It does not
// allocate unless cfg is invalid. If not even an empty aggregate fits, it
// returns 0, 0 and ErrShortBuffer.
func Fit(cfg Config, bufLen int, lens []int) (n, size int, err error) {
	l, err := newLayout(cfg)
	if err != nil {
		return 0, 0, err
	}
	limit := l.limit(bufLen)
	size = l.empty()
	if size > limit {
		return 0, 0, ErrShortBuffer
	}
	off := l.dataStart
	for i, dl := range lens {
		if i == l.max || dl <= 0 || dl > limit {
			break
		}
		end := alignUp(off, l.dgAlign) + dl
		t := l.total(i+1, end)
		if t > limit {
			break
		}
		off, size, n = end, t, i+1
	}
	return n, size, nil
}

// Writer builds one NTB at a time in a caller-owned buffer. The zero value
// is ready for Reset. A Writer keeps the wSequence counter across
// aggregates and increments it on every Finish.
type Writer struct {
	l    layout
	buf  []byte // the usable part of the caller's buffer
	off  int    // end of the last datagram (dataStart when empty)
	n    int    // datagrams added
	ents []entry
	seq  uint16
	open bool
	size int // length returned by the last Finish
}

type entry struct{ idx, n int }

var _ framing.Writer = (*Writer)(nil)

// Reset starts a new aggregate in buf with the settings in cfg. Bytes of
// buf beyond the returned aggregate length are never written. NTB16 uses at
// most the first 65535 bytes of buf. Reset fails with ErrBadConfig or, if
// buf cannot hold an empty aggregate, ErrShortBuffer.
func (w *Writer) Reset(buf []byte, cfg Config) error {
	w.open = false
	w.n, w.size = 0, 0
	w.ents = w.ents[:0]
	l, err := newLayout(cfg)
	if err != nil {
		return err
	}
	limit := l.limit(len(buf))
	if e := l.empty(); e > limit {
		return fmt.Errorf("%w: %d bytes, an empty %v aggregate needs %d", ErrShortBuffer, len(buf), variant(l.ntb32), e)
	}
	w.l = l
	w.buf = buf[:limit]
	w.off = l.dataStart
	w.open = true
	return nil
}

// SetSequence sets the wSequence the next Finish writes.
func (w *Writer) SetSequence(seq uint16) { w.seq = seq }

// Sequence returns the wSequence the next Finish writes.
func (w *Writer) Sequence() uint16 { return w.seq }

// Count returns the number of datagrams in the open aggregate.
func (w *Writer) Count() int { return w.n }

// Len returns the length the open aggregate would have if finished now.
func (w *Writer) Len() int {
	if !w.open {
		return w.size
	}
	return w.l.total(w.n, w.off)
}

// Fits reports whether a datagram of n bytes can still be added.
func (w *Writer) Fits(n int) bool {
	if !w.open || w.n >= w.l.max || n <= 0 {
		return false
	}
	return w.l.total(w.n+1, alignUp(w.off, w.l.dgAlign)+n) <= len(w.buf)
}

// Add copies one datagram into the aggregate, or fails as
// [framing.Writer] says (framing.ErrLimit: the aggregate holds
// MaxDatagrams datagrams). Add does not allocate once the Writer has seen
// MaxDatagrams datagrams in an earlier aggregate.
func (w *Writer) Add(d []byte) error {
	b, err := w.Append(len(d))
	if err != nil {
		return err
	}
	copy(b, d)
	return nil
}

// Append adds a datagram of n bytes to the aggregate without writing it and
// returns the n bytes of the buffer it occupies, for the caller to fill in
// place before Finish (their content is whatever the buffer held). It fails
// as Add does, leaving the aggregate unchanged.
func (w *Writer) Append(n int) ([]byte, error) {
	if !w.open {
		return nil, framing.ErrNotOpen
	}
	if n <= 0 {
		return nil, framing.ErrEmpty
	}
	if w.n >= w.l.max {
		return nil, framing.ErrLimit
	}
	if n > len(w.buf) {
		if w.n == 0 {
			return nil, framing.ErrTooLarge
		}
		return nil, framing.ErrFull
	}
	start := alignUp(w.off, w.l.dgAlign)
	end := start + n
	if w.l.total(w.n+1, end) > len(w.buf) {
		if w.n == 0 {
			return nil, framing.ErrTooLarge
		}
		return nil, framing.ErrFull
	}
	clear(w.buf[w.off:start])
	if w.l.first {
		w.putEntry(w.l.ndpOff+w.l.ndpHdr+w.n*w.l.entLen, start, n)
	} else {
		w.ents = append(w.ents, entry{start, n})
	}
	w.off = end
	w.n++
	return w.buf[start:end:end], nil
}

// Finish writes the NTH and the NDP, closes the aggregate and returns its
// length: the aggregate is buf[:n]. An aggregate without datagrams is still
// a valid NTB (check Count first to avoid sending it). Calling Finish again
// returns the same length without changing anything.
func (w *Writer) Finish() (n int) {
	if !w.open {
		return w.size
	}
	l := &w.l
	var ndpOff int
	if l.first {
		ndpOff = l.ndpOff
		clear(w.buf[l.nthLen:ndpOff])
		// Terminator and any unused reserved entries.
		clear(w.buf[ndpOff+l.ndpHdr+w.n*l.entLen : l.dataStart])
	} else {
		ndpOff = alignUp(w.off, l.ndpAlign)
		clear(w.buf[w.off:ndpOff])
		end := ndpOff + l.ndpLen(w.n)
		p := ndpOff + l.ndpHdr
		for _, e := range w.ents {
			w.putEntry(p, e.idx, e.n)
			p += l.entLen
		}
		clear(w.buf[p:end])
	}
	total := l.total(w.n, w.off)
	ndpLen := l.ndpLen(w.n)
	b := w.buf
	if !l.ntb32 {
		le.PutUint32(b[0:], SigNTH16)
		le.PutUint16(b[4:], NTH16Len)
		le.PutUint16(b[6:], w.seq)
		le.PutUint16(b[8:], uint16(total))
		le.PutUint16(b[10:], uint16(ndpOff))
		le.PutUint32(b[ndpOff:], l.sig)
		le.PutUint16(b[ndpOff+4:], uint16(ndpLen))
		le.PutUint16(b[ndpOff+6:], 0)
	} else {
		le.PutUint32(b[0:], SigNTH32)
		le.PutUint16(b[4:], NTH32Len)
		le.PutUint16(b[6:], w.seq)
		le.PutUint32(b[8:], uint32(total))
		le.PutUint32(b[12:], uint32(ndpOff))
		le.PutUint32(b[ndpOff:], l.sig)
		le.PutUint16(b[ndpOff+4:], uint16(ndpLen))
		le.PutUint16(b[ndpOff+6:], 0)
		le.PutUint32(b[ndpOff+8:], 0)
		le.PutUint32(b[ndpOff+12:], 0)
	}
	w.seq++
	w.open = false
	w.size = total
	return total
}

func (w *Writer) putEntry(p, idx, n int) {
	if !w.l.ntb32 {
		le.PutUint16(w.buf[p:], uint16(idx))
		le.PutUint16(w.buf[p+2:], uint16(n))
		return
	}
	le.PutUint32(w.buf[p:], uint32(idx))
	le.PutUint32(w.buf[p+4:], uint32(n))
}

// PutTXHeader writes into hdr[:TXHeaderLen] the 28-byte header Linux's
// mhi_wwan_mbim puts in front of an uplink IP packet of ipLen bytes: an
// NTH16 (wSequence seq, wBlockLength 28+ipLen, wNdpIndex 12) and an IPS NDP16
// for session sid at offset 12 with one entry {28, ipLen} and a terminator.
// The packet itself belongs at offset 28.
func PutTXHeader(hdr []byte, ipLen int, sid uint8, seq uint16) error {
	if len(hdr) < TXHeaderLen {
		return ErrShortBuffer
	}
	if ipLen <= 0 {
		return framing.ErrEmpty
	}
	if ipLen > math.MaxUint16-TXHeaderLen {
		return framing.ErrTooLarge
	}
	le.PutUint32(hdr[0:], SigNTH16)
	le.PutUint16(hdr[4:], NTH16Len)
	le.PutUint16(hdr[6:], seq)
	le.PutUint16(hdr[8:], uint16(TXHeaderLen+ipLen))
	le.PutUint16(hdr[10:], NTH16Len)
	le.PutUint32(hdr[12:], SigIPS16|uint32(sid)<<24)
	le.PutUint16(hdr[16:], NDP16MinLen)
	le.PutUint16(hdr[18:], 0)
	le.PutUint16(hdr[20:], TXHeaderLen)
	le.PutUint16(hdr[22:], uint16(ipLen))
	le.PutUint32(hdr[24:], 0)
	return nil
}

// EncodeTX writes the single-datagram uplink NTB for ip into dst (header at
// 0, packet at TXHeaderLen) and returns its length. It fails with
// ErrShortBuffer if dst is smaller than TXHeaderLen+len(ip),
// framing.ErrEmpty or framing.ErrTooLarge.
func EncodeTX(dst, ip []byte, sid uint8, seq uint16) (int, error) {
	n := TXHeaderLen + len(ip)
	if len(dst) < n {
		return 0, ErrShortBuffer
	}
	if err := PutTXHeader(dst, len(ip), sid, seq); err != nil {
		return 0, err
	}
	copy(dst[TXHeaderLen:], ip)
	return n, nil
}
