package ctrlport

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gomhi/gomhi/mhi/proto/mbim"
)

// This file is the host's data session: connecting the modem's packet
// data context over a control channel (MBIM CONNECT here; QMI WDS where a
// model has no MBIM), reading the configuration the network assigned, and
// handing it to whatever configures the host's interface. It is what
// ModemManager's bearer does for Linux; `mhictl up` runs one per device
// and `mhictl connect` asks it to connect.

// IP types of a session request, as `mhictl connect --ip-type` spells them.
const (
	IPTypeIPv4   = "ipv4"
	IPTypeIPv6   = "ipv6"
	IPTypeIPv4v6 = "ipv4v6"
)

// Session errors.
var (
	// ErrSessionRequest: the request is invalid (no APN, unknown IP type).
	ErrSessionRequest = errors.New("ctrlport: invalid session request")
	// ErrSessionActive: connect while a session is connected.
	ErrSessionActive = errors.New("ctrlport: a session is already connected")
	// ErrSessionRefused: the modem refused or failed the connect; the
	// error names its status.
	ErrSessionRefused = errors.New("ctrlport: the modem did not connect the session")
	// ErrFCCLocked: the modem keeps its radio off: it refused to switch
	// it on (MBIM RADIO_STATE set: OPERATION_NOT_ALLOWED, or the software
	// radio still off), as an FCC-locked module does until its vendor's
	// unlock procedure.
	ErrFCCLocked = errors.New("ctrlport: radio FCC-locked")
	// ErrHostConfig: the session connected but the host side (addresses,
	// routes, MTU) could not be configured; the session was disconnected
	// again.
	ErrHostConfig = errors.New("ctrlport: configuring the host side of the session failed")
)

// SessionRequest asks for a data session.
type SessionRequest struct {
	// APN is the access point name (required).
	APN string
	// IPType is IPTypeIPv4 (also ""), IPTypeIPv6 or IPTypeIPv4v6.
	IPType string
	// Interface names the host interface the session is to configure
	// ("": the session's default). A Session whose host cannot make one
	// (HostPreparer) accepts only its own interface's name.
	Interface string
}

// MaxInterfaceName is the longest interface name Linux takes (IFNAMSIZ
// less the NUL).
const MaxInterfaceName = 15

// ValidInterfaceName checks name as Linux checks a network interface's
// name: 1..15 bytes, not "." or "..", no '/', ':' or white space.
func ValidInterfaceName(name string) error {
	if name == "" || len(name) > MaxInterfaceName {
		return fmt.Errorf("%w: interface name %q: want 1..%d bytes", ErrSessionRequest, name, MaxInterfaceName)
	}
	if name == "." || name == ".." {
		return fmt.Errorf("%w: interface name %q", ErrSessionRequest, name)
	}
	for _, c := range []byte(name) {
		if c <= ' ' || c >= 0x7f || c == '/' || c == ':' {
			return fmt.Errorf("%w: interface name %q holds %q: no '/', ':', white space or control characters", ErrSessionRequest, name, c)
		}
	}
	return nil
}

// validate checks r and fills the default IP type.
func (r *SessionRequest) validate() error {
	if r.APN == "" {
		return fmt.Errorf("%w: no APN", ErrSessionRequest)
	}
	if len(r.APN) > 100 {
		return fmt.Errorf("%w: APN of %d bytes, longer than 100", ErrSessionRequest, len(r.APN))
	}
	switch r.IPType {
	case "":
		r.IPType = IPTypeIPv4
	case IPTypeIPv4, IPTypeIPv6, IPTypeIPv4v6:
	default:
		return fmt.Errorf("%w: IP type %q: want ipv4, ipv6 or ipv4v6", ErrSessionRequest, r.IPType)
	}
	if r.Interface != "" {
		return ValidInterfaceName(r.Interface)
	}
	return nil
}

// SessionConfig is what the network assigned to a connected session, as
// the modem reported it (MBIM IP_CONFIGURATION, QMI WDS current settings).
// Absent values are zero.
type SessionConfig struct {
	Protocol string       `json:"protocol"` // "mbim" or "qmi"
	APN      string       `json:"apn"`
	IPType   string       `json:"ip_type"` // the activated type
	IPv4     netip.Prefix `json:"ipv4"`
	Gateway4 netip.Addr   `json:"gateway4"`
	DNS4     []netip.Addr `json:"dns4"`
	IPv6     netip.Prefix `json:"ipv6"`
	Gateway6 netip.Addr   `json:"gateway6"`
	DNS6     []netip.Addr `json:"dns6"`
	MTU      int          `json:"mtu"`
}

