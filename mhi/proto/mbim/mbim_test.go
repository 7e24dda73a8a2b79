package mbim

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"testing"
	"time"
)

func TestUUIDString(t *testing.T) {
	if got := ServiceBasicConnect.String(); got != "a289cc33-bcbb-8b4f-b6b0-133ec2aae6df" {
		t.Fatalf("BASIC_CONNECT = %s", got)
	}
	if ServiceBasicConnect[0] != 0xa2 || ServiceBasicConnect[15] != 0xdf {
		t.Fatalf("bytes not in string order: % x", ServiceBasicConnect)
	}
	if ServiceBasicConnect.Name() != "BASIC_CONNECT" {
		t.Fatal(ServiceBasicConnect.Name())
	}
	for _, bad := range []string{"", "a289cc33bcbb8b4fb6b0133ec2aae6df", "z289cc33-bcbb-8b4f-b6b0-133ec2aae6df"} {
		if _, err := ParseUUID(bad); err == nil {
			t.Errorf("ParseUUID(%q) accepted", bad)
		}
	}
}

func TestStrings(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{StatusNoDeviceSupport.String(), "NoDeviceSupport"},
		{Status(999).String(), "Status(999)"},
		{ErrorNotOpened.String(), "NotOpened"},
		{ProtocolError(0).String(), "ProtocolError(0)"},
		{TypeCommandDone.String(), "COMMAND_DONE"},
		{MessageType(5).String(), "MessageType(0x5)"},
		{CIDName(ServiceBasicConnect, CIDConnect), "CONNECT"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
	if MessageType(5).Known() || !TypeIndicateStatus.Known() {
		t.Error("Known")
	}
}

// A COMMAND as libmbim builds it: DEVICE_CAPS query, TID 2.
var deviceCapsQuery = []byte{
	0x03, 0, 0, 0, 0x30, 0, 0, 0, 0x02, 0, 0, 0, // COMMAND, 48 bytes, TID 2
	0x01, 0, 0, 0, 0, 0, 0, 0, // fragment 0 of 1
	0xa2, 0x89, 0xcc, 0x33, 0xbc, 0xbb, 0x8b, 0x4f, 0xb6, 0xb0, 0x13, 0x3e, 0xc2, 0xaa, 0xe6, 0xdf,
	0x01, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, // CID 1, query, no buffer
}

func TestParseMessage(t *testing.T) {
	m, err := ParseMessage(deviceCapsQuery)
	if err != nil {
		t.Fatal(err)
	}
	if m.Type != TypeCommand || m.TID != 2 || m.Service != ServiceBasicConnect || m.CID != CIDDeviceCaps || m.Command != CommandQuery || len(m.Info) != 0 {
		t.Fatalf("%+v", m)
	}
	if got := AppendCommand(nil, 2, ServiceBasicConnect, CIDDeviceCaps, CommandQuery, nil); !bytes.Equal(got, deviceCapsQuery) {
		t.Fatalf("AppendCommand = % x", got)
	}

	short := func(b []byte, n int) []byte { return append([]byte(nil), b[:n]...) }
	withLen := func(b []byte) []byte { le.PutUint32(b[4:], uint32(len(b))); return b }
	cmd := AppendCommand(nil, 7, ServiceBasicConnect, CIDConnect, CommandSet, []byte{1, 2, 3, 4})
	badInfo := append([]byte(nil), cmd...)
	le.PutUint32(badInfo[44:], 5)
	badFrag := append([]byte(nil), cmd...)
	le.PutUint32(badFrag[16:], 1)
	for _, c := range []struct {
		name string
		b    []byte
		want error
		tid  uint32
	}{
		{"empty", nil, ErrShort, 0},
		{"11 bytes", short(deviceCapsQuery, 11), ErrShort, 0},
		{"length mismatch", short(deviceCapsQuery, 40), ErrBadLength, 2},
		{"command header cut", withLen(short(deviceCapsQuery, 40)), ErrShort, 2},
		{"no fragment header", withLen(short(deviceCapsQuery, 16)), ErrShort, 2},
		{"info longer than message", badInfo, ErrBadLength, 7},
		{"current >= total", badFrag, ErrBadFragment, 7},
		{"open too short", withLen(short(AppendOpen(nil, 1, 4096), 12)), ErrShort, 1},
		{"unknown type", AppendSimple(nil, 9, 3, 0), ErrUnknownType, 3},
	} {
		m, err := ParseMessage(c.b)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: err %v, want %v", c.name, err, c.want)
		}
		if m.TID != c.tid {
			t.Errorf("%s: TID %d, want %d", c.name, m.TID, c.tid)
		}
	}
	for _, c := range []struct {
		b     []byte
		t     MessageType
		value uint32
	}{
		{AppendOpen(nil, 1, 4096), TypeOpen, 4096},
		{AppendClose(nil, 1), TypeClose, 0},
		{AppendOpenDone(nil, 1, StatusSuccess), TypeOpenDone, 0},
		{AppendCloseDone(nil, 1, StatusFailure), TypeCloseDone, 2},
		{AppendFunctionError(nil, 1, ErrorNotOpened), TypeFunctionError, 5},
		{AppendHostError(nil, 1, ErrorCancel), TypeHostError, 7},
	} {
		m, err := ParseMessage(c.b)
		if err != nil || m.Type != c.t || m.Value != c.value || m.TID != 1 {
			t.Errorf("%s: %+v %v", c.t, m, err)
		}
	}
}

