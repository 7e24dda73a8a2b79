package modem

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
)

// This file holds the modem's cellular state: what its control functions
// (MBIM, QMI, AT) report and change, and what gates its IP data.

// Identity is what a modem says about itself.
type Identity struct {
	Manufacturer string // e.g. "Telit"
	Model        string // e.g. "FN990"
	Firmware     string // firmware revision (MBIM FirmwareInfo, QMI revision, AT+CGMR)
	Hardware     string // hardware revision (MBIM HardwareInfo, after Model)
	IMEI         string // 15 digits (MBIM DeviceId, QMI IMEI, AT+CGSN)
	IMSI         string // subscriber id
	ICCID        string // SIM card id
	MSISDN       string // own number; may be empty
	ProviderID   string // home network MCC+MNC, e.g. "00101"
	ProviderName string // home network name
}

// IPType is the IP family of a data session.
type IPType uint8

// IP types of a session.
const (
	IPv4 IPType = iota + 1
	IPv6
	IPv4v6
)

var ipTypeNames = [...]string{"", "ipv4", "ipv6", "ipv4v6"}

// String returns "ipv4", "ipv6" or "ipv4v6".
func (t IPType) String() string {
	if t >= IPv4 && t <= IPv4v6 {
		return ipTypeNames[t]
	}
	return fmt.Sprintf("IPType(%d)", int(t))
}

// has4 reports whether the type includes IPv4.
func (t IPType) has4() bool { return t == IPv4 || t == IPv4v6 }

// has6 reports whether the type includes IPv6.
func (t IPType) has6() bool { return t == IPv6 || t == IPv4v6 }

// SessionAddressing is what the network assigns to a connected session:
// the host's addresses, the gateway (the modem's side of the link, the
// address the responder answers as), DNS servers and the MTU.
type SessionAddressing struct {
	IPv4     netip.Prefix // host address and on-link prefix
	Gateway4 netip.Addr
	DNS4     []netip.Addr
	IPv6     netip.Prefix
	Gateway6 netip.Addr
	DNS6     []netip.Addr
	MTU      int
}

// Default addressing of a session: the host gets 198.18.0.1/24 and
// fd00:6d68:6900::1/64 (the benchmarking and a unique-local range), the
// modem's side is .2 / ::2 and also serves as DNS, MTU 1500. They match
// the addresses `mhictl up` gives its TUN interface by default.
var (
	DefaultIPv4     = netip.MustParsePrefix("198.18.0.1/24")
	DefaultGateway4 = netip.MustParseAddr("198.18.0.2")
	DefaultIPv6     = netip.MustParsePrefix("fd00:6d68:6900::1/64")
	DefaultGateway6 = netip.MustParseAddr("fd00:6d68:6900::2")
)

// DefaultSessionMTU is the MTU a session reports unless configured.
const DefaultSessionMTU = 1500

// Session limits: Config.MaxSessions defaults to DefaultMaxSessions and
// may not exceed MaxSessionLimit (MBIM session ids and QMAP mux ids are
// one byte).
const (
	DefaultMaxSessions = 8
	MaxSessionLimit    = 256
)