// SessionClient connects and disconnects the modem's data session over
// one control protocol. MBIMSession is one.
type SessionClient interface {
	// Protocol names the protocol: "mbim", "qmi".
	Protocol() string
	// Connect activates the session and returns its configuration.
	Connect(ctx context.Context, req SessionRequest) (SessionConfig, error)
	// Disconnect deactivates the session (no error if none is active).
	Disconnect(ctx context.Context) error
	// Active asks the modem whether the session is active.
	Active(ctx context.Context) (bool, error)
	// Notify sets f, called (from the client's receive path; it must
	// not block) when the modem announces that the session may have
	// ended. Session uses it to notice a network-side disconnect.
	Notify(f func())
	// Close stops the client.
	Close()
}

// MBIMSession is a SessionClient over MBIM (BASIC_CONNECT PACKET_SERVICE,
// CONNECT, IP_CONFIGURATION) on one session number (CONNECT's
// SessionId: 0 for NewMBIMSession, n for Sibling(n)). It shares its
// transport (a Port's Pair) with the port's clients: its transaction ids
// are far from theirs, and it opens the MBIM function only when the modem
// answers NotOpened (a client's CLOSE closed it), so that a running
// mbim-proxy, which holds the function open, is not disturbed. The
// sessions of one device share one MBIMClient; an indication reaches the
// session it names.
type MBIMSession struct {
	hub    *mbimHub
	c      *MBIMClient
	sid    uint32
	notify atomic.Pointer[func()]
}

// mbimHub is the MBIMClient the sessions of one port share, and the
// sessions its indications are routed to.
type mbimHub struct {
	c *MBIMClient

	mu       sync.Mutex
	sessions map[uint32]*MBIMSession
	closed   bool
}

// NewMBIMSession starts an MBIM session client for session 0 on t.
func NewMBIMSession(t MessageTransport) *MBIMSession {
	h := &mbimHub{sessions: map[uint32]*MBIMSession{}}
	h.c = NewMBIMClient(t, MBIMClientOptions{OnIndication: h.indication})
	s := &MBIMSession{hub: h, c: h.c}
	h.sessions[0] = s
	return s
}

// ErrSessionNumber: a session number a client cannot take (one already
// made on the client, or beyond what the protocol carries).
var ErrSessionNumber = errors.New("ctrlport: invalid session number")

// Sibling returns the session client for session n on the same MBIM
// client (its indications routed to it by their SessionId). It fails
// with ErrSessionNumber if n has one already.
func (s *MBIMSession) Sibling(n uint8) (*MBIMSession, error) {
	h := s.hub
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.sessions[uint32(n)]; ok {
		return nil, fmt.Errorf("%w: MBIM session %d has a client already", ErrSessionNumber, n)
	}
	o := &MBIMSession{hub: h, c: h.c, sid: uint32(n)}
	h.sessions[uint32(n)] = o
	return o, nil
}

// Number returns the session number (CONNECT's SessionId).
func (s *MBIMSession) Number() uint8 { return uint8(s.sid) }

// Client returns the MBIM client the session uses.
func (s *MBIMSession) Client() *MBIMClient { return s.c }

// Protocol returns "mbim".
func (s *MBIMSession) Protocol() string { return "mbim" }

// Notify implements SessionClient.
func (s *MBIMSession) Notify(f func()) { s.notify.Store(&f) }

// Close stops the session; the shared client stops with the last
// session closed.
func (s *MBIMSession) Close() {
	h := s.hub
	h.mu.Lock()
	if h.sessions[s.sid] == s {
		delete(h.sessions, s.sid)
	}
	last := len(h.sessions) == 0 && !h.closed
	if last {
		h.closed = true
	}
	h.mu.Unlock()
	if last {
		h.c.Close()
	}
}

// indication watches CONNECT and PACKET_SERVICE indications: a CONNECT
// that is not activated may mean the end of the session it names (only
// that one); a PACKET_SERVICE or RADIO_STATE change may mean the end of
// every session.
func (h *mbimHub) indication(svc mbim.UUID, cid uint32, info mbim.Info) {
	if svc != mbim.ServiceBasicConnect {
		return
	}
	var only *uint32
	switch cid {
	case mbim.CIDConnect:
		ci, err := mbim.ParseConnectInfo(info)
		if err != nil || ci.ActivationState == mbim.ActivationStateActivated {
			return
		}
		only = &ci.SessionID
	case mbim.CIDPacketService, mbim.CIDRadioState:
	default:
		return
	}
	h.mu.Lock()
	var targets []*MBIMSession
	for sid, s := range h.sessions {
		if only == nil || *only == sid {
			targets = append(targets, s)
		}
	}
	h.mu.Unlock()
	for _, s := range targets {
		if f := s.notify.Load(); f != nil {
			(*f)()
		}
	}
}

