package genl

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/mdlayher/genetlink"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/gomhi/gomhi/sysfs"
)

// This file holds the data-session and control-port commands of the
// family (CONNECT, DISCONNECT, GET_SESSION, DUMP_PORTS): their attribute
// sets, the server's handlers — which go through the tree's session/ and
// ports/ entries like every other command — and the client's methods.

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
)

// Attributes of the "port" set (inside AttrPort).
const (
	PortAttrName  uint16 = 1 // string: e.g. "wwan0mbim0"
	PortAttrPath  uint16 = 2 // string: what a tool opens
	PortAttrStats uint16 = 3 // nest: StatsAttrEntry nests (counter name below stats/ports/<name>/)
)

// Limits of the CONNECT strings, in bytes without the NUL.
const (
	MaxAPNLen    = 100 // 3GPP TS 23.003: an APN is at most 100 octets
	MaxIPTypeLen = 15
)

// ConnectTimeout is the client's default wait for a CONNECT or DISCONNECT
// answer: the modem may take seconds to activate a context.
const ConnectTimeout = 65 * time.Second

func (r *Request) decodeSessionAttr(typ uint16, name string, p []byte, off int) error {
	maxLen := MaxAPNLen
	if typ == AttrIPType {
		maxLen = MaxIPTypeLen
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
	if typ == AttrAPN {
		r.APN = s
	} else {
		r.IPType = s
	}
	return nil
}

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
	if err := authorize(cred); err != nil {
		return err
	}
	dir, err := s.sessionDir(req)
	if err != nil {
		return err
	}
	v := req.APN
	if req.IPType != "" {
		v += " " + req.IPType
	}
	if err := s.tree.Set(dir+"/connect", v); err != nil {
		off := req.AttrOffset(AttrAPN)
		if errors.Is(err, sysfs.ErrInvalid) && strings.Contains(err.Error(), "IP type") {
			off = req.AttrOffset(AttrIPType)
		}
		return treeError(err, off, req.DevName)
	}
	return s.sessionReply(r, CmdConnect, dir)
}

func (s *Server) disconnect(r *reply, cred *unix.Ucred) error {
	req := r.req
	if err := authorize(cred); err != nil {
		return err
	}
	dir, err := s.sessionDir(req)
	if err != nil {
		return err
	}
	if err := s.tree.Set(dir+"/disconnect", "1"); err != nil {
		return treeError(err, 0, req.DevName)
	}
	return s.sessionReply(r, CmdDisconnect, dir)
}

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
		a, ok := d.Attr(file)
		if !ok {
			return ""
		}
		v, err := a.Read()
		if err != nil {
			return ""
		}
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
				n.Nested(PortAttrStats, func(sn *netlink.AttributeEncoder) error {
					for _, st := range stats {
						sn.Nested(StatsAttrEntry, func(en *netlink.AttributeEncoder) error {
							en.String(StatAttrName, st.name)
							en.Uint64(StatAttrValue, st.value)
							return nil
						})
					}
					return nil
				})
				return nil
			})
			b, err := ae.Encode()
			if err != nil {
				return reqErr(unix.EMSGSIZE, 0, "%s: port %s does not fit a message: %v", req.DevName, a.Name, err)
			}
			msgs = append(msgs, b)
		}
	}
	r.multi = true
	for _, b := range msgs {
		r.add(CmdDumpPorts, FamilyVersion, b)
	}
	r.done()
	return nil
}

// Session is a device's data session as GET_SESSION, CONNECT and
// DISCONNECT report it. Absent values are empty.
type Session struct {
	Device    string   `json:"device"`
	State     string   `json:"state"`
	Protocol  string   `json:"protocol"`
	APN       string   `json:"apn"`
	IPType    string   `json:"ip_type"`
	IPv4      string   `json:"ipv4"`
	Gateway4  string   `json:"gateway4"`
	DNS4      []string `json:"dns4"`
	IPv6      string   `json:"ipv6"`
	Gateway6  string   `json:"gateway6"`
	DNS6      []string `json:"dns6"`
	MTU       uint32   `json:"mtu"`
	Interface string   `json:"interface"`
	LastError string   `json:"last_error,omitempty"`
}

// Port is one control port as DUMP_PORTS reports it.
type Port struct {
	Name  string            `json:"name"`
	Path  string            `json:"path"`
	Stats map[string]uint64 `json:"stats"`
}

// execFor runs one request with its own timeout.
func (c *Client) execFor(timeout time.Duration, m genetlink.Message, flags netlink.HeaderFlags) ([]genetlink.Message, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.sock.SetDeadline(time.Now().Add(timeout)); err != nil {
		return nil, err
	}
	return c.conn.Execute(m, c.family.ID, flags)
}

