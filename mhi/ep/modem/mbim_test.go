package modem

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhi/proto/mbim"
	"github.com/gomhi/gomhi/mhi/wire"
)

// mbimRecorder stands in for the Pipe: it records what the function sends.
type mbimRecorder struct {
	mu   sync.Mutex
	msgs [][]byte
	full bool // TrySend fails as on a full downlink queue
}

func (r *mbimRecorder) Send(_ context.Context, b []byte) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, append([]byte(nil), b...))
	return nil
}

func (r *mbimRecorder) TrySend(b []byte) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.full {
		return wire.ErrRingFull
	}
	r.msgs = append(r.msgs, append([]byte(nil), b...))
	return nil
}

func (r *mbimRecorder) take(t *testing.T) []mbim.Message {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []mbim.Message
	for _, b := range r.msgs {
		m, err := mbim.ParseMessage(b)
		if err != nil {
			t.Fatalf("the function sent a malformed message: %v (% x)", err, b)
		}
		out = append(out, m)
	}
	r.msgs = nil
	return out
}

type mbimRig struct {
	t   *testing.T
	m   *Modem
	f   *MBIM
	rec *mbimRecorder
	tid uint32
}

func newMBIMRig(t *testing.T, mc Config, opts MBIMOptions) *mbimRig {
	t.Helper()
	m, err := New(mc)
	if err != nil {
		t.Fatal(err)
	}
	f, err := NewMBIM(m, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Subscribe(f.onModemEvent))
	return &mbimRig{t: t, m: m, f: f, rec: &mbimRecorder{}, tid: 1}
}

// raw sends one transfer and returns the messages sent in reply.
func (r *mbimRig) raw(b []byte) []mbim.Message {
	r.t.Helper()
	if err := r.f.receive(context.Background(), r.rec, b); err != nil {
		r.t.Fatalf("receive: %v", err)
	}
	return r.rec.take(r.t)
}

// one sends b and expects exactly one reply.
func (r *mbimRig) one(b []byte) mbim.Message {
	r.t.Helper()
	ms := r.raw(b)
	if len(ms) != 1 {
		r.t.Fatalf("%d replies, want 1: %+v", len(ms), ms)
	}
	return ms[0]
}

func (r *mbimRig) open() {
	r.t.Helper()
	r.tid++
	m := r.one(mbim.AppendOpen(nil, r.tid, 4096))
	if m.Type != mbim.TypeOpenDone || m.TID != r.tid || m.DoneStatus() != mbim.StatusSuccess {
		r.t.Fatalf("OPEN: %+v", m)
	}
}

// cmd runs a BASIC_CONNECT command and checks the reply's framing.
func (r *mbimRig) cmd(cid uint32, ct mbim.CommandType, info []byte) (mbim.Status, mbim.Info) {
	r.t.Helper()
	r.tid++
	m := r.one(mbim.AppendCommand(nil, r.tid, mbim.ServiceBasicConnect, cid, ct, info))
	if m.Type != mbim.TypeCommandDone || m.TID != r.tid || m.Service != mbim.ServiceBasicConnect || m.CID != cid {
		r.t.Fatalf("%s: reply %s TID %d %s/%d", mbim.CIDName(mbim.ServiceBasicConnect, cid), m.Type, m.TID, m.Service.Name(), m.CID)
	}
	if m.Status == mbim.StatusSuccess && len(m.Info) == 0 {
		r.t.Fatalf("%s: success without an InformationBuffer", mbim.CIDName(mbim.ServiceBasicConnect, cid))
	}
	return m.Status, m.Info
}

func (r *mbimRig) ok(cid uint32, ct mbim.CommandType, info []byte) mbim.Info {
	r.t.Helper()
	s, in := r.cmd(cid, ct, info)
	if s != mbim.StatusSuccess {
		r.t.Fatalf("%s %s: status %s", mbim.CIDName(mbim.ServiceBasicConnect, cid), ct, s)
	}
	return in
}

// must returns v; a decoding error fails the test (through a panic: Go
// cannot pass a call's two results after another argument).
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

var testIdentity = Identity{Manufacturer: "Telit", Model: "FN990", Firmware: "LE.1.2.3", Hardware: "rev 2",
	IMEI: "351234567890123", IMSI: "001019876543210", ICCID: "8900112233445566778", MSISDN: "+15550100", ProviderID: "00101", ProviderName: "Test Net"}