// withOpen runs op; if the modem answers NotOpened (the function was
// closed by a port client's CLOSE), it opens the function and runs op
// once more.
func (s *MBIMSession) withOpen(ctx context.Context, op func() error) error {
	err := op()
	var fe *FunctionError
	if errors.As(err, &fe) && fe.Code == mbim.ErrorNotOpened {
		if oerr := s.c.Open(ctx); oerr != nil {
			return fmt.Errorf("ctrlport: MBIM OPEN after NotOpened: %w", oerr)
		}
		err = op()
	}
	return err
}

var mbimIPTypes = map[string]uint32{IPTypeIPv4: mbim.IPTypeIPv4, IPTypeIPv6: mbim.IPTypeIPv6, IPTypeIPv4v6: mbim.IPTypeIPv4v6}

func mbimIPTypeName(t uint32) string {
	switch t {
	case mbim.IPTypeIPv4:
		return IPTypeIPv4
	case mbim.IPTypeIPv6:
		return IPTypeIPv6
	case mbim.IPTypeIPv4v6, mbim.IPTypeIPv4AndIPv6:
		return IPTypeIPv4v6
	}
	return fmt.Sprintf("mbim-ip-type-%d", t)
}

// mbimIPTypeFits reports whether the IP type a modem activated is one the
// request allows: the type asked for, the modem's default (0), or for a
// dual-stack request either family alone.
func mbimIPTypeFits(req string, got uint32) bool {
	switch got {
	case mbim.IPTypeDefault:
		return true
	case mbim.IPTypeIPv4:
		return req == IPTypeIPv4 || req == IPTypeIPv4v6
	case mbim.IPTypeIPv6:
		return req == IPTypeIPv6 || req == IPTypeIPv4v6
	case mbim.IPTypeIPv4v6, mbim.IPTypeIPv4AndIPv6:
		return req == IPTypeIPv4v6
	}
	return false
}

// Connect attaches the packet service (a modem without the CID, answering
// NoDeviceSupport, is taken as attaching on its own), activates the session
// with req's APN and IP type, and reads IP_CONFIGURATION. A CONNECT reply
// for another session, with an IP type the request did not ask for, or
// that does not parse is refused, and so is an IP_CONFIGURATION that
// does not parse or flags an MTU of 0; the modem's session is then
// deactivated again. Only the families of the activated IP type are
// taken from IP_CONFIGURATION.
func (s *MBIMSession) Connect(ctx context.Context, req SessionRequest) (SessionConfig, error) {
	if err := req.validate(); err != nil {
		return SessionConfig{}, err
	}
	err := s.attach(ctx)
	var se *StatusError
	if errors.As(err, &se) && se.Status == mbim.StatusRadioPowerOff {
		// The radio is off: switch it on, as ModemManager's enable does,
		// and learn whether the modem is FCC-locked.
		if perr := s.radioOn(ctx); perr != nil {
			return SessionConfig{}, perr
		}
		err = s.attach(ctx)
	}
	if err != nil {
		return SessionConfig{}, fmt.Errorf("%w: packet service attach: %w", ErrSessionRefused, err)
	}
	ci, mayBeActive, err := s.activate(ctx, req)
	if mayBeActive {
		return s.undoConnect(ctx, req, err)
	}
	if err != nil {
		return SessionConfig{}, err
	}
	cfg := SessionConfig{Protocol: "mbim", APN: req.APN, IPType: mbimIPTypeName(ci.IPType)}
	if ci.IPType == mbim.IPTypeDefault {
		cfg.IPType = req.IPType
	}
	ipc, err := s.c.IPConfigurationOf(ctx, s.sid)
	if err == nil && ipc.SessionID != s.sid {
		err = fmt.Errorf("%w: IP_CONFIGURATION answered for session %d, asked for session %d", mbim.ErrWrongMessage, ipc.SessionID, s.sid)
	}
	if err != nil {
		return s.undoConnect(ctx, req, fmt.Errorf("IP_CONFIGURATION: %w", err))
	}
	if err := applyMBIMIPConfiguration(&cfg, ipc); err != nil {
		return s.undoConnect(ctx, req, err)
	}
	return cfg, nil
}