// Config configures a Modem. Zero fields get defaults (see New).
type Config struct {
	Identity   Identity
	Addressing SessionAddressing
	// RequireConnect gates IP data on a connected session, as a real modem
	// does: until a session is connected (and after it is disconnected)
	// the IP data function drops and counts every packet. Without it data
	// flows whatever the session state (the behaviour before control
	// channels existed).
	RequireConnect bool
	// RadioOff starts the modem with its radio off (default on).
	RadioOff bool
	// RSSI is the signal in the 0–31 scale of 3GPP 27.007 (+CSQ); zero
	// means the default, 20 (about -73 dBm).
	RSSI int
	// MaxSessions is how many data sessions the modem carries at once:
	// sessions 0..MaxSessions-1 (MBIM SessionId, the host's session
	// number); a connect for a higher number fails with ErrSessionLimit.
	// Zero means DefaultMaxSessions; at most MaxSessionLimit.
	MaxSessions int
	// WireBase is the wire id of session 0 on the data path: the QMAP mux
	// id (and MBIM NDP session byte) the modem's IP data numbers session
	// 0 with; session N is WireBase+N. QMI's Bind Mux Data Port names a
	// session by this wire id (pcigeneric/mock sets it from the model's
	// MuxIDBase or the sdx72-mux-112 quirk). Zero for most modems.
	WireBase uint8

	// The field failures below are what the quirks of mhi/ep/quirk set
	// (docs/QUIRKS.md).

	// FCCLocked starts the modem FCC-locked, as Lenovo/Foxconn and
	// Quectel modules ship: its radio is off and every request to switch
	// it on fails (ErrFCCLocked: MBIM RADIO_STATE set answers
	// OPERATION_NOT_ALLOWED, QMI DMS SET_OPERATING_MODE online
	// InvalidTransition, AT+CFUN=1 an error) until UnlockFCC. The lock
	// survives Restart, as a real module's does a crash.
	FCCLocked bool
	// AutoconnectPDN models the modem's own autoconnect holding the
	// default PDN: every session activation the host asks for fails with
	// ErrPDNHeld (MBIM CONNECT: CONTEXT_NOT_ACTIVATED; QMI START_NETWORK:
	// CallFailed, call-end reason 241) until the host first deactivates
	// (MBIM CONNECT deactivate, QMI STOP_NETWORK or disabling autoconnect
	// with WDS SET_AUTOCONNECT_SETTINGS), which releases the PDN for good.
	AutoconnectPDN bool
	// CrashOnConnect, if set, is called instead of completing the first
	// session activation the host asks for (MBIM CONNECT activate, QMI
	// START_NETWORK): the firmware crashes right when a session connects.
	// The activation fails with ErrCrashed; the function (pcigeneric/mock
	// binds it) raises SYS_ERR and restarts the modem. Later activations
	// proceed normally.
	CrashOnConnect func()
}

// Default identity strings, used for fields left empty.
const (
	DefaultManufacturer = "gomhi"
	DefaultModel        = "mock modem"
	DefaultFirmware     = "gomhi-mock-1.0"
	DefaultHardware     = "1.0"
	DefaultIMEI         = "350000000000009"
	DefaultIMSI         = "001010123456789"
	DefaultICCID        = "8900101234567890123"
	DefaultProviderID   = "00101"
	DefaultProviderName = "gomhi network"
	DefaultRSSI         = 20
)

// Errors of Modem operations.
var (
	// ErrConfig: an invalid Config or argument.
	ErrConfig = errors.New("modem: invalid modem configuration")
	// ErrRadioOff: the operation needs the radio on.
	ErrRadioOff = errors.New("modem: radio is off")
	// ErrDetached: the packet service is detached.
	ErrDetached = errors.New("modem: packet service detached")
	// ErrNoAPN: a connect without an access point name.
	ErrNoAPN = errors.New("modem: no access point name")
	// ErrSessionActive: a connect for a session number that is already
	// connected.
	ErrSessionActive = errors.New("modem: a session is already connected")
	// ErrSessionLimit: a connect for a session number at or above
	// Config.MaxSessions.
	ErrSessionLimit = errors.New("modem: session number beyond the modem's limit")
	// ErrNoSession: the operation names a session that is not the active one.
	ErrNoSession = errors.New("modem: no such active session")
	// ErrFCCLocked: the radio cannot be switched on: the modem is
	// FCC-locked until the vendor's unlock procedure (Config.FCCLocked).
	ErrFCCLocked = errors.New("modem: radio FCC-locked")
	// ErrPDNHeld: the modem's own autoconnect holds the default PDN
	// (Config.AutoconnectPDN); deactivate first.
	ErrPDNHeld = errors.New("modem: the default PDN is held by the modem's autoconnect")
	// ErrCrashed: the modem crashed while activating the session
	// (Config.CrashOnConnect).
	ErrCrashed = errors.New("modem: the firmware crashed while connecting")
)

// RegisterState is the network registration state.
type RegisterState uint8

