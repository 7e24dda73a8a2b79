package ctrlport

import (
	"encoding/binary"
	"fmt"
)

// A Framer cuts a client's byte stream into the protocol's messages, so
// that each becomes one uplink transfer (as each write(2) does on a Linux
// wwan port).
type Framer interface {
	// Frame examines the unconsumed bytes at the head of the stream and
	// returns n > 0 when they start with a whole message of n bytes, 0
	// when more bytes are needed, or n < 0 when the first -n bytes cannot
	// start a message and are to be skipped (counted as garbage). A
	// message is never longer than MaxMTU; with MaxMTU bytes buffered
	// Frame must not return 0.
	Frame(buf []byte) int
	// Name names the protocol ("MBIM", "QMUX", "AT").
	Name() string
}

// MBIMFramer frames MBIM: a host message starts with a MessageType of
// OPEN, CLOSE, COMMAND or HOST_ERROR (1–4) and its MessageLength (at
// offset 4, at least 12 and at most MaxMTU). Anything else is skipped a
// byte at a time until such a header starts the stream.
type MBIMFramer struct{}

// Name implements Framer.
func (MBIMFramer) Name() string { return "MBIM" }

// Frame implements Framer.
func (MBIMFramer) Frame(buf []byte) int {
	if len(buf) >= 4 {
		if t := binary.LittleEndian.Uint32(buf); t < 1 || t > 4 {
			return -1
		}
	}
	if len(buf) < 8 {
		return 0
	}
	n := binary.LittleEndian.Uint32(buf[4:])
	if n < 12 || n > MaxMTU {
		return -1
	}
	if uint32(len(buf)) < n {
		return 0
	}
	return int(n)
}

// QMUXFramer frames QMI over QMUX: an interface-type byte 0x01, then a
// u16 length counting every byte after the marker (a frame of length+1
// bytes, at least a 6-byte QMUX header). Anything else is skipped a byte
// at a time.
type QMUXFramer struct{}

// Name implements Framer.
func (QMUXFramer) Name() string { return "QMUX" }

// Frame implements Framer.
func (QMUXFramer) Frame(buf []byte) int {
	if len(buf) == 0 {
		return 0
	}
	if buf[0] != 0x01 {
		return -1
	}
	if len(buf) < 3 {
		return 0
	}
	n := int(binary.LittleEndian.Uint16(buf[1:])) + 1
	if n < 6 || n > MaxMTU {
		return -1
	}
	if len(buf) < n {
		return 0
	}
	return n
}

// ATFramer frames AT command lines: everything up to and including a
// carriage return (S3). Line feeds and NULs before a line (terminals
// that send CR LF) are skipped; a line longer than MaxMTU is skipped.
type ATFramer struct{}

// Name implements Framer.
func (ATFramer) Name() string { return "AT" }

// Frame implements Framer.
func (ATFramer) Frame(buf []byte) int {
	skip := 0
	for skip < len(buf) && (buf[skip] == '\n' || buf[skip] == 0) {
		skip++
	}
	if skip > 0 {
		return -skip
	}
	for i, c := range buf {
		if c == '\r' {
			return i + 1
		}
	}
	if len(buf) >= MaxMTU {
		return -len(buf)
	}
	return 0
}

// Kind is the type of a control port, as Linux's wwan core names them.
type Kind int

// Port kinds.
const (
	KindAT Kind = iota + 1
	KindMBIM
	KindQMI
	KindQCDM
	KindFirehose
)

// String returns the kind's name in port names: "at", "mbim", "qmi",
// "qcdm", "firehose".
func (k Kind) String() string {
	switch k {
	case KindAT:
		return "at"
	case KindMBIM:
		return "mbim"
	case KindQMI:
		return "qmi"
	case KindQCDM:
		return "qcdm"
	case KindFirehose:
		return "firehose"
	}
	return "unknown"
}

// KindOf returns the port kind Linux's mhi_wwan_ctrl gives a channel pair
// ("DUN" and "DUN2" are AT, "MBIM", "QMI", "DIAG" is QCDM, "FIREHOSE"),
// and false for pairs it does not expose.
func KindOf(pair string) (Kind, bool) {
	switch pair {
	case "DUN", "DUN2":
		return KindAT, true
	case "MBIM":
		return KindMBIM, true
	case "QMI":
		return KindQMI, true
	case "DIAG":
		return KindQCDM, true
	case "FIREHOSE":
		return KindFirehose, true
	}
	return 0, false
}

// FramerFor returns the framer of a port kind: MBIM, QMUX, AT; nil for
// the kinds without a message framing (QCDM, firehose).
func FramerFor(k Kind) Framer {
	switch k {
	case KindMBIM:
		return MBIMFramer{}
	case KindQMI:
		return QMUXFramer{}
	case KindAT:
		return ATFramer{}
	}
	return nil
}

// PortNames names the control ports of a wwan device as Linux's wwan core
// does: "wwan<dev><kind><n>", n counting ports of the same kind in the
// order given. pairs are the model's channel pair names in channel order;
// pairs Linux does not expose get "". For example ["DUN", "MBIM", "DUN2"]
// on wwan0 gives wwan0at0, wwan0mbim0, wwan0at1.
func PortNames(dev int, pairs []string) []string {
	seen := map[Kind]int{}
	out := make([]string, len(pairs))
	for i, p := range pairs {
		k, ok := KindOf(p)
		if !ok {
			continue
		}
		out[i] = fmt.Sprintf("wwan%d%s%d", dev, k, seen[k])
		seen[k]++
	}
	return out
}