// FCCUnlockHint says what unlocks an FCC-locked module: gomhi does not
// run the vendors' procedures.
const FCCUnlockHint = "the modem keeps its radio off until its vendor's FCC unlock procedure runs " +
	"(ModemManager's fcc-unlock.d scripts; on a Quectel module 'mbimcli -d PORT --quectel-set-radio-state=on', " +
	"PORT the modem's MBIM port, e.g. /run/gomhi/mhi0/wwan0mbim0: 'mhictl get DEV ports'); gomhi does not run it"

// radioOn switches the radio on (RADIO_STATE set). A modem that refuses
// with OPERATION_NOT_ALLOWED, or answers with its software radio still
// off, is FCC-locked (ErrFCCLocked); one whose hardware switch is off is
// rfkilled.
func (s *MBIMSession) radioOn(ctx context.Context) error {
	var rs mbim.RadioState
	err := s.withOpen(ctx, func() (err error) {
		rs, err = s.c.SetRadio(ctx, true)
		return err
	})
	var se *StatusError
	switch {
	case errors.As(err, &se) && se.Status == mbim.StatusOperationNotAllowed,
		err == nil && rs.Hw == mbim.RadioOn && rs.Sw != mbim.RadioOn:
		if err == nil {
			err = fmt.Errorf("RADIO_STATE set on: the software radio stays off")
		}
		if s.quectelFCCLocked(ctx) {
			err = fmt.Errorf("%w; the modem's Quectel service reports the radio fcc-locked", err)
		}
		return fmt.Errorf("%w: %w: %s (%w)", ErrSessionRefused, ErrFCCLocked, FCCUnlockHint, err)
	case err == nil && rs.Hw != mbim.RadioOn:
		return fmt.Errorf("%w: the radio is off by its hardware switch (rfkill, W_DISABLE#)", ErrSessionRefused)
	case err != nil:
		return fmt.Errorf("%w: switching the radio on: %w", ErrSessionRefused, err)
	}
	return nil
}

// quectelFCCLocked asks the Quectel service's RADIO_STATE whether the
// radio is FCC-locked (a modem without the service answers otherwise).
func (s *MBIMSession) quectelFCCLocked(ctx context.Context) bool {
	var st mbim.Status
	var info mbim.Info
	err := s.withOpen(ctx, func() (err error) {
		st, info, err = s.c.Command(ctx, mbim.ServiceQuectel, mbim.CIDQuectelRadioState, mbim.CommandQuery, nil)
		return err
	})
	if err != nil || st != mbim.StatusSuccess {
		return false
	}
	v, err := info.U32(0)
	return err == nil && v == mbim.QuectelRadioFCCLocked
}

// attach attaches the packet service; a modem without the CID (answering
// NoDeviceSupport) is taken as attaching on its own.
func (s *MBIMSession) attach(ctx context.Context) error {
	return s.withOpen(ctx, func() error {
		_, err := s.c.Attach(ctx)
		return unlessStatus(err, mbim.StatusNoDeviceSupport)
	})
}

// unlessStatus returns err, or nil when err is the modem's answer with
// status st (a *StatusError): an answer the caller takes as success.
func unlessStatus(err error, st mbim.Status) error {
	var se *StatusError
	if errors.As(err, &se) && se.Status == st {
		return nil
	}
	return err
}

// activate sends CONNECT for the session and checks the answer. With an
// error, mayBeActive says that the modem may have activated the session
// all the same (an answer that says nothing usable, or not what was asked
// for), so that it must be deactivated again.
func (s *MBIMSession) activate(ctx context.Context, req SessionRequest) (ci mbim.ConnectInfo, mayBeActive bool, err error) {
	connect := func() error {
		return s.withOpen(ctx, func() (err error) {
			ci, err = s.c.ConnectSession(ctx, s.sid, req.APN, mbimIPTypes[req.IPType])
			return err
		})
	}
	err = connect()
	var se *StatusError
	if errors.As(err, &se) && se.Status == mbim.StatusContextNotActivated {
		// A context the modem activated itself (its own autoconnect)
		// may hold the default PDN (OpenMPTCProuter #4030, QModem #251):
		// deactivate it and try once more.
		if derr := s.Disconnect(ctx); derr == nil {
			if rerr := connect(); rerr == nil {
				err = nil
			} else {
				err = fmt.Errorf("%w (again after deactivating a context the modem's own autoconnect may hold)", rerr)
			}
		}
	}
	switch {
	case errors.As(err, &se) && se.Status == mbim.StatusMaxActivatedContexts && s.sid != 0:
		return ci, false, fmt.Errorf("%w: session %d: the modem has as many sessions activated as it takes, or this one already: %w", ErrSessionRefused, s.sid, err)
	case errors.As(err, &se) && se.Status == mbim.StatusMaxActivatedContexts:
		return ci, false, fmt.Errorf("%w: the modem has a session connected already (disconnect it first): %w", ErrSessionActive, err)
	case errors.As(err, &se):
		// The modem refused: it has nothing activated.
		return ci, false, fmt.Errorf("%w: APN %q, %s: %w", ErrSessionRefused, req.APN, req.IPType, err)
	case err != nil:
		return ci, true, err
	case ci.SessionID != s.sid:
		return ci, true, fmt.Errorf("%w: CONNECT answered for session %d, asked for session %d", mbim.ErrWrongMessage, ci.SessionID, s.sid)
	case ci.ActivationState != mbim.ActivationStateActivated:
		return ci, true, fmt.Errorf("activation state %d after CONNECT", ci.ActivationState)
	case !mbimIPTypeFits(req.IPType, ci.IPType):
		return ci, true, fmt.Errorf("%w: the modem activated IP type %s for a %s request", ErrBadSessionConfig, mbimIPTypeName(ci.IPType), req.IPType)
	}
	return ci, false, nil
}

