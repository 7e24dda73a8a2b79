package qmi

import (
	"encoding/binary"
	"fmt"
)

// Header describes a frame to build.
type Header struct {
	QMUXFlags uint8 // QMUXFromHost or QMUXFromModem
	Service   Service
	Client    uint8
	Type      MsgType
	Compound  bool   // the compound bit (non-CTL services only)
	TID       uint16 // at most 255 for CTL
	Message   MessageID
}

// ResponseTo returns the header of the modem's response to request f: the
// same service, client, transaction and message, flagged as a response
// from the modem.
func ResponseTo(f *Frame) Header {
	return Header{QMUXFlags: QMUXFromModem, Service: f.Service, Client: f.Client,
		Type: Response, TID: f.TID, Message: f.Message}
}

// Builder appends one frame to a caller-owned buffer. Use it as
//
//	var b qmi.Builder
//	b.Start(buf[:0], hdr)
//	b.Result(qmi.Success)
//	b.TLVString(0x01, "model")
//	out, err := b.Finish()
//
// or, for a value of several fields, Begin(typ), the Put methods, End().
// Errors (ErrTooLarge, ErrBuilder) are sticky and reported by Finish; the
// Builder never panics. A zero Builder is ready for Start.
type Builder struct {
	buf     []byte
	start   int // offset of the frame's I/F type byte in buf
	sduTLVs int // offset of the SDU's TLV length field
	tlv     int // offset of the open TLV's header, or -1
	started bool
	err     error
}

// Start begins a frame appended to buf (it may be buf[:0] of a reused
// buffer). The QMUX and TLV lengths are filled in by Finish.
func (b *Builder) Start(buf []byte, h Header) {
	*b = Builder{buf: buf, start: len(buf), tlv: -1, started: true}
	if h.Service == CTL && h.TID > 0xFF {
		b.err = fmt.Errorf("%w: CTL transaction id %d > 255", ErrBuilder, h.TID)
	}
	b.buf = append(b.buf, Marker, 0, 0, h.QMUXFlags, byte(h.Service), h.Client)
	flags := h.Type.sduFlags(h.Service)
	if h.Service == CTL {
		b.buf = append(b.buf, flags, byte(h.TID))
	} else {
		if h.Compound {
			flags |= svcFlagCompound
		}
		b.buf = append(b.buf, flags, byte(h.TID), byte(h.TID>>8))
	}
	b.buf = binary.LittleEndian.AppendUint16(b.buf, uint16(h.Message))
	b.sduTLVs = len(b.buf)
	b.buf = append(b.buf, 0, 0)
}

func (b *Builder) ready() bool {
	if !b.started && b.err == nil {
		b.err = fmt.Errorf("%w: TLV before Start", ErrBuilder)
	}
	return b.err == nil
}

// Begin opens a TLV of type typ whose value the Put methods append.
func (b *Builder) Begin(typ uint8) {
	if !b.ready() {
		return
	}
	if b.tlv >= 0 {
		b.err = fmt.Errorf("%w: Begin(0x%02x) inside an open TLV", ErrBuilder, typ)
		return
	}
	b.tlv = len(b.buf)
	b.buf = append(b.buf, typ, 0, 0)
}

// End closes the TLV opened by Begin and fills in its length.
func (b *Builder) End() {
	if !b.ready() {
		return
	}
	if b.tlv < 0 {
		b.err = fmt.Errorf("%w: End without Begin", ErrBuilder)
		return
	}
	n := len(b.buf) - b.tlv - TLVHeaderLen
	if n > 0xFFFF {
		b.err = fmt.Errorf("%w: TLV 0x%02x of %d bytes", ErrTooLarge, b.buf[b.tlv], n)
		return
	}
	binary.LittleEndian.PutUint16(b.buf[b.tlv+1:], uint16(n))
	b.tlv = -1
}

func (b *Builder) inTLV() bool {
	if !b.ready() {
		return false
	}
	if b.tlv < 0 {
		b.err = fmt.Errorf("%w: Put outside a TLV", ErrBuilder)
		return false
	}
	return true
}

