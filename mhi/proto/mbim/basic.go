package mbim

import (
	"fmt"
	"net/netip"
)

// BASIC_CONNECT CIDs (libmbim mbim-cid.h).
const (
	CIDDeviceCaps                 uint32 = 1
	CIDSubscriberReadyStatus      uint32 = 2
	CIDRadioState                 uint32 = 3
	CIDPin                        uint32 = 4
	CIDPinList                    uint32 = 5
	CIDHomeProvider               uint32 = 6
	CIDPreferredProviders         uint32 = 7
	CIDVisibleProviders           uint32 = 8
	CIDRegisterState              uint32 = 9
	CIDPacketService              uint32 = 10
	CIDSignalState                uint32 = 11
	CIDConnect                    uint32 = 12
	CIDProvisionedContexts        uint32 = 13
	CIDServiceActivation          uint32 = 14
	CIDIPConfiguration            uint32 = 15
	CIDDeviceServices             uint32 = 16
	CIDDeviceServiceSubscribeList uint32 = 19
	CIDPacketStatistics           uint32 = 20
	CIDNetworkIdleHint            uint32 = 21
	CIDEmergencyMode              uint32 = 22
	CIDIPPacketFilters            uint32 = 23
	CIDMulticarrierProviders      uint32 = 24
)

// CID of MS_BASIC_CONNECT_EXTENSIONS that a device must not list unless it
// answers it (listing it makes libmbim exchange versions on open).
const CIDMSBasicConnectExtensionsVersion uint32 = 15

var basicConnectCIDNames = map[uint32]string{
	1: "DEVICE_CAPS", 2: "SUBSCRIBER_READY_STATUS", 3: "RADIO_STATE", 4: "PIN", 5: "PIN_LIST",
	6: "HOME_PROVIDER", 7: "PREFERRED_PROVIDERS", 8: "VISIBLE_PROVIDERS", 9: "REGISTER_STATE",
	10: "PACKET_SERVICE", 11: "SIGNAL_STATE", 12: "CONNECT", 13: "PROVISIONED_CONTEXTS",
	14: "SERVICE_ACTIVATION", 15: "IP_CONFIGURATION", 16: "DEVICE_SERVICES",
	19: "DEVICE_SERVICE_SUBSCRIBE_LIST", 20: "PACKET_STATISTICS", 21: "NETWORK_IDLE_HINT",
	22: "EMERGENCY_MODE", 23: "IP_PACKET_FILTERS", 24: "MULTICARRIER_PROVIDERS",
}

// CIDName names a CID of a service ("CONNECT"), or gives its number.
func CIDName(svc UUID, cid uint32) string {
	if svc == ServiceBasicConnect {
		if n, ok := basicConnectCIDNames[cid]; ok {
			return n
		}
	}
	return fmt.Sprint(cid)
}

// Data classes (bit mask: DEVICE_CAPS DataClass, REGISTER_STATE
// AvailableDataClasses, PACKET_SERVICE HighestAvailableDataClass).
const (
	DataClassGPRS  uint32 = 1 << 0
	DataClassEDGE  uint32 = 1 << 1
	DataClassUMTS  uint32 = 1 << 2
	DataClassHSDPA uint32 = 1 << 3
	DataClassHSUPA uint32 = 1 << 4
	DataClassLTE   uint32 = 1 << 5
	DataClass5GNSA uint32 = 1 << 6
	DataClass5GSA  uint32 = 1 << 7
)

// Cellular classes (bit mask).
const (
	CellularClassGSM  uint32 = 1
	CellularClassCDMA uint32 = 2
)

// Device types, voice classes, SIM classes.
const (
	DeviceTypeEmbedded  uint32 = 1
	DeviceTypeRemovable uint32 = 2
	VoiceClassNoVoice   uint32 = 1
	SimClassLogical     uint32 = 1
	SimClassRemovable   uint32 = 2
)

// Subscriber ready states.
const (
	ReadyStateNotInitialized uint32 = 0
	ReadyStateInitialized    uint32 = 1
	ReadyStateSimNotInserted uint32 = 2
)

// Radio switch states.
const (
	RadioOff uint32 = 0
	RadioOn  uint32 = 1
)

// PIN types, states and operations; PIN modes and formats.
const (
	PinTypeUnknown      uint32 = 0
	PinTypePIN1         uint32 = 2
	PinStateUnlocked    uint32 = 0
	PinStateLocked      uint32 = 1
	PinModeNotSupported uint32 = 0
	PinModeEnabled      uint32 = 1
	PinModeDisabled     uint32 = 2
	PinFormatNumeric    uint32 = 1
)