// Registration states.
const (
	RegDeregistered RegisterState = iota // radio off: not registered, not searching
	RegHome                              // registered on the home network
)

// Session is the state of one of the modem's data sessions.
type Session struct {
	// Number is the session number (MBIM SessionId, the host's session;
	// its wire id is Config.WireBase+Number).
	Number uint8
	Active bool
	APN    string
	Type   IPType // the activated type (IPv4v6 may be narrowed by the addressing)
	// ID counts connects: it changes with every new session, so a control
	// function can hand out session handles (QMI's packet data handle).
	ID uint32
	// EndCause is the 3GPP session-management cause (TS 24.008
	// §10.5.6.6) the network gave when it ended the session on its own:
	// CauseRegularDeactivation after NetworkDisconnect, 0 while active or
	// after the host's deactivation. MBIM carries it as CONNECT's NwError.
	EndCause uint32
}

// CauseRegularDeactivation is 3GPP cause #36, "regular deactivation": the
// network released the PDN.
const CauseRegularDeactivation = 36

// EventKind says what changed in a Event.
type EventKind uint8

// Modem event kinds.
const (
	EventRadio         EventKind = iota + 1 // radio switched on or off
	EventRegistration                       // registration state changed
	EventPacketService                      // attached or detached
	EventSession                            // session connected or disconnected
	EventSignal                             // signal strength changed
)

// Event tells subscribers what changed. Subscribers read the new
// state from the Modem.
type Event struct {
	Kind EventKind
	// Session is the session an EventSession is about (0 for the other
	// kinds).
	Session uint8
}

// Stats are the modem's counters.
type Stats struct {
	Connects    uint64 `json:"connects"`
	Disconnects uint64 `json:"disconnects"`
	// NetworkDisconnects counts sessions the network ended on its own
	// (NetworkDisconnect; also counted in Disconnects).
	NetworkDisconnects uint64 `json:"network_disconnects"`
	ConnectFail        uint64 `json:"connect_failures"`
	// Restarts counts Restart calls (baseband crashes).
	Restarts uint64 `json:"restarts"`
}

// Modem is the cellular state of the mock modem, shared by its control
// functions and consulted by its IP data function (it implements
// ipdata.Gate). All methods are safe for concurrent use.
type Modem struct {
	cfg Config

	// mu guards the fields below but the atomics; nothing is taken while
	// it is held (publish calls the subscribers after it is released). It
	// comes after the control functions' locks (see MBIM, QMI and AT).
	mu       sync.Mutex
	radio    bool
	attached bool
	rssi     int
	sessions []Session // by number, len Config.MaxSessions
	nextID   uint32
	subs     map[int]func(Event)
	nextSub  int
	// The field failures' state (Config): the FCC lock, the PDN the
	// modem's autoconnect holds, the crash still due.
	fccLocked bool
	pdnHeld   bool
	crashDue  bool
	dataOpen  atomic.Bool // what DataAllowed answers, updated under mu
	// allowed has bit n set while IP data of session n may flow
	// (SessionAllowed); updated under mu, read lock-free.
	allowed [MaxSessionLimit / 64]atomic.Uint64

	connects, disconnects, connectFail, restarts, netDisconnects atomic.Uint64
}

