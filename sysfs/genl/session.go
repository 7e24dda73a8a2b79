package genl

import (
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// This file holds the wire definitions of the data-session and
// control-port commands (CONNECT, DISCONNECT, GET_SESSION, DUMP_PORTS):
// their attribute sets, limits and request decoding. The server's
// handlers are in handlers_session.go, the client's methods in
// client_session.go.

// Attributes of the "session" set (inside AttrSession).
const (
	SessAttrState     uint16 = 1  // string: "connected" or "disconnected"
	SessAttrProtocol  uint16 = 2  // string: "mbim", "qmi"
	SessAttrAPN       uint16 = 3  // string
	SessAttrIPType    uint16 = 4  // string: "ipv4", "ipv6", "ipv4v6"
	SessAttrIPv4      uint16 = 5  // string: address/prefix, e.g. "198.18.0.1/24"
	SessAttrGateway4  uint16 = 6  // string
	SessAttrDNS4      uint16 = 7  // string, repeated: one per server
	SessAttrIPv6      uint16 = 8  // string: address/prefix
	SessAttrGateway6  uint16 = 9  // string
	SessAttrDNS6      uint16 = 10 // string, repeated
	SessAttrMTU       uint16 = 11 // u32
	SessAttrInterface uint16 = 12 // string: the interface configured
	SessAttrLastError uint16 = 13 // string: why the last operation failed
	SessAttrNumber    uint16 = 14 // u32: the session number
)

// Attributes of the "port" set (inside AttrPort).
const (
	PortAttrName  uint16 = 1 // string: e.g. "wwan0mbim0"
	PortAttrPath  uint16 = 2 // string: what a tool opens
	PortAttrStats uint16 = 3 // nest: StatsAttrEntry nests (counter name below stats/ports/<name>/)
)

// Limits of the CONNECT strings, in bytes without the NUL.
const (
	MaxAPNLen       = 100 // 3GPP TS 23.003: an APN is at most 100 octets
	MaxIPTypeLen    = 15
	MaxInterfaceLen = 15 // IFNAMSIZ less the NUL
	// MaxSessionID is the highest session number a request may name.
	MaxSessionID = 255
)

// ConnectTimeout is the client's default wait for a CONNECT or DISCONNECT
// answer: the modem may take seconds to activate a context.
const ConnectTimeout = 65 * time.Second

func (r *Request) decodeSessionAttr(typ uint16, name string, p []byte, off int) error {
	if typ == AttrSessionID {
		v, err := parseU32(name, p, off)
		if err != nil {
			return err
		}
		if v > MaxSessionID {
			return reqErr(unix.ERANGE, off, "%s: %d: session numbers are 0..%d", name, v, MaxSessionID)
		}
		r.SessionID = &v
		return nil
	}
	maxLen := MaxAPNLen
	switch typ {
	case AttrIPType:
		maxLen = MaxIPTypeLen
	case AttrInterface:
		maxLen = MaxInterfaceLen
	}
	s, err := parseString(name, p, maxLen, off)
	if err != nil {
		return err
	}
	for _, c := range s {
		if c <= ' ' || c == 0x7f {
			return reqErr(unix.EINVAL, off, "%s: %q holds white space or control characters", name, s)
		}
	}
	switch typ {
	case AttrAPN:
		r.APN = s
	case AttrInterface:
		if s == "" || s == "." || s == ".." || strings.ContainsAny(s, "/:") {
			return reqErr(unix.EINVAL, off, "%s: %q is not a valid interface name", name, s)
		}
		r.Interface = s
	default:
		r.IPType = s
	}
	return nil
}