// Provider states (bit mask).
const (
	ProviderStateHome       uint32 = 1 << 0
	ProviderStateForbidden  uint32 = 1 << 1
	ProviderStatePreferred  uint32 = 1 << 2
	ProviderStateVisible    uint32 = 1 << 3
	ProviderStateRegistered uint32 = 1 << 4
)

// Register states, modes, actions and flags.
const (
	RegisterStateUnknown      uint32 = 0
	RegisterStateDeregistered uint32 = 1
	RegisterStateSearching    uint32 = 2
	RegisterStateHome         uint32 = 3
	RegisterStateRoaming      uint32 = 4
	RegisterStateDenied       uint32 = 6
	RegisterModeAutomatic     uint32 = 1
	RegisterModeManual        uint32 = 2
	RegisterActionAutomatic   uint32 = 0
	RegisterActionManual      uint32 = 1
	// RegistrationFlagPacketServiceAutoAttach: the device attaches the
	// packet service by itself once registered.
	RegistrationFlagPacketServiceAutoAttach uint32 = 2
)

// Packet service actions and states.
const (
	PacketServiceActionAttach uint32 = 0
	PacketServiceActionDetach uint32 = 1
	PacketServiceUnknown      uint32 = 0
	PacketServiceAttaching    uint32 = 1
	PacketServiceAttached     uint32 = 2
	PacketServiceDetaching    uint32 = 3
	PacketServiceDetached     uint32 = 4
)

// CONNECT activation commands and states, IP types, auth protocols.
const (
	ActivationCommandDeactivate uint32 = 0
	ActivationCommandActivate   uint32 = 1
	ActivationStateUnknown      uint32 = 0
	ActivationStateActivated    uint32 = 1
	ActivationStateActivating   uint32 = 2
	ActivationStateDeactivated  uint32 = 3
	ActivationStateDeactivating uint32 = 4
	IPTypeDefault               uint32 = 0
	IPTypeIPv4                  uint32 = 1
	IPTypeIPv6                  uint32 = 2
	IPTypeIPv4v6                uint32 = 3
	IPTypeIPv4AndIPv6           uint32 = 4
	AuthNone                    uint32 = 0
)

// IP configuration availability flags.
const (
	IPConfigAddress uint32 = 1 << 0
	IPConfigGateway uint32 = 1 << 1
	IPConfigDNS     uint32 = 1 << 2
	IPConfigMTU     uint32 = 1 << 3
)

func wrap(what string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("mbim: %s: %w", what, err)
}

// errs returns the first non-nil error.
func errs(es ...error) error {
	for _, e := range es {
		if e != nil {
			return e
		}
	}
	return nil
}

// DeviceCaps is the DEVICE_CAPS response.
type DeviceCaps struct {
	DeviceType, CellularClass, VoiceClass, SimClass, DataClass uint32
	SmsCaps, ControlCaps, MaxSessions                          uint32
	CustomDataClass                                            string
	DeviceID                                                   string // IMEI for GSM devices
	FirmwareInfo, HardwareInfo                                 string
}

// AppendTo appends c as an InformationBuffer.
func (c *DeviceCaps) AppendTo(dst []byte) []byte {
	b := NewBuilder(dst, 64)
	for i, v := range []uint32{c.DeviceType, c.CellularClass, c.VoiceClass, c.SimClass, c.DataClass, c.SmsCaps, c.ControlCaps, c.MaxSessions} {
		b.U32(4*i, v)
	}
	b.String(32, c.CustomDataClass)
	b.String(40, c.DeviceID)
	b.String(48, c.FirmwareInfo)
	b.String(56, c.HardwareInfo)
	return b.Bytes()
}

// ParseDeviceCaps decodes a DEVICE_CAPS response.
func ParseDeviceCaps(in Info) (DeviceCaps, error) {
	var c DeviceCaps
	var e [12]error
	for i, p := range []*uint32{&c.DeviceType, &c.CellularClass, &c.VoiceClass, &c.SimClass, &c.DataClass, &c.SmsCaps, &c.ControlCaps, &c.MaxSessions} {
		*p, e[i] = in.U32(4 * i)
	}
	c.CustomDataClass, e[8] = in.String(32)
	c.DeviceID, e[9] = in.String(40)
	c.FirmwareInfo, e[10] = in.String(48)
	c.HardwareInfo, e[11] = in.String(56)
	return c, wrap("DEVICE_CAPS", errs(e[:]...))
}