// New validates cfg, fills its defaults and returns the modem: radio
// on (unless RadioOff), registered on the home network and attached while
// the radio is on, no session.
func New(cfg Config) (*Modem, error) {
	id := &cfg.Identity
	for _, f := range []struct {
		p   *string
		def string
	}{
		{&id.Manufacturer, DefaultManufacturer}, {&id.Model, DefaultModel},
		{&id.Firmware, DefaultFirmware}, {&id.Hardware, DefaultHardware},
		{&id.IMEI, DefaultIMEI}, {&id.IMSI, DefaultIMSI}, {&id.ICCID, DefaultICCID},
		{&id.ProviderID, DefaultProviderID}, {&id.ProviderName, DefaultProviderName},
	} {
		if *f.p == "" {
			*f.p = f.def
		}
	}
	a := &cfg.Addressing
	if !a.IPv4.IsValid() {
		a.IPv4 = DefaultIPv4
	}
	if !a.Gateway4.IsValid() {
		a.Gateway4 = DefaultGateway4
	}
	if a.DNS4 == nil {
		a.DNS4 = []netip.Addr{a.Gateway4}
	}
	if !a.IPv6.IsValid() {
		a.IPv6 = DefaultIPv6
	}
	if !a.Gateway6.IsValid() {
		a.Gateway6 = DefaultGateway6
	}
	if a.DNS6 == nil {
		a.DNS6 = []netip.Addr{a.Gateway6}
	}
	if a.MTU == 0 {
		a.MTU = DefaultSessionMTU
	}
	if cfg.RSSI == 0 {
		cfg.RSSI = DefaultRSSI
	}
	if cfg.MaxSessions == 0 {
		cfg.MaxSessions = DefaultMaxSessions
	}
	switch {
	case cfg.MaxSessions < 1 || cfg.MaxSessions > MaxSessionLimit:
		return nil, fmt.Errorf("%w: MaxSessions %d outside 1..%d", ErrConfig, cfg.MaxSessions, MaxSessionLimit)
	case !a.IPv4.Addr().Is4() || !a.Gateway4.Is4():
		return nil, fmt.Errorf("%w: IPv4 address %v / gateway %v", ErrConfig, a.IPv4, a.Gateway4)
	case !a.IPv6.Addr().Is6() || a.IPv6.Addr().Is4In6() || !a.Gateway6.Is6():
		return nil, fmt.Errorf("%w: IPv6 address %v / gateway %v", ErrConfig, a.IPv6, a.Gateway6)
	case a.MTU < 1280 || a.MTU > 65535:
		return nil, fmt.Errorf("%w: MTU %d outside 1280..65535", ErrConfig, a.MTU)
	case cfg.RSSI < 0 || cfg.RSSI > 31:
		return nil, fmt.Errorf("%w: RSSI %d outside 0..31", ErrConfig, cfg.RSSI)
	}
	for _, d := range a.DNS4 {
		if !d.Is4() {
			return nil, fmt.Errorf("%w: IPv4 DNS server %v", ErrConfig, d)
		}
	}
	for _, d := range a.DNS6 {
		if !d.Is6() || d.Is4In6() {
			return nil, fmt.Errorf("%w: IPv6 DNS server %v", ErrConfig, d)
		}
	}
	if cfg.FCCLocked {
		cfg.RadioOff = true
	}
	m := &Modem{cfg: cfg, radio: !cfg.RadioOff, rssi: cfg.RSSI, subs: map[int]func(Event){},
		fccLocked: cfg.FCCLocked, pdnHeld: cfg.AutoconnectPDN, crashDue: cfg.CrashOnConnect != nil}
	m.attached = m.radio
	m.sessions = make([]Session, cfg.MaxSessions)
	for i := range m.sessions {
		m.sessions[i].Number = uint8(i)
	}
	m.updateGateLocked()
	return m, nil
}

// Identity returns the modem's identity strings.
func (m *Modem) Identity() Identity { return m.cfg.Identity }

// Addressing returns what session 0 is assigned (the configured
// addressing).
func (m *Modem) Addressing() SessionAddressing { return m.cfg.Addressing }

// MaxSessions returns how many sessions the modem carries at once.
func (m *Modem) MaxSessions() int { return m.cfg.MaxSessions }

// WireBase returns the wire id of session 0 (Config.WireBase).
func (m *Modem) WireBase() uint8 { return m.cfg.WireBase }

// SessionFromWire returns the session number a wire id (a QMAP mux id,
// an NDP session byte) names: wire − WireBase, or the wire id itself
// when it is below the base (the lenient reading of the contract).
func (m *Modem) SessionFromWire(wire uint8) uint8 {
	if wire >= m.cfg.WireBase {
		return wire - m.cfg.WireBase
	}
	return wire
}

