package mbim

import (
	"bytes"
	"encoding/binary"
	"reflect"
	"testing"
	"time"
)

func seedMessages() [][]byte {
	caps := DeviceCaps{DataClass: DataClassLTE, DeviceID: "350000000000009", FirmwareInfo: "fw"}
	cfg := IPConfiguration{IPv4Available: 15}
	return [][]byte{
		deviceCapsQuery,
		AppendOpen(nil, 1, 4096),
		AppendClose(nil, 2),
		AppendFunctionError(nil, 3, ErrorNotOpened),
		AppendCommandDone(nil, 4, ServiceBasicConnect, CIDDeviceCaps, StatusSuccess, caps.AppendTo(nil)),
		AppendIndicateStatus(nil, 0, ServiceBasicConnect, CIDIPConfiguration, cfg.AppendTo(nil)),
	}
}

// FuzzParseMessage: any bytes parse to a message or a named error, never
// a panic; a parsed message's views stay inside its bytes, and a whole
// command re-encodes to the same bytes.
func FuzzParseMessage(f *testing.F) {
	for _, s := range seedMessages() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ParseMessage(b)
		if err != nil {
			return
		}
		if len(m.Info) > len(b) || len(m.Payload) > len(b) {
			t.Fatalf("views larger than the message: info %d payload %d of %d", len(m.Info), len(m.Payload), len(b))
		}
		if m.Type == TypeCommand && m.TotalFragments == 1 && int(m.InfoLen) == len(b)-CommandHeaderLen {
			again := AppendCommand(nil, m.TID, m.Service, m.CID, m.Command, m.Info)
			if !bytes.Equal(again, b) {
				t.Fatalf("re-encoded command differs:\n% x\n% x", again, b)
			}
		}
	})
}

// parsers lists every typed decoder with a re-encoder, for the fuzzer.
var parsers = []struct {
	name  string
	parse func(Info) (payload, error)
}{
	{"DeviceCaps", func(i Info) (payload, error) { v, err := ParseDeviceCaps(i); return &v, err }},
	{"SubscriberReadyStatus", func(i Info) (payload, error) { v, err := ParseSubscriberReadyStatus(i); return &v, err }},
	{"RadioState", func(i Info) (payload, error) { v, err := ParseRadioState(i); return &v, err }},
	{"RadioStateSet", func(i Info) (payload, error) { v, err := ParseRadioStateSet(i); return &v, err }},
	{"PinInfo", func(i Info) (payload, error) { v, err := ParsePinInfo(i); return &v, err }},
	{"PinSet", func(i Info) (payload, error) { v, err := ParsePinSet(i); return &v, err }},
	{"PinList", func(i Info) (payload, error) { v, err := ParsePinList(i); return &v, err }},
	{"Provider", func(i Info) (payload, error) { v, err := ParseProvider(i); return &v, err }},
	{"RegistrationState", func(i Info) (payload, error) { v, err := ParseRegistrationState(i); return &v, err }},
	{"RegisterStateSet", func(i Info) (payload, error) { v, err := ParseRegisterStateSet(i); return &v, err }},
	{"PacketService", func(i Info) (payload, error) { v, err := ParsePacketService(i); return &v, err }},
	{"PacketServiceSet", func(i Info) (payload, error) { v, err := ParsePacketServiceSet(i); return &v, err }},
	{"SignalState", func(i Info) (payload, error) { v, err := ParseSignalState(i); return &v, err }},
	{"SignalStateSet", func(i Info) (payload, error) { v, err := ParseSignalStateSet(i); return &v, err }},
	{"ConnectSet", func(i Info) (payload, error) { v, err := ParseConnectSet(i); return &v, err }},
	{"ConnectInfo", func(i Info) (payload, error) { v, err := ParseConnectInfo(i); return &v, err }},
	{"IPConfiguration", func(i Info) (payload, error) { v, err := ParseIPConfiguration(i); return &v, err }},
	{"DeviceServices", func(i Info) (payload, error) { v, err := ParseDeviceServices(i); return &v, err }},
	{"EventList", func(i Info) (payload, error) { v, err := ParseEventList(i); return &v, err }},
	{"PacketStatistics", func(i Info) (payload, error) { v, err := ParsePacketStatistics(i); return &v, err }},
}

// FuzzInformationBuffer runs every payload decoder on the same bytes:
// none may panic, and whatever decodes must encode to a buffer that
// decodes to the same value.
func FuzzInformationBuffer(f *testing.F) {
	for _, s := range seedMessages() {
		if m, err := ParseMessage(s); err == nil {
			f.Add([]byte(m.Info))
		}
	}
	ds := DeviceServices{Services: []DeviceService{{ID: ServiceBasicConnect, CIDs: []uint32{1, 9, 12}}}}
	f.Add(ds.AppendTo(nil))
	el := EventList{{Service: ServiceBasicConnect, CIDs: []uint32{9, 10}}}
	f.Add(el.AppendTo(nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, p := range parsers {
			v, err := p.parse(Info(b))
			if err != nil {
				continue
			}
			again, err := p.parse(Info(v.AppendTo(nil)))
			if err != nil {
				t.Fatalf("%s: re-encoded value does not decode: %v", p.name, err)
			}
			if !reflect.DeepEqual(v, again) {
				t.Fatalf("%s: round trip\n%+v\n%+v", p.name, v, again)
			}
		}
	})
}

// FuzzReassemble: arbitrary fragment streams never panic and only ever
// produce well-formed complete messages; and any InformationBuffer split
// at any MaxControlTransfer reassembles to the original message.
func FuzzReassemble(f *testing.F) {
	f.Add([]byte{}, uint16(64))
	f.Add(bytes.Repeat([]byte{0x5a}, 5000), uint16(4096))
	f.Add(seedMessages()[4], uint16(100))
	f.Fuzz(func(t *testing.T, b []byte, maxT uint16) {
		// Property: split and join.
		msg := AppendCommandDone(nil, 9, ServiceBasicConnect, CIDDeviceCaps, StatusSuccess, b)
		var r Reassembler
		now := time.Unix(1, 0)
		var got []byte
		n := FragmentCount(len(msg), int(maxT))
		for i := range n {
			fr, err := AppendFragment(nil, msg, int(maxT), i)
			if err != nil {
				t.Fatal(err)
			}
			m, err := ParseMessage(fr)
			if err != nil {
				t.Fatalf("fragment %d/%d: %v", i, n, err)
			}
			res, err := r.Add(m, now)
			if err != nil {
				if len(msg) > DefaultMaxMessage {
					return
				}
				t.Fatalf("fragment %d/%d: %v", i, n, err)
			}
			got = res.Message
		}
		if !bytes.Equal(got, msg) {
			t.Fatalf("reassembled %d bytes, want %d", len(got), len(msg))
		}
		// Robustness: b as a stream of length-prefixed raw fragments.
		var r2 Reassembler
		for len(b) >= 2 {
			l := int(binary.LittleEndian.Uint16(b))
			b = b[2:]
			l = min(l, len(b))
			m, err := ParseMessage(b[:l])
			b = b[l:]
			if err != nil || !m.Type.Fragmentable() {
				continue
			}
			now = now.Add(100 * time.Millisecond)
			res, err := r2.Add(m, now)
			if err == nil && res.Message != nil {
				c, perr := ParseMessage(res.Message)
				if perr == nil && c.TotalFragments != 1 {
					t.Fatalf("complete message with fragment header %d/%d", c.CurrentFragment, c.TotalFragments)
				}
			}
		}
	})
}
