package modem

import (
	"errors"
	"fmt"
	"net/netip"
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
	// ErrSessionActive: a connect while a session is already connected.
	ErrSessionActive = errors.New("modem: a session is already connected")
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

// Session is the state of the modem's data session.
type Session struct {
	Active bool
	APN    string
	Type   IPType // the activated type (IPv4v6 may be narrowed by the addressing)
	// ID counts connects: it changes with every new session, so a control
	// function can hand out session handles (QMI's packet data handle).
	ID uint32
}

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
}

// Stats are the modem's counters.
type Stats struct {
	Connects    uint64 `json:"connects"`
	Disconnects uint64 `json:"disconnects"`
	ConnectFail uint64 `json:"connect_failures"`
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
	session  Session
	nextID   uint32
	subs     map[int]func(Event)
	nextSub  int
	// The field failures' state (Config): the FCC lock, the PDN the
	// modem's autoconnect holds, the crash still due.
	fccLocked bool
	pdnHeld   bool
	crashDue  bool
	dataOpen  atomic.Bool // what DataAllowed answers, updated under mu

	connects, disconnects, connectFail, restarts atomic.Uint64
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
	switch {
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
	m.updateGateLocked()
	return m, nil
}

// Identity returns the modem's identity strings.
func (m *Modem) Identity() Identity { return m.cfg.Identity }

// Addressing returns what a session is assigned.
func (m *Modem) Addressing() SessionAddressing { return m.cfg.Addressing }

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
func (m *Modem) publish(kinds ...EventKind) {
	if len(kinds) == 0 {
		return
	}
	m.mu.Lock()
	fs := make([]func(Event), 0, len(m.subs))
	for _, f := range m.subs {
		fs = append(fs, f)
	}
	m.mu.Unlock()
	for _, k := range kinds {
		for _, f := range fs {
			f(Event{Kind: k})
		}
	}
}

// Radio reports whether the radio is on.
func (m *Modem) Radio() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.radio
}