// SubscriberReadyStatus is the SUBSCRIBER_READY_STATUS response and
// notification.
type SubscriberReadyStatus struct {
	ReadyState       uint32
	SubscriberID     string // IMSI
	SimICCID         string
	ReadyInfo        uint32
	TelephoneNumbers []string
}

// AppendTo appends s as an InformationBuffer.
func (s *SubscriberReadyStatus) AppendTo(dst []byte) []byte {
	b := NewBuilder(dst, 28+8*len(s.TelephoneNumbers))
	b.U32(0, s.ReadyState)
	b.String(4, s.SubscriberID)
	b.String(12, s.SimICCID)
	b.U32(20, s.ReadyInfo)
	b.U32(24, uint32(len(s.TelephoneNumbers)))
	for i, n := range s.TelephoneNumbers {
		b.String(28+8*i, n)
	}
	return b.Bytes()
}

// ParseSubscriberReadyStatus decodes a SUBSCRIBER_READY_STATUS response.
func ParseSubscriberReadyStatus(in Info) (SubscriberReadyStatus, error) {
	var s SubscriberReadyStatus
	var e [5]error
	s.ReadyState, e[0] = in.U32(0)
	s.SubscriberID, e[1] = in.String(4)
	s.SimICCID, e[2] = in.String(12)
	s.ReadyInfo, e[3] = in.U32(20)
	var n uint32
	n, e[4] = in.count(24, 8)
	if err := errs(e[:]...); err != nil {
		return s, wrap("SUBSCRIBER_READY_STATUS", err)
	}
	for i := range int(n) {
		t, err := in.String(28 + 8*i)
		if err != nil {
			return s, wrap("SUBSCRIBER_READY_STATUS", err)
		}
		s.TelephoneNumbers = append(s.TelephoneNumbers, t)
	}
	return s, nil
}

// appendU32s appends a buffer of fixed u32 fields.
func appendU32s(dst []byte, vs ...uint32) []byte {
	b := NewBuilder(dst, 4*len(vs))
	for i, v := range vs {
		b.U32(4*i, v)
	}
	return b.Bytes()
}

// parseU32s reads len(ps) u32 fields.
func parseU32s(in Info, what string, ps ...*uint32) error {
	for i, p := range ps {
		v, err := in.U32(4 * i)
		if err != nil {
			return wrap(what, err)
		}
		*p = v
	}
	return nil
}

// RadioState is the RADIO_STATE response and notification.
type RadioState struct{ Hw, Sw uint32 }

// AppendTo appends r as an InformationBuffer.
func (r *RadioState) AppendTo(dst []byte) []byte { return appendU32s(dst, r.Hw, r.Sw) }

// ParseRadioState decodes a RADIO_STATE response.
func ParseRadioState(in Info) (r RadioState, err error) {
	return r, parseU32s(in, "RADIO_STATE", &r.Hw, &r.Sw)
}

// RadioStateSet is the RADIO_STATE set request.
type RadioStateSet struct{ RadioState uint32 }

// AppendTo appends r as an InformationBuffer.
func (r *RadioStateSet) AppendTo(dst []byte) []byte { return appendU32s(dst, r.RadioState) }

// ParseRadioStateSet decodes a RADIO_STATE set request.
func ParseRadioStateSet(in Info) (r RadioStateSet, err error) {
	return r, parseU32s(in, "RADIO_STATE set", &r.RadioState)
}

// PinInfo is the PIN response.
type PinInfo struct{ PinType, PinState, RemainingAttempts uint32 }

// AppendTo appends p as an InformationBuffer.
func (p *PinInfo) AppendTo(dst []byte) []byte {
	return appendU32s(dst, p.PinType, p.PinState, p.RemainingAttempts)
}

// ParsePinInfo decodes a PIN response.
func ParsePinInfo(in Info) (p PinInfo, err error) {
	return p, parseU32s(in, "PIN", &p.PinType, &p.PinState, &p.RemainingAttempts)
}

// PinSet is the PIN set request.
type PinSet struct {
	PinType, PinOperation uint32
	Pin, NewPin           string
}

// AppendTo appends p as an InformationBuffer.
func (p *PinSet) AppendTo(dst []byte) []byte {
	b := NewBuilder(dst, 24)
	b.U32(0, p.PinType)
	b.U32(4, p.PinOperation)
	b.String(8, p.Pin)
	b.String(16, p.NewPin)
	return b.Bytes()
}

