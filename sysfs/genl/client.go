package genl

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/mdlayher/genetlink"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// Client errors. Every error a Client returns is an *Error that wraps one
// of these (match with errors.Is) and, for errors the server sent, the
// errno as a unix.Errno.
var (
	// ErrNoServer: nothing listens at the port (ECONNREFUSED), or what
	// listens there does not serve the mhi family.
	ErrNoServer = errors.New("no running mhi instance (start one with `mhictl up`)")
	// ErrNoDevice: the server has no device of that name (ENODEV).
	ErrNoDevice = errors.New("no such MHI device")
	// ErrInvalid: the server rejected a value or the request (EINVAL,
	// ERANGE); the error's Message says why.
	ErrInvalid = errors.New("invalid argument")
	// ErrPermission: the request needs privileges the caller lacks (EPERM,
	// EACCES).
	ErrPermission = errors.New("permission denied: needs root or CAP_NET_ADMIN")
	// ErrBusy: the device cannot apply the change in its current state
	// (EBUSY).
	ErrBusy = errors.New("device busy")
	// ErrNotSupported: the server or the device does not support the
	// operation (EOPNOTSUPP).
	ErrNotSupported = errors.New("operation not supported")
	// ErrTimeout: no answer within the client's timeout.
	ErrTimeout = errors.New("request timed out")
	// ErrProtocol: the reply was malformed, or the server failed (EIO and
	// other errnos).
	ErrProtocol = errors.New("mhi netlink protocol error")
	// ErrUntrustedServer: the process at the server's port is not the
	// one the client trusts — neither root, nor the client's own user,
	// nor the server a trusted run file names. Most likely another local
	// user bound the port first (a squatter). The error names the
	// process (Error.Peer) and says whether anything was sent to it.
	ErrUntrustedServer = errors.New("the netlink port is held by a process the client does not trust")
)

// Error is a failed client request.
type Error struct {
	// Op is the operation: "dial", "get-device", "set-device",
	// "get-stats", "dump-channels".
	Op string
	// Device is the device name the request named ("" for none).
	Device string
	// Port is the server's port id.
	Port uint32
	// Errno is the errno the server answered (0 when the failure was
	// local: no server, timeout, malformed reply).
	Errno unix.Errno
	// Message is the server's extended-ack message, if any.
	Message string
	// Offset is the extended ack's attribute offset, if any.
	Offset int
	// Kind is the sentinel this error matches (ErrInvalid…).
	Kind error
	// Peer is, for ErrUntrustedServer, the process found at the port or
	// named by the refused reply's credentials (nil if unidentified).
	Peer *Peer
	// Err is the underlying error.
	Err error
}

// Error describes the failure, preferring the server's own message.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("genl: ")
	b.WriteString(e.Op)
	if e.Device != "" {
		b.WriteString(" ")
		b.WriteString(e.Device)
	}
	b.WriteString(": ")
	switch {
	case e.Kind == ErrNoServer && e.Errno == unix.ECONNREFUSED:
		fmt.Fprintf(&b, "%v: nothing listens at netlink port %#x", ErrNoServer, e.Port)
	case e.Kind == ErrTimeout:
		fmt.Fprintf(&b, "no answer from netlink port %#x: %v", e.Port, ErrTimeout)
	case e.Kind == ErrUntrustedServer && e.Err != nil:
		var ue *untrustedError
		if errors.As(e.Err, &ue) {
			b.WriteString(ue.Error())
		} else {
			b.WriteString(e.Err.Error())
		}
	case e.Message != "":
		fmt.Fprintf(&b, "%s (%v)", e.Message, e.Errno)
	case e.Kind != nil && e.Err != nil && e.Kind == ErrProtocol:
		fmt.Fprintf(&b, "%v", e.Err)
	case e.Kind != nil:
		b.WriteString(e.Kind.Error())
		if e.Errno != 0 {
			fmt.Fprintf(&b, " (%v)", e.Errno)
		}
	default:
		fmt.Fprintf(&b, "%v", e.Err)
	}
	return b.String()
}

// Unwrap returns the sentinel and the underlying error.
func (e *Error) Unwrap() []error {
	var out []error
	if e.Kind != nil {
		out = append(out, e.Kind)
	}
	if e.Err != nil {
		out = append(out, e.Err)
	}
	return out
}

