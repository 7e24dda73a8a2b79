package genl

import (
	"errors"
	"fmt"
	"time"

	"github.com/mdlayher/genetlink"
	"github.com/mdlayher/netlink"
)

// This file holds the client's side of the data-session and control-port
// commands: their result types, methods and reply decoding.

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