// ParsePinSet decodes a PIN set request.
func ParsePinSet(in Info) (PinSet, error) {
	var p PinSet
	var e [4]error
	p.PinType, e[0] = in.U32(0)
	p.PinOperation, e[1] = in.U32(4)
	p.Pin, e[2] = in.String(8)
	p.NewPin, e[3] = in.String(16)
	return p, wrap("PIN set", errs(e[:]...))
}

// PinDesc describes one PIN of PIN_LIST.
type PinDesc struct{ Mode, Format, LengthMin, LengthMax uint32 }

// PinList is the PIN_LIST response: PIN1, PIN2, device SIM, device first
// SIM, network, network subset, service provider, corporate, subsidy
// lock, custom.
type PinList [10]PinDesc

// AppendTo appends l as an InformationBuffer.
func (l *PinList) AppendTo(dst []byte) []byte {
	b := NewBuilder(dst, 160)
	for i, d := range l {
		b.U32(16*i, d.Mode)
		b.U32(16*i+4, d.Format)
		b.U32(16*i+8, d.LengthMin)
		b.U32(16*i+12, d.LengthMax)
	}
	return b.Bytes()
}

// ParsePinList decodes a PIN_LIST response.
func ParsePinList(in Info) (PinList, error) {
	var l PinList
	for i := range l {
		d := &l[i]
		if err := parseU32s(in[min(16*i, len(in)):], "PIN_LIST", &d.Mode, &d.Format, &d.LengthMin, &d.LengthMax); err != nil {
			return l, err
		}
	}
	return l, nil
}

// Provider is MbimProvider, the HOME_PROVIDER response.
type Provider struct {
	ProviderID    string // MCC and MNC digits
	ProviderState uint32
	ProviderName  string
	CellularClass uint32
	Rssi          uint32
	ErrorRate     uint32
}

// AppendTo appends p as an InformationBuffer.
func (p *Provider) AppendTo(dst []byte) []byte {
	b := NewBuilder(dst, 32)
	b.String(0, p.ProviderID)
	b.U32(8, p.ProviderState)
	b.String(12, p.ProviderName)
	b.U32(20, p.CellularClass)
	b.U32(24, p.Rssi)
	b.U32(28, p.ErrorRate)
	return b.Bytes()
}

// ParseProvider decodes a HOME_PROVIDER response.
func ParseProvider(in Info) (Provider, error) {
	var p Provider
	var e [6]error
	p.ProviderID, e[0] = in.String(0)
	p.ProviderState, e[1] = in.U32(8)
	p.ProviderName, e[2] = in.String(12)
	p.CellularClass, e[3] = in.U32(20)
	p.Rssi, e[4] = in.U32(24)
	p.ErrorRate, e[5] = in.U32(28)
	return p, wrap("HOME_PROVIDER", errs(e[:]...))
}

// RegistrationState is the REGISTER_STATE response and notification.
type RegistrationState struct {
	NwError, RegisterState, RegisterMode  uint32
	AvailableDataClasses                  uint32
	CurrentCellularClass                  uint32
	ProviderID, ProviderName, RoamingText string
	RegistrationFlag                      uint32
}

// AppendTo appends r as an InformationBuffer.
func (r *RegistrationState) AppendTo(dst []byte) []byte {
	b := NewBuilder(dst, 48)
	for i, v := range []uint32{r.NwError, r.RegisterState, r.RegisterMode, r.AvailableDataClasses, r.CurrentCellularClass} {
		b.U32(4*i, v)
	}
	b.String(20, r.ProviderID)
	b.String(28, r.ProviderName)
	b.String(36, r.RoamingText)
	b.U32(44, r.RegistrationFlag)
	return b.Bytes()
}

// ParseRegistrationState decodes a REGISTER_STATE response.
func ParseRegistrationState(in Info) (RegistrationState, error) {
	var r RegistrationState
	var e [9]error
	for i, p := range []*uint32{&r.NwError, &r.RegisterState, &r.RegisterMode, &r.AvailableDataClasses, &r.CurrentCellularClass} {
		*p, e[i] = in.U32(4 * i)
	}
	r.ProviderID, e[5] = in.String(20)
	r.ProviderName, e[6] = in.String(28)
	r.RoamingText, e[7] = in.String(36)
	r.RegistrationFlag, e[8] = in.U32(44)
	return r, wrap("REGISTER_STATE", errs(e[:]...))
}

// RegisterStateSet is the REGISTER_STATE set request.
type RegisterStateSet struct {
	ProviderID     string
	RegisterAction uint32
	DataClass      uint32
}

