// Package genl serves gomhi's attribute tree (package sysfs) as the generic
// netlink family "mhi", and is the matching client that mhictl uses.
//
// A user-space program cannot register a real generic-netlink family, so the
// family travels as generic-netlink framing over NETLINK_USERSOCK: the server
// binds a well-known port id (DefaultPort, 0x4d4849 "MHI") and answers
// requests sent to it, including nlctrl's CTRL_CMD_GETFAMILY so that
// genetlink.Conn.GetFamily("mhi") works as it does against the kernel.
// Replies and errors follow the kernel's conventions: NLMSG_ERROR with
// -errno, the request's header and an extended acknowledgement
// (NLMSGERR_ATTR_MSG, NLMSGERR_ATTR_OFFS).
//
// Any local user may bind a NETLINK_USERSOCK port, so the port is not
// trusted by itself: a server pushed off DefaultPort by another user's
// socket serves on a kernel-assigned port advertised in a root-owned run
// file (RunFile, ServerOptions.RunFile), and the client trusts only root,
// its own user and the server a trusted run file names — it checks who
// holds the port (/proc) before sending, and the kernel-stamped
// credentials (SCM_CREDENTIALS) of every reply, failing with
// ErrUntrustedServer otherwise.
//
// The wire format (commands, attributes, their numbers and types) is
// specified in docs/netlink-mhi.yaml and explained in docs/NETLINK.md.
// The server keeps no state of its own: every GET reads the tree and every
// SET goes through sysfs.Tree.Set, so validation lives in one place.
package genl

import (
	"encoding/binary"
	"strconv"
	"time"
)

// Family identity.
const (
	// FamilyName is the generic-netlink family name clients resolve.
	FamilyName = "mhi"
	// FamilyVersion is the family's version (genlmsghdr.version).
	FamilyVersion = 1
	// FamilyID is the family id the server answers to (the nlmsg_type of
	// its messages). Clients should resolve it with CTRL_CMD_GETFAMILY
	// rather than rely on the number.
	FamilyID uint16 = 0x4d
	// DefaultPort is the NETLINK_USERSOCK port id the server binds unless
	// told otherwise: "MHI" in ASCII.
	DefaultPort uint32 = 0x4d4849
	// DefaultTimeout bounds one client request.
	DefaultTimeout = 2 * time.Second
)

// Commands (genlmsghdr.cmd). Replies carry the command of their request.
const (
	// CmdGetDevice: DEV_NAME → the device's attributes; with NLM_F_DUMP
	// (and optionally DEV_NAME as a filter) → DEVICE nests of every device.
	CmdGetDevice uint8 = 1
	// CmdSetDevice: DEV_NAME plus any of MRU, MTU, TIMEOUT_MS → applied
	// through the tree; the reply is the device as CmdGetDevice returns it.
	// Needs uid 0 or CAP_NET_ADMIN.
	CmdSetDevice uint8 = 2
	// CmdGetStats: DEV_NAME → one STATS nest of {NAME, VALUE} entries.
	CmdGetStats uint8 = 3
	// CmdDumpChannels: DEV_NAME → one multipart message per channel, each
	// with DEV_NAME and a CHANNEL nest, then NLMSG_DONE.
	CmdDumpChannels uint8 = 4
	// CmdConnect: DEV_NAME, APN and optionally IP_TYPE, SESSION_ID and
	// INTERFACE → connects the device's data session (SESSION_ID's; 0
	// when absent) over its control channel and configures its
	// interface; the reply is DEV_NAME and a SESSION nest, as
	// CmdGetSession returns it. Needs uid 0 or CAP_NET_ADMIN.
	CmdConnect uint8 = 5
	// CmdDisconnect: DEV_NAME and optionally SESSION_ID → disconnects
	// the data session and removes
	// its addresses; the reply as CmdGetSession. Needs uid 0 or
	// CAP_NET_ADMIN.
	CmdDisconnect uint8 = 6
	// CmdGetSession: DEV_NAME and optionally SESSION_ID → DEV_NAME and
	// a SESSION nest; with NLM_F_DUMP, one message per session of the
	// device (DEV_NAME and a SESSION nest each), then NLMSG_DONE.
	CmdGetSession uint8 = 7
	// CmdDumpPorts: DEV_NAME → one multipart message per control port,
	// each with DEV_NAME and a PORT nest, then NLMSG_DONE.
	CmdDumpPorts uint8 = 8

	cmdMax = CmdGetDump // rddm.go
)