// AddressingOf returns what session n is assigned: session 0 the
// configured addressing; session N the configured IPv4 address and
// gateway shifted by N×256 (198.18.N.1/24, gateway 198.18.N.2), the IPv6
// address and gateway with N added to their fourth 16-bit group
// (fd00:6d68:6900:N::1/64, gateway ::2), a DNS server that is the
// configured gateway replaced by the session's gateway (others kept), the
// configured MTU.
func (m *Modem) AddressingOf(n uint8) SessionAddressing {
	a := m.cfg.Addressing
	out := a
	out.DNS4 = slices.Clone(a.DNS4)
	out.DNS6 = slices.Clone(a.DNS6)
	if n == 0 {
		return out
	}
	out.IPv4 = netip.PrefixFrom(shift4(a.IPv4.Addr(), n), a.IPv4.Bits())
	out.Gateway4 = shift4(a.Gateway4, n)
	for i, d := range out.DNS4 {
		if d == a.Gateway4 {
			out.DNS4[i] = out.Gateway4
		}
	}
	out.IPv6 = netip.PrefixFrom(shift6(a.IPv6.Addr(), n), a.IPv6.Bits())
	out.Gateway6 = shift6(a.Gateway6, n)
	for i, d := range out.DNS6 {
		if d == a.Gateway6 {
			out.DNS6[i] = out.Gateway6
		}
	}
	return out
}

// shift4 adds n×256 to an IPv4 address.
func shift4(a netip.Addr, n uint8) netip.Addr {
	b := a.As4()
	v := binary.BigEndian.Uint32(b[:]) + uint32(n)<<8
	binary.BigEndian.PutUint32(b[:], v)
	return netip.AddrFrom4(b)
}

// shift6 adds n to an IPv6 address's fourth 16-bit group.
func shift6(a netip.Addr, n uint8) netip.Addr {
	b := a.As16()
	binary.BigEndian.PutUint16(b[6:], binary.BigEndian.Uint16(b[6:])+uint16(n))
	return netip.AddrFrom16(b)
}

// Subscribe calls f after every change (from the goroutine that made it,
// after the modem's lock is released; f must not block). It returns a
// function that removes f.
func (m *Modem) Subscribe(f func(Event)) (cancel func()) {
	m.mu.Lock()
	id := m.nextSub
	m.nextSub++
	m.subs[id] = f
	m.mu.Unlock()
	return func() {
		m.mu.Lock()
		delete(m.subs, id)
		m.mu.Unlock()
	}
}

// publish sends events to the subscribers. Called without m.mu.
func (m *Modem) publish(evs ...Event) {
	if len(evs) == 0 {
		return
	}
	m.mu.Lock()
	fs := make([]func(Event), 0, len(m.subs))
	for _, f := range m.subs {
		fs = append(fs, f)
	}
	m.mu.Unlock()
	for _, ev := range evs {
		for _, f := range fs {
			f(ev)
		}
	}
}

// kinds turns event kinds into events (of no particular session).
func kinds(ks ...EventKind) []Event {
	evs := make([]Event, len(ks))
	for i, k := range ks {
		evs[i] = Event{Kind: k}
	}
	return evs
}

// endAllLocked ends every active session (counted in Disconnects) and
// returns an EventSession per session ended. Called with m.mu held.
func (m *Modem) endAllLocked() []Event {
	var evs []Event
	for i := range m.sessions {
		if m.sessions[i].Active {
			m.sessions[i].Active = false
			m.disconnects.Add(1)
			evs = append(evs, Event{Kind: EventSession, Session: uint8(i)})
		}
	}
	return evs
}

// Radio reports whether the radio is on.
func (m *Modem) Radio() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.radio
}

// SetRadio switches the radio. Switching it off detaches the packet
// service and ends every session; switching it on registers and attaches.
func (m *Modem) SetRadio(on bool) {
	m.mu.Lock()
	if m.radio == on {
		m.mu.Unlock()
		return
	}
	m.radio = on
	evs := kinds(EventRadio, EventRegistration)
	if m.attached != on {
		m.attached = on
		evs = append(evs, Event{Kind: EventPacketService})
	}
	if !on {
		evs = append(evs, m.endAllLocked()...)
	}
	m.updateGateLocked()
	m.mu.Unlock()
	m.publish(evs...)
}

