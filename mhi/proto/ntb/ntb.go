package ntb

import (
	"encoding/binary"
	"errors"
)

// variant names an NTB variant in messages: "NTB32" when ntb32, else
// "NTB16". Which variant a Writer builds is Config.NTB32; a Parser takes
// either (unless Only16).
func variant(ntb32 bool) string {
	if ntb32 {
		return "NTB32"
	}
	return "NTB16"
}

// Signatures and fixed sizes of the NTB structures.
const (
	// SigNTH16 is dwSignature of an NTH16: the bytes "NCMH".
	SigNTH16 uint32 = 0x484D434E
	// SigNTH32 is dwSignature of an NTH32: the bytes "ncmh".
	SigNTH32 uint32 = 0x686D636E

	// SigIPS16 is the MBIM IP-stream NDP16 signature for session 0 ("IPS"+0x00);
	// OR in session<<24 for other sessions.
	SigIPS16 uint32 = 0x00535049
	// SigIPS32 is the MBIM IP-stream NDP32 signature for session 0 ("ips"+0x00).
	SigIPS32 uint32 = 0x00737069
	// SigDSS16 is the MBIM device-service-stream NDP16 signature for session 0.
	SigDSS16 uint32 = 0x00535344
	// SigDSS32 is the MBIM device-service-stream NDP32 signature for session 0.
	SigDSS32 uint32 = 0x00737364
	// SigNCM16 is the plain CDC-NCM NDP16 signature without CRC ("NCM0").
	SigNCM16 uint32 = 0x304D434E
	// SigNCM32 is the plain CDC-NCM NDP32 signature without CRC ("ncm0").
	SigNCM32 uint32 = 0x306D636E

	// NTH16Len is the size of an NTH16.
	NTH16Len = 12
	// NTH32Len is the size of an NTH32.
	NTH32Len = 16
	// NDP16HeaderLen is the size of an NDP16 before its entries.
	NDP16HeaderLen = 8
	// NDP32HeaderLen is the size of an NDP32 before its entries.
	NDP32HeaderLen = 16
	// NDP16EntryLen is the size of one NDP16 datagram entry.
	NDP16EntryLen = 4
	// NDP32EntryLen is the size of one NDP32 datagram entry.
	NDP32EntryLen = 8
	// NDP16MinLen is the smallest valid NDP16 wLength.
	NDP16MinLen = 16
	// NDP32MinLen is the smallest valid NDP32 wLength.
	NDP32MinLen = 32

	// TXHeaderLen is the size of the header mhi_wwan_mbim puts in front of
	// every uplink datagram: NTH16 + NDP16 with one entry and a terminator.
	TXHeaderLen = NTH16Len + NDP16HeaderLen + 2*NDP16EntryLen

	// DefaultMaxDatagrams is the datagram limit of an aggregate when
	// Config.MaxDatagrams is 0 (modems put at most 32 packets in one buffer).
	DefaultMaxDatagrams = 32
	// DefaultDatagramAlign is the datagram alignment when Config.DatagramAlign is 0.
	DefaultDatagramAlign = 4
	// DefaultNDPAlign is the NDP alignment when Config.NDPAlign is 0; it is
	// also the smallest alignment the NCM specification allows for an NDP.
	DefaultNDPAlign = 4
	// MaxNDPs bounds the NDP chain a Parser follows in one NTB.
	MaxNDPs = 64

	maxConfigDatagrams = 1 << 20
	maxBlock32         = 1<<31 - 1 // NTB32 blocks are limited to what an int holds everywhere
	maxAlign           = 4096
	sigLowMask         = 0x00FFFFFF
)

// NDPKind selects the signature the Writer puts on its NDP.
type NDPKind uint8

const (
	// IPS marks MBIM IP data for a session (the default).
	IPS NDPKind = iota
	// DSS marks an MBIM device service stream for a session.
	DSS
	// NCM is a plain CDC-NCM NDP without CRC; it carries no session.
	NCM
)

// NDPSignature returns the NDP dwSignature of an NDP16, or with ntb32 an
// NDP32, for kind k and session id sid (placed in byte 3 for IPS and DSS,
// ignored for NCM).
func NDPSignature(ntb32 bool, k NDPKind, sid uint8) uint32 {
	s := uint32(sid) << 24
	switch {
	case !ntb32 && k == IPS:
		return SigIPS16 | s
	case !ntb32 && k == DSS:
		return SigDSS16 | s
	case !ntb32:
		return SigNCM16
	case k == IPS:
		return SigIPS32 | s
	case k == DSS:
		return SigDSS32 | s
	}
	return SigNCM32
}