// undoConnect deactivates what the modem activated, or may have activated,
// when the session cannot be used, and returns err as a refusal.
func (s *MBIMSession) undoConnect(ctx context.Context, req SessionRequest, err error) (SessionConfig, error) {
	if ctx.Err() == nil {
		_ = s.Disconnect(ctx)
	}
	return SessionConfig{}, fmt.Errorf("%w: APN %q, %s: %w", ErrSessionRefused, req.APN, req.IPType, err)
}

// applyMBIMIPConfiguration fills cfg's addresses, gateways, DNS servers
// and MTU (the smaller of the families' MTUs) from ipc, for the families
// of cfg.IPType only: what ipc flags available. An MTU flagged available
// must be in 1..MaxSessionMTU.
func applyMBIMIPConfiguration(cfg *SessionConfig, ipc mbim.IPConfiguration) error {
	want4 := cfg.IPType == IPTypeIPv4 || cfg.IPType == IPTypeIPv4v6
	want6 := cfg.IPType == IPTypeIPv6 || cfg.IPType == IPTypeIPv4v6
	mtu := 0
	for _, f := range []struct {
		want  bool
		avail uint32
		addrs []netip.Prefix
		gw    netip.Addr
		dns   []netip.Addr
		mtu   uint32
		fam   string
	}{
		{want: want4, avail: ipc.IPv4Available, addrs: ipc.IPv4Addresses, gw: ipc.IPv4Gateway, dns: ipc.IPv4DNS, mtu: ipc.IPv4MTU, fam: "IPv4"},
		{want: want6, avail: ipc.IPv6Available, addrs: ipc.IPv6Addresses, gw: ipc.IPv6Gateway, dns: ipc.IPv6DNS, mtu: ipc.IPv6MTU, fam: "IPv6"},
	} {
		if !f.want {
			continue
		}
		var p netip.Prefix
		var gw netip.Addr
		var dns []netip.Addr
		if f.avail&mbim.IPConfigAddress != 0 && len(f.addrs) > 0 {
			p = f.addrs[0]
		}
		if f.avail&mbim.IPConfigGateway != 0 {
			gw = f.gw
		}
		if f.avail&mbim.IPConfigDNS != 0 {
			dns = f.dns
		}
		if f.avail&mbim.IPConfigMTU != 0 {
			if f.mtu == 0 || f.mtu > MaxSessionMTU {
				return fmt.Errorf("%w: %s MTU %d flagged available, valid range 1..%d", ErrBadSessionConfig, f.fam, f.mtu, MaxSessionMTU)
			}
			if m := int(f.mtu); mtu == 0 || m < mtu {
				mtu = m
			}
		}
		if f.fam == "IPv4" {
			cfg.IPv4, cfg.Gateway4, cfg.DNS4 = p, gw, dns
		} else {
			cfg.IPv6, cfg.Gateway6, cfg.DNS6 = p, gw, dns
		}
	}
	cfg.MTU = mtu
	return nil
}

// Disconnect deactivates the session.
func (s *MBIMSession) Disconnect(ctx context.Context) error {
	return s.withOpen(ctx, func() error {
		_, err := s.c.DisconnectSession(ctx, s.sid)
		return unlessStatus(err, mbim.StatusContextNotActivated)
	})
}