// PowerRadio switches the radio as a host's request does (MBIM
// RADIO_STATE set, QMI DMS SET_OPERATING_MODE, AT+CFUN): as SetRadio, but
// switching it on fails with ErrFCCLocked while the modem is FCC-locked.
func (m *Modem) PowerRadio(on bool) error {
	m.mu.Lock()
	locked := m.fccLocked
	m.mu.Unlock()
	if on && locked {
		return fmt.Errorf("modem: radio on: %w (unlock: the vendor's FCC unlock procedure)", ErrFCCLocked)
	}
	m.SetRadio(on)
	return nil
}

// FCCLocked reports whether the modem is FCC-locked.
func (m *Modem) FCCLocked() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.fccLocked
}

// UnlockFCC lifts the FCC lock, as the vendor's unlock procedure does;
// the radio stays off until the host switches it on.
func (m *Modem) UnlockFCC() {
	m.mu.Lock()
	m.fccLocked = false
	m.mu.Unlock()
}

// ReleasePDN ends what holds the default PDN (Config.AutoconnectPDN): the
// host deactivated, or disabled the modem's autoconnect. It reports
// whether the PDN was held.
func (m *Modem) ReleasePDN() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	held := m.pdnHeld
	m.pdnHeld = false
	return held
}

// PDNHeld reports whether the modem's autoconnect holds the default PDN.
func (m *Modem) PDNHeld() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.pdnHeld
}

// Restart models the baseband restarting, as it does when the modem
// crashes (a SYS_ERR on the MHI side): every data session ends without
// the host asking (each counted in Disconnects), the radio, attach state and signal
// return to the configuration's start values, and subscribers hear about
// every change. The identity, addressing and session numbering survive.
func (m *Modem) Restart() {
	m.mu.Lock()
	evs := m.endAllLocked()
	if radio := !m.cfg.RadioOff; m.radio != radio {
		m.radio = radio
		evs = append(evs, kinds(EventRadio, EventRegistration)...)
	}
	if m.attached != m.radio {
		m.attached = m.radio
		evs = append(evs, Event{Kind: EventPacketService})
	}
	if m.rssi != m.cfg.RSSI {
		m.rssi = m.cfg.RSSI
		evs = append(evs, Event{Kind: EventSignal})
	}
	m.updateGateLocked()
	m.mu.Unlock()
	m.restarts.Add(1)
	m.publish(evs...)
}

// Registration returns the registration state: home while the radio is on.
func (m *Modem) Registration() RegisterState {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.radio {
		return RegHome
	}
	return RegDeregistered
}

// Attached reports whether the packet service is attached.
func (m *Modem) Attached() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.attached
}

// SetAttached attaches or detaches the packet service. Attaching needs the
// radio on; detaching ends every session.
func (m *Modem) SetAttached(on bool) error {
	m.mu.Lock()
	if on && !m.radio {
		m.mu.Unlock()
		return fmt.Errorf("modem: attach: %w", ErrRadioOff)
	}
	if m.attached == on {
		m.mu.Unlock()
		return nil
	}
	m.attached = on
	evs := kinds(EventPacketService)
	if !on {
		evs = append(evs, m.endAllLocked()...)
	}
	m.updateGateLocked()
	m.mu.Unlock()
	m.publish(evs...)
	return nil
}

// RSSI returns the signal strength on the 0–31 scale (99: unknown, when
// the radio is off).
func (m *Modem) RSSI() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.radio {
		return 99
	}
	return m.rssi
}

// SetRSSI changes the signal strength (0–31).
func (m *Modem) SetRSSI(v int) error {
	if v < 0 || v > 31 {
		return fmt.Errorf("%w: RSSI %d outside 0..31", ErrConfig, v)
	}
	m.mu.Lock()
	changed := m.rssi != v
	m.rssi = v
	m.mu.Unlock()
	if changed {
		m.publish(Event{Kind: EventSignal})
	}
	return nil
}

// Session returns the state of session 0 (SessionOf(0)).
func (m *Modem) Session() Session { return m.SessionOf(0) }