func TestProtocolErrorFor(t *testing.T) {
	for _, c := range []struct {
		err  error
		want ProtocolError
	}{
		{ErrBadLength, ErrorLengthMismatch}, {ErrShort, ErrorLengthMismatch},
		{ErrFragmentOutOfSequence, ErrorFragmentOutOfSequence}, {ErrFragmentTimeout, ErrorTimeoutFragment},
		{ErrTooLarge, ErrorMaxTransfer}, {ErrUnknownType, ErrorUnknown},
	} {
		if got := ProtocolErrorFor(c.err); got != c.want {
			t.Errorf("%v → %s, want %s", c.err, got, c.want)
		}
	}
}

func TestFragmentRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for iter := range 200 {
		info := make([]byte, rng.IntN(20000))
		for i := range info {
			info[i] = byte(rng.Uint32())
		}
		msg := AppendCommandDone(nil, uint32(iter), ServiceBasicConnect, CIDDeviceServices, StatusSuccess, info)
		maxT := MinControlTransfer + rng.IntN(5000)
		n := FragmentCount(len(msg), maxT)
		var r Reassembler
		now := time.Unix(0, 0)
		var got []byte
		for i := range n {
			f, err := AppendFragment(nil, msg, maxT, i)
			if err != nil {
				t.Fatal(err)
			}
			if len(f) > maxT {
				t.Fatalf("fragment %d of %d bytes > %d", i, len(f), maxT)
			}
			m, err := ParseMessage(f)
			if err != nil {
				t.Fatalf("fragment %d: %v", i, err)
			}
			res, err := r.Add(m, now)
			if err != nil || res.Abandoned {
				t.Fatalf("fragment %d: %v %+v", i, err, res)
			}
			if (res.Message != nil) != (i == n-1) {
				t.Fatalf("fragment %d of %d: complete=%v", i, n, res.Message != nil)
			}
			got = res.Message
		}
		if !bytes.Equal(got, msg) {
			t.Fatalf("iteration %d (%d fragments of ≤%d): reassembled message differs", iter, n, maxT)
		}
	}
}

func frags(t *testing.T, tid uint32, infoLen, maxT int) []Message {
	t.Helper()
	msg := AppendCommand(nil, tid, ServiceBasicConnect, CIDConnect, CommandSet, make([]byte, infoLen))
	var out []Message
	for i := range FragmentCount(len(msg), maxT) {
		f, err := AppendFragment(nil, msg, maxT, i)
		if err != nil {
			t.Fatal(err)
		}
		m, err := ParseMessage(f)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}

func TestReassemblerErrors(t *testing.T) {
	now := time.Unix(100, 0)
	a := frags(t, 1, 300, 128)
	b := frags(t, 2, 300, 128)
	if len(a) < 3 {
		t.Fatalf("%d fragments", len(a))
	}

	var r Reassembler
	if _, err := r.Add(a[1], now); !errors.Is(err, ErrFragmentOutOfSequence) {
		t.Fatalf("continuation first: %v", err)
	}
	r.Add(a[0], now)
	if res, err := r.Add(a[2], now); !errors.Is(err, ErrFragmentOutOfSequence) || !res.Abandoned || res.AbandonedTID != 1 {
		t.Fatalf("skipped fragment: %v %+v", err, res)
	}
	r.Add(a[0], now)
	res, err := r.Add(b[0], now)
	if err != nil || !res.Abandoned || res.AbandonedTID != 1 || !errors.Is(res.AbandonedErr, ErrFragmentOutOfSequence) {
		t.Fatalf("new message over a pending one: %v %+v", err, res)
	}
	if tid, ok := r.Pending(); !ok || tid != 2 {
		t.Fatalf("pending %d %v", tid, ok)
	}
	if tid, ok := r.Expire(now.Add(time.Second)); ok {
		t.Fatalf("expired %d after 1s", tid)
	}
	res, err = r.Add(b[1], now.Add(2*time.Second))
	if !errors.Is(err, ErrFragmentOutOfSequence) || !res.Abandoned || !errors.Is(res.AbandonedErr, ErrFragmentTimeout) {
		t.Fatalf("late fragment: %v %+v", err, res)
	}
	r2 := Reassembler{MaxLen: 200}
	if _, err := r2.Add(a[0], now); err != nil {
		t.Fatal(err)
	}
	if _, err := r2.Add(a[1], now); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("too large: %v", err)
	}
	if _, ok := r2.Pending(); ok {
		t.Fatal("still pending after ErrTooLarge")
	}
	if _, err := r.Add(Message{Type: TypeOpen}, now); !errors.Is(err, ErrBadFragment) {
		t.Fatalf("OPEN: %v", err)
	}
}