// AppendTo appends r as an InformationBuffer.
func (r *RegisterStateSet) AppendTo(dst []byte) []byte {
	b := NewBuilder(dst, 16)
	b.String(0, r.ProviderID)
	b.U32(8, r.RegisterAction)
	b.U32(12, r.DataClass)
	return b.Bytes()
}

// ParseRegisterStateSet decodes a REGISTER_STATE set request.
func ParseRegisterStateSet(in Info) (RegisterStateSet, error) {
	var r RegisterStateSet
	var e [3]error
	r.ProviderID, e[0] = in.String(0)
	r.RegisterAction, e[1] = in.U32(8)
	r.DataClass, e[2] = in.U32(12)
	return r, wrap("REGISTER_STATE set", errs(e[:]...))
}

// PacketService is the PACKET_SERVICE response and notification; the
// speeds are in bits per second.
type PacketService struct {
	NwError, PacketServiceState, HighestAvailableDataClass uint32
	UplinkSpeed, DownlinkSpeed                             uint64
}

// AppendTo appends p as an InformationBuffer.
func (p *PacketService) AppendTo(dst []byte) []byte {
	b := NewBuilder(dst, 28)
	b.U32(0, p.NwError)
	b.U32(4, p.PacketServiceState)
	b.U32(8, p.HighestAvailableDataClass)
	b.U64(12, p.UplinkSpeed)
	b.U64(20, p.DownlinkSpeed)
	return b.Bytes()
}

// ParsePacketService decodes a PACKET_SERVICE response.
func ParsePacketService(in Info) (PacketService, error) {
	var p PacketService
	var e [5]error
	p.NwError, e[0] = in.U32(0)
	p.PacketServiceState, e[1] = in.U32(4)
	p.HighestAvailableDataClass, e[2] = in.U32(8)
	p.UplinkSpeed, e[3] = in.U64(12)
	p.DownlinkSpeed, e[4] = in.U64(20)
	return p, wrap("PACKET_SERVICE", errs(e[:]...))
}

// PacketServiceSet is the PACKET_SERVICE set request.
type PacketServiceSet struct{ Action uint32 }

// AppendTo appends p as an InformationBuffer.
func (p *PacketServiceSet) AppendTo(dst []byte) []byte { return appendU32s(dst, p.Action) }

// ParsePacketServiceSet decodes a PACKET_SERVICE set request.
func ParsePacketServiceSet(in Info) (p PacketServiceSet, err error) {
	return p, parseU32s(in, "PACKET_SERVICE set", &p.Action)
}

// SignalState is the SIGNAL_STATE response and notification. Rssi is
// 0–31 (−113 + 2·Rssi dBm) or 99 (unknown); ErrorRate 0–7 or 99.
type SignalState struct {
	Rssi, ErrorRate, SignalStrengthInterval, RssiThreshold, ErrorRateThreshold uint32
}

// AppendTo appends s as an InformationBuffer.
func (s *SignalState) AppendTo(dst []byte) []byte {
	return appendU32s(dst, s.Rssi, s.ErrorRate, s.SignalStrengthInterval, s.RssiThreshold, s.ErrorRateThreshold)
}

// ParseSignalState decodes a SIGNAL_STATE response.
func ParseSignalState(in Info) (s SignalState, err error) {
	return s, parseU32s(in, "SIGNAL_STATE", &s.Rssi, &s.ErrorRate, &s.SignalStrengthInterval, &s.RssiThreshold, &s.ErrorRateThreshold)
}

// SignalStateSet is the SIGNAL_STATE set request.
type SignalStateSet struct {
	SignalStrengthInterval, RssiThreshold, ErrorRateThreshold uint32
}

// AppendTo appends s as an InformationBuffer.
func (s *SignalStateSet) AppendTo(dst []byte) []byte {
	return appendU32s(dst, s.SignalStrengthInterval, s.RssiThreshold, s.ErrorRateThreshold)
}

// ParseSignalStateSet decodes a SIGNAL_STATE set request.
func ParseSignalStateSet(in Info) (s SignalStateSet, err error) {
	return s, parseU32s(in, "SIGNAL_STATE set", &s.SignalStrengthInterval, &s.RssiThreshold, &s.ErrorRateThreshold)
}

// ConnectSet is the CONNECT set request.
type ConnectSet struct {
	SessionID, ActivationCommand      uint32
	AccessString, UserName, Password  string
	Compression, AuthProtocol, IPType uint32
	ContextType                       UUID
}