// SessionOf returns the state of session n (inactive, with its number,
// when n is beyond the limit).
func (m *Modem) SessionOf(n uint8) Session {
	m.mu.Lock()
	defer m.mu.Unlock()
	if int(n) >= len(m.sessions) {
		return Session{Number: n}
	}
	return m.sessions[n]
}

// Sessions returns the active sessions, by number.
func (m *Modem) Sessions() []Session {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Session
	for _, s := range m.sessions {
		if s.Active {
			out = append(out, s)
		}
	}
	return out
}

// Connect activates session 0 (ConnectSession(0, apn, t)).
func (m *Modem) Connect(apn string, t IPType) (Session, error) {
	return m.ConnectSession(0, apn, t)
}

// ConnectSession activates session n with an access point name and an IP
// type (0 means IPv4, as most hosts ask by default). It needs the radio
// on and the packet service attached (a detached modem attaches first, as
// real modems do on an activation request); it fails with ErrSessionLimit
// for n ≥ Config.MaxSessions and with ErrSessionActive while session n
// is active. The field failures apply: the PDN the modem's autoconnect
// holds is session 0's (ErrPDNHeld), the crash comes with the first
// activation of any session (ErrCrashed).
func (m *Modem) ConnectSession(n uint8, apn string, t IPType) (Session, error) {
	if t == 0 {
		t = IPv4
	}
	fail := func(s Session, err error) (Session, error) {
		m.connectFail.Add(1)
		return s, fmt.Errorf("modem: connect session %d: %w", n, err)
	}
	switch {
	case int(n) >= m.cfg.MaxSessions:
		return fail(Session{Number: n}, fmt.Errorf("%w (%d sessions)", ErrSessionLimit, m.cfg.MaxSessions))
	case t < IPv4 || t > IPv4v6:
		return fail(Session{Number: n}, fmt.Errorf("%w: IP type %d", ErrConfig, t))
	case apn == "":
		return fail(Session{Number: n}, ErrNoAPN)
	}
	m.mu.Lock()
	cur := m.sessions[n]
	switch {
	case !m.radio:
		locked := m.fccLocked
		m.mu.Unlock()
		if locked {
			return fail(cur, fmt.Errorf("%w: %w", ErrRadioOff, ErrFCCLocked))
		}
		return fail(cur, ErrRadioOff)
	case n == 0 && m.pdnHeld && !cur.Active:
		m.mu.Unlock()
		return fail(cur, ErrPDNHeld)
	case m.crashDue:
		m.crashDue = false
		m.mu.Unlock()
		m.cfg.CrashOnConnect()
		return fail(cur, ErrCrashed)
	case cur.Active:
		m.mu.Unlock()
		return fail(cur, fmt.Errorf("%w (APN %q)", ErrSessionActive, cur.APN))
	}
	var evs []Event
	if !m.attached {
		m.attached = true
		evs = append(evs, Event{Kind: EventPacketService})
	}
	evs = append(evs, Event{Kind: EventSession, Session: n})
	m.nextID++
	m.sessions[n] = Session{Number: n, Active: true, APN: apn, Type: t, ID: m.nextID}
	s := m.sessions[n]
	m.updateGateLocked()
	m.mu.Unlock()
	m.connects.Add(1)
	m.publish(evs...)
	return s, nil
}

// Disconnect ends session 0; it reports whether it was active.
func (m *Modem) Disconnect() bool { return m.DisconnectSession(0) }

// DisconnectSession ends session n, as the host asks (MBIM CONNECT
// deactivate, QMI STOP_NETWORK); it reports whether it was active. Other
// sessions are untouched.
func (m *Modem) DisconnectSession(n uint8) bool {
	return m.disconnect(func(s *Session) bool { return s.Number == n }, 0)
}

// NetworkDisconnect ends session n as the network does on its own (a
// PDN released by the network, fault injection): as DisconnectSession,
// also counted in Stats.NetworkDisconnects. Subscribers hear an
// EventSession for n: MBIM indicates CONNECT deactivated for that
// SessionId, QMI indicates the packet service disconnected to the
// session's clients.
func (m *Modem) NetworkDisconnect(n uint8) bool {
	if !m.disconnect(func(s *Session) bool { return s.Number == n }, CauseRegularDeactivation) {
		return false
	}
	m.netDisconnects.Add(1)
	return true
}