func TestInfoBounds(t *testing.T) {
	b := NewBuilder(nil, 16)
	b.String(0, "héllo 𝄞")
	b.U32(8, 0xffffffff) // offset of a bogus OL pair
	b.U32(12, 4)
	in := Info(b.Bytes())
	if s, err := in.String(0); err != nil || s != "héllo 𝄞" {
		t.Fatalf("%q %v", s, err)
	}
	if off, _, _ := in.OL(0); off != 16 || len(in)%4 != 0 {
		t.Fatalf("string at %d, buffer %d", off, len(in))
	}
	if _, err := in.String(8); !errors.Is(err, ErrBadOffset) {
		t.Fatalf("bad offset: %v", err)
	}
	if _, err := in.U32(len(in) - 2); !errors.Is(err, ErrShort) {
		t.Fatalf("short: %v", err)
	}
	if _, err := in.U32(-1); !errors.Is(err, ErrShort) {
		t.Fatalf("negative: %v", err)
	}
	odd := Info{8, 0, 0, 0, 3, 0, 0, 0, 'a', 0, 'b', 0}
	if _, err := odd.String(0); !errors.Is(err, ErrBadLength) {
		t.Fatalf("odd: %v", err)
	}
	if _, err := in.Array(8, 0x40000000, 16); !errors.Is(err, ErrBadLength) {
		t.Fatalf("huge array: %v", err)
	}
	eb := NewBuilder(nil, 8)
	empty := Info(eb.Bytes())
	if s, err := empty.String(0); err != nil || s != "" {
		t.Fatalf("empty %q %v", s, err)
	}
}

// payload is a typed payload that round-trips through its parser.
type payload interface{ AppendTo([]byte) []byte }