// Attributes of the top-level "mhi" set (also used inside DEVICE nests).
const (
	AttrDevName   uint16 = 1  // string: device name, e.g. "mhi0"
	AttrMRU       uint16 = 2  // u32: receive buffer size in bytes
	AttrMTU       uint16 = 3  // u32: largest transmitted packet in bytes
	AttrTimeoutMs uint16 = 4  // u32: command/state-change timeout
	AttrState     uint16 = 5  // string: MHI state (M0, M3, SYS_ERR…)
	AttrEE        uint16 = 6  // string: execution environment (AMSS…)
	AttrModel     uint16 = 7  // string: device-table model name
	AttrSerial    uint16 = 8  // string: BHI serial number
	AttrStats     uint16 = 9  // nest: StatsAttrEntry nests
	AttrChannel   uint16 = 10 // nest: ChanAttr* attributes
	AttrDevice    uint16 = 11 // nest, repeated: one device in a dump
	AttrAPN       uint16 = 12 // string: access point name (CONNECT)
	AttrIPType    uint16 = 13 // string: "ipv4", "ipv6" or "ipv4v6" (CONNECT)
	AttrSession   uint16 = 14 // nest: SessAttr* attributes
	AttrPort      uint16 = 15 // nest: PortAttr* attributes
	// AttrAutosuspendMs is the idle time after which the host suspends
	// the device (M3), 0: off (u32).
	AttrAutosuspendMs uint16 = 16
	// AttrPMRequest asks for a power-state change in set-device (u32:
	// PMRequestSuspend, PMRequestResume).
	AttrPMRequest uint16 = 17

	// AttrPMState is the host's power-management state (string:
	// devices/<dev>/pm_state: M0, M3, RECOVERY_FAILED, LINK_DOWN…).
	AttrPMState uint16 = 25
	// AttrRecovery is SYS_ERR recovery's standing (string:
	// devices/<dev>/recovery).
	AttrRecovery uint16 = 26
	// AttrSessionID is the session number a CONNECT, DISCONNECT or
	// GET_SESSION is about (u32, 0..255; absent: 0).
	AttrSessionID uint16 = 27
	// AttrInterface names the interface a CONNECT of a session N > 0
	// makes (string; absent: <tun>.<N>).
	AttrInterface uint16 = 28

	// AttrMax is the highest top-level attribute type.
	AttrMax = AttrInterface
)

// Values of AttrPMRequest.
const (
	PMRequestSuspend uint32 = 1 // M0 → M3
	PMRequestResume  uint32 = 2 // M3 → M0
)

// Attributes of the "stats" set (inside AttrStats).
const (
	StatsAttrEntry uint16 = 1 // nest, repeated: StatAttrName + StatAttrValue
)

// Attributes of the "stat-entry" set (inside StatsAttrEntry).
const (
	StatAttrName  uint16 = 1 // string: counter path below stats/, e.g. "net/rx_packets"
	StatAttrValue uint16 = 2 // u64: counter value
)

// Attributes of the "channel" set (inside AttrChannel).
const (
	ChanAttrNum       uint16 = 1  // u32: channel number
	ChanAttrName      uint16 = 2  // string: channel name, e.g. "IP_HW0"
	ChanAttrDir       uint16 = 3  // string: "UL" or "DL"
	ChanAttrState     uint16 = 4  // string: host view of the channel state
	ChanAttrCtxState  uint16 = 5  // string: channel context state (device view)
	ChanAttrElements  uint16 = 6  // u64: transfer ring size
	ChanAttrPending   uint16 = 7  // u64: queued, not completed elements
	ChanAttrCompleted uint16 = 8  // u64: elements completed
	ChanAttrBytes     uint16 = 9  // u64: bytes completed
	ChanAttrHostRP    uint16 = 10 // u64: host read pointer (IOVA)
	ChanAttrHostWP    uint16 = 11 // u64: host write pointer (IOVA)
	ChanAttrCtxRP     uint16 = 12 // u64: context read pointer (IOVA)
	ChanAttrCtxWP     uint16 = 13 // u64: context write pointer (IOVA)
)