// Active queries CONNECT for the session.
func (s *MBIMSession) Active(ctx context.Context) (bool, error) {
	var ci mbim.ConnectInfo
	err := s.withOpen(ctx, func() (err error) {
		ci, err = s.c.ConnectionStateOf(ctx, s.sid)
		return err
	})
	return ci.ActivationState == mbim.ActivationStateActivated, err
}

// HostConfigurer applies a connected session's configuration to the
// host: the interface's addresses, routes and MTU.
type HostConfigurer interface {
	// Interface names the interface configured ("" for none).
	Interface() string
	// Apply configures the host for cfg.
	Apply(cfg SessionConfig) error
	// Remove undoes Apply.
	Remove(cfg SessionConfig) error
}

// HostPreparer is a HostConfigurer that makes its interface for each
// connect (a session N > 0's own TUN) and removes it again.
type HostPreparer interface {
	HostConfigurer
	// Prepare makes the interface, named name ("": the session's
	// default), before the modem is asked to connect; an error refuses
	// the connect (ErrInterfaceTaken for a name in use).
	Prepare(name string) error
	// Release removes what Prepare made: after a failed connect, and
	// after Remove when the session ends.
	Release() error
}

// ErrInterfaceTaken: the interface name a connect asks for is in use.
var ErrInterfaceTaken = errors.New("ctrlport: interface name in use")

// SessionOptions configure a Session.
type SessionOptions struct {
	// Number is the session number (MBIM SessionId, the QMAP mux id
	// less the model's base), shown in its state.
	Number uint8
	// Host, if set, configures the host side of a connected session.
	Host HostConfigurer
	// Timeout bounds one connect or disconnect (default
	// DefaultSessionTimeout).
	Timeout time.Duration
	// Logger receives Info records for connects and disconnects and Warn
	// records for failures (nil: discard).
	Logger *slog.Logger
}

// DefaultSessionTimeout bounds a connect or disconnect: real modems take
// seconds to activate a context (mbimcli allows 60 s).
const DefaultSessionTimeout = 60 * time.Second

// Session states.
const (
	StateConnected    = "connected"
	StateDisconnected = "disconnected"
)

// SessionState is a Session's state: connected or not, and what was
// configured.
type SessionState struct {
	// Session is the session number.
	Session   uint8  `json:"session"`
	State     string `json:"state"` // StateConnected or StateDisconnected
	Interface string `json:"interface"`
	SessionConfig
	// Since is when the state last changed.
	Since time.Time `json:"since"`
	// LastError is the last failure's message ("" after a success).
	LastError string `json:"last_error"`
}

// Connected reports whether the state is connected.
func (s SessionState) Connected() bool { return s.State == StateConnected }

// SessionStats are a Session's counters.
type SessionStats struct {
	Connects           uint64 `json:"connects"`
	ConnectFailures    uint64 `json:"connect_failures"`
	Disconnects        uint64 `json:"disconnects"`
	DisconnectFailures uint64 `json:"disconnect_failures"`
	// NetworkDisconnects counts sessions the modem ended on its own
	// (radio off, detach, another client's deactivate).
	NetworkDisconnects uint64 `json:"network_disconnects"`
	// ConfigRefused counts connects refused because the modem assigned a
	// configuration the host does not accept (ErrBadSessionConfig).
	ConfigRefused uint64 `json:"config_refused"`
	// StateChecks counts the times the session asked the modem whether
	// it still stands, after an indication said it might not.
	StateChecks uint64 `json:"state_checks"`
	Connected   uint64 `json:"connected"` // 1 while connected
}

// Session drives a device's data session: connect over a SessionClient,
// then configure the host; disconnect and unconfigure. It notices a
// session the modem ends on its own and unconfigures the host then too.
// Its methods are safe for concurrent use; operations are serialised.
type Session struct {
	client SessionClient
	opts   SessionOptions
	log    *slog.Logger

	op sync.Mutex // serialises operations

	mu    sync.Mutex
	state SessionState
	stats SessionStats

	checking atomic.Bool // a checker goroutine runs
	lost     atomic.Bool // an indication came that the checker has not acted on
	closed   atomic.Bool
	wg       sync.WaitGroup  // the checker; Add under mu, not after closed
	ctx      context.Context // ends with Close
	cancel   func()
}

// NewSession returns a disconnected Session over client.
func NewSession(client SessionClient, opts SessionOptions) *Session {
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultSessionTimeout
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Session{client: client, opts: opts, log: log.With("protocol", client.Protocol())}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.state = SessionState{Session: opts.Number, State: StateDisconnected, SessionConfig: SessionConfig{Protocol: client.Protocol()}, Since: time.Now()}
	if opts.Host != nil {
		s.state.Interface = opts.Host.Interface()
	}
	client.Notify(s.maybeLost)
	return s
}