func TestPayloadRoundTrip(t *testing.T) {
	a4 := netip.MustParsePrefix("198.18.0.1/24")
	a6 := netip.MustParsePrefix("fd00:6d68:6900::1/64")
	cases := []struct {
		in    payload
		parse func(Info) (any, error)
	}{
		{&DeviceCaps{DeviceType: 1, CellularClass: 1, VoiceClass: 1, SimClass: 2, DataClass: DataClassLTE, SmsCaps: 3, ControlCaps: 1, MaxSessions: 1,
			DeviceID: "350000000000009", FirmwareInfo: "fw 1.2", HardwareInfo: "hw"},
			func(i Info) (any, error) { v, err := ParseDeviceCaps(i); return &v, err }},
		{&SubscriberReadyStatus{ReadyState: 1, SubscriberID: "001010123456789", SimICCID: "8900", TelephoneNumbers: []string{"+1555", "+1666"}},
			func(i Info) (any, error) { v, err := ParseSubscriberReadyStatus(i); return &v, err }},
		{&RadioState{Hw: 1, Sw: 1}, func(i Info) (any, error) { v, err := ParseRadioState(i); return &v, err }},
		{&RadioStateSet{RadioState: 1}, func(i Info) (any, error) { v, err := ParseRadioStateSet(i); return &v, err }},
		{&PinInfo{PinType: 2, PinState: 0, RemainingAttempts: 3}, func(i Info) (any, error) { v, err := ParsePinInfo(i); return &v, err }},
		{&PinSet{PinType: 2, PinOperation: 0, Pin: "1234", NewPin: "9999"}, func(i Info) (any, error) { v, err := ParsePinSet(i); return &v, err }},
		{&PinList{{2, 1, 4, 8}, {2, 1, 4, 8}}, func(i Info) (any, error) { v, err := ParsePinList(i); return &v, err }},
		{&Provider{ProviderID: "00101", ProviderState: 1, ProviderName: "net", CellularClass: 1, Rssi: 20, ErrorRate: 99},
			func(i Info) (any, error) { v, err := ParseProvider(i); return &v, err }},
		{&RegistrationState{RegisterState: 3, RegisterMode: 1, AvailableDataClasses: DataClassLTE, CurrentCellularClass: 1, ProviderID: "00101", ProviderName: "net", RegistrationFlag: 2},
			func(i Info) (any, error) { v, err := ParseRegistrationState(i); return &v, err }},
		{&RegisterStateSet{ProviderID: "00101", RegisterAction: 1, DataClass: 32},
			func(i Info) (any, error) { v, err := ParseRegisterStateSet(i); return &v, err }},
		{&PacketService{PacketServiceState: 2, HighestAvailableDataClass: 32, UplinkSpeed: 50e6, DownlinkSpeed: 1 << 40},
			func(i Info) (any, error) { v, err := ParsePacketService(i); return &v, err }},
		{&PacketServiceSet{Action: 1}, func(i Info) (any, error) { v, err := ParsePacketServiceSet(i); return &v, err }},
		{&SignalState{Rssi: 20, ErrorRate: 99, SignalStrengthInterval: 5}, func(i Info) (any, error) { v, err := ParseSignalState(i); return &v, err }},
		{&SignalStateSet{SignalStrengthInterval: 5, RssiThreshold: 2, ErrorRateThreshold: 3},
			func(i Info) (any, error) { v, err := ParseSignalStateSet(i); return &v, err }},
		{&ConnectSet{ActivationCommand: 1, AccessString: "internet", UserName: "u", Password: "p", IPType: 3, ContextType: ContextTypeInternet},
			func(i Info) (any, error) { v, err := ParseConnectSet(i); return &v, err }},
		{&ConnectInfo{ActivationState: 1, IPType: 1, ContextType: ContextTypeInternet, NwError: 7},
			func(i Info) (any, error) { v, err := ParseConnectInfo(i); return &v, err }},
		{&IPConfiguration{SessionID: 0, IPv4Available: 15, IPv6Available: 15,
			IPv4Addresses: []netip.Prefix{a4}, IPv6Addresses: []netip.Prefix{a6},
			IPv4Gateway: netip.MustParseAddr("198.18.0.2"), IPv6Gateway: netip.MustParseAddr("fd00:6d68:6900::2"),
			IPv4DNS: []netip.Addr{netip.MustParseAddr("198.18.0.2"), netip.MustParseAddr("9.9.9.9")}, IPv6DNS: []netip.Addr{netip.MustParseAddr("fd00:6d68:6900::2")},
			IPv4MTU: 1500, IPv6MTU: 1500},
			func(i Info) (any, error) { v, err := ParseIPConfiguration(i); return &v, err }},
		{&IPConfiguration{SessionID: 3}, func(i Info) (any, error) { v, err := ParseIPConfiguration(i); return &v, err }},
		{&DeviceServices{MaxDssSessions: 0, Services: []DeviceService{
			{ID: ServiceBasicConnect, CIDs: []uint32{1, 2, 3}}, {ID: ServiceSMS, DssPayload: 1, MaxDssInstances: 2, CIDs: []uint32{}}}},
			func(i Info) (any, error) { v, err := ParseDeviceServices(i); return &v, err }},
		{&EventList{{Service: ServiceBasicConnect, CIDs: []uint32{9, 10, 11, 12}}},
			func(i Info) (any, error) { v, err := ParseEventList(i); return &v, err }},
		{&PacketStatistics{InDiscards: 1, InErrors: 2, InOctets: 3, InPackets: 4, OutOctets: 5, OutPackets: 6, OutErrors: 7, OutDiscards: 8},
			func(i Info) (any, error) { v, err := ParsePacketStatistics(i); return &v, err }},
	}
	for _, c := range cases {
		prefix := []byte{0xaa, 0xbb, 0xcc} // the builder appends after existing bytes
		b := c.in.AppendTo(prefix)
		if !bytes.Equal(b[:3], prefix) || len(b[3:])%4 != 0 {
			t.Errorf("%T: prefix changed or unpadded length %d", c.in, len(b)-3)
		}
		got, err := c.parse(Info(b[3:]))
		if err != nil {
			t.Errorf("%T: %v", c.in, err)
			continue
		}
		if !reflect.DeepEqual(got, c.in) {
			t.Errorf("%T: round trip\n got %+v\nwant %+v", c.in, got, c.in)
		}
		// Every truncation must fail cleanly (or parse a prefix-valid
		// buffer), never panic.
		for n := range len(b) - 3 {
			c.parse(Info(b[3 : 3+n]))
		}
	}
}

func TestStringLayout(t *testing.T) {
	// DEVICE_CAPS with one 3-character string: offset just after the
	// 64-byte fixed part, length 6, padded to 8.
	c := DeviceCaps{DeviceID: "abc"}
	b := c.AppendTo(nil)
	if len(b) != 72 {
		t.Fatalf("%d bytes, want 72", len(b))
	}
	if o, l, _ := Info(b).OL(40); o != 64 || l != 6 {
		t.Fatalf("DeviceId OL %d/%d, want 64/6", o, l)
	}
	if !bytes.Equal(b[64:72], []byte{'a', 0, 'b', 0, 'c', 0, 0, 0}) {
		t.Fatalf("% x", b[64:])
	}
}