// disconnectID ends the session with the given ID if it is still active
// (a control function ending the session it started, without ending a
// newer one another function started meanwhile). It reports whether it
// ended one.
func (m *Modem) disconnectID(id uint32) bool {
	return m.disconnect(func(s *Session) bool { return s.ID == id }, 0)
}

// disconnect ends the first active session match (called with m.mu
// held) approves, recording the network's cause (0: the host asked), and
// reports whether it ended one.
func (m *Modem) disconnect(match func(s *Session) bool, cause uint32) bool {
	m.mu.Lock()
	for i := range m.sessions {
		s := &m.sessions[i]
		if !s.Active || !match(s) {
			continue
		}
		s.Active, s.EndCause = false, cause
		m.updateGateLocked()
		m.mu.Unlock()
		m.disconnects.Add(1)
		m.publish(Event{Kind: EventSession, Session: uint8(i)})
		return true
	}
	m.mu.Unlock()
	return false
}

// sessionByIDLocked returns the active session with the given ID, or nil.
func (m *Modem) sessionByIDLocked(id uint32) *Session {
	for i := range m.sessions {
		if m.sessions[i].Active && m.sessions[i].ID == id {
			return &m.sessions[i]
		}
	}
	return nil
}

// setSessionType changes the IP type of the active session with the given
// ID: QMI connects each IP family on its own WDS client, so a dual-stack
// session gains its second family (and loses one) after it was connected.
// It fails with ErrNoSession when id is not an active session and with
// ErrConfig for an invalid type.
func (m *Modem) setSessionType(id uint32, t IPType) (Session, error) {
	if t < IPv4 || t > IPv4v6 {
		return Session{}, fmt.Errorf("modem: session type: %w: IP type %d", ErrConfig, t)
	}
	m.mu.Lock()
	s := m.sessionByIDLocked(id)
	if s == nil {
		m.mu.Unlock()
		return Session{}, fmt.Errorf("modem: session type of session %d: %w", id, ErrNoSession)
	}
	changed := s.Type != t
	s.Type = t
	out := *s
	m.mu.Unlock()
	if changed {
		m.publish(Event{Kind: EventSession, Session: out.Number})
	}
	return out, nil
}

// DataAllowed implements ipdata.Gate for a data path that does not tell
// sessions apart: IP data flows unless the modem requires a connected
// session and none (of any number) is. A data path that knows each
// packet's session asks SessionAllowed.
func (m *Modem) DataAllowed() bool { return m.dataOpen.Load() }

// SessionAllowed implements ipdata.SessionGate: IP data of session n may
// flow — always without Config.RequireConnect, with it only while session
// n is connected. Lock-free: called per packet.
func (m *Modem) SessionAllowed(n uint8) bool {
	return m.allowed[n>>6].Load()&(1<<(n&63)) != 0
}

// updateGateLocked recomputes what DataAllowed and SessionAllowed answer.
func (m *Modem) updateGateLocked() {
	var bits [len(m.allowed)]uint64
	anyActive := false
	for i, s := range m.sessions {
		if !m.cfg.RequireConnect || s.Active {
			bits[i>>6] |= 1 << (i & 63)
			anyActive = anyActive || s.Active
		}
	}
	if !m.cfg.RequireConnect {
		bits = [len(m.allowed)]uint64{^uint64(0), ^uint64(0), ^uint64(0), ^uint64(0)}
	}
	for i := range bits {
		m.allowed[i].Store(bits[i])
	}
	m.dataOpen.Store(!m.cfg.RequireConnect || anyActive)
}

// Stats returns the modem's counters.
func (m *Modem) Stats() Stats {
	return Stats{Connects: m.connects.Load(), Disconnects: m.disconnects.Load(), ConnectFail: m.connectFail.Load(),
		Restarts: m.restarts.Load(), NetworkDisconnects: m.netDisconnects.Load()}
}
