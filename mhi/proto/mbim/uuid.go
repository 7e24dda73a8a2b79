package mbim

import (
	"encoding/hex"
	"fmt"
)

// UUID is a service or context-type identifier: 16 raw bytes in the order
// of its string form.
type UUID [16]byte

// ParseUUID parses the string form "a289cc33-bcbb-8b4f-b6b0-133ec2aae6df".
func ParseUUID(s string) (UUID, error) {
	var u UUID
	if len(s) != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return u, fmt.Errorf("mbim: UUID %q: want 8-4-4-4-12 hex digits", s)
	}
	h := s[0:8] + s[9:13] + s[14:18] + s[19:23] + s[24:36]
	if _, err := hex.Decode(u[:], []byte(h)); err != nil {
		return u, fmt.Errorf("mbim: UUID %q: %w", s, err)
	}
	return u, nil
}

func mustUUID(s string) UUID {
	u, err := ParseUUID(s)
	if err != nil {
		panic(err)
	}
	return u
}

// String returns the UUID's string form.
func (u UUID) String() string {
	h := hex.EncodeToString(u[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// Name returns the service's name for the UUIDs this package knows
// ("BASIC_CONNECT"…), else the string form.
func (u UUID) Name() string {
	if n, ok := serviceNames[u]; ok {
		return n
	}
	return u.String()
}

// Service UUIDs (libmbim mbim-uuid.c).
var (
	ServiceBasicConnect             = mustUUID("a289cc33-bcbb-8b4f-b6b0-133ec2aae6df")
	ServiceSMS                      = mustUUID("533fbeeb-14fe-4467-9f90-33a223e56c3f")
	ServiceUSSD                     = mustUUID("e550a0c8-5e82-479e-82f7-10abf4c3351f")
	ServicePhonebook                = mustUUID("4bf38476-1e6a-41db-b1d8-bed289c25bdb")
	ServiceSTK                      = mustUUID("d8f20131-fcb5-4e17-8602-d6ed3816164c")
	ServiceAuth                     = mustUUID("1d2b5ff7-0aa1-48b2-aa52-50f15767174e")
	ServiceDSS                      = mustUUID("c08a26dd-7718-4382-8482-6e0d583c4d0e")
	ServiceMSBasicConnectExtensions = mustUUID("3d01dcc5-fef5-4d05-0d3a-bef7058e9aaf")
	ServiceQMI                      = mustUUID("d1a30bc2-f97a-6e43-bf65-c7e24fb0f0d3")
	// ServiceQuectel is Quectel's vendor service (libmbim's uuid_quectel,
	// since 1.26.2): its RADIO_STATE is the FCC unlock ModemManager's
	// Quectel fcc-unlock script sends ('mbimcli --quectel-set-radio-state=on').
	ServiceQuectel = mustUUID("11223344-5566-7788-99aa-bbccddeeff11")
	// ServiceProxyControl is libmbim's private service between mbim-proxy
	// and its clients; it never reaches a device.
	ServiceProxyControl = mustUUID("838cf7fb-8d0d-4d7f-871e-d71dbefbb39b")
)

// Context types (CONNECT's ContextType).
var (
	ContextTypeNone     = mustUUID("b43f758c-a560-4b46-b35e-c5869641fb54")
	ContextTypeInternet = mustUUID("7e5e2a7e-4e6f-7272-736b-656e7e5e2a7e")
)

var serviceNames = map[UUID]string{
	ServiceBasicConnect: "BASIC_CONNECT", ServiceSMS: "SMS", ServiceUSSD: "USSD",
	ServicePhonebook: "PHONEBOOK", ServiceSTK: "STK", ServiceAuth: "AUTH", ServiceDSS: "DSS",
	ServiceMSBasicConnectExtensions: "MS_BASIC_CONNECT_EXTENSIONS", ServiceQMI: "QMI",
	ServiceProxyControl: "PROXY_CONTROL", ServiceQuectel: "QUECTEL",
}

// CIDQuectelRadioState is the Quectel service's RADIO_STATE (set: u32
// state; query: empty; response: u32 state), and its states
// (MbimQuectelRadioSwitchState).
const (
	CIDQuectelRadioState  uint32 = 1
	QuectelRadioOff       uint32 = 0
	QuectelRadioOn        uint32 = 1
	QuectelRadioFCCLocked uint32 = 4
)