func TestMBIMNotOpenedAndClose(t *testing.T) {
	r := newMBIMRig(t, Config{}, MBIMOptions{})
	m := r.one(mbim.AppendCommand(nil, 7, mbim.ServiceBasicConnect, mbim.CIDDeviceCaps, mbim.CommandQuery, nil))
	if m.Type != mbim.TypeFunctionError || m.TID != 7 || m.ErrorCode() != mbim.ErrorNotOpened {
		t.Fatalf("COMMAND before OPEN: %+v", m)
	}
	r.open()
	r.ok(mbim.CIDDeviceCaps, mbim.CommandQuery, nil)
	m = r.one(mbim.AppendClose(nil, 9))
	if m.Type != mbim.TypeCloseDone || m.TID != 9 || m.DoneStatus() != mbim.StatusSuccess {
		t.Fatalf("CLOSE: %+v", m)
	}
	if r.f.Open() {
		t.Fatal("still open after CLOSE")
	}
	m = r.one(mbim.AppendCommand(nil, 10, mbim.ServiceBasicConnect, mbim.CIDDeviceCaps, mbim.CommandQuery, nil))
	if m.ErrorCode() != mbim.ErrorNotOpened {
		t.Fatalf("COMMAND after CLOSE: %+v", m)
	}
	st := r.f.Stats()
	if st.Opens != 1 || st.Closes != 1 || st.ByError["NotOpened"] != 2 || st.CommandsOK != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestMBIMQueries(t *testing.T) {
	r := newMBIMRig(t, Config{Identity: testIdentity}, MBIMOptions{})
	r.open()

	caps := must(mbim.ParseDeviceCaps(r.ok(mbim.CIDDeviceCaps, mbim.CommandQuery, nil)))
	if caps.DeviceID != testIdentity.IMEI || caps.FirmwareInfo != testIdentity.Firmware || caps.HardwareInfo != "FN990 rev 2" ||
		caps.DataClass&mbim.DataClassLTE == 0 || caps.CellularClass != mbim.CellularClassGSM || caps.MaxSessions != DefaultMaxSessions {
		t.Errorf("DEVICE_CAPS %+v", caps)
	}
	srs := must(mbim.ParseSubscriberReadyStatus(r.ok(mbim.CIDSubscriberReadyStatus, mbim.CommandQuery, nil)))
	if srs.ReadyState != mbim.ReadyStateInitialized || srs.SubscriberID != testIdentity.IMSI || srs.SimICCID != testIdentity.ICCID ||
		!slices.Equal(srs.TelephoneNumbers, []string{testIdentity.MSISDN}) {
		t.Errorf("SUBSCRIBER_READY_STATUS %+v", srs)
	}
	if rs := must(mbim.ParseRadioState(r.ok(mbim.CIDRadioState, mbim.CommandQuery, nil))); rs != (mbim.RadioState{Hw: 1, Sw: 1}) {
		t.Errorf("RADIO_STATE %+v", rs)
	}
	if pin := must(mbim.ParsePinInfo(r.ok(mbim.CIDPin, mbim.CommandQuery, nil))); pin.PinState != mbim.PinStateUnlocked {
		t.Errorf("PIN %+v", pin)
	}
	if pl := must(mbim.ParsePinList(r.ok(mbim.CIDPinList, mbim.CommandQuery, nil))); pl[0].Mode != mbim.PinModeDisabled {
		t.Errorf("PIN_LIST %+v", pl)
	}
	hp := must(mbim.ParseProvider(r.ok(mbim.CIDHomeProvider, mbim.CommandQuery, nil)))
	if hp.ProviderID != "00101" || hp.ProviderName != "Test Net" || hp.ProviderState&mbim.ProviderStateHome == 0 {
		t.Errorf("HOME_PROVIDER %+v", hp)
	}
	reg := must(mbim.ParseRegistrationState(r.ok(mbim.CIDRegisterState, mbim.CommandQuery, nil)))
	if reg.RegisterState != mbim.RegisterStateHome || reg.RegisterMode != mbim.RegisterModeAutomatic ||
		reg.AvailableDataClasses != mbim.DataClassLTE || reg.ProviderID != "00101" || reg.ProviderName != "Test Net" {
		t.Errorf("REGISTER_STATE %+v", reg)
	}
	reg = must(mbim.ParseRegistrationState(r.ok(mbim.CIDRegisterState, mbim.CommandSet, (&mbim.RegisterStateSet{}).AppendTo(nil))))
	if reg.RegisterState != mbim.RegisterStateHome {
		t.Errorf("REGISTER_STATE set automatic %+v", reg)
	}
	if s, _ := r.cmd(mbim.CIDRegisterState, mbim.CommandSet, (&mbim.RegisterStateSet{ProviderID: "99999", RegisterAction: mbim.RegisterActionManual}).AppendTo(nil)); s != mbim.StatusProviderNotVisible {
		t.Errorf("manual registration on an unknown network: %s", s)
	}
	ps := must(mbim.ParsePacketService(r.ok(mbim.CIDPacketService, mbim.CommandQuery, nil)))
	if ps.PacketServiceState != mbim.PacketServiceAttached || ps.HighestAvailableDataClass != mbim.DataClassLTE || ps.DownlinkSpeed == 0 {
		t.Errorf("PACKET_SERVICE %+v", ps)
	}
	sig := must(mbim.ParseSignalState(r.ok(mbim.CIDSignalState, mbim.CommandQuery, nil)))
	if sig.Rssi != DefaultRSSI || sig.ErrorRate != 99 {
		t.Errorf("SIGNAL_STATE %+v", sig)
	}
	sig = must(mbim.ParseSignalState(r.ok(mbim.CIDSignalState, mbim.CommandSet, (&mbim.SignalStateSet{SignalStrengthInterval: 5, RssiThreshold: 2}).AppendTo(nil))))
	if sig.SignalStrengthInterval != 5 || sig.RssiThreshold != 2 {
		t.Errorf("SIGNAL_STATE set %+v", sig)
	}
	ds := must(mbim.ParseDeviceServices(r.ok(mbim.CIDDeviceServices, mbim.CommandQuery, nil)))
	if len(ds.Services) != 1 || ds.Services[0].ID != mbim.ServiceBasicConnect {
		t.Fatalf("DEVICE_SERVICES %+v", ds)
	}
	for _, cid := range []uint32{1, 2, 3, 4, 5, 6, 9, 10, 11, 12, 15, 16, 19} {
		if !slices.Contains(ds.Services[0].CIDs, cid) {
			t.Errorf("DEVICE_SERVICES lacks BASIC_CONNECT CID %d", cid)
		}
	}
	if slices.Contains(ds.Services[0].CIDs, mbim.CIDPacketStatistics) {
		t.Error("PACKET_STATISTICS listed without a provider")
	}
	ci := must(mbim.ParseConnectInfo(r.ok(mbim.CIDConnect, mbim.CommandQuery, (&mbim.ConnectInfo{}).AppendTo(nil))))
	if ci.ActivationState != mbim.ActivationStateDeactivated {
		t.Errorf("CONNECT query %+v", ci)
	}
	if s, _ := r.cmd(mbim.CIDIPConfiguration, mbim.CommandQuery, (&mbim.IPConfiguration{}).AppendTo(nil)); s != mbim.StatusContextNotActivated {
		t.Errorf("IP_CONFIGURATION without a session: %s", s)
	}
	if s, _ := r.cmd(mbim.CIDPacketStatistics, mbim.CommandQuery, nil); s != mbim.StatusNoDeviceSupport {
		t.Errorf("PACKET_STATISTICS without a provider: %s", s)
	}
	if s, _ := r.cmd(mbim.CIDDeviceCaps, mbim.CommandSet, nil); s != mbim.StatusNoDeviceSupport {
		t.Errorf("DEVICE_CAPS set: %s", s)
	}
	if s, _ := r.cmd(mbim.CIDVisibleProviders, mbim.CommandQuery, nil); s != mbim.StatusNoDeviceSupport {
		t.Errorf("VISIBLE_PROVIDERS: %s", s)
	}
	r.tid++
	m := r.one(mbim.AppendCommand(nil, r.tid, mbim.ServiceMSBasicConnectExtensions, mbim.CIDMSBasicConnectExtensionsVersion, mbim.CommandQuery, nil))
	if m.Type != mbim.TypeCommandDone || m.Status != mbim.StatusNoDeviceSupport || m.Service != mbim.ServiceMSBasicConnectExtensions {
		t.Errorf("MS_BASIC_CONNECT_EXTENSIONS VERSION: %+v", m)
	}
	st := r.f.Stats()
	want := []MBIMUnsupported{
		{Service: "BASIC_CONNECT", CID: 1, Command: "set", Count: 1},
		{Service: "BASIC_CONNECT", CID: 8, Command: "query", Count: 1},
		{Service: "BASIC_CONNECT", CID: 20, Command: "query", Count: 1},
		{Service: "MS_BASIC_CONNECT_EXTENSIONS", CID: 15, Command: "query", Count: 1},
	}
	if !slices.Equal(st.Unsupported, want) || st.NotSupported != 4 {
		t.Errorf("unsupported %+v (%d), want %+v", st.Unsupported, st.NotSupported, want)
	}
}

func TestMBIMPacketStatistics(t *testing.T) {
	r := newMBIMRig(t, Config{}, MBIMOptions{PacketStatistics: func() mbim.PacketStatistics {
		return mbim.PacketStatistics{InPackets: 5, OutPackets: 6}
	}})
	r.open()
	ps := must(mbim.ParsePacketStatistics(r.ok(mbim.CIDPacketStatistics, mbim.CommandQuery, nil)))
	if ps.InPackets != 5 || ps.OutPackets != 6 {
		t.Fatalf("%+v", ps)
	}
}

func TestMBIMConnect(t *testing.T) {
	r := newMBIMRig(t, Config{RequireConnect: true}, MBIMOptions{})
	r.open()
	connect := func(apn string, ipType uint32) (mbim.Status, mbim.ConnectInfo) {
		s, in := r.cmd(mbim.CIDConnect, mbim.CommandSet, (&mbim.ConnectSet{ActivationCommand: mbim.ActivationCommandActivate,
			AccessString: apn, IPType: ipType, ContextType: mbim.ContextTypeInternet}).AppendTo(nil))
		return s, must(mbim.ParseConnectInfo(in)) // every CONNECT reply carries the state
	}
	if r.m.DataAllowed() {
		t.Fatal("data allowed before connect")
	}
	s, ci := connect("internet", mbim.IPTypeIPv4v6)
	if s != mbim.StatusSuccess || ci.ActivationState != mbim.ActivationStateActivated || ci.IPType != mbim.IPTypeIPv4v6 || ci.ContextType != mbim.ContextTypeInternet {
		t.Fatalf("connect: %s %+v", s, ci)
	}
	if !r.m.DataAllowed() || r.m.Session().APN != "internet" {
		t.Fatalf("modem session %+v", r.m.Session())
	}
	cfg := must(mbim.ParseIPConfiguration(r.ok(mbim.CIDIPConfiguration, mbim.CommandQuery, (&mbim.IPConfiguration{}).AppendTo(nil))))
	want := mbim.IPConfiguration{IPv4Available: 15, IPv6Available: 15,
		IPv4Addresses: []netip.Prefix{DefaultIPv4}, IPv6Addresses: []netip.Prefix{DefaultIPv6},
		IPv4Gateway: DefaultGateway4, IPv6Gateway: DefaultGateway6,
		IPv4DNS: []netip.Addr{DefaultGateway4}, IPv6DNS: []netip.Addr{DefaultGateway6}, IPv4MTU: 1500, IPv6MTU: 1500}
	if !ipConfigEqual(cfg, want) {
		t.Fatalf("IP_CONFIGURATION\n got %+v\nwant %+v", cfg, want)
	}
	if s, ci := connect("internet", mbim.IPTypeIPv4); s != mbim.StatusMaxActivatedContexts || ci.ActivationState != mbim.ActivationStateActivated {
		t.Fatalf("second connect: %s %+v", s, ci)
	}
	q := must(mbim.ParseConnectInfo(r.ok(mbim.CIDConnect, mbim.CommandQuery, (&mbim.ConnectInfo{}).AppendTo(nil))))
	if q.ActivationState != mbim.ActivationStateActivated || q.IPType != mbim.IPTypeIPv4v6 {
		t.Fatalf("query: %+v", q)
	}
	s, in := r.cmd(mbim.CIDConnect, mbim.CommandSet, (&mbim.ConnectSet{ActivationCommand: mbim.ActivationCommandDeactivate}).AppendTo(nil))
	if ci := must(mbim.ParseConnectInfo(in)); s != mbim.StatusSuccess || ci.ActivationState != mbim.ActivationStateDeactivated {
		t.Fatalf("disconnect: %s %+v", s, ci)
	}
	if r.m.DataAllowed() {
		t.Fatal("data allowed after disconnect")
	}
	if s, _ := connect("", 0); s != mbim.StatusInvalidAccessString {
		t.Fatalf("connect without APN: %s", s)
	}
	if s, _ := connect("internet", 9); s != mbim.StatusInvalidParameters {
		t.Fatalf("connect with IP type 9: %s", s)
	}
	// IPv6 only: no IPv4 configuration.
	if s, ci := connect("internet", mbim.IPTypeIPv6); s != mbim.StatusSuccess || ci.IPType != mbim.IPTypeIPv6 {
		t.Fatalf("connect ipv6: %s %+v", s, ci)
	}
	cfg = must(mbim.ParseIPConfiguration(r.ok(mbim.CIDIPConfiguration, mbim.CommandQuery, (&mbim.IPConfiguration{}).AppendTo(nil))))
	if cfg.IPv4Available != 0 || len(cfg.IPv4Addresses) != 0 || len(cfg.IPv6Addresses) != 1 {
		t.Fatalf("ipv6 configuration %+v", cfg)
	}
	// Radio off ends the session; connecting then fails.
	r.ok(mbim.CIDRadioState, mbim.CommandSet, (&mbim.RadioStateSet{RadioState: mbim.RadioOff}).AppendTo(nil))
	if s, _ := connect("internet", 0); s != mbim.StatusRadioPowerOff {
		t.Fatalf("connect with radio off: %s", s)
	}
	rs := must(mbim.ParseRadioState(r.ok(mbim.CIDRadioState, mbim.CommandSet, (&mbim.RadioStateSet{RadioState: mbim.RadioOn}).AppendTo(nil))))
	if rs != (mbim.RadioState{Hw: 1, Sw: 1}) {
		t.Fatalf("radio on: %+v", rs)
	}
	// Detach and attach.
	ps := must(mbim.ParsePacketService(r.ok(mbim.CIDPacketService, mbim.CommandSet, (&mbim.PacketServiceSet{Action: mbim.PacketServiceActionDetach}).AppendTo(nil))))
	if ps.PacketServiceState != mbim.PacketServiceDetached || r.m.Attached() {
		t.Fatalf("detach: %+v", ps)
	}
	ps = must(mbim.ParsePacketService(r.ok(mbim.CIDPacketService, mbim.CommandSet, (&mbim.PacketServiceSet{}).AppendTo(nil))))
	if ps.PacketServiceState != mbim.PacketServiceAttached || !r.m.Attached() {
		t.Fatalf("attach: %+v", ps)
	}
}

func ipConfigEqual(a, b mbim.IPConfiguration) bool {
	return a.SessionID == b.SessionID && a.IPv4Available == b.IPv4Available && a.IPv6Available == b.IPv6Available &&
		slices.Equal(a.IPv4Addresses, b.IPv4Addresses) && slices.Equal(a.IPv6Addresses, b.IPv6Addresses) &&
		a.IPv4Gateway == b.IPv4Gateway && a.IPv6Gateway == b.IPv6Gateway &&
		slices.Equal(a.IPv4DNS, b.IPv4DNS) && slices.Equal(a.IPv6DNS, b.IPv6DNS) && a.IPv4MTU == b.IPv4MTU && a.IPv6MTU == b.IPv6MTU
}

func TestMBIMIndications(t *testing.T) {
	r := newMBIMRig(t, Config{}, MBIMOptions{})
	r.m.SetRadio(false) // not open: nothing is sent
	r.f.sendIndications(r.rec)
	if ms := r.rec.take(t); len(ms) != 0 {
		t.Fatalf("%d indications while closed", len(ms))
	}
	r.open()
	r.m.SetRadio(true)
	r.f.sendIndications(r.rec)
	got := map[uint32]mbim.Message{}
	for _, m := range r.rec.take(t) {
		if m.Type != mbim.TypeIndicateStatus || m.TID != 0 || m.Service != mbim.ServiceBasicConnect {
			t.Fatalf("indication %+v", m)
		}
		got[m.CID] = m
	}
	for _, cid := range []uint32{mbim.CIDRadioState, mbim.CIDRegisterState, mbim.CIDPacketService} {
		if _, ok := got[cid]; !ok {
			t.Errorf("no %s indication after radio on", mbim.CIDName(mbim.ServiceBasicConnect, cid))
		}
	}
	if reg := must(mbim.ParseRegistrationState(got[mbim.CIDRegisterState].Info)); reg.RegisterState != mbim.RegisterStateHome {
		t.Errorf("REGISTER_STATE indication %+v", reg)
	}
	// Subscribe to CONNECT and SIGNAL_STATE only.
	list := mbim.EventList{{Service: mbim.ServiceBasicConnect, CIDs: []uint32{mbim.CIDConnect, mbim.CIDSignalState}}}
	echo := must(mbim.ParseEventList(r.ok(mbim.CIDDeviceServiceSubscribeList, mbim.CommandSet, list.AppendTo(nil))))
	if len(echo) != 1 || !slices.Equal(echo[0].CIDs, list[0].CIDs) {
		t.Fatalf("subscribe list echo %+v", echo)
	}
	r.m.SetRadio(false)
	r.m.SetRadio(true)
	if err := r.m.SetRSSI(25); err != nil {
		t.Fatal(err)
	}
	if _, err := r.m.Connect("internet", IPv4); err != nil {
		t.Fatal(err)
	}
	r.f.sendIndications(r.rec)
	var cids []uint32
	for _, m := range r.rec.take(t) {
		cids = append(cids, m.CID)
		if m.CID == mbim.CIDSignalState {
			if s := must(mbim.ParseSignalState(m.Info)); s.Rssi != 25 {
				t.Errorf("SIGNAL_STATE indication %+v", s)
			}
		}
		if m.CID == mbim.CIDConnect {
			if c := must(mbim.ParseConnectInfo(m.Info)); c.ActivationState != mbim.ActivationStateActivated {
				t.Errorf("CONNECT indication %+v", c)
			}
		}
	}
	slices.Sort(cids)
	if !slices.Equal(cids, []uint32{mbim.CIDSignalState, mbim.CIDConnect}) && !slices.Equal(cids, []uint32{mbim.CIDConnect, mbim.CIDSignalState}) {
		t.Fatalf("indications %v, want CONNECT and SIGNAL_STATE only", cids)
	}
	// A full downlink queue drops (and counts) indications.
	r.rec.full = true
	r.m.Disconnect()
	r.f.sendIndications(r.rec)
	if st := r.f.Stats(); st.IndicationsDropped != 1 || st.Indications < 5 {
		t.Fatalf("stats %+v", st)
	}
}

func TestMBIMMalformed(t *testing.T) {
	r := newMBIMRig(t, Config{}, MBIMOptions{})
	r.open()
	cmd := mbim.AppendCommand(nil, 40, mbim.ServiceBasicConnect, mbim.CIDDeviceCaps, mbim.CommandQuery, nil)
	lenMismatch := append(append([]byte(nil), cmd...), 0, 0, 0, 0)
	infoTooLong := mbim.AppendCommand(nil, 41, mbim.ServiceBasicConnect, mbim.CIDConnect, mbim.CommandSet, []byte{1, 2, 3, 4})
	infoTooLong[44] = 8
	badFrag := append([]byte(nil), cmd...)
	badFrag[16] = 3
	le := func(b []byte, off int, v uint32) []byte {
		b = append([]byte(nil), b...)
		b[off], b[off+1], b[off+2], b[off+3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
		return b
	}
	for _, c := range []struct {
		name string
		in   []byte
		typ  mbim.MessageType
		tid  uint32
		code mbim.ProtocolError
		st   mbim.Status
	}{
		{"too short for a header", []byte{3, 0, 0, 0, 12}, 0, 0, 0, 0},
		{"length field larger than the transfer", lenMismatch, mbim.TypeFunctionError, 40, mbim.ErrorLengthMismatch, 0},
		{"information buffer beyond the message", infoTooLong, mbim.TypeFunctionError, 41, mbim.ErrorLengthMismatch, 0},
		{"fragment header 3 of 1", badFrag, mbim.TypeFunctionError, 40, mbim.ErrorFragmentOutOfSequence, 0},
		{"unknown message type", le(mbim.AppendOpen(nil, 42, 4096), 0, 0x77), mbim.TypeFunctionError, 42, mbim.ErrorUnknown, 0},
		{"device-to-host type", mbim.AppendOpenDone(nil, 43, 0), mbim.TypeFunctionError, 43, mbim.ErrorUnknown, 0},
		{"continuation without a first fragment", le(le(cmd[:20], 12, 2), 16, 1), mbim.TypeFunctionError, 40, mbim.ErrorLengthMismatch, 0},
		{"malformed CONNECT buffer", mbim.AppendCommand(nil, 44, mbim.ServiceBasicConnect, mbim.CIDConnect, mbim.CommandSet, []byte{1, 0, 0, 0}),
			mbim.TypeCommandDone, 44, 0, mbim.StatusInvalidParameters},
		{"unknown service", mbim.AppendCommand(nil, 45, mbim.ServiceSMS, 1, mbim.CommandQuery, nil), mbim.TypeCommandDone, 45, 0, mbim.StatusNoDeviceSupport},
	} {
		ms := r.raw(c.in)
		if c.typ == 0 {
			if len(ms) != 0 {
				t.Errorf("%s: %d replies, want none", c.name, len(ms))
			}
			continue
		}
		if len(ms) != 1 {
			t.Errorf("%s: %d replies, want 1", c.name, len(ms))
			continue
		}
		m := ms[0]
		if m.Type != c.typ || m.TID != c.tid || (c.typ == mbim.TypeFunctionError && m.ErrorCode() != c.code) || (c.typ == mbim.TypeCommandDone && m.Status != c.st) {
			t.Errorf("%s: reply %s TID %d code %s status %s; want %s TID %d %s %s", c.name, m.Type, m.TID, m.ErrorCode(), m.Status, c.typ, c.tid, c.code, c.st)
		}
	}
	st := r.f.Stats()
	if st.DroppedShort != 1 || st.FunctionErrors != 6 || st.ByError["LengthMismatch"] != 3 {
		t.Fatalf("stats %+v", st)
	}
}

func TestMBIMFragments(t *testing.T) {
	r := newMBIMRig(t, Config{Identity: testIdentity}, MBIMOptions{FragmentTimeout: 50 * time.Millisecond})
	// OPEN with the smallest MaxControlTransfer: replies are fragmented.
	m := r.one(mbim.AppendOpen(nil, 1, 64))
	if m.Type != mbim.TypeOpenDone {
		t.Fatal(m)
	}
	ms := r.raw(mbim.AppendCommand(nil, 2, mbim.ServiceBasicConnect, mbim.CIDDeviceCaps, mbim.CommandQuery, nil))
	if len(ms) < 3 {
		t.Fatalf("%d fragments for DEVICE_CAPS at 64 bytes", len(ms))
	}
	var re mbim.Reassembler
	var whole []byte
	for i, f := range ms {
		if len(f.Raw) > 64 || f.TID != 2 || f.CurrentFragment != uint32(i) || f.TotalFragments != uint32(len(ms)) {
			t.Fatalf("fragment %d: %d bytes TID %d %d/%d", i, len(f.Raw), f.TID, f.CurrentFragment, f.TotalFragments)
		}
		res, err := re.Add(f, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		whole = res.Message
	}
	dm := must(mbim.ParseMessage(whole))
	if caps := must(mbim.ParseDeviceCaps(dm.Info)); caps.DeviceID != testIdentity.IMEI {
		t.Fatalf("reassembled DEVICE_CAPS %+v", caps)
	}

	// A fragmented CONNECT from the host.
	r.one(mbim.AppendOpen(nil, 3, 4096))
	req := (&mbim.ConnectSet{ActivationCommand: 1, AccessString: "a-rather-long-access-point-name.example", IPType: 1}).AppendTo(nil)
	msg := mbim.AppendCommand(nil, 4, mbim.ServiceBasicConnect, mbim.CIDConnect, mbim.CommandSet, req)
	n := mbim.FragmentCount(len(msg), 64)
	for i := range n {
		f := must(mbim.AppendFragment(nil, msg, 64, i))
		ms := r.raw(f)
		if i < n-1 && len(ms) != 0 {
			t.Fatalf("reply to fragment %d of %d", i, n)
		}
		if i == n-1 && (len(ms) != 1 || ms[0].Status != mbim.StatusSuccess || ms[0].TID != 4) {
			t.Fatalf("reply to the last fragment: %+v", ms)
		}
	}
	if s := r.m.Session(); !s.Active || s.APN != "a-rather-long-access-point-name.example" {
		t.Fatalf("session %+v", s)
	}
	// Out of sequence: fragment 0, then fragment 2.
	msg = mbim.AppendCommand(nil, 5, mbim.ServiceBasicConnect, mbim.CIDConnect, mbim.CommandSet, req)
	if ms := r.raw(must(mbim.AppendFragment(nil, msg, 64, 0))); len(ms) != 0 {
		t.Fatal(ms)
	}
	ms = r.raw(must(mbim.AppendFragment(nil, msg, 64, 2)))
	if len(ms) != 1 || ms[0].Type != mbim.TypeFunctionError || ms[0].ErrorCode() != mbim.ErrorFragmentOutOfSequence || ms[0].TID != 5 {
		t.Fatalf("out of sequence: %+v", ms)
	}
	// Timeout: fragment 0, silence, then another command.
	msg = mbim.AppendCommand(nil, 6, mbim.ServiceBasicConnect, mbim.CIDConnect, mbim.CommandSet, req)
	r.raw(must(mbim.AppendFragment(nil, msg, 64, 0)))
	time.Sleep(80 * time.Millisecond)
	ms = r.raw(mbim.AppendCommand(nil, 7, mbim.ServiceBasicConnect, mbim.CIDRadioState, mbim.CommandQuery, nil))
	if len(ms) != 2 || ms[0].TID != 6 || ms[0].ErrorCode() != mbim.ErrorTimeoutFragment || ms[1].TID != 7 || ms[1].Status != mbim.StatusSuccess {
		t.Fatalf("timeout: %+v", ms)
	}
	if st := r.f.Stats(); st.FragmentsOut != uint64(len(ms)) && st.FragmentsOut < 3 || st.FragmentsIn < uint64(n) {
		t.Fatalf("stats %+v", st)
	}
}

func TestNewMBIMNeedsModem(t *testing.T) {
	if _, err := NewMBIM(nil, MBIMOptions{}); !errors.Is(err, ErrConfig) {
		t.Fatal(err)
	}
}

// FuzzMBIMAnswer: any uplink transfer gets well-formed replies (each a
// device-to-host message within the host's MaxControlTransfer) or is
// accounted for without one (a drop, a HOST_ERROR, a fragment awaiting
// the next); the function never panics.
func FuzzMBIMAnswer(f *testing.F) {
	f.Add(mbim.AppendOpen(nil, 1, 4096))
	f.Add(mbim.AppendClose(nil, 2))
	f.Add(mbim.AppendCommand(nil, 3, mbim.ServiceBasicConnect, mbim.CIDDeviceCaps, mbim.CommandQuery, nil))
	f.Add(mbim.AppendCommand(nil, 4, mbim.ServiceBasicConnect, mbim.CIDConnect, mbim.CommandSet,
		(&mbim.ConnectSet{ActivationCommand: 1, AccessString: "internet"}).AppendTo(nil)))
	f.Add(mbim.AppendCommand(nil, 5, mbim.ServiceBasicConnect, mbim.CIDDeviceServiceSubscribeList, mbim.CommandSet,
		mbim.EventList{{Service: mbim.ServiceBasicConnect, CIDs: []uint32{9}}}.AppendTo(nil)))
	f.Add(mbim.AppendHostError(nil, 6, mbim.ErrorCancel))
	f.Add([]byte{1, 2, 3})
	modem, err := New(Config{})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		fn, err := NewMBIM(modem, MBIMOptions{})
		if err != nil {
			t.Fatal(err)
		}
		rec := &mbimRecorder{}
		// Open first (unless the input is itself an OPEN or CLOSE), so
		// that commands reach the handlers.
		if err := fn.receive(context.Background(), rec, mbim.AppendOpen(nil, 0xffff, 64)); err != nil {
			t.Fatal(err)
		}
		rec.msgs = nil
		before := fn.Stats()
		if err := fn.receive(context.Background(), rec, b); err != nil {
			t.Fatalf("receive: %v", err)
		}
		after := fn.Stats()
		for _, raw := range rec.msgs {
			m, err := mbim.ParseMessage(raw)
			if err != nil {
				t.Fatalf("malformed reply %v: % x", err, raw)
			}
			if m.Type.FromHost() {
				t.Fatalf("reply of host type %s", m.Type)
			}
			if len(raw) > max(fn.maxCtl, 64) {
				t.Fatalf("reply of %d bytes above MaxControlTransfer %d", len(raw), fn.maxCtl)
			}
		}
		if len(rec.msgs) == 0 {
			accounted := after.DroppedShort > before.DroppedShort || after.HostErrors > before.HostErrors || after.FragmentsIn > before.FragmentsIn
			if !accounted {
				t.Fatalf("no reply and nothing counted for % x", b)
			}
		}
	})
}
