package qmi

import (
	"encoding/binary"
	"fmt"
)

// Frame is a parsed QMUX frame. TLVs is a view into the parsed buffer.
type Frame struct {
	QMUXFlags uint8 // QMUXFromHost or QMUXFromModem
	Service   Service
	Client    uint8
	SDUFlags  uint8  // raw SDU flags (see Type)
	TID       uint16 // transaction id (8 bits for CTL)
	Message   MessageID
	TLVs      TLVs // the TLV area, checked to be exactly filled by TLVs
}

// Type returns whether the frame is a request, response or indication.
func (f *Frame) Type() MsgType { return typeOf(f.Service, f.SDUFlags) }

// Compound reports the compound bit of a non-CTL SDU.
func (f *Frame) Compound() bool { return f.Service != CTL && f.SDUFlags&svcFlagCompound != 0 }

// Name returns "SERVICE MESSAGE", e.g. "DMS GET_IDS".
func (f *Frame) Name() string { return f.Service.String() + " " + f.Service.MessageName(f.Message) }

// FrameLen returns the length of the frame that starts b, from its I/F
// type and QMUX length: the number of bytes a stream reader must gather.
// It needs the first three bytes (ErrShort otherwise) and fails with
// ErrMarker when b does not start with the I/F type, and with
// ErrQMUXLength when the QMUX length is too small for a QMUX header.
func FrameLen(b []byte) (int, error) {
	if len(b) < 3 {
		return 0, ErrShort
	}
	if b[0] != Marker {
		return 0, fmt.Errorf("%w: 0x%02x", ErrMarker, b[0])
	}
	n := int(binary.LittleEndian.Uint16(b[1:3]))
	if n < QMUXHeaderLen-1 {
		return 0, fmt.Errorf("%w: QMUX length %d < %d", ErrQMUXLength, n, QMUXHeaderLen-1)
	}
	return n + 1, nil
}

// ParseFrame parses exactly one QMUX frame occupying all of b, with
// libqmi's checks: ErrShort, ErrMarker, ErrQMUXLength (QMUX length ≠
// len(b)−1), ErrSDUHeader, ErrTLVLength (SDU TLV length ≠ what follows the
// SDU header) and ErrTLVOverrun (the TLVs do not exactly fill the SDU).
// The result refers to b. On ErrTLVLength and ErrTLVOverrun the header
// fields are filled in (TLVs is nil), so that a modem can still answer
// the request with MalformedMessage.
func ParseFrame(b []byte) (Frame, error) {
	var f Frame
	if len(b) < QMUXHeaderLen {
		return f, fmt.Errorf("%w: %d bytes", ErrShort, len(b))
	}
	if b[0] != Marker {
		return f, fmt.Errorf("%w: 0x%02x", ErrMarker, b[0])
	}
	if n := int(binary.LittleEndian.Uint16(b[1:3])); n != len(b)-1 {
		return f, fmt.Errorf("%w: QMUX length %d, frame of %d bytes", ErrQMUXLength, n, len(b))
	}
	f.QMUXFlags, f.Service, f.Client = b[3], Service(b[4]), b[5]
	sdu := b[QMUXHeaderLen:]
	var tlvLen int
	if f.Service == CTL {
		if len(sdu) < CTLHeaderLen {
			return f, fmt.Errorf("%w: %d bytes of CTL SDU", ErrSDUHeader, len(sdu))
		}
		f.SDUFlags, f.TID = sdu[0], uint16(sdu[1])
		f.Message = MessageID(binary.LittleEndian.Uint16(sdu[2:4]))
		tlvLen = int(binary.LittleEndian.Uint16(sdu[4:6]))
		sdu = sdu[CTLHeaderLen:]
	} else {
		if len(sdu) < ServiceHeaderLen {
			return f, fmt.Errorf("%w: %d bytes of %v SDU", ErrSDUHeader, len(sdu), f.Service)
		}
		f.SDUFlags = sdu[0]
		f.TID = binary.LittleEndian.Uint16(sdu[1:3])
		f.Message = MessageID(binary.LittleEndian.Uint16(sdu[3:5]))
		tlvLen = int(binary.LittleEndian.Uint16(sdu[5:7]))
		sdu = sdu[ServiceHeaderLen:]
	}
	if tlvLen != len(sdu) {
		return f, fmt.Errorf("%w: TLV length %d, %d bytes follow (%v 0x%04x)", ErrTLVLength, tlvLen, len(sdu), f.Service, uint16(f.Message))
	}
	if err := TLVs(sdu).Validate(); err != nil {
		return f, fmt.Errorf("%w (%v 0x%04x)", err, f.Service, uint16(f.Message))
	}
	f.TLVs = TLVs(sdu)
	return f, nil
}

// TLVs is a TLV area: a sequence of type u8 | length u16 | value.
type TLVs []byte