// AppendTo appends c as an InformationBuffer.
func (c *ConnectSet) AppendTo(dst []byte) []byte {
	b := NewBuilder(dst, 60)
	b.U32(0, c.SessionID)
	b.U32(4, c.ActivationCommand)
	b.String(8, c.AccessString)
	b.String(16, c.UserName)
	b.String(24, c.Password)
	b.U32(32, c.Compression)
	b.U32(36, c.AuthProtocol)
	b.U32(40, c.IPType)
	b.UUID(44, c.ContextType)
	return b.Bytes()
}

// ParseConnectSet decodes a CONNECT set request.
func ParseConnectSet(in Info) (ConnectSet, error) {
	var c ConnectSet
	var e [9]error
	c.SessionID, e[0] = in.U32(0)
	c.ActivationCommand, e[1] = in.U32(4)
	c.AccessString, e[2] = in.String(8)
	c.UserName, e[3] = in.String(16)
	c.Password, e[4] = in.String(24)
	c.Compression, e[5] = in.U32(32)
	c.AuthProtocol, e[6] = in.U32(36)
	c.IPType, e[7] = in.U32(40)
	c.ContextType, e[8] = in.UUID(44)
	return c, wrap("CONNECT set", errs(e[:]...))
}

// ConnectInfo is the CONNECT response and notification, and the layout
// of the CONNECT query (where only SessionID matters).
type ConnectInfo struct {
	SessionID, ActivationState, VoiceCallState, IPType uint32
	ContextType                                        UUID
	NwError                                            uint32
}

// AppendTo appends c as an InformationBuffer.
func (c *ConnectInfo) AppendTo(dst []byte) []byte {
	b := NewBuilder(dst, 36)
	b.U32(0, c.SessionID)
	b.U32(4, c.ActivationState)
	b.U32(8, c.VoiceCallState)
	b.U32(12, c.IPType)
	b.UUID(16, c.ContextType)
	b.U32(32, c.NwError)
	return b.Bytes()
}

// ParseConnectInfo decodes a CONNECT response (or query).
func ParseConnectInfo(in Info) (ConnectInfo, error) {
	var c ConnectInfo
	var e [6]error
	c.SessionID, e[0] = in.U32(0)
	c.ActivationState, e[1] = in.U32(4)
	c.VoiceCallState, e[2] = in.U32(8)
	c.IPType, e[3] = in.U32(12)
	c.ContextType, e[4] = in.UUID(16)
	c.NwError, e[5] = in.U32(32)
	return c, wrap("CONNECT", errs(e[:]...))
}

// IPConfiguration is the IP_CONFIGURATION response (and, with only
// SessionID set, its query). Addresses carry their on-link prefix length.
type IPConfiguration struct {
	SessionID                    uint32
	IPv4Available, IPv6Available uint32 // IPConfig* flags
	IPv4Addresses, IPv6Addresses []netip.Prefix
	IPv4Gateway, IPv6Gateway     netip.Addr // zero: none
	IPv4DNS, IPv6DNS             []netip.Addr
	IPv4MTU, IPv6MTU             uint32
}

// AppendTo appends c as an InformationBuffer. Addresses of the wrong
// family are left out.
func (c *IPConfiguration) AppendTo(dst []byte) []byte {
	b := NewBuilder(dst, 60)
	b.U32(0, c.SessionID)
	b.U32(4, c.IPv4Available)
	b.U32(8, c.IPv6Available)
	var n4, n6, d4, d6 uint32
	var a4, a6, s4, s6 []byte
	for _, p := range c.IPv4Addresses {
		if p.Addr().Is4() {
			a4 = le.AppendUint32(a4, uint32(p.Bits()))
			a4 = append(a4, p.Addr().AsSlice()...)
			n4++
		}
	}
	for _, p := range c.IPv6Addresses {
		if p.Addr().Is6() {
			a6 = le.AppendUint32(a6, uint32(p.Bits()))
			a6 = append(a6, p.Addr().AsSlice()...)
			n6++
		}
	}
	for _, a := range c.IPv4DNS {
		if a.Is4() {
			s4 = append(s4, a.AsSlice()...)
			d4++
		}
	}
	for _, a := range c.IPv6DNS {
		if a.Is6() {
			s6 = append(s6, a.AsSlice()...)
			d6++
		}
	}
	b.U32(12, n4)
	b.Data(16, a4)
	b.U32(20, n6)
	b.Data(24, a6)
	if c.IPv4Gateway.Is4() {
		b.Data(28, c.IPv4Gateway.AsSlice())
	}
	if c.IPv6Gateway.Is6() {
		b.Data(32, c.IPv6Gateway.AsSlice())
	}
	b.U32(36, d4)
	b.Data(40, s4)
	b.U32(44, d6)
	b.Data(48, s6)
	b.U32(52, c.IPv4MTU)
	b.U32(56, c.IPv6MTU)
	return b.Bytes()
}