// ClientOptions configure Dial.
type ClientOptions struct {
	// Port is the server's NETLINK_USERSOCK port id. 0: the port in the
	// run file of a live server (RunFile, or the default places), else
	// DefaultPort.
	Port uint32
	// RunFile is the run file to read ("": root's in RunDir, then, for
	// other users, their own under $XDG_RUNTIME_DIR; see DefaultRunFile).
	RunFile string
	// Device, if set, is the device the client means: the server that
	// advertises it in its own run file (DeviceRunFile, beside each run
	// file above) is preferred, so that with one `mhictl up` per modem
	// each request reaches the instance serving its device.
	Device string
	// Timeout bounds each request (0: DefaultTimeout).
	Timeout time.Duration
}

// Client talks to a Server. Its methods are safe for concurrent use; the
// requests are serialised.
type Client struct {
	mu      sync.Mutex
	sock    *userSocket
	conn    *genetlink.Conn
	port    uint32
	runFile string
	timeout time.Duration
	family  genetlink.Family
}

// Device is a device's attributes as GET_DEVICE returns them.
type Device struct {
	Name   string `json:"name"`   // DEV_NAME, e.g. "mhi0"
	State  string `json:"state"`  // MHI state: M0, M3, SYS_ERR…
	EE     string `json:"ee"`     // execution environment: AMSS, SBL…
	Model  string `json:"model"`  // device-table model name
	Serial string `json:"serial"` // BHI serial number
	// MRU and MTU are 0 when the device has no network device up.
	MRU       uint32 `json:"mru,omitempty"` // receive buffer size in bytes
	MTU       uint32 `json:"mtu,omitempty"` // largest transmitted packet in bytes
	TimeoutMs uint32 `json:"timeout_ms"`    // command and state-change timeout
	// AutosuspendMs is the host's auto-suspend delay (0: off).
	AutosuspendMs uint32 `json:"autosuspend_ms"`
	// PMState is the host's power-management state: M0, M3…;
	// RECOVERY_FAILED or LINK_DOWN when the device is left alone.
	PMState string `json:"pm_state"`
	// Recovery is SYS_ERR recovery's standing (ok, recovering…, failed…).
	Recovery string `json:"recovery"`
}

// SetRequest names the values SetDevice changes; nil fields stay as they
// are.
type SetRequest struct {
	MRU       *uint32 // receive buffer size in bytes
	MTU       *uint32 // largest transmitted packet in bytes
	TimeoutMs *uint32 // command and state-change timeout
	// AutosuspendMs sets the auto-suspend delay (0: off); PMRequest asks
	// for PMRequestSuspend or PMRequestResume, after the other values.
	AutosuspendMs *uint32
	PMRequest     *uint32 // PMRequestSuspend or PMRequestResume
}

// Stat is one counter, named by its path below the device's stats
// directory ("net/rx_packets", "mhi/…").
type Stat struct {
	Name  string `json:"name"`  // path below stats/, e.g. "net/rx_packets"
	Value uint64 `json:"value"` // the counter
}

// Channel is one channel's status as DUMP_CHANNELS reports it.
type Channel struct {
	Num       uint32 `json:"num"`       // channel number
	Name      string `json:"name"`      // channel name, e.g. "IP_HW0"
	Dir       string `json:"dir"`       // "UL" or "DL"
	State     string `json:"state"`     // the host's view of the channel state
	CtxState  string `json:"ctx_state"` // the channel context's state (the device's view)
	Elements  uint64 `json:"elements"`  // transfer ring size
	Pending   uint64 `json:"pending"`   // elements queued, not completed
	Completed uint64 `json:"completed"` // elements completed
	Bytes     uint64 `json:"bytes"`     // bytes completed
	HostRP    uint64 `json:"host_rp"`   // host read pointer (IOVA)
	HostWP    uint64 `json:"host_wp"`   // host write pointer (IOVA)
	CtxRP     uint64 `json:"ctx_rp"`    // context read pointer (IOVA)
	CtxWP     uint64 `json:"ctx_wp"`    // context write pointer (IOVA)
}

// Dial finds the server (ClientOptions.Port), checks who holds its port,
// opens a client socket and resolves the family with nlctrl GETFAMILY.
// With nothing listening it fails with an error matching ErrNoServer that
// tells the user to run `mhictl up`.
//
// The client trusts only root, its own user and the server a trusted run
// file names (its uid and pid). Before sending anything it looks the
// port's holder up in /proc; a holder it can see and does not trust fails
// Dial with ErrUntrustedServer, naming the process, and nothing is sent.
// Every reply's kernel-stamped credentials (SCM_CREDENTIALS) are checked
// too, so a holder the client could not see is caught by its first reply,
// the family look-up, before any request that changes something is sent.
func Dial(opts ClientOptions) (*Client, error) {
	exp, err := locate(opts)
	if err != nil {
		return nil, untrusted("dial", "", exp.port, err)
	}
	return dial(exp, opts.Timeout)
}