// sessionRequest runs a session command and decodes its one reply.
func (c *Client) sessionRequest(op, dev string, cmd uint8, timeout time.Duration, encode func(*netlink.AttributeEncoder)) (Session, error) {
	ae := netlink.NewAttributeEncoder()
	ae.String(AttrDevName, dev)
	if encode != nil {
		encode(ae)
	}
	b, err := ae.Encode()
	if err != nil {
		return Session{}, &Error{Op: op, Device: dev, Port: c.port, Kind: ErrInvalid, Err: err}
	}
	msgs, err := c.execFor(timeout, genetlink.Message{Header: genetlink.Header{Command: cmd, Version: FamilyVersion}, Data: b}, netlink.Request)
	if err != nil {
		return Session{}, c.fail(op, dev, err)
	}
	if len(msgs) != 1 {
		return Session{}, c.malformed(op, dev, fmt.Errorf("%d replies", len(msgs)))
	}
	s, err := decodeSession(msgs[0].Data)
	if err != nil {
		return Session{}, c.malformed(op, dev, err)
	}
	return s, nil
}

// Connect connects the device's data session with an access point name
// and an IP type ("ipv4", "ipv6", "ipv4v6"; "" is ipv4) and returns what
// was configured. It needs root or CAP_NET_ADMIN. The wait is
// ConnectTimeout or the client's timeout, whichever is longer.
func (c *Client) Connect(dev, apn, ipType string) (Session, error) {
	return c.sessionRequest("connect", dev, CmdConnect, max(c.timeout, ConnectTimeout), func(ae *netlink.AttributeEncoder) {
		ae.String(AttrAPN, apn)
		if ipType != "" {
			ae.String(AttrIPType, ipType)
		}
	})
}

// Disconnect disconnects the device's data session and removes what it
// configured. It needs root or CAP_NET_ADMIN.
func (c *Client) Disconnect(dev string) (Session, error) {
	return c.sessionRequest("disconnect", dev, CmdDisconnect, max(c.timeout, ConnectTimeout), nil)
}

// Session returns the device's data session.
func (c *Client) Session(dev string) (Session, error) {
	return c.sessionRequest("get-session", dev, CmdGetSession, c.timeout, nil)
}

// Ports returns the device's control ports with their counters.
func (c *Client) Ports(dev string) ([]Port, error) {
	msgs, err := c.request("dump-ports", dev, CmdDumpPorts, netlink.Request|netlink.Dump, nil)
	if err != nil {
		return nil, err
	}
	var out []Port
	for _, m := range msgs {
		ad, err := netlink.NewAttributeDecoder(m.Data)
		if err != nil {
			return nil, c.malformed("dump-ports", dev, err)
		}
		for ad.Next() {
			if ad.Type() != AttrPort {
				continue
			}
			ad.Nested(func(pd *netlink.AttributeDecoder) error {
				p := Port{Stats: map[string]uint64{}}
				for pd.Next() {
					switch pd.Type() {
					case PortAttrName:
						p.Name = pd.String()
					case PortAttrPath:
						p.Path = pd.String()
					case PortAttrStats:
						pd.Nested(func(sd *netlink.AttributeDecoder) error {
							for sd.Next() {
								if sd.Type() != StatsAttrEntry {
									continue
								}
								sd.Nested(func(ed *netlink.AttributeDecoder) error {
									var name string
									var v uint64
									for ed.Next() {
										switch ed.Type() {
										case StatAttrName:
											name = ed.String()
										case StatAttrValue:
											v = ed.Uint64()
										}
									}
									p.Stats[name] = v
									return nil
								})
							}
							return nil
						})
					}
				}
				out = append(out, p)
				return nil
			})
		}
		if err := ad.Err(); err != nil {
			return nil, c.malformed("dump-ports", dev, err)
		}
	}
	return out, nil
}

func decodeSession(b []byte) (Session, error) {
	ad, err := netlink.NewAttributeDecoder(b)
	if err != nil {
		return Session{}, err
	}
	var s Session
	found := false
	for ad.Next() {
		switch ad.Type() {
		case AttrDevName:
			s.Device = ad.String()
		case AttrSession:
			found = true
			ad.Nested(func(sd *netlink.AttributeDecoder) error {
				str := map[uint16]*string{
					SessAttrState: &s.State, SessAttrProtocol: &s.Protocol, SessAttrAPN: &s.APN, SessAttrIPType: &s.IPType,
					SessAttrIPv4: &s.IPv4, SessAttrGateway4: &s.Gateway4, SessAttrIPv6: &s.IPv6, SessAttrGateway6: &s.Gateway6,
					SessAttrInterface: &s.Interface, SessAttrLastError: &s.LastError,
				}
				for sd.Next() {
					switch t := sd.Type(); t {
					case SessAttrDNS4:
						s.DNS4 = append(s.DNS4, sd.String())
					case SessAttrDNS6:
						s.DNS6 = append(s.DNS6, sd.String())
					case SessAttrMTU:
						s.MTU = sd.Uint32()
					default:
						if p, ok := str[t]; ok {
							*p = sd.String()
						}
					}
				}
				return nil
			})
		}
	}
	if err := ad.Err(); err != nil {
		return s, err
	}
	if !found {
		return s, errors.New("reply has no session nest")
	}
	return s, nil
}