// Put8 appends a byte to the open TLV.
func (b *Builder) Put8(v uint8) {
	if b.inTLV() {
		b.buf = append(b.buf, v)
	}
}

// Put16 appends a little-endian uint16 to the open TLV.
func (b *Builder) Put16(v uint16) {
	if b.inTLV() {
		b.buf = binary.LittleEndian.AppendUint16(b.buf, v)
	}
}

// Put32 appends a little-endian uint32 to the open TLV.
func (b *Builder) Put32(v uint32) {
	if b.inTLV() {
		b.buf = binary.LittleEndian.AppendUint32(b.buf, v)
	}
}

// Put64 appends a little-endian uint64 to the open TLV.
func (b *Builder) Put64(v uint64) {
	if b.inTLV() {
		b.buf = binary.LittleEndian.AppendUint64(b.buf, v)
	}
}

// PutBytes appends raw bytes to the open TLV.
func (b *Builder) PutBytes(p []byte) {
	if b.inTLV() {
		b.buf = append(b.buf, p...)
	}
}

// PutString appends a string's bytes, unprefixed (libqmi's format for a
// string that is a whole TLV value).
func (b *Builder) PutString(s string) {
	if b.inTLV() {
		b.buf = append(b.buf, s...)
	}
}

// PutString8 appends a string with a u8 length prefix (libqmi's format for
// strings inside sequences); longer than 255 bytes is ErrTooLarge.
func (b *Builder) PutString8(s string) {
	if !b.inTLV() {
		return
	}
	if len(s) > 0xFF {
		b.err = fmt.Errorf("%w: string of %d bytes in a u8-prefixed field", ErrTooLarge, len(s))
		return
	}
	b.buf = append(b.buf, byte(len(s)))
	b.buf = append(b.buf, s...)
}

// TLV appends a whole TLV with value v.
func (b *Builder) TLV(typ uint8, v []byte) {
	b.Begin(typ)
	b.PutBytes(v)
	b.End()
}

// TLVU8 appends a TLV holding one byte.
func (b *Builder) TLVU8(typ uint8, v uint8) {
	b.Begin(typ)
	b.Put8(v)
	b.End()
}

// TLVU16 appends a TLV holding a uint16.
func (b *Builder) TLVU16(typ uint8, v uint16) {
	b.Begin(typ)
	b.Put16(v)
	b.End()
}

// TLVU32 appends a TLV holding a uint32.
func (b *Builder) TLVU32(typ uint8, v uint32) {
	b.Begin(typ)
	b.Put32(v)
	b.End()
}

// TLVString appends a TLV whose value is the string's bytes.
func (b *Builder) TLVString(typ uint8, s string) {
	b.Begin(typ)
	b.PutString(s)
	b.End()
}

// Result appends the result TLV 0x02.
func (b *Builder) Result(r Result) {
	b.Begin(TLVResult)
	b.Put16(r.Status)
	b.Put16(uint16(r.Code))
	b.End()
}

// Finish fills in the QMUX and SDU TLV lengths and returns the buffer with
// the frame appended (the frame is out[len(buf):] of the buf given to
// Start).
func (b *Builder) Finish() ([]byte, error) {
	if !b.ready() {
		return b.buf, b.err
	}
	if b.tlv >= 0 {
		b.err = fmt.Errorf("%w: Finish with TLV 0x%02x open", ErrBuilder, b.buf[b.tlv])
		return b.buf, b.err
	}
	tlvs := len(b.buf) - b.sduTLVs - 2
	qmux := len(b.buf) - b.start - 1
	if qmux > 0xFFFF {
		b.err = fmt.Errorf("%w: frame of %d bytes", ErrTooLarge, qmux+1)
		return b.buf, b.err
	}
	binary.LittleEndian.PutUint16(b.buf[b.start+1:], uint16(qmux))
	binary.LittleEndian.PutUint16(b.buf[b.sduTLVs:], uint16(tlvs))
	return b.buf, nil
}

// Frame returns the frame being built (up to now) without finishing it.
func (b *Builder) Frame() []byte {
	if b.start > len(b.buf) {
		return nil
	}
	return b.buf[b.start:]
}
