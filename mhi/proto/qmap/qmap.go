package qmap

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
)

// Sizes and field values of the MAP framing.
const (
	// HeaderLen is the size of the MAP header in front of every frame.
	HeaderLen = 4
	// TrailerLen is the size of the DL checksum v4 trailer.
	TrailerLen = 8
	// ULHeaderLen is the size of the UL checksum v4 header.
	ULHeaderLen = 4
	// V5HeaderLen is the size of the MAPv5 checksum header.
	V5HeaderLen = 4
	// CommandHeaderLen is the size of a command before its data.
	CommandHeaderLen = 8
	// MaxPayload is the largest payload length (packet plus padding) a MAP
	// header can describe.
	MaxPayload = 0xFFFF
	// MaxPad is the largest pad length the 6-bit field holds.
	MaxPad = 0x3F

	// FlagCommand is the CD bit in byte 0 of the MAP header.
	FlagCommand = 0x80
	// FlagNextHeader is the MAPv5 next-header bit in byte 0.
	FlagNextHeader = 0x40
	// PadMask selects the pad length in byte 0.
	PadMask = 0x3F

	// V5TypeCsumOffload is the MAPv5 header type of a checksum offload header,
	// the only one accepted on receive.
	V5TypeCsumOffload = 2
	// V5CsumValid is the checksum-valid bit in byte 1 of a MAPv5 checksum header.
	V5CsumValid = 0x80
	// TrailerCsumValid is the checksum-valid bit in byte 1 of the DL v4 trailer.
	TrailerCsumValid = 0x01
	// ULCsumEnabled, ULCsumUDP and ULCsumOffsetMask are the fields of the
	// UL v4 header's second 16-bit word: checksum computation requested,
	// the transport is UDP (a zero result is sent as 0xFFFF), and where in
	// the transport header the checksum goes.
	ULCsumEnabled    = 0x8000
	ULCsumUDP        = 0x4000
	ULCsumOffsetMask = 0x3FFF

	// DefaultMaxPackets is the frame limit of an aggregate when
	// Config.MaxPackets is 0 (modems put at most 32 packets in one buffer).
	DefaultMaxPackets = 32
	// DefaultAlign is the frame alignment when Config.Align is 0, as rmnet pads.
	DefaultAlign = 4
)

// CsumMode selects the checksum offload framing of data frames.
type CsumMode uint8

const (
	// CsumNone: no checksum offload; frames are header, packet, padding.
	CsumNone CsumMode = iota
	// CsumV4: downlink, an 8-byte checksum trailer follows every frame's
	// payload; uplink, a 4-byte checksum header follows the MAP header of
	// every data frame.
	CsumV4
	// CsumV5: a 4-byte MAPv5 checksum header follows the MAP header of every
	// data frame, with the next-header bit set.
	CsumV5
)

// String returns "none", "v4" or "v5".
func (m CsumMode) String() string {
	switch m {
	case CsumNone:
		return "none"
	case CsumV4:
		return "v4"
	case CsumV5:
		return "v5"
	}
	return "csum?"
}

// ParseCsumMode parses "none", "v4" or "v5" (case-insensitive; "mapv4"
// and "mapv5" too), the names String gives; anything else fails with
// ErrBadConfig.
func ParseCsumMode(s string) (CsumMode, error) {
	switch strings.ToLower(s) {
	case "none":
		return CsumNone, nil
	case "v4", "mapv4":
		return CsumV4, nil
	case "v5", "mapv5":
		return CsumV5, nil
	}
	return CsumNone, fmt.Errorf("%w: checksum framing %q (none, v4 or v5)", ErrBadConfig, s)
}

// Csum is the checksum offload information of a data frame. It is zero
// with CsumNone. With CsumV5 only Valid is carried (downlink: the modem
// found the checksum valid; uplink: the host asks the modem to compute
// it). With a CsumV4 downlink trailer Valid, Start (the checksum start
// offset from the IP header), Length (the bytes covered) and Value (the
// checksum) are. With a CsumV4 uplink header Valid (computation
// requested), Start (where the sum starts, from the IP header: its
// length), Offset (where the result goes, from Start; 14 bits) and UDP
// are.
type Csum struct {
	Valid  bool
	Start  uint16
	Length uint16
	Value  uint16
	Offset uint16
	UDP    bool
}

// Header is a decoded MAP header.
type Header struct {
	Command    bool   // CD bit: command frame
	NextHeader bool   // MAPv5 next-header bit
	Pad        uint8  // pad length, 0…63
	Mux        uint8  // mux id
	Len        uint16 // payload length including padding
}

// ReadHeader decodes the MAP header at the start of b; it fails with
// ErrShort if b is shorter than HeaderLen.
func ReadHeader(b []byte) (Header, error) {
	if len(b) < HeaderLen {
		return Header{}, ErrShort
	}
	return Header{
		Command:    b[0]&FlagCommand != 0,
		NextHeader: b[0]&FlagNextHeader != 0,
		Pad:        b[0] & PadMask,
		Mux:        b[1],
		Len:        be.Uint16(b[2:]),
	}, nil
}