// Parse errors. Each names one reason an aggregate, an NDP or a datagram
// entry is dropped; [Stats] counts them by the same names. Parse returns them
// unwrapped so that the receive path does not allocate; match with errors.Is.
var (
	// ErrShort: the input is too short to hold an NTH and an NDP header.
	ErrShort = errors.New("ntb: aggregate too short")
	// ErrBadSignature: the NTH signature is neither "NCMH" nor an accepted "ncmh".
	ErrBadSignature = errors.New("ntb: bad NTH signature")
	// ErrBadBlockLength: the block length exceeds the received length or is
	// smaller than an NTH plus an NDP header.
	ErrBadBlockLength = errors.New("ntb: bad block length")
	// ErrBadNDPIndex: an NDP index is 0, points into the NTH, or leaves no
	// room for an NDP header inside the block.
	ErrBadNDPIndex = errors.New("ntb: bad NDP index")
	// ErrBadNDPLength: an NDP's wLength is below the minimum or runs past the block.
	ErrBadNDPLength = errors.New("ntb: bad NDP length")
	// ErrNDPLoop: the NDP chain leads back to an NDP already walked.
	ErrNDPLoop = errors.New("ntb: NDP chain loops")
	// ErrTooManyNDPs: the NDP chain is longer than MaxNDPs.
	ErrTooManyNDPs = errors.New("ntb: too many NDPs")
	// ErrZeroLength: a datagram entry has exactly one of index and length zero
	// (an all-zero entry is the normal terminator and is not an error). The
	// rest of that NDP is ignored.
	ErrZeroLength = errors.New("ntb: datagram entry with zero index or length")
	// ErrDatagramOutOfBounds: a datagram starts inside the NTH or ends past the block.
	ErrDatagramOutOfBounds = errors.New("ntb: datagram out of bounds")
	// ErrOverlap: the NDPs and datagrams walked so far, plus this one,
	// claim more bytes than the block holds outside its NTH, so some of them
	// overlap. An NDP that overlaps stops the walk; a datagram that overlaps
	// is dropped. This bounds the work and the bytes delivered per NTB.
	ErrOverlap = errors.New("ntb: NDPs or datagrams overlap")
	// ErrBadIPVersion: a datagram's first nibble is neither 4 nor 6.
	ErrBadIPVersion = errors.New("ntb: datagram is not IPv4 or IPv6")
)

// Builder errors. Add, Append and the size functions also fail with the
// shared outcomes of an aggregate writer: [framing.ErrFull],
// [framing.ErrLimit], [framing.ErrTooLarge], [framing.ErrEmpty] and
// [framing.ErrNotOpen] (see [framing.Writer]).
var (
	// ErrShortBuffer: the buffer cannot hold even an empty aggregate.
	ErrShortBuffer = errors.New("ntb: buffer too short")
	// ErrBadConfig: a Config field is out of range.
	ErrBadConfig = errors.New("ntb: invalid configuration")
)

// Reasons returns the parse error sentinels in a fixed order, for exporting
// every counter of a [Stats] with [Stats.Get].
func Reasons() []error {
	r := reasons
	return r[:]
}

var reasons = [...]error{
	ErrShort, ErrBadSignature, ErrBadBlockLength, ErrBadNDPIndex,
	ErrBadNDPLength, ErrNDPLoop, ErrTooManyNDPs, ErrZeroLength,
	ErrDatagramOutOfBounds, ErrOverlap, ErrBadIPVersion,
}

// Stats counts what a Parser has seen since it was created or its Stats
// were last zeroed. Plain integers: a Parser is used by one goroutine.
type Stats struct {
	NTBs         uint64 // aggregates whose NTH was accepted
	NDPs         uint64 // NDPs walked
	SkippedNDPs  uint64 // well-formed NDPs skipped because they are not IPS
	Datagrams    uint64 // datagrams delivered
	Bytes        uint64 // bytes delivered
	SequenceGaps uint64 // NTHs whose wSequence did not follow the previous one (logged only)

	Short               uint64 // ErrShort
	BadSignature        uint64 // ErrBadSignature
	BadBlockLength      uint64 // ErrBadBlockLength
	BadNDPIndex         uint64 // ErrBadNDPIndex
	BadNDPLength        uint64 // ErrBadNDPLength
	NDPLoop             uint64 // ErrNDPLoop
	TooManyNDPs         uint64 // ErrTooManyNDPs
	ZeroLength          uint64 // ErrZeroLength
	DatagramOutOfBounds uint64 // ErrDatagramOutOfBounds
	Overlap             uint64 // ErrOverlap
	BadIPVersion        uint64 // ErrBadIPVersion
}

// counter returns the field counting reason, or nil.
func (s *Stats) counter(reason error) *uint64 {
	switch reason {
	case ErrShort:
		return &s.Short
	case ErrBadSignature:
		return &s.BadSignature
	case ErrBadBlockLength:
		return &s.BadBlockLength
	case ErrBadNDPIndex:
		return &s.BadNDPIndex
	case ErrBadNDPLength:
		return &s.BadNDPLength
	case ErrNDPLoop:
		return &s.NDPLoop
	case ErrTooManyNDPs:
		return &s.TooManyNDPs
	case ErrZeroLength:
		return &s.ZeroLength
	case ErrDatagramOutOfBounds:
		return &s.DatagramOutOfBounds
	case ErrOverlap:
		return &s.Overlap
	case ErrBadIPVersion:
		return &s.BadIPVersion
	}
	return nil
}

// Get returns the counter for a parse error reason (one of [Reasons]); it
// returns 0 for any other error.
func (s *Stats) Get(reason error) uint64 {
	if c := s.counter(reason); c != nil {
		return *c
	}
	return 0
}

// Errors returns the sum of all error counters.
func (s *Stats) Errors() uint64 {
	var n uint64
	for _, r := range reasons {
		n += s.Get(r)
	}
	return n
}

var le = binary.LittleEndian

func alignUp(n, a int) int { return (n + a - 1) &^ (a - 1) }

func isPow2(n int) bool { return n > 0 && n&(n-1) == 0 }