// MaxDevNameLen is the longest DEV_NAME accepted, in bytes (without the
// terminating NUL).
const MaxDevNameLen = 63

// Netlink and nlctrl numbers not all of which x/sys/unix names.
const (
	nlHdrLen   = 16
	genlHdrLen = 4
	nlaHdrLen  = 4

	nlmsgMinType = 0x10 // NLMSG_MIN_TYPE: below are control messages
	genlIDCtrl   = 0x10 // GENL_ID_CTRL
	ctrlVersion  = 2

	nlaFNested    = 0x8000
	nlaFByteOrder = 0x4000
	nlaTypeMask   = ^uint16(nlaFNested | nlaFByteOrder)

	nlmsgerrAttrMsg      = 1 // NLMSGERR_ATTR_MSG
	nlmsgerrAttrOffs     = 2 // NLMSGERR_ATTR_OFFS
	nlmsgerrAttrMissType = 5 // NLMSGERR_ATTR_MISS_TYPE

	genlNameSize = 16 // GENL_NAMSIZ, including the NUL
)

func align4(n int) int { return (n + 3) &^ 3 }

var ne = binary.NativeEndian

// attrNames names the top-level attributes as the YAML spec does.
var attrNames = [...]string{
	AttrDevName:   "dev-name",
	AttrMRU:       "mru",
	AttrMTU:       "mtu",
	AttrTimeoutMs: "timeout-ms",
	AttrState:     "state",
	AttrEE:        "ee",
	AttrModel:     "model",
	AttrSerial:    "serial",
	AttrStats:     "stats",
	AttrChannel:   "channel",
	AttrDevice:    "device",
	AttrAPN:       "apn",
	AttrIPType:    "ip-type",
	AttrSession:   "session",
	AttrPort:      "port",

	AttrAutosuspendMs: "autosuspend-ms",
	AttrPMRequest:     "pm-request",
	AttrDumpCrash:     "dump-crash",
	AttrDumpWaitMs:    "dump-wait-ms",
	AttrDumpSize:      "dump-size",
	AttrDumpSHA256:    "dump-sha256",
	AttrDumpTime:      "dump-time",
	AttrDumpOffset:    "dump-offset",
	AttrDumpData:      "dump-data",
	AttrPMState:       "pm-state",
	AttrRecovery:      "recovery",
	AttrSessionID:     "session-id",
	AttrInterface:     "interface",
}

var cmdNames = [...]string{
	CmdGetDevice:    "get-device",
	CmdSetDevice:    "set-device",
	CmdGetStats:     "get-stats",
	CmdDumpChannels: "dump-channels",
	CmdConnect:      "connect",
	CmdDisconnect:   "disconnect",
	CmdGetSession:   "get-session",
	CmdDumpPorts:    "dump-ports",
	CmdGetDump:      "get-dump",
}

func attrName(t uint16) string {
	if int(t) < len(attrNames) && attrNames[t] != "" {
		return attrNames[t]
	}
	return "attribute " + strconv.Itoa(int(t))
}

func cmdName(c uint8) string {
	if int(c) < len(cmdNames) && cmdNames[c] != "" {
		return cmdNames[c]
	}
	return "command " + strconv.Itoa(int(c))
}

// appendHeader appends a netlink header whose length field is patched by
// finishMsg.
func appendHeader(b []byte, typ uint16, flags uint16, seq, pid uint32) []byte {
	b = ne.AppendUint32(b, 0)
	b = ne.AppendUint16(b, typ)
	b = ne.AppendUint16(b, flags)
	b = ne.AppendUint32(b, seq)
	return ne.AppendUint32(b, pid)
}

// finishMsg sets the length of the message starting at start and pads it
// to 4 bytes.
func finishMsg(b []byte, start int) []byte {
	ne.PutUint32(b[start:], uint32(len(b)-start))
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

// appendAttr appends one TLV with payload p, padded to 4 bytes.
func appendAttr(b []byte, typ uint16, p []byte) []byte {
	b = ne.AppendUint16(b, uint16(nlaHdrLen+len(p)))
	b = ne.AppendUint16(b, typ)
	b = append(b, p...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}