// Put encodes h into b[:HeaderLen]; Pad is truncated to 6 bits. It fails
// with ErrShortBuffer if b is shorter than HeaderLen.
func (h Header) Put(b []byte) error {
	if len(b) < HeaderLen {
		return ErrShortBuffer
	}
	b[0] = h.Pad & PadMask
	if h.Command {
		b[0] |= FlagCommand
	}
	if h.NextHeader {
		b[0] |= FlagNextHeader
	}
	b[1] = h.Mux
	be.PutUint16(b[2:], h.Len)
	return nil
}

// Parse errors: each names a reason a frame, or the rest of an aggregate,
// is dropped; [Stats] counts them by the same names. Parse returns them
// unwrapped so that the receive path does not allocate; match with errors.Is.
var (
	// ErrShort: the input is shorter than one MAP header.
	ErrShort = errors.New("qmap: aggregate too short")
	// ErrTruncated: a MAP header, or the frame it announces, runs past the
	// end of the input; the rest of the input is dropped.
	ErrTruncated = errors.New("qmap: frame truncated")
	// ErrZeroLength: a MAP header has payload length 0, which ends the
	// aggregate (the rest is dropped), or a data frame's payload is all padding.
	ErrZeroLength = errors.New("qmap: zero-length frame")
	// ErrBadPad: the pad length exceeds the payload length.
	ErrBadPad = errors.New("qmap: pad longer than payload")
	// ErrBadNextHeader: in CsumV5 mode a data frame lacks the next-header bit
	// or its MAPv5 header type is not checksum offload (2).
	ErrBadNextHeader = errors.New("qmap: missing or unsupported MAPv5 header")
	// ErrBadIPVersion: a data frame's first nibble is neither 4 nor 6.
	ErrBadIPVersion = errors.New("qmap: packet is not IPv4 or IPv6")
	// ErrCommandFrame names the command frames a Parser counts and skips
	// (Stats.CommandFrames). It is not a malformation: Parse never returns it.
	ErrCommandFrame = errors.New("qmap: command frame")
)

// Builder errors. Add and the size functions also fail with the shared
// outcomes of an aggregate writer: [framing.ErrFull], [framing.ErrLimit],
// [framing.ErrTooLarge] (also: the payload exceeds MaxPayload),
// [framing.ErrEmpty] and [framing.ErrNotOpen] (see [framing.Writer]).
var (
	// ErrShortBuffer: the destination is too small.
	ErrShortBuffer = errors.New("qmap: buffer too short")
	// ErrBadConfig: a Config field is out of range.
	ErrBadConfig = errors.New("qmap: invalid configuration")
)

var reasons = [...]error{
	ErrShort, ErrTruncated, ErrZeroLength, ErrBadPad, ErrBadNextHeader, ErrBadIPVersion,
}

// Reasons returns the parse error sentinels (the malformations) in a fixed
// order, for exporting every counter of a [Stats] with [Stats.Get].
// ErrCommandFrame is not among them.
func Reasons() []error {
	r := reasons
	return r[:]
}

// Stats counts what a Parser has seen. Plain integers: a Parser is used by
// one goroutine.
type Stats struct {
	Aggregates    uint64 // Parse calls
	Frames        uint64 // frames whose length was in bounds
	Packets       uint64 // data packets delivered
	Bytes         uint64 // IP bytes delivered
	CommandFrames uint64 // ErrCommandFrame: command frames skipped (or handed to OnCommand)

	Short         uint64 // ErrShort
	Truncated     uint64 // ErrTruncated
	ZeroLength    uint64 // ErrZeroLength
	BadPad        uint64 // ErrBadPad
	BadNextHeader uint64 // ErrBadNextHeader
	BadIPVersion  uint64 // ErrBadIPVersion
}

func (s *Stats) counter(reason error) *uint64 {
	switch reason {
	case ErrShort:
		return &s.Short
	case ErrTruncated:
		return &s.Truncated
	case ErrZeroLength:
		return &s.ZeroLength
	case ErrBadPad:
		return &s.BadPad
	case ErrBadNextHeader:
		return &s.BadNextHeader
	case ErrBadIPVersion:
		return &s.BadIPVersion
	case ErrCommandFrame:
		return &s.CommandFrames
	}
	return nil
}

// Get returns the counter for a parse reason (one of [Reasons], or
// ErrCommandFrame); 0 for any other error.
func (s *Stats) Get(reason error) uint64 {
	if c := s.counter(reason); c != nil {
		return *c
	}
	return 0
}

// Errors returns the sum of the malformation counters (command frames excluded).
func (s *Stats) Errors() uint64 {
	var n uint64
	for _, r := range reasons {
		n += s.Get(r)
	}
	return n
}

var be = binary.BigEndian

func isPow2(n int) bool { return n > 0 && n&(n-1) == 0 }