// Number returns the session number.
func (s *Session) Number() uint8 { return s.opts.Number }

// Protocol returns the client's protocol.
func (s *Session) Protocol() string { return s.client.Protocol() }

// State returns the current state.
func (s *Session) State() SessionState {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.state
	return st
}

// Stats returns the counters.
func (s *Session) Stats() SessionStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	if s.state.Connected() {
		st.Connected = 1
	}
	return st
}

func (s *Session) set(st SessionState) {
	st.Since = time.Now()
	if s.opts.Host != nil {
		st.Interface = s.opts.Host.Interface()
	}
	st.Protocol = s.client.Protocol()
	st.Session = s.opts.Number
	s.mu.Lock()
	s.state = st
	s.mu.Unlock()
}

func (s *Session) fail(counter *uint64, err error) {
	s.mu.Lock()
	*counter++
	s.state.LastError = err.Error()
	s.mu.Unlock()
}

// Connect connects the session and configures the host. It fails with
// ErrSessionRequest for an invalid request, ErrSessionActive while
// connected, ErrSessionRefused when the modem does not connect and
// ErrHostConfig when the host cannot be configured (the modem's session
// is then disconnected again, and an interface made for it removed).
func (s *Session) Connect(ctx context.Context, req SessionRequest) (SessionState, error) {
	if err := req.validate(); err != nil {
		s.fail(&s.stats.ConnectFailures, err)
		return s.State(), err
	}
	s.op.Lock()
	defer s.op.Unlock()
	if cur := s.State(); cur.Connected() {
		err := fmt.Errorf("%w: session %d (APN %q, %s); disconnect first", ErrSessionActive, s.opts.Number, cur.APN, cur.IPType)
		s.fail(&s.stats.ConnectFailures, err)
		return cur, err
	}
	release, err := s.prepareHost(req.Interface)
	if err != nil {
		s.fail(&s.stats.ConnectFailures, err)
		return s.State(), err
	}
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	cfg, err := s.client.Connect(ctx, req)
	if err == nil {
		var cerr error
		if cfg, cerr = CheckSessionConfig(cfg); cerr != nil {
			// Nothing of it reaches the host; the modem's session goes.
			derr := s.client.Disconnect(ctx)
			err = fmt.Errorf("%w: APN %q, %s: %w", ErrSessionRefused, req.APN, req.IPType, errors.Join(cerr, derr))
		}
	}
	if err != nil {
		release()
		s.log.Warn("session connect failed", "session", s.opts.Number, "apn", req.APN, "ip_type", req.IPType, "err", err)
		if errors.Is(err, ErrBadSessionConfig) {
			s.mu.Lock()
			s.stats.ConfigRefused++
			s.mu.Unlock()
		}
		s.fail(&s.stats.ConnectFailures, err)
		return s.State(), err
	}
	if h := s.opts.Host; h != nil {
		if herr := h.Apply(cfg); herr != nil {
			derr := s.client.Disconnect(ctx)
			_ = h.Remove(cfg)
			name := h.Interface()
			release()
			err := fmt.Errorf("%w: %s: %w", ErrHostConfig, name, errors.Join(herr, derr))
			s.log.Warn("session connected but the host could not be configured; disconnected", "session", s.opts.Number, "err", err)
			s.fail(&s.stats.ConnectFailures, err)
			return s.State(), err
		}
	}
	s.set(SessionState{State: StateConnected, SessionConfig: cfg})
	s.mu.Lock()
	s.stats.Connects++
	st := s.state
	s.mu.Unlock()
	s.log.Info("session connected", "session", s.opts.Number, "apn", cfg.APN, "ip_type", cfg.IPType, "ipv4", cfg.IPv4, "ipv6", cfg.IPv6, "mtu", cfg.MTU, "interface", st.Interface)
	return st, nil
}

// prepareHost makes the session's interface when its host makes one per
// connect (HostPreparer), or checks that name is the host's own
// interface; release undoes it.
func (s *Session) prepareHost(name string) (release func(), err error) {
	nothing := func() {}
	h := s.opts.Host
	if p, ok := h.(HostPreparer); ok {
		if err := p.Prepare(name); err != nil {
			return nothing, fmt.Errorf("%w: session %d: %w", ErrHostConfig, s.opts.Number, err)
		}
		return func() {
			if err := p.Release(); err != nil {
				s.log.Warn("removing the session's interface", "session", s.opts.Number, "err", err)
			}
		}, nil
	}
	switch {
	case name == "":
	case h == nil:
		return nothing, fmt.Errorf("%w: interface %q: session %d configures no interface (the host stack runs without one)", ErrSessionRequest, name, s.opts.Number)
	case name != h.Interface():
		return nothing, fmt.Errorf("%w: interface %q: session %d configures %s", ErrSessionRequest, name, s.opts.Number, h.Interface())
	}
	return nothing, nil
}

