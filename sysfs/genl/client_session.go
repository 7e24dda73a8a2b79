package genl

import (
	"time"

	"github.com/mdlayher/netlink"
)

// This file holds the client's side of the data-session and control-port
// commands: their result types, methods and reply decoding.

// Session is a device's data session as GET_SESSION, CONNECT and
// DISCONNECT report it. Absent values are empty.
type Session struct {
	Device    string   `json:"device"`               // DEV_NAME
	Session   uint8    `json:"session"`              // the session number
	State     string   `json:"state"`                // "connected" or "disconnected"
	Protocol  string   `json:"protocol"`             // "mbim" or "qmi"
	APN       string   `json:"apn"`                  // access point name
	IPType    string   `json:"ip_type"`              // "ipv4", "ipv6" or "ipv4v6"
	IPv4      string   `json:"ipv4"`                 // address/prefix, e.g. "198.18.0.1/24"
	Gateway4  string   `json:"gateway4"`             // IPv4 gateway
	DNS4      []string `json:"dns4"`                 // IPv4 name servers
	IPv6      string   `json:"ipv6"`                 // address/prefix
	Gateway6  string   `json:"gateway6"`             // IPv6 gateway
	DNS6      []string `json:"dns6"`                 // IPv6 name servers
	MTU       uint32   `json:"mtu"`                  // the link MTU the network gave
	Interface string   `json:"interface"`            // the interface configured
	LastError string   `json:"last_error,omitempty"` // why the last operation failed
}

// Port is one control port as DUMP_PORTS reports it.
type Port struct {
	Name  string            `json:"name"`  // e.g. "wwan0mbim0"
	Path  string            `json:"path"`  // what a tool opens
	Stats map[string]uint64 `json:"stats"` // counters by name below stats/ports/<name>/
}

// sessionRequest runs a session command and decodes its one reply.
func (c *Client) sessionRequest(op, dev string, cmd uint8, timeout time.Duration, encode func(*netlink.AttributeEncoder)) (Session, error) {
	msgs, err := c.requestWithin(timeout, op, dev, cmd, netlink.Request, encode)
	if err != nil {
		return Session{}, err
	}
	return oneReply(c, op, dev, msgs, decodeSession)
}

// Connect connects the device's data session with an access point name
// and an IP type ("ipv4", "ipv6", "ipv4v6"; "" is ipv4) and returns what
// was configured. It needs root or CAP_NET_ADMIN. The wait is
// ConnectTimeout or the client's timeout, whichever is longer.
func (c *Client) Connect(dev, apn, ipType string) (Session, error) {
	return c.ConnectSession(dev, ConnectRequest{APN: apn, IPType: ipType})
}

// ConnectRequest is what ConnectSession asks for.
type ConnectRequest struct {
	// Session is the session number (0: the device's first session,
	// configured on its --tun interface).
	Session uint8
	// APN is the access point name (required), IPType "ipv4" (also
	// ""), "ipv6" or "ipv4v6".
	APN, IPType string
	// Interface names a session N > 0's own interface ("": <tun>.<N>).
	Interface string
}

// ConnectSession connects data session r.Session of the device, as
// Connect does session 0.
func (c *Client) ConnectSession(dev string, r ConnectRequest) (Session, error) {
	return c.sessionRequest("connect", dev, CmdConnect, max(c.timeout, ConnectTimeout), func(ae *netlink.AttributeEncoder) {
		ae.String(AttrAPN, r.APN)
		if r.IPType != "" {
			ae.String(AttrIPType, r.IPType)
		}
		if r.Session != 0 {
			ae.Uint32(AttrSessionID, uint32(r.Session))
		}
		if r.Interface != "" {
			ae.String(AttrInterface, r.Interface)
		}
	})
}

// sessionID encodes SESSION_ID n (nothing for session 0).
func sessionID(n uint8) func(*netlink.AttributeEncoder) {
	return func(ae *netlink.AttributeEncoder) {
		if n != 0 {
			ae.Uint32(AttrSessionID, uint32(n))
		}
	}
}

// Disconnect disconnects the device's data session and removes what it
// configured. It needs root or CAP_NET_ADMIN.
func (c *Client) Disconnect(dev string) (Session, error) {
	return c.DisconnectSession(dev, 0)
}

// DisconnectSession disconnects data session n of the device and
// removes what it configured (for n > 0, its interface too).
func (c *Client) DisconnectSession(dev string, n uint8) (Session, error) {
	return c.sessionRequest("disconnect", dev, CmdDisconnect, max(c.timeout, ConnectTimeout), sessionID(n))
}

// Session returns the device's data session.
func (c *Client) Session(dev string) (Session, error) {
	return c.SessionOf(dev, 0)
}

// SessionOf returns data session n of the device.
func (c *Client) SessionOf(dev string, n uint8) (Session, error) {
	return c.sessionRequest("get-session", dev, CmdGetSession, c.timeout, sessionID(n))
}

// Sessions returns every data session of the device, by number.
func (c *Client) Sessions(dev string) ([]Session, error) {
	msgs, err := c.request("get-sessions", dev, CmdGetSession, netlink.Request|netlink.Dump, nil)
	if err != nil {
		return nil, err
	}
	out := make([]Session, 0, len(msgs))
	for _, m := range msgs {
		s, err := decodeSession(m.Data)
		if err != nil {
			return nil, c.malformed("get-sessions", dev, err)
		}
		out = append(out, s)
	}
	return out, nil
}

// Ports returns the device's control ports with their counters.
func (c *Client) Ports(dev string) ([]Port, error) {
	return dumpNests(c, "dump-ports", dev, CmdDumpPorts, AttrPort, decodePort)
}
