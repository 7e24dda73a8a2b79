package genl

import (
	"errors"
	"fmt"
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

// sessionDir checks that the device exists and has a data session.
func (s *Server) sessionDir(req *Request) (string, error) {
	base, err := s.devicePath(req)
	if err != nil {
		return "", err
	}
	if _, err := s.tree.LookupDir(base + "/session"); err != nil {
		return "", &RequestError{Errno: unix.EOPNOTSUPP, Offset: req.AttrOffset(AttrDevName), Err: err,
			Msg: fmt.Sprintf("%s has no data session (its model has no MBIM or QMI control channel, or the host stack drives none)", req.DevName)}
	}
	return base + "/session", nil
}

// connect writes "APN [IP_TYPE]" to session/connect and answers with
// the session.
func (s *Server) connect(r *reply, cred *unix.Ucred) error {
	req := r.req
	v := req.APN
	if req.IPType != "" {
		v += " " + req.IPType
	}
	return s.setSession(r, cred, CmdConnect, "connect", v, func(err error) int {
		if errors.Is(err, sysfs.ErrInvalid) && strings.Contains(err.Error(), "IP type") {
			return req.AttrOffset(AttrIPType)
		}
		return req.AttrOffset(AttrAPN)
	})
}

// disconnect writes session/disconnect and answers with the session.
func (s *Server) disconnect(r *reply, cred *unix.Ucred) error {
	return s.setSession(r, cred, CmdDisconnect, "disconnect", "1", nil)
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

// getSession answers GET_SESSION.
func (s *Server) getSession(r *reply) error {
	dir, err := s.sessionDir(r.req)
	if err != nil {
		return err
	}
	return s.sessionReply(r, CmdGetSession, dir)
}

// sessionReply encodes DEV_NAME and the SESSION nest from the tree.
func (s *Server) sessionReply(r *reply, cmd uint8, dir string) error {
	d, err := s.tree.LookupDir(dir)
	if err != nil {
		return treeError(err, 0, r.req.DevName)
	}
	read := func(file string) string {
		v, _ := readAttr(d, file)
		return v
	}
	ae := netlink.NewAttributeEncoder()
	ae.String(AttrDevName, r.req.DevName)
	ae.Nested(AttrSession, func(n *netlink.AttributeEncoder) error {
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
	return r.addEncoded(cmd, ae)
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