// dial opens the client socket for exp and resolves the family.
func dial(exp *expected, timeout time.Duration) (*Client, error) {
	sock, err := newUserSocket(exp)
	if err != nil {
		return nil, &Error{Op: "dial", Port: exp.port, Kind: ErrProtocol, Err: err}
	}
	c := &Client{
		sock:    sock,
		conn:    genetlink.NewConn(netlink.NewConn(sock, sock.raw.PID())),
		port:    exp.port,
		runFile: exp.runFile,
		timeout: timeout,
	}
	if c.timeout <= 0 {
		c.timeout = DefaultTimeout
	}
	if err := c.resolve(); err != nil {
		_ = c.Close()
		return nil, err
	}
	return c, nil
}

// Close closes the client's socket.
func (c *Client) Close() error { return c.conn.Close() }

// Port returns the server port the client talks to.
func (c *Client) Port() uint32 { return c.port }

// RunFile returns the run file the port came from, "" if none.
func (c *Client) RunFile() string { return c.runFile }

// untrusted wraps an untrustedError into an *Error.
func untrusted(op, dev string, port uint32, err error) *Error {
	e := &Error{Op: op, Device: dev, Port: port, Kind: ErrUntrustedServer, Err: err}
	var ue *untrustedError
	if errors.As(err, &ue) {
		e.Peer = ue.peer
	}
	return e
}

// Family returns the family as the server described it.
func (c *Client) Family() genetlink.Family { return c.family }

// resolve asks nlctrl for the family. It parses the reply itself rather
// than calling genetlink's GetFamily, which panics on a reply with more
// than one family.
func (c *Client) resolve() error {
	ae := netlink.NewAttributeEncoder()
	ae.String(unix.CTRL_ATTR_FAMILY_NAME, FamilyName)
	b, err := ae.Encode()
	if err != nil {
		return &Error{Op: "dial", Port: c.port, Kind: ErrProtocol, Err: err}
	}
	msgs, err := c.exec(c.timeout, genetlink.Message{
		Header: genetlink.Header{Command: unix.CTRL_CMD_GETFAMILY, Version: 1}, Data: b,
	}, genlIDCtrl, netlink.Request)
	if err != nil {
		e := c.fail("dial", "", err)
		if e.Errno == unix.ENOENT || e.Errno == unix.EOPNOTSUPP {
			e.Kind = ErrNoServer
		}
		return e
	}
	for _, m := range msgs {
		var f genetlink.Family
		var version uint32
		err := attrFields{
			u16: map[uint16]*uint16{unix.CTRL_ATTR_FAMILY_ID: &f.ID},
			str: map[uint16]*string{unix.CTRL_ATTR_FAMILY_NAME: &f.Name},
			u32: map[uint16]*uint32{unix.CTRL_ATTR_VERSION: &version},
		}.decodeBytes(m.Data)
		f.Version = uint8(version)
		if err == nil && f.Name == FamilyName && f.ID != 0 {
			c.family = f
			return nil
		}
	}
	return &Error{Op: "dial", Port: c.port, Kind: ErrNoServer,
		Err: fmt.Errorf("%w: no %q family in the GETFAMILY reply from port %#x", ErrProtocol, FamilyName, c.port)}
}

// exec runs one request, waiting for its answer at most timeout.
func (c *Client) exec(timeout time.Duration, m genetlink.Message, family uint16, flags netlink.HeaderFlags) ([]genetlink.Message, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.sock.SetDeadline(time.Now().Add(timeout)); err != nil {
		return nil, err
	}
	return c.conn.Execute(m, family, flags)
}

// fail turns a request error into an *Error with its sentinel.
func (c *Client) fail(op, dev string, err error) *Error {
	if errors.Is(err, ErrUntrustedServer) {
		return untrusted(op, dev, c.port, err)
	}
	e := &Error{Op: op, Device: dev, Port: c.port, Err: err}
	var oe *netlink.OpError
	if errors.As(err, &oe) {
		e.Message, e.Offset = oe.Message, oe.Offset
	}
	var errno unix.Errno
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		e.Kind = ErrTimeout
	case errors.As(err, &errno):
		e.Errno = errno
		switch errno {
		case unix.ECONNREFUSED:
			e.Kind = ErrNoServer
		case unix.ENODEV:
			e.Kind = ErrNoDevice
		case unix.EINVAL, unix.ERANGE:
			e.Kind = ErrInvalid
		case unix.EPERM, unix.EACCES:
			e.Kind = ErrPermission
		case unix.EBUSY:
			e.Kind = ErrBusy
		case unix.EOPNOTSUPP:
			e.Kind = ErrNotSupported
		default:
			e.Kind = ErrProtocol
		}
	default:
		e.Kind = ErrProtocol
	}
	return e
}