// Next splits off the first TLV. It fails with ErrTLVOverrun when the
// header or value runs past the end; on an empty area it returns ok false.
func (t TLVs) Next() (typ uint8, value []byte, rest TLVs, ok bool, err error) {
	if len(t) == 0 {
		return 0, nil, nil, false, nil
	}
	if len(t) < TLVHeaderLen {
		return 0, nil, nil, false, fmt.Errorf("%w: %d bytes left for a TLV header", ErrTLVOverrun, len(t))
	}
	n := int(binary.LittleEndian.Uint16(t[1:3]))
	if n > len(t)-TLVHeaderLen {
		return 0, nil, nil, false, fmt.Errorf("%w: TLV 0x%02x of %d bytes, %d left", ErrTLVOverrun, t[0], n, len(t)-TLVHeaderLen)
	}
	end := TLVHeaderLen + n
	return t[0], t[TLVHeaderLen:end:end], t[end:], true, nil
}

// Validate checks that the TLVs exactly fill the area.
func (t TLVs) Validate() error {
	for {
		_, _, rest, ok, err := t.Next()
		if err != nil || !ok {
			return err
		}
		t = rest
	}
}

// Find returns the value of the first TLV of type typ. It stops at a
// malformed TLV (areas from ParseFrame are already validated).
func (t TLVs) Find(typ uint8) ([]byte, bool) {
	for {
		ty, v, rest, ok, err := t.Next()
		if err != nil || !ok {
			return nil, false
		}
		if ty == typ {
			return v, true
		}
		t = rest
	}
}

// Count returns the number of well-formed TLVs before the end or the first
// malformed one.
func (t TLVs) Count() int {
	n := 0
	for {
		_, _, rest, ok, err := t.Next()
		if err != nil || !ok {
			return n
		}
		n++
		t = rest
	}
}

// Result decodes the result TLV 0x02: ErrNoResult when it is missing,
// ErrValue when it is not 4 bytes.
func (t TLVs) Result() (Result, error) {
	v, ok := t.Find(TLVResult)
	if !ok {
		return Result{}, ErrNoResult
	}
	if len(v) != 4 {
		return Result{}, fmt.Errorf("%w: result TLV of %d bytes, want 4", ErrValue, len(v))
	}
	return Result{Status: binary.LittleEndian.Uint16(v), Code: ErrorCode(binary.LittleEndian.Uint16(v[2:]))}, nil
}

// Reader decodes a TLV value field by field (little-endian). The first
// short read sets a sticky error (ErrValue) and every later read returns
// zero values, so a decoder can read all fields and check Err once.
type Reader struct {
	b   []byte
	err error
}

// NewReader returns a Reader over v.
func NewReader(v []byte) Reader { return Reader{b: v} }

func (r *Reader) take(n int) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || n > len(r.b) {
		r.err = fmt.Errorf("%w: need %d bytes, %d left", ErrValue, n, len(r.b))
		r.b = nil
		return nil
	}
	p := r.b[:n:n]
	r.b = r.b[n:]
	return p
}

// U8 reads one byte.
func (r *Reader) U8() uint8 {
	if p := r.take(1); p != nil {
		return p[0]
	}
	return 0
}

// U16 reads a little-endian uint16.
func (r *Reader) U16() uint16 {
	if p := r.take(2); p != nil {
		return binary.LittleEndian.Uint16(p)
	}
	return 0
}

// U32 reads a little-endian uint32.
func (r *Reader) U32() uint32 {
	if p := r.take(4); p != nil {
		return binary.LittleEndian.Uint32(p)
	}
	return 0
}

// U64 reads a little-endian uint64.
func (r *Reader) U64() uint64 {
	if p := r.take(8); p != nil {
		return binary.LittleEndian.Uint64(p)
	}
	return 0
}

// Bytes reads n bytes (a view, not a copy).
func (r *Reader) Bytes(n int) []byte { return r.take(n) }

// String8 reads a string with a u8 length prefix (libqmi's format for
// strings inside sequences and arrays); the result is a view.
func (r *Reader) String8() []byte { return r.take(int(r.U8())) }

// Rest returns the unread bytes (a view) and consumes them.
func (r *Reader) Rest() []byte {
	if r.err != nil {
		return nil
	}
	p := r.b
	r.b = nil
	return p
}

// Len returns the number of unread bytes.
func (r *Reader) Len() int { return len(r.b) }

// Err returns the first error, or nil.
func (r *Reader) Err() error { return r.err }

// Finish returns the first error, or ErrValue when bytes are left over
// (a value longer than its format).
func (r *Reader) Finish() error {
	if r.err != nil {
		return r.err
	}
	if len(r.b) != 0 {
		return fmt.Errorf("%w: %d bytes left over", ErrValue, len(r.b))
	}
	return nil
}