// unconfigure removes the session's configuration from the host and the
// interface made for it, if any.
func (s *Session) unconfigure(cfg SessionConfig) error {
	h := s.opts.Host
	if h == nil {
		return nil
	}
	err := h.Remove(cfg)
	if p, ok := h.(HostPreparer); ok {
		err = errors.Join(err, p.Release())
	}
	return err
}

// Disconnect deactivates the modem's session (whoever connected it) and
// unconfigures the host if this Session had configured it.
func (s *Session) Disconnect(ctx context.Context) (SessionState, error) {
	s.op.Lock()
	defer s.op.Unlock()
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	cur := s.State()
	err := s.client.Disconnect(ctx)
	if err != nil {
		err = fmt.Errorf("ctrlport: %s disconnect: %w", s.client.Protocol(), err)
		s.log.Warn("session disconnect failed", "err", err)
		s.fail(&s.stats.DisconnectFailures, err)
		return s.State(), err
	}
	var herr error
	if cur.Connected() {
		herr = s.unconfigure(cur.SessionConfig)
	}
	s.set(SessionState{State: StateDisconnected})
	s.mu.Lock()
	if cur.Connected() {
		s.stats.Disconnects++
	}
	st := s.state
	s.mu.Unlock()
	if herr != nil {
		herr = fmt.Errorf("%w: removing session %d's configuration from %s: %w", ErrHostConfig, s.opts.Number, cur.Interface, herr)
		s.fail(&s.stats.DisconnectFailures, herr)
		return s.State(), herr
	}
	s.log.Info("session disconnected", "session", s.opts.Number, "apn", cur.APN)
	return st, nil
}

// stateCheckInterval is the least time between two checks of the
// session's state, so that a storm of indications costs the modem a few
// queries, not one per indication.
const stateCheckInterval = 200 * time.Millisecond

// maybeLost runs when the modem says the session may have ended. A checker
// goroutine (one at a time) asks the modem and, if the session is gone,
// unconfigures the host. An indication that comes while a connect is in
// progress or a check runs is not lost: the checker looks again once the
// connect is done, at most every stateCheckInterval.
func (s *Session) maybeLost() {
	s.lost.Store(true)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed.Load() || s.checking.Swap(true) {
		return
	}
	s.wg.Add(1)
	go s.checker()
}

func (s *Session) checker() {
	defer s.wg.Done()
	for {
		for s.lost.Swap(false) {
			s.check()
			select {
			case <-s.ctx.Done():
				s.checking.Store(false)
				return
			case <-time.After(stateCheckInterval):
			}
		}
		s.checking.Store(false)
		// An indication between the last Swap and Store(false) found the
		// checker still running: look once more.
		if !s.lost.Load() || s.checking.Swap(true) {
			return
		}
	}
}

// check asks the modem whether the connected session still stands (after
// any connect or disconnect in progress) and unconfigures the host if not.
func (s *Session) check() {
	s.op.Lock()
	defer s.op.Unlock()
	cur := s.State()
	if !cur.Connected() || s.closed.Load() {
		return
	}
	s.mu.Lock()
	s.stats.StateChecks++
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
	defer cancel()
	active, err := s.client.Active(ctx)
	if err != nil || active {
		return
	}
	// Let the client drop what it holds for the ended session (QMI
	// client ids); the modem has nothing left to deactivate.
	_ = s.client.Disconnect(ctx)
	if err := s.unconfigure(cur.SessionConfig); err != nil {
		s.log.Warn("removing the ended session's configuration", "session", s.opts.Number, "err", err)
	}
	s.set(SessionState{State: StateDisconnected, LastError: "the modem ended the session"})
	s.mu.Lock()
	s.stats.NetworkDisconnects++
	s.mu.Unlock()
	s.log.Info("the modem ended the session", "session", s.opts.Number, "apn", cur.APN)
}

// Close stops watching the modem and closes the client. It leaves the
// modem's session as it is (the modem goes away with the host stack).
func (s *Session) Close() {
	s.mu.Lock()
	was := s.closed.Swap(true)
	s.mu.Unlock()
	if was {
		return
	}
	s.cancel()
	s.client.Close()
	s.wg.Wait()
}