// SetRadio switches the radio. Switching it off detaches the packet
// service and ends any session; switching it on registers and attaches.
func (m *Modem) SetRadio(on bool) {
	m.mu.Lock()
	if m.radio == on {
		m.mu.Unlock()
		return
	}
	m.radio = on
	evs := []EventKind{EventRadio, EventRegistration}
	if m.attached != on {
		m.attached = on
		evs = append(evs, EventPacketService)
	}
	if !on && m.session.Active {
		m.session.Active = false
		m.disconnects.Add(1)
		evs = append(evs, EventSession)
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
// crashes (a SYS_ERR on the MHI side): the data session ends without the
// host asking (counted in Disconnects), the radio, attach state and signal
// return to the configuration's start values, and subscribers hear about
// every change. The identity, addressing and session numbering survive.
func (m *Modem) Restart() {
	m.mu.Lock()
	var evs []EventKind
	if m.session.Active {
		m.session.Active = false
		m.disconnects.Add(1)
		evs = append(evs, EventSession)
	}
	if radio := !m.cfg.RadioOff; m.radio != radio {
		m.radio = radio
		evs = append(evs, EventRadio, EventRegistration)
	}
	if m.attached != m.radio {
		m.attached = m.radio
		evs = append(evs, EventPacketService)
	}
	if m.rssi != m.cfg.RSSI {
		m.rssi = m.cfg.RSSI
		evs = append(evs, EventSignal)
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
// radio on; detaching ends any session.
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
	evs := []EventKind{EventPacketService}
	if !on && m.session.Active {
		m.session.Active = false
		m.disconnects.Add(1)
		evs = append(evs, EventSession)
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
		m.publish(EventSignal)
	}
	return nil
}

// Session returns the data session's state.
func (m *Modem) Session() Session {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.session
}

// Connect activates the data session with an access point name and an IP
// type (0 means IPv4, as most hosts ask by default). It needs the radio on
// and the packet service attached (a detached modem attaches first, as
// real modems do on an activation request) and fails while a session is
// active.
func (m *Modem) Connect(apn string, t IPType) (Session, error) {
	if t == 0 {
		t = IPv4
	}
	if t < IPv4 || t > IPv4v6 {
		m.connectFail.Add(1)
		return Session{}, fmt.Errorf("modem: connect: %w: IP type %d", ErrConfig, t)
	}
	if apn == "" {
		m.connectFail.Add(1)
		return Session{}, fmt.Errorf("modem: connect: %w", ErrNoAPN)
	}
	m.mu.Lock()
	if !m.radio {
		locked := m.fccLocked
		m.mu.Unlock()
		m.connectFail.Add(1)
		if locked {
			return Session{}, fmt.Errorf("modem: connect: %w: %w", ErrRadioOff, ErrFCCLocked)
		}
		return Session{}, fmt.Errorf("modem: connect: %w", ErrRadioOff)
	}
	if m.pdnHeld && !m.session.Active {
		m.mu.Unlock()
		m.connectFail.Add(1)
		return Session{}, fmt.Errorf("modem: connect: %w", ErrPDNHeld)
	}
	if m.crashDue {
		m.crashDue = false
		m.mu.Unlock()
		m.connectFail.Add(1)
		m.cfg.CrashOnConnect()
		return Session{}, fmt.Errorf("modem: connect: %w", ErrCrashed)
	}
	if m.session.Active {
		s := m.session
		m.mu.Unlock()
		m.connectFail.Add(1)
		return s, fmt.Errorf("modem: connect: %w (APN %q)", ErrSessionActive, s.APN)
	}
	evs := []EventKind{EventSession}
	if !m.attached {
		m.attached = true
		evs = append([]EventKind{EventPacketService}, evs...)
	}
	m.nextID++
	m.session = Session{Active: true, APN: apn, Type: t, ID: m.nextID}
	s := m.session
	m.updateGateLocked()
	m.mu.Unlock()
	m.connects.Add(1)
	m.publish(evs...)
	return s, nil
}

// Disconnect ends the data session; it reports whether one was active.
func (m *Modem) Disconnect() bool {
	return m.disconnect(func() bool { return true })
}

// disconnectID ends the data session if it is the active one with the
// given ID (a control function ending the session it started, without
// ending a newer one another function started meanwhile). It reports
// whether it ended one.
func (m *Modem) disconnectID(id uint32) bool {
	return m.disconnect(func() bool { return m.session.ID == id })
}

// disconnect ends the active session if match (called with m.mu held)
// approves it, and reports whether it ended one.
func (m *Modem) disconnect(match func() bool) bool {
	m.mu.Lock()
	if !m.session.Active || !match() {
		m.mu.Unlock()
		return false
	}
	m.session.Active = false
	m.updateGateLocked()
	m.mu.Unlock()
	m.disconnects.Add(1)
	m.publish(EventSession)
	return true
}

// setSessionType changes the IP type of the active session with the given
// ID: QMI connects each IP family on its own WDS client, so a dual-stack
// session gains its second family (and loses one) after it was connected.
// It fails with ErrNoSession when id is not the active session and with
// ErrConfig for an invalid type.
func (m *Modem) setSessionType(id uint32, t IPType) (Session, error) {
	if t < IPv4 || t > IPv4v6 {
		return Session{}, fmt.Errorf("modem: session type: %w: IP type %d", ErrConfig, t)
	}
	m.mu.Lock()
	if !m.session.Active || m.session.ID != id {
		s := m.session
		m.mu.Unlock()
		return s, fmt.Errorf("modem: session type of session %d: %w", id, ErrNoSession)
	}
	changed := m.session.Type != t
	m.session.Type = t
	s := m.session
	m.mu.Unlock()
	if changed {
		m.publish(EventSession)
	}
	return s, nil
}

// DataAllowed implements ipdata.Gate: IP data flows unless the modem requires
// a connected session and none is.
func (m *Modem) DataAllowed() bool { return m.dataOpen.Load() }

func (m *Modem) updateGateLocked() {
	m.dataOpen.Store(!m.cfg.RequireConnect || m.session.Active)
}

// Stats returns the modem's counters.
func (m *Modem) Stats() Stats {
	return Stats{Connects: m.connects.Load(), Disconnects: m.disconnects.Load(), ConnectFail: m.connectFail.Load(),
		Restarts: m.restarts.Load()}
}
