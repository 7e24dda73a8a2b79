package mbim

import (
	"fmt"
	"net/netip"
	"unicode/utf16"
)

// Info is a read-only view of an InformationBuffer, or of a struct inside
// one: the offsets read from it are relative to its start. Every accessor
// checks its bounds and returns an error wrapping ErrShort (a field beyond
// the end), ErrBadOffset (an offset pointing outside) or ErrBadLength;
// none panics.
type Info []byte

func (in Info) need(off, n int) error {
	if off < 0 || n < 0 || uint64(off)+uint64(n) > uint64(len(in)) {
		return fmt.Errorf("%w: field at %d+%d, buffer of %d bytes", ErrShort, off, n, len(in))
	}
	return nil
}

// U32 reads the u32 at off.
func (in Info) U32(off int) (uint32, error) {
	if err := in.need(off, 4); err != nil {
		return 0, err
	}
	return le.Uint32(in[off:]), nil
}

// U64 reads the u64 at off.
func (in Info) U64(off int) (uint64, error) {
	if err := in.need(off, 8); err != nil {
		return 0, err
	}
	return le.Uint64(in[off:]), nil
}

// UUID reads the 16-byte UUID at off.
func (in Info) UUID(off int) (UUID, error) {
	var u UUID
	if err := in.need(off, 16); err != nil {
		return u, err
	}
	copy(u[:], in[off:])
	return u, nil
}

// OL reads the offset/length pair at off.
func (in Info) OL(off int) (offset, length uint32, err error) {
	if err := in.need(off, 8); err != nil {
		return 0, 0, err
	}
	return le.Uint32(in[off:]), le.Uint32(in[off+4:]), nil
}

// span returns in[o:o+n] after checking it lies inside.
func (in Info) span(o, n uint64, what string) (Info, error) {
	if n == 0 {
		return Info{}, nil
	}
	if o > uint64(len(in)) || n > uint64(len(in))-o {
		return nil, fmt.Errorf("%w: %s at %d+%d, buffer of %d bytes", ErrBadOffset, what, o, n, len(in))
	}
	return in[o : o+n], nil
}

// Ref returns the bytes the offset/length pair at off points to (a view;
// empty for a zero length), as a referenced struct or opaque data.
func (in Info) Ref(off int) (Info, error) {
	o, n, err := in.OL(off)
	if err != nil {
		return nil, err
	}
	return in.span(uint64(o), uint64(n), "referenced data")
}

// StringBytes returns the raw UTF-16LE bytes of the string whose OL pair
// is at off, without copying.
func (in Info) StringBytes(off int) ([]byte, error) {
	b, err := in.Ref(off)
	if err != nil {
		return nil, err
	}
	if len(b)%2 != 0 {
		return nil, fmt.Errorf("%w: UTF-16 string of %d bytes", ErrBadLength, len(b))
	}
	return b, nil
}

// String decodes the UTF-16LE string whose OL pair is at off. Unpaired
// surrogates become U+FFFD.
func (in Info) String(off int) (string, error) {
	b, err := in.StringBytes(off)
	if err != nil || len(b) == 0 {
		return "", err
	}
	u := make([]uint16, len(b)/2)
	for i := range u {
		u[i] = le.Uint16(b[2*i:])
	}
	return string(utf16.Decode(u)), nil
}

// Array returns the count elements of elemSize bytes that the u32 offset
// at off points to (struct-array, ipv4-array, ipv6-array). A zero count
// gives an empty view whatever the offset.
func (in Info) Array(off int, count uint32, elemSize int) (Info, error) {
	o, err := in.U32(off)
	if err != nil || count == 0 {
		return Info{}, err
	}
	n := uint64(count) * uint64(elemSize)
	if n > uint64(len(in)) {
		return nil, fmt.Errorf("%w: %d elements of %d bytes, buffer of %d bytes", ErrBadLength, count, elemSize, len(in))
	}
	return in.span(uint64(o), n, "array")
}

// IPv4Ref reads the optional IPv4 address a u32 offset at off points to
// (ref-ipv4); offset 0 is no address.
func (in Info) IPv4Ref(off int) (netip.Addr, error) {
	b, err := in.Array(off, 1, 4)
	if err != nil || len(b) == 0 {
		return netip.Addr{}, err
	}
	if o, _ := in.U32(off); o == 0 {
		return netip.Addr{}, nil
	}
	return netip.AddrFrom4([4]byte(b)), nil
}

// IPv6Ref reads the optional IPv6 address a u32 offset at off points to
// (ref-ipv6); offset 0 is no address.
func (in Info) IPv6Ref(off int) (netip.Addr, error) {
	b, err := in.Array(off, 1, 16)
	if err != nil || len(b) == 0 {
		return netip.Addr{}, err
	}
	if o, _ := in.U32(off); o == 0 {
		return netip.Addr{}, nil
	}
	return netip.AddrFrom16([16]byte(b)), nil
}

