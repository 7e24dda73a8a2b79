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
	return dumpNests(c, "dump-ports", dev, CmdDumpPorts, AttrPort, decodePort)
}
