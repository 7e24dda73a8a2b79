package genl

import (
	"cmp"
	"errors"
	"fmt"
	"path"
	"strconv"
	"strings"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/gomhi/gomhi/sysfs"
)

// This file holds the server's handlers of the data-session and
// control-port commands (CONNECT, DISCONNECT, GET_SESSION, DUMP_PORTS),
// which go through the tree's session/ and ports/ entries like every
// other command.

// sessionNumber is the request's session number (0 when absent).
func sessionNumber(req *Request) int {
	if req.SessionID == nil {
		return 0
	}
	return int(*req.SessionID)
}

// sessionDir checks that the device exists and has the data session the
// request names: sessions/<N> on a device with several, session/ (N = 0
// only) on one with one.
func (s *Server) sessionDir(req *Request) (string, error) {
	base, err := s.devicePath(req)
	if err != nil {
		return "", err
	}
	if _, err := s.tree.LookupDir(base + "/session"); err != nil {
		return "", &RequestError{Errno: unix.EOPNOTSUPP, Offset: req.AttrOffset(AttrDevName), Err: err,
			Msg: fmt.Sprintf("%s has no data session (its model has no MBIM or QMI control channel, or the host stack drives none)", req.DevName)}
	}
	n := sessionNumber(req)
	sd, err := s.tree.LookupDir(base + "/sessions")
	if err != nil {
		if n != 0 {
			return "", reqErr(unix.EINVAL, req.AttrOffset(AttrSessionID), "%s: session %d: the device has session 0 only", req.DevName, n)
		}
		return base + "/session", nil
	}
	dir := base + "/sessions/" + strconv.Itoa(n)
	if _, err := s.tree.LookupDir(dir); err != nil {
		return "", reqErr(unix.EINVAL, req.AttrOffset(AttrSessionID), "%s: session %d is beyond the limit: the device takes sessions 0..%d",
			req.DevName, n, len(sd.Dirs())-1)
	}
	return dir, nil
}

// connect writes "APN [IP_TYPE [INTERFACE]]" to the session's connect
// file and answers with the session.
func (s *Server) connect(r *reply, cred *unix.Ucred) error {
	req := r.req
	v := req.APN
	if req.IPType != "" || req.Interface != "" {
		v += " " + cmp.Or(req.IPType, "ipv4")
	}
	if req.Interface != "" {
		v += " " + req.Interface
	}
	return s.setSession(r, cred, CmdConnect, "connect", v, func(err error) int {
		switch {
		case errors.Is(err, sysfs.ErrInvalid) && strings.Contains(err.Error(), "IP type"):
			return req.AttrOffset(AttrIPType)
		case req.Interface != "" && strings.Contains(err.Error(), req.Interface):
			return req.AttrOffset(AttrInterface)
		}
		return req.AttrOffset(AttrAPN)
	})
}

// disconnect writes the session's disconnect file and answers with the
// session.
func (s *Server) disconnect(r *reply, cred *unix.Ucred) error {
	return s.setSession(r, cred, CmdDisconnect, "disconnect", "1", func(error) int { return r.req.AttrOffset(AttrSessionID) })
}

// setSession lets an authorized sender write value to the session's
// file and answers with the session as cmd. A failure names the
// attribute at errOffset(err) (nil: none).
func (s *Server) setSession(r *reply, cred *unix.Ucred, cmd uint8, file, value string, errOffset func(error) int) error {
	if err := authorize(cred); err != nil {
		return err
	}
	dir, err := s.sessionDir(r.req)
	if err != nil {
		return err
	}
	if err := s.tree.Set(dir+"/"+file, value); err != nil {
		off := 0
		if errOffset != nil {
			off = errOffset(err)
		}
		return treeError(err, off, r.req.DevName)
	}
	return s.sessionReply(r, cmd, dir)
}

// getSession answers GET_SESSION: one session, or with NLM_F_DUMP every
// session of the device.
func (s *Server) getSession(r *reply) error {
	if r.req.Dump() {
		return s.dumpSessions(r)
	}
	dir, err := s.sessionDir(r.req)
	if err != nil {
		return err
	}
	return s.sessionReply(r, CmdGetSession, dir)
}