// count reads a u32 count at off and checks that count elements of at
// least minSize bytes could fit in the buffer, so that a caller may
// allocate for them.
func (in Info) count(off, minSize int) (uint32, error) {
	n, err := in.U32(off)
	if err != nil {
		return 0, err
	}
	if uint64(n)*uint64(max(minSize, 1)) > uint64(len(in)) {
		return 0, fmt.Errorf("%w: count %d at %d, buffer of %d bytes", ErrBadLength, n, off, len(in))
	}
	return n, nil
}

// Builder appends an InformationBuffer (or a struct inside one) to a
// caller-owned slice: a fixed part of a known size, zeroed, whose fields
// the setters fill, then a variable part the offset fields point into.
// Offsets are relative to the Builder's start. Field offsets are the
// caller's constants: a field outside the fixed part is a programming
// error and panics.
type Builder struct {
	buf   []byte
	base  int
	fixed int
}

// NewBuilder starts a buffer of fixedLen zero bytes at the end of dst
// (which may hold a message header before it).
func NewBuilder(dst []byte, fixedLen int) Builder {
	base := len(dst)
	dst = append(dst, make([]byte, fixedLen)...)
	return Builder{buf: dst, base: base, fixed: fixedLen}
}

// Bytes returns dst with the buffer appended.
func (b *Builder) Bytes() []byte { return b.buf }

// Len returns the buffer's length so far.
func (b *Builder) Len() int { return len(b.buf) - b.base }

func (b *Builder) field(off, n int) []byte {
	if off < 0 || off+n > b.fixed {
		panic(fmt.Sprintf("mbim: Builder field %d+%d outside the fixed part of %d bytes", off, n, b.fixed))
	}
	return b.buf[b.base+off : b.base+off+n]
}

// U32 sets the u32 field at off.
func (b *Builder) U32(off int, v uint32) { le.PutUint32(b.field(off, 4), v) }

// U64 sets the u64 field at off.
func (b *Builder) U64(off int, v uint64) { le.PutUint64(b.field(off, 8), v) }

// UUID sets the UUID field at off.
func (b *Builder) UUID(off int, u UUID) { copy(b.field(off, 16), u[:]) }

// pad aligns the end of the buffer to 4 bytes relative to its start.
func (b *Builder) pad() {
	for (len(b.buf)-b.base)%4 != 0 {
		b.buf = append(b.buf, 0)
	}
}

// String appends s as UTF-16LE (padded to 4 bytes) and sets the OL pair at
// off to it; the empty string is 0/0.
func (b *Builder) String(off int, s string) {
	if s == "" {
		b.U32(off, 0)
		b.U32(off+4, 0)
		return
	}
	b.pad()
	start := len(b.buf)
	for _, r := range s {
		if r1, r2 := utf16.EncodeRune(r); r1 != 0xFFFD {
			b.buf = le.AppendUint16(b.buf, uint16(r1))
			b.buf = le.AppendUint16(b.buf, uint16(r2))
		} else {
			if r > 0xFFFF || (r >= 0xD800 && r < 0xE000) {
				r = 0xFFFD
			}
			b.buf = le.AppendUint16(b.buf, uint16(r))
		}
	}
	n := len(b.buf) - start
	b.pad()
	b.U32(off, uint32(start-b.base))
	b.U32(off+4, uint32(n))
}

// Data appends data (padded to 4 bytes) and sets the u32 offset at off to
// it (struct-array, ipv4-array, ref-ipv4…); empty data sets offset 0.
func (b *Builder) Data(off int, data []byte) {
	if len(data) == 0 {
		b.U32(off, 0)
		return
	}
	b.pad()
	b.U32(off, uint32(len(b.buf)-b.base))
	b.buf = append(b.buf, data...)
	b.pad()
}

// OLData appends data (padded) and sets the OL pair at off to it.
func (b *Builder) OLData(off int, data []byte) {
	if len(data) == 0 {
		b.U32(off, 0)
		b.U32(off+4, 0)
		return
	}
	b.Data(off, data)
	b.U32(off+4, uint32(len(data)))
}

// Begin starts a struct of fixedLen bytes in the variable part; fill it
// through the returned Builder (its offsets are relative to its own
// start), then hand it to End or EndOffset. b must not be used in between.
func (b *Builder) Begin(fixedLen int) Builder {
	b.pad()
	return NewBuilder(b.buf, fixedLen)
}

// End takes back a struct started with Begin and sets the OL pair at off
// to it (ref-struct, ref-struct-array elements).
func (b *Builder) End(off int, child Builder) {
	b.buf = child.buf
	b.U32(off, uint32(child.base-b.base))
	b.U32(off+4, uint32(len(child.buf)-child.base))
	b.pad()
}

// EndOffset takes back a struct started with Begin and sets the u32
// offset at off to it.
func (b *Builder) EndOffset(off int, child Builder) {
	b.buf = child.buf
	b.U32(off, uint32(child.base-b.base))
	b.pad()
}
