package genl

import (
	"bytes"
	"fmt"
	"strings"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// RequestError is why the server refuses a request: the errno and the
// extended acknowledgement its NLMSG_ERROR reply carries.
type RequestError struct {
	// Errno is sent negated in nlmsgerr.error.
	Errno unix.Errno
	// Msg is the human-readable NLMSGERR_ATTR_MSG.
	Msg string
	// Offset is the byte offset, from the start of the request's netlink
	// header, of the attribute at fault (NLMSGERR_ATTR_OFFS); 0 for none.
	Offset int
	// Missing is the type of a required top-level attribute the request
	// lacks (NLMSGERR_ATTR_MISS_TYPE); 0 for none.
	Missing uint16
	// Err is the underlying cause, such as a sysfs sentinel; may be nil.
	Err error
}

// Error returns the message and the errno.
func (e *RequestError) Error() string {
	return fmt.Sprintf("%s (%v)", e.Msg, e.Errno)
}

// Unwrap returns the errno and the cause, so errors.Is matches
// unix.EINVAL and sysfs.ErrInvalid alike.
func (e *RequestError) Unwrap() []error {
	if e.Err != nil {
		return []error{e.Errno, e.Err}
	}
	return []error{e.Errno}
}

func reqErr(errno unix.Errno, off int, format string, args ...any) *RequestError {
	return &RequestError{Errno: errno, Offset: off, Msg: fmt.Sprintf(format, args...)}
}

// Request is one decoded request message, validated against the family's
// policy (attribute types, sizes, which command takes which attribute, and
// required attributes).
type Request struct {
	// Header is the netlink header as received. Header.PID is what the
	// sender wrote and is not trusted; the server replies to the port the
	// kernel reports.
	Header netlink.Header
	// Command and Version come from the generic-netlink header.
	Command uint8
	Version uint8

	// DevName is AttrDevName ("" when absent).
	DevName string
	// MRU, MTU and TimeoutMs are the SET_DEVICE values (nil when absent).
	MRU, MTU, TimeoutMs *uint32
	// AutosuspendMs and PMRequest are the SET_DEVICE power settings.
	AutosuspendMs, PMRequest *uint32
	// APN and IPType are the CONNECT values ("" when absent).
	APN, IPType string
	// SessionID is the session number of a CONNECT, DISCONNECT or
	// GET_SESSION (nil: absent, session 0); Interface a CONNECT's
	// interface name.
	SessionID *uint32
	Interface string
	// DumpCrash and DumpWaitMs are the GET_DUMP values (rddm.go).
	DumpCrash  bool
	DumpWaitMs *uint32

	// FamilyName and FamilyID are the nlctrl GETFAMILY attributes
	// ("" and 0 when absent).
	FamilyName string
	FamilyID   uint16

	// offs holds each attribute's offset from the start of the message,
	// for NLMSGERR_ATTR_OFFS.
	offs [AttrMax + 1]int
}

// Ignored reports whether the message is not for the server to answer: it
// lacks NLM_F_REQUEST (a reply or a stray message), or it is a netlink
// control message (type below NLMSG_MIN_TYPE). The kernel skips both, which
// also keeps two servers from answering each other's errors forever.
func (r *Request) Ignored() bool {
	return r.Header.Flags&netlink.Request == 0 || r.Header.Type < nlmsgMinType
}

// Ctrl reports whether the request is addressed to nlctrl (GENL_ID_CTRL).
func (r *Request) Ctrl() bool { return r.Header.Type == genlIDCtrl }

// Dump reports whether the request carries NLM_F_DUMP (both of its bits).
func (r *Request) Dump() bool { return r.Header.Flags&netlink.Dump == netlink.Dump }

// AttrOffset returns the offset of top-level attribute typ within the
// message, or 0 if the request did not carry it.
func (r *Request) AttrOffset(typ uint16) int {
	if int(typ) < len(r.offs) {
		return r.offs[typ]
	}
	return 0
}

// DecodeRequest decodes the netlink message at the start of b, a datagram
// that may hold several messages, and returns it with n, the number of
// bytes it occupies (its aligned length, at least 1 when b is not empty),
// so the caller can continue with b[n:]. When the header itself is unusable
// (truncated, or a length that does not fit), n is len(b).
//
// Messages that Ignored reports are returned without further checks. For
// the rest the error, if any, is a *RequestError that says what to answer:
// EINVAL for malformed framing, unknown or misplaced attributes, wrong
// attribute sizes and missing required attributes; ERANGE for an oversized
// string; EOPNOTSUPP for an unknown command; ENOENT for an unknown family.
// DecodeRequest never panics, whatever b holds.
func DecodeRequest(b []byte) (req Request, n int, err error) {
	if len(b) < nlHdrLen {
		return req, len(b), reqErr(unix.EINVAL, 0, "truncated netlink header: %d of %d bytes", len(b), nlHdrLen)
	}
	req.Header = netlink.Header{
		Length:   ne.Uint32(b[0:]),
		Type:     netlink.HeaderType(ne.Uint16(b[4:])),
		Flags:    netlink.HeaderFlags(ne.Uint16(b[6:])),
		Sequence: ne.Uint32(b[8:]),
		PID:      ne.Uint32(b[12:]),
	}
	l := req.Header.Length
	if l < nlHdrLen {
		return req, len(b), reqErr(unix.EINVAL, 0, "nlmsg_len %d is shorter than the %d-byte header", l, nlHdrLen)
	}
	if l > uint32(len(b)) {
		return req, len(b), reqErr(unix.EINVAL, 0, "nlmsg_len %d exceeds the %d bytes received", l, len(b))
	}
	n = min(align4(int(l)), len(b))
	if req.Ignored() {
		return req, n, nil
	}
	msg := b[:l]
	switch uint16(req.Header.Type) {
	case genlIDCtrl:
		err = req.decodeCtrl(msg)
	case FamilyID:
		err = req.decodeMHI(msg)
	default:
		err = reqErr(unix.ENOENT, 0, "no generic netlink family with id %#x here (%s is %#x)", uint16(req.Header.Type), FamilyName, FamilyID)
	}
	return req, n, err
}

// walkAttrs calls fn for each attribute of msg from offset start, with its
// type (flags masked off), raw type, payload and offset. It rejects
// attributes that overrun the message and trailing bytes, as the kernel's
// strict validation does.
func walkAttrs(msg []byte, start int, fn func(typ, raw uint16, p []byte, off int) error) error {
	off := start
	for off < len(msg) {
		if len(msg)-off < nlaHdrLen {
			return reqErr(unix.EINVAL, off, "%d bytes left over after the attributes", len(msg)-off)
		}
		alen := int(ne.Uint16(msg[off:]))
		raw := ne.Uint16(msg[off+2:])
		if alen < nlaHdrLen || alen > len(msg)-off {
			return reqErr(unix.EINVAL, off, "attribute at offset %d: length %d does not fit the %d bytes left", off, alen, len(msg)-off)
		}
		if err := fn(raw&nlaTypeMask, raw, msg[off+nlaHdrLen:off+alen], off); err != nil {
			return err
		}
		off += align4(alen)
	}
	return nil
}

// parseString accepts a string attribute with or without its terminating
// NUL (NLA_STRING and NLA_NUL_STRING alike).
func parseString(name string, p []byte, maxLen, off int) (string, error) {
	if len(p) > 0 && p[len(p)-1] == 0 {
		p = p[:len(p)-1]
	}
	if len(p) > maxLen {
		return "", reqErr(unix.ERANGE, off, "%s: %d bytes, longer than the %d-byte limit", name, len(p), maxLen)
	}
	if bytes.IndexByte(p, 0) >= 0 {
		return "", reqErr(unix.EINVAL, off, "%s: embedded NUL byte", name)
	}
	return string(p), nil
}

func parseU32(name string, p []byte, off int) (uint32, error) {
	if len(p) != 4 {
		return 0, reqErr(unix.EINVAL, off, "%s: attribute is %d bytes, want 4 (u32)", name, len(p))
	}
	return ne.Uint32(p), nil
}

// validDevName rejects names that could escape devices/<name> in the tree
// or are not printable.
func validDevName(s string) bool {
	if s == "" || s == "." || s == ".." || strings.ContainsRune(s, '/') {
		return false
	}
	for _, r := range s {
		if r <= ' ' || r == 0x7f || r > '~' {
			return false
		}
	}
	return true
}

// mhiPolicy says which attributes each command accepts.
var mhiPolicy = [cmdMax + 1]uint32{
	CmdGetDevice:    1 << AttrDevName,
	CmdSetDevice:    1<<AttrDevName | 1<<AttrMRU | 1<<AttrMTU | 1<<AttrTimeoutMs | 1<<AttrAutosuspendMs | 1<<AttrPMRequest,
	CmdGetStats:     1 << AttrDevName,
	CmdDumpChannels: 1 << AttrDevName,
	CmdConnect:      1<<AttrDevName | 1<<AttrAPN | 1<<AttrIPType | 1<<AttrSessionID | 1<<AttrInterface,
	CmdDisconnect:   1<<AttrDevName | 1<<AttrSessionID,
	CmdGetSession:   1<<AttrDevName | 1<<AttrSessionID,
	CmdDumpPorts:    1 << AttrDevName,
	CmdGetDump:      1<<AttrDevName | 1<<AttrDumpCrash | 1<<AttrDumpWaitMs,
}

func (r *Request) decodeMHI(msg []byte) error {
	if len(msg) < nlHdrLen+genlHdrLen {
		return reqErr(unix.EINVAL, 0, "truncated generic netlink header: %d of %d bytes", len(msg)-nlHdrLen, genlHdrLen)
	}
	r.Command, r.Version = msg[nlHdrLen], msg[nlHdrLen+1]
	if r.Command == 0 || r.Command > cmdMax {
		return reqErr(unix.EOPNOTSUPP, 0, "unknown command %d in family %s", r.Command, FamilyName)
	}
	if err := walkAttrs(msg, nlHdrLen+genlHdrLen, r.decodeMHIAttr); err != nil {
		return err
	}
	return r.checkRequired()
}

// decodeMHIAttr decodes one top-level attribute of an mhi-family request
// (walkAttrs' callback): its type must be one the command accepts, with
// the size and range the policy gives it.
func (r *Request) decodeMHIAttr(typ, raw uint16, p []byte, off int) error {
	allowed := mhiPolicy[r.Command]
	if typ == 0 || typ > AttrMax {
		return reqErr(unix.EINVAL, off, "unknown attribute type %d", typ)
	}
	name := attrName(typ)
	if allowed&(1<<typ) == 0 {
		return reqErr(unix.EINVAL, off, "attribute %s is not valid in %s requests", name, cmdName(r.Command))
	}
	if raw&nlaFNested != 0 {
		return reqErr(unix.EINVAL, off, "%s: NLA_F_NESTED set on a scalar attribute", name)
	}
	r.offs[typ] = off
	switch typ {
	case AttrDevName:
		s, err := parseString(name, p, MaxDevNameLen, off)
		if err != nil {
			return err
		}
		if !validDevName(s) {
			return reqErr(unix.EINVAL, off, "%s: %q is not a valid device name", name, s)
		}
		r.DevName = s
	case AttrMRU, AttrMTU, AttrTimeoutMs, AttrAutosuspendMs, AttrPMRequest:
		v, err := parseU32(name, p, off)
		if err != nil {
			return err
		}
		switch typ {
		case AttrMRU:
			r.MRU = &v
		case AttrMTU:
			r.MTU = &v
		case AttrAutosuspendMs:
			r.AutosuspendMs = &v
		case AttrPMRequest:
			if v != PMRequestSuspend && v != PMRequestResume {
				return reqErr(unix.EINVAL, off, "%s: %d: want %d (suspend) or %d (resume)", name, v, PMRequestSuspend, PMRequestResume)
			}
			r.PMRequest = &v
		default:
			r.TimeoutMs = &v
		}
	case AttrAPN, AttrIPType, AttrSessionID, AttrInterface:
		return r.decodeSessionAttr(typ, name, p, off)
	case AttrDumpCrash, AttrDumpWaitMs, AttrDumpSize, AttrDumpSHA256, AttrDumpTime, AttrDumpOffset, AttrDumpData:
		return r.decodeDumpAttr(typ, name, p, off)
	}
	return nil
}

// checkRequired fails a request that lacks an attribute its command
// needs: DEV_NAME (all but a GET_DEVICE dump), APN (CONNECT), something
// to set (SET_DEVICE).
func (r *Request) checkRequired() error {
	needName := r.Command != CmdGetDevice || !r.Dump()
	if needName && r.DevName == "" {
		return &RequestError{Errno: unix.EINVAL, Missing: AttrDevName,
			Msg: fmt.Sprintf("%s needs the %s attribute", cmdName(r.Command), attrName(AttrDevName))}
	}
	if r.Command == CmdConnect && r.APN == "" {
		return &RequestError{Errno: unix.EINVAL, Missing: AttrAPN,
			Msg: fmt.Sprintf("%s needs the %s attribute", cmdName(r.Command), attrName(AttrAPN))}
	}
	if r.Command == CmdSetDevice && r.MRU == nil && r.MTU == nil && r.TimeoutMs == nil && r.AutosuspendMs == nil && r.PMRequest == nil {
		return &RequestError{Errno: unix.EINVAL, Missing: AttrMRU,
			Msg: "set-device: nothing to set (give mru, mtu, timeout-ms, autosuspend-ms or pm-request)"}
	}
	return nil
}

func (r *Request) decodeCtrl(msg []byte) error {
	if len(msg) < nlHdrLen+genlHdrLen {
		return reqErr(unix.EINVAL, 0, "truncated generic netlink header: %d of %d bytes", len(msg)-nlHdrLen, genlHdrLen)
	}
	r.Command, r.Version = msg[nlHdrLen], msg[nlHdrLen+1]
	if r.Command != unix.CTRL_CMD_GETFAMILY {
		return reqErr(unix.EOPNOTSUPP, 0, "nlctrl command %d is not supported here (only GETFAMILY)", r.Command)
	}
	err := walkAttrs(msg, nlHdrLen+genlHdrLen, func(typ, raw uint16, p []byte, off int) error {
		switch typ {
		case unix.CTRL_ATTR_FAMILY_ID:
			if len(p) != 2 {
				return reqErr(unix.EINVAL, off, "family-id: attribute is %d bytes, want 2 (u16)", len(p))
			}
			r.FamilyID = ne.Uint16(p)
		case unix.CTRL_ATTR_FAMILY_NAME:
			s, err := parseString("family-name", p, genlNameSize-1, off)
			if err != nil {
				return err
			}
			r.FamilyName = s
		default:
			return reqErr(unix.EINVAL, off, "nlctrl attribute %d is not valid in GETFAMILY requests", typ)
		}
		r.offs[typ] = off
		return nil
	})
	if err != nil {
		return err
	}
	if !r.Dump() && r.FamilyName == "" && r.FamilyID == 0 {
		return &RequestError{Errno: unix.EINVAL, Missing: unix.CTRL_ATTR_FAMILY_NAME,
			Msg: "GETFAMILY needs family-name or family-id"}
	}
	return nil
}