// request runs one mhi-family command under the client's timeout.
func (c *Client) request(op, dev string, cmd uint8, flags netlink.HeaderFlags, encode func(*netlink.AttributeEncoder)) ([]genetlink.Message, error) {
	return c.requestWithin(c.timeout, op, dev, cmd, flags, encode)
}

// requestWithin runs one mhi-family command: DEV_NAME (unless dev is "")
// and what encode adds, waiting for the answer at most timeout.
func (c *Client) requestWithin(timeout time.Duration, op, dev string, cmd uint8, flags netlink.HeaderFlags, encode func(*netlink.AttributeEncoder)) ([]genetlink.Message, error) {
	ae := netlink.NewAttributeEncoder()
	if dev != "" {
		ae.String(AttrDevName, dev)
	}
	if encode != nil {
		encode(ae)
	}
	b, err := ae.Encode()
	if err != nil {
		return nil, &Error{Op: op, Device: dev, Port: c.port, Kind: ErrInvalid, Err: err}
	}
	msgs, err := c.exec(timeout, genetlink.Message{
		Header: genetlink.Header{Command: cmd, Version: FamilyVersion}, Data: b,
	}, c.family.ID, flags)
	if err != nil {
		return nil, c.fail(op, dev, err)
	}
	return msgs, nil
}

// malformed is the error of a reply the client cannot decode.
func (c *Client) malformed(op, dev string, err error) error {
	return &Error{Op: op, Device: dev, Port: c.port, Kind: ErrProtocol, Err: fmt.Errorf("%w: %w", ErrProtocol, err)}
}

// GetDevice returns the attributes of device name.
func (c *Client) GetDevice(name string) (Device, error) {
	msgs, err := c.request("get-device", name, CmdGetDevice, netlink.Request, nil)
	if err != nil {
		return Device{}, err
	}
	return oneReply(c, "get-device", name, msgs, decodeDevice)
}

// Devices returns every device the server knows, in name order.
func (c *Client) Devices() ([]Device, error) {
	return dumpNests(c, "get-device", "", CmdGetDevice, AttrDevice, decodeDeviceAttrs)
}

// SetDevice changes the values r names (MRU, MTU, timeout) and returns the
// device as it is afterwards. It needs root or CAP_NET_ADMIN. Values are
// applied in the order MRU, MTU, timeout; after a failure the ones before
// it stay applied.
func (c *Client) SetDevice(name string, r SetRequest) (Device, error) {
	msgs, err := c.request("set-device", name, CmdSetDevice, netlink.Request, func(ae *netlink.AttributeEncoder) {
		for _, a := range []struct {
			typ uint16
			v   *uint32
		}{{AttrMRU, r.MRU}, {AttrMTU, r.MTU}, {AttrTimeoutMs, r.TimeoutMs},
			{AttrAutosuspendMs, r.AutosuspendMs}, {AttrPMRequest, r.PMRequest}} {
			if a.v != nil {
				ae.Uint32(a.typ, *a.v)
			}
		}
	})
	if err != nil {
		return Device{}, err
	}
	return oneReply(c, "set-device", name, msgs, decodeDevice)
}

// Stats returns the device's counters in the tree's (sorted) order.
func (c *Client) Stats(name string) ([]Stat, error) {
	msgs, err := c.request("get-stats", name, CmdGetStats, netlink.Request, nil)
	if err != nil {
		return nil, err
	}
	var out []Stat
	err = decodeReplies(msgs, eachNest(AttrStats, func(sad *netlink.AttributeDecoder) error {
		return decodeStatEntries(sad, func(st Stat) { out = append(out, st) })
	}))
	if err != nil {
		return nil, c.malformed("get-stats", name, err)
	}
	return out, nil
}

// StatsMap is Stats as a map from counter name to value.
func (c *Client) StatsMap(name string) (map[string]uint64, error) {
	st, err := c.Stats(name)
	if err != nil {
		return nil, err
	}
	m := make(map[string]uint64, len(st))
	for _, s := range st {
		m[s.Name] = s.Value
	}
	return m, nil
}

// Channels returns the status of every channel of the device, in the
// tree's order.
func (c *Client) Channels(name string) ([]Channel, error) {
	return dumpNests(c, "dump-channels", name, CmdDumpChannels, AttrChannel, decodeChannel)
}