// ParseIPConfiguration decodes an IP_CONFIGURATION response (or query).
func ParseIPConfiguration(in Info) (IPConfiguration, error) {
	var c IPConfiguration
	fail := func(err error) (IPConfiguration, error) { return c, wrap("IP_CONFIGURATION", err) }
	var e [10]error
	c.SessionID, e[0] = in.U32(0)
	c.IPv4Available, e[1] = in.U32(4)
	c.IPv6Available, e[2] = in.U32(8)
	c.IPv4MTU, e[3] = in.U32(52)
	c.IPv6MTU, e[4] = in.U32(56)
	var n4, n6, d4, d6 uint32
	n4, e[5] = in.count(12, 8)
	n6, e[6] = in.count(20, 20)
	d4, e[7] = in.count(36, 4)
	d6, e[8] = in.count(44, 16)
	if err := errs(e[:]...); err != nil {
		return fail(err)
	}
	a4, err := in.Array(16, n4, 8)
	if err != nil {
		return fail(err)
	}
	for i := range int(n4) {
		el := a4[8*i:]
		bits := le.Uint32(el)
		if bits > 32 {
			return fail(fmt.Errorf("%w: IPv4 prefix length %d", ErrBadLength, bits))
		}
		c.IPv4Addresses = append(c.IPv4Addresses, netip.PrefixFrom(netip.AddrFrom4([4]byte(el[4:8])), int(bits)))
	}
	a6, err := in.Array(24, n6, 20)
	if err != nil {
		return fail(err)
	}
	for i := range int(n6) {
		el := a6[20*i:]
		bits := le.Uint32(el)
		if bits > 128 {
			return fail(fmt.Errorf("%w: IPv6 prefix length %d", ErrBadLength, bits))
		}
		c.IPv6Addresses = append(c.IPv6Addresses, netip.PrefixFrom(netip.AddrFrom16([16]byte(el[4:20])), int(bits)))
	}
	if c.IPv4Gateway, err = in.IPv4Ref(28); err != nil {
		return fail(err)
	}
	if c.IPv6Gateway, err = in.IPv6Ref(32); err != nil {
		return fail(err)
	}
	s4, err := in.Array(40, d4, 4)
	if err != nil {
		return fail(err)
	}
	for i := range int(d4) {
		c.IPv4DNS = append(c.IPv4DNS, netip.AddrFrom4([4]byte(s4[4*i:4*i+4])))
	}
	s6, err := in.Array(48, d6, 16)
	if err != nil {
		return fail(err)
	}
	for i := range int(d6) {
		c.IPv6DNS = append(c.IPv6DNS, netip.AddrFrom16([16]byte(s6[16*i:16*i+16])))
	}
	return c, nil
}

// DeviceService is one element of DEVICE_SERVICES.
type DeviceService struct {
	ID              UUID
	DssPayload      uint32
	MaxDssInstances uint32
	CIDs            []uint32
}

// DeviceServices is the DEVICE_SERVICES response.
type DeviceServices struct {
	MaxDssSessions uint32
	Services       []DeviceService
}

// AppendTo appends d as an InformationBuffer.
func (d *DeviceServices) AppendTo(dst []byte) []byte {
	b := NewBuilder(dst, 8+8*len(d.Services))
	b.U32(0, uint32(len(d.Services)))
	b.U32(4, d.MaxDssSessions)
	for i, s := range d.Services {
		el := b.Begin(28 + 4*len(s.CIDs))
		el.UUID(0, s.ID)
		el.U32(16, s.DssPayload)
		el.U32(20, s.MaxDssInstances)
		el.U32(24, uint32(len(s.CIDs)))
		for j, c := range s.CIDs {
			el.U32(28+4*j, c)
		}
		b.End(8+8*i, el)
	}
	return b.Bytes()
}

// ParseDeviceServices decodes a DEVICE_SERVICES response.
func ParseDeviceServices(in Info) (DeviceServices, error) {
	var d DeviceServices
	n, err := in.count(0, 8)
	if err != nil {
		return d, wrap("DEVICE_SERVICES", err)
	}
	if d.MaxDssSessions, err = in.U32(4); err != nil {
		return d, wrap("DEVICE_SERVICES", err)
	}
	for i := range int(n) {
		el, err := in.Ref(8 + 8*i)
		if err != nil {
			return d, wrap("DEVICE_SERVICES", err)
		}
		var s DeviceService
		var e [4]error
		s.ID, e[0] = el.UUID(0)
		s.DssPayload, e[1] = el.U32(16)
		s.MaxDssInstances, e[2] = el.U32(20)
		var nc uint32
		nc, e[3] = el.count(24, 4)
		if err := errs(e[:]...); err != nil {
			return d, wrap("DEVICE_SERVICES element", err)
		}
		if s.CIDs, err = el.u32s(28, nc); err != nil {
			return d, wrap("DEVICE_SERVICES element", err)
		}
		d.Services = append(d.Services, s)
	}
	return d, nil
}