// dumpSessions sends one message per session of the device (just
// session 0 on a device with one), then NLMSG_DONE.
func (s *Server) dumpSessions(r *reply) error {
	r0 := *r.req
	r0.SessionID = nil
	dir0, err := s.sessionDir(&r0)
	if err != nil {
		return err
	}
	dirs := []string{dir0}
	base, _ := path.Split(dir0)
	if sd, err := s.tree.LookupDir(strings.TrimSuffix(base, "/")); err == nil && path.Base(base) == "sessions" {
		dirs = dirs[:0]
		for _, d := range sd.Dirs() {
			dirs = append(dirs, base+d.Name)
		}
	}
	var msgs [][]byte
	for _, dir := range dirs {
		ae, err := s.sessionAttrs(r, dir)
		if err != nil {
			return err
		}
		b, err := ae.Encode()
		if err != nil {
			return reqErr(unix.EMSGSIZE, 0, "%s: session %s does not fit a message: %v", r.req.DevName, path.Base(dir), err)
		}
		msgs = append(msgs, b)
	}
	r.dump(CmdGetSession, msgs)
	return nil
}

// sessionReply encodes DEV_NAME and the SESSION nest from the tree.
func (s *Server) sessionReply(r *reply, cmd uint8, dir string) error {
	ae, err := s.sessionAttrs(r, dir)
	if err != nil {
		return err
	}
	return r.addEncoded(cmd, ae)
}

// sessionAttrs encodes DEV_NAME and the SESSION nest of dir.
func (s *Server) sessionAttrs(r *reply, dir string) (*netlink.AttributeEncoder, error) {
	d, err := s.tree.LookupDir(dir)
	if err != nil {
		return nil, treeError(err, 0, r.req.DevName)
	}
	read := func(file string) string {
		v, _ := readAttr(d, file)
		return v
	}
	ae := netlink.NewAttributeEncoder()
	ae.String(AttrDevName, r.req.DevName)
	ae.Nested(AttrSession, func(n *netlink.AttributeEncoder) error {
		if v, err := strconv.ParseUint(read("number"), 10, 32); err == nil {
			n.Uint32(SessAttrNumber, uint32(v))
		}
		for _, a := range []struct {
			typ  uint16
			file string
		}{
			{SessAttrState, "state"}, {SessAttrProtocol, "protocol"}, {SessAttrAPN, "apn"}, {SessAttrIPType, "ip_type"},
			{SessAttrIPv4, "ipv4"}, {SessAttrGateway4, "gateway4"}, {SessAttrIPv6, "ipv6"}, {SessAttrGateway6, "gateway6"},
			{SessAttrInterface, "interface"}, {SessAttrLastError, "last_error"},
		} {
			if v := read(a.file); v != "" {
				n.String(a.typ, v)
			}
		}
		for _, a := range []struct {
			typ  uint16
			file string
		}{{SessAttrDNS4, "dns4"}, {SessAttrDNS6, "dns6"}} {
			for _, v := range strings.Fields(read(a.file)) {
				n.String(a.typ, v)
			}
		}
		if m, err := strconv.ParseUint(read("mtu"), 10, 32); err == nil && m > 0 {
			n.Uint32(SessAttrMTU, uint32(m))
		}
		return nil
	})
	return ae, nil
}

// dumpPorts sends one message per port under devices/<dev>/ports.
func (s *Server) dumpPorts(r *reply) error {
	req := r.req
	base, err := s.devicePath(req)
	if err != nil {
		return err
	}
	var msgs [][]byte
	if d, err := s.tree.LookupDir(base + "/ports"); err == nil {
		for _, a := range d.Attrs() {
			path, err := a.Read()
			if err != nil {
				continue
			}
			var stats []statEntry
			if sd, err := s.tree.LookupDir(base + "/stats/ports/" + a.Name); err == nil {
				stats = collectStats("", sd, nil)
			}
			ae := netlink.NewAttributeEncoder()
			ae.String(AttrDevName, req.DevName)
			ae.Nested(AttrPort, func(n *netlink.AttributeEncoder) error {
				n.String(PortAttrName, a.Name)
				n.String(PortAttrPath, path)
				n.Nested(PortAttrStats, encodeStatEntries(stats))
				return nil
			})
			b, err := ae.Encode()
			if err != nil {
				return reqErr(unix.EMSGSIZE, 0, "%s: port %s does not fit a message: %v", req.DevName, a.Name, err)
			}
			msgs = append(msgs, b)
		}
	}
	r.dump(CmdDumpPorts, msgs)
	return nil
}
