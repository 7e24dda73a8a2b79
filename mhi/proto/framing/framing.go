// Package framing names how IP packets are framed on an MHI IP data
// channel pair — raw IP, MBIM NTB16 or NTB32, QMAP — for every side that
// has to agree on it: the host's network device (mhinet), the mock modem's
// IP data function (mhi/ep), the device table (pcigeneric) and the command
// line. It also states, once, the contract of the aggregate writers of
// mhi/proto/ntb and mhi/proto/qmap ([Writer]) and the errors they share.
// Like the codecs beside it, it imports nothing of this module.
package framing

import (
	"errors"
	"fmt"
	"strings"
)

// Format is the framing of IP packets on an IP data channel pair.
//
// The zero value is [RawIP]: no framing at all, one packet per transfer.
// It is what a data channel carries when nothing is negotiated (Linux's
// mhi_net on IP_HW0), what the host's network device has always taken by
// default (a zero mhinet.Config is raw IP on IP_HW0), and the one framing
// that needs no parameters (session, mux id, aggregate limits). A
// component whose default is another framing says so explicitly: the
// mock modem speaks NTB16 on an IP_HW0_MBIM pair because
// pcigeneric.PairFormat names it, not because NTB16 is a zero value.
type Format uint8

// The framings.
const (
	// RawIP carries one bare IP packet per transfer, both ways: Linux's
	// mhi_net without rmnet.
	RawIP Format = iota
	// NTB16 aggregates packets into MBIM NTB16 blocks (NTH16 and NDP16):
	// Linux's mhi_wwan_mbim, which sends one datagram per NTB16 and takes
	// NTB16 or NTB32 aggregates.
	NTB16
	// NTB32 aggregates packets into MBIM NTB32 blocks (NTH32 and NDP32).
	NTB32
	// QMAP aggregates packets into QMAP (rmnet MAP) frames: mhi_net with
	// rmnet.
	QMAP
)

// names are the names Parse accepts for each Format, in lower case; the
// first is the one String returns.
var names = [...][]string{
	RawIP: {"raw", "rawip", "ip"},
	NTB16: {"mbim", "ntb", "ntb16"},
	NTB32: {"ntb32"},
	QMAP:  {"qmap", "rmnet"},
}

// Valid reports whether f is one of the framings above.
func (f Format) Valid() bool { return int(f) < len(names) }

// String returns the name the command line uses for f: "raw", "mbim"
// (NTB16, the framing of MBIM data as mhi_wwan_mbim sends it), "ntb32" or
// "qmap"; "format(N)" for an invalid value.
func (f Format) String() string {
	if f.Valid() {
		return names[f][0]
	}
	return fmt.Sprintf("format(%d)", uint8(f))
}

// Parse converts a name to a Format, ignoring case: "raw", "rawip" or
// "ip" (RawIP); "mbim", "ntb" or "ntb16" (NTB16); "ntb32" (NTB32); "qmap"
// or "rmnet" (QMAP).
func Parse(s string) (Format, error) {
	name := strings.ToLower(s)
	known := make([]string, 0, len(names))
	for f, ns := range names {
		for _, n := range ns {
			if n == name {
				return Format(f), nil
			}
		}
		known = append(known, ns[0])
	}
	return RawIP, fmt.Errorf("framing: unknown format %q (%s)", s, strings.Join(known, ", "))
}

// Writer builds one aggregate at a time, in place, in a buffer its caller
// owns. The writers of mhi/proto/ntb and mhi/proto/qmap implement it; each
// opens an aggregate with its own Reset, which takes the codec's Config.
// No method allocates in the steady state.
type Writer interface {
	// Add copies one packet into the open aggregate. When it fails the
	// aggregate is unchanged and the error, returned unwrapped so that a
	// data path can compare it without allocating, is one of:
	//
	//   - ErrFull: the packet does not fit the rest of the buffer; finish
	//     this aggregate and add the packet to the next one.
	//   - ErrLimit: the aggregate already holds as many packets as its
	//     configuration allows; finish it and add the packet to the next.
	//   - ErrTooLarge: the packet would not fit an empty aggregate either,
	//     so a new aggregate cannot help.
	//   - ErrEmpty: a zero-length packet cannot be framed.
	//   - ErrNotOpen: no aggregate is open (no successful Reset, or
	//     Finish was called).
	Add(packet []byte) error
	// Count returns the number of packets in the open aggregate.
	Count() int
	// Finish writes the aggregate's headers, closes it and returns its
	// length: the aggregate is the buffer's first n bytes.
	Finish() (n int)
}

// The outcomes of Writer.Add other than success, shared by every codec;
// the codecs' size functions (ntb.Size, qmap.FrameLen, …) wrap them too.
// Match with errors.Is.
var (
	// ErrFull: the packet does not fit the rest of the aggregate's buffer.
	ErrFull = errors.New("framing: packet does not fit the rest of the aggregate")
	// ErrLimit: the aggregate already holds its most packets.
	ErrLimit = errors.New("framing: aggregate holds its most packets")
	// ErrTooLarge: the packet does not fit even an empty aggregate.
	ErrTooLarge = errors.New("framing: packet does not fit an empty aggregate")
	// ErrEmpty: a zero-length packet cannot be framed (an aggregate would
	// read it as its end).
	ErrEmpty = errors.New("framing: empty packet")
	// ErrNotOpen: Add was called without a successful Reset, or after
	// Finish.
	ErrNotOpen = errors.New("framing: no open aggregate")
)