// u32s reads n inline u32 values starting at off.
func (in Info) u32s(off int, n uint32) ([]uint32, error) {
	if err := in.need(off, int(min(uint64(n)*4, uint64(len(in))+1))); err != nil {
		return nil, err
	}
	out := make([]uint32, n)
	for i := range out {
		out[i] = le.Uint32(in[off+4*i:])
	}
	return out, nil
}

// EventEntry is one service's CIDs in DEVICE_SERVICE_SUBSCRIBE_LIST.
type EventEntry struct {
	Service UUID
	CIDs    []uint32
}

// EventList is the DEVICE_SERVICE_SUBSCRIBE_LIST set request and
// response: the indications the host wants.
type EventList []EventEntry

// AppendTo appends l as an InformationBuffer.
func (l EventList) AppendTo(dst []byte) []byte {
	b := NewBuilder(dst, 4+8*len(l))
	b.U32(0, uint32(len(l)))
	for i, ev := range l {
		el := b.Begin(20 + 4*len(ev.CIDs))
		el.UUID(0, ev.Service)
		el.U32(16, uint32(len(ev.CIDs)))
		for j, c := range ev.CIDs {
			el.U32(20+4*j, c)
		}
		b.End(4+8*i, el)
	}
	return b.Bytes()
}

// ParseEventList decodes a DEVICE_SERVICE_SUBSCRIBE_LIST request or
// response.
func ParseEventList(in Info) (EventList, error) {
	n, err := in.count(0, 8)
	if err != nil {
		return nil, wrap("DEVICE_SERVICE_SUBSCRIBE_LIST", err)
	}
	l := EventList{}
	for i := range int(n) {
		el, err := in.Ref(4 + 8*i)
		if err != nil {
			return nil, wrap("DEVICE_SERVICE_SUBSCRIBE_LIST", err)
		}
		var ev EventEntry
		var nc uint32
		var e [2]error
		ev.Service, e[0] = el.UUID(0)
		nc, e[1] = el.count(16, 4)
		if err := errs(e[:]...); err != nil {
			return nil, wrap("DEVICE_SERVICE_SUBSCRIBE_LIST entry", err)
		}
		if ev.CIDs, err = el.u32s(20, nc); err != nil {
			return nil, wrap("DEVICE_SERVICE_SUBSCRIBE_LIST entry", err)
		}
		l = append(l, ev)
	}
	return l, nil
}

// PacketStatistics is the PACKET_STATISTICS response ("in" is what the
// device received from the network for the host, "out" what the host
// sent).
type PacketStatistics struct {
	InDiscards, InErrors                       uint32
	InOctets, InPackets, OutOctets, OutPackets uint64
	OutErrors, OutDiscards                     uint32
}

// AppendTo appends p as an InformationBuffer.
func (p *PacketStatistics) AppendTo(dst []byte) []byte {
	b := NewBuilder(dst, 48)
	b.U32(0, p.InDiscards)
	b.U32(4, p.InErrors)
	b.U64(8, p.InOctets)
	b.U64(16, p.InPackets)
	b.U64(24, p.OutOctets)
	b.U64(32, p.OutPackets)
	b.U32(40, p.OutErrors)
	b.U32(44, p.OutDiscards)
	return b.Bytes()
}

// ParsePacketStatistics decodes a PACKET_STATISTICS response.
func ParsePacketStatistics(in Info) (PacketStatistics, error) {
	var p PacketStatistics
	var e [8]error
	p.InDiscards, e[0] = in.U32(0)
	p.InErrors, e[1] = in.U32(4)
	p.InOctets, e[2] = in.U64(8)
	p.InPackets, e[3] = in.U64(16)
	p.OutOctets, e[4] = in.U64(24)
	p.OutPackets, e[5] = in.U64(32)
	p.OutErrors, e[6] = in.U32(40)
	p.OutDiscards, e[7] = in.U32(44)
	return p, wrap("PACKET_STATISTICS", errs(e[:]...))
}
