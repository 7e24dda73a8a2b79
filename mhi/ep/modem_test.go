package ep

import (
	"errors"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhi/proto/framing"
)

func TestModemDefaults(t *testing.T) {
	m, err := NewModem(ModemConfig{Identity: ModemIdentity{Model: "FN990"}})
	if err != nil {
		t.Fatal(err)
	}
	id := m.Identity()
	if id.Model != "FN990" || id.Manufacturer != DefaultManufacturer || id.IMEI != DefaultIMEI {
		t.Fatalf("identity %+v", id)
	}
	a := m.Addressing()
	if a.IPv4 != DefaultIPv4 || a.Gateway4 != DefaultGateway4 || len(a.DNS4) != 1 || a.DNS4[0] != DefaultGateway4 ||
		a.IPv6 != DefaultIPv6 || a.MTU != DefaultSessionMTU {
		t.Fatalf("addressing %+v", a)
	}
	if !m.Radio() || !m.Attached() || m.Registration() != RegHome || m.RSSI() != DefaultRSSI || m.Session().Active {
		t.Fatalf("initial state: radio %v attached %v reg %v rssi %d session %+v",
			m.Radio(), m.Attached(), m.Registration(), m.RSSI(), m.Session())
	}
	if !m.DataAllowed() {
		t.Fatal("data gated on a modem that does not require a session")
	}
}

func TestModemRejectsBadConfig(t *testing.T) {
	for name, cfg := range map[string]ModemConfig{
		"v6 as v4":    {Addressing: SessionAddressing{IPv4: netip.MustParsePrefix("fd00::1/64")}},
		"v4 as v6":    {Addressing: SessionAddressing{IPv6: netip.MustParsePrefix("10.0.0.1/24")}},
		"small MTU":   {Addressing: SessionAddressing{MTU: 500}},
		"rssi":        {RSSI: 40},
		"dns4 family": {Addressing: SessionAddressing{DNS4: []netip.Addr{netip.MustParseAddr("::1")}}},
	} {
		if _, err := NewModem(cfg); !errors.Is(err, ErrModemConfig) {
			t.Errorf("%s: err %v, want ErrModemConfig", name, err)
		}
	}
}

func TestModemSessionGatesData(t *testing.T) {
	m, err := NewModem(ModemConfig{RequireConnect: true})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var got []ModemEventKind
	cancel := m.Subscribe(func(e ModemEvent) {
		mu.Lock()
		got = append(got, e.Kind)
		mu.Unlock()
	})
	defer cancel()
	events := func() []ModemEventKind {
		mu.Lock()
		defer mu.Unlock()
		out := got
		got = nil
		return out
	}

	if m.DataAllowed() {
		t.Fatal("data allowed before connect")
	}
	if _, err := m.Connect("", IPv4); !errors.Is(err, ErrNoAPN) {
		t.Fatalf("connect without APN: %v", err)
	}
	s, err := m.Connect("internet", 0)
	if err != nil || !s.Active || s.APN != "internet" || s.Type != IPv4 || s.ID == 0 {
		t.Fatalf("connect: %+v, %v", s, err)
	}
	if !m.DataAllowed() {
		t.Fatal("data gated while connected")
	}
	if _, err := m.Connect("other", IPv4); !errors.Is(err, ErrSessionActive) {
		t.Fatalf("second connect: %v", err)
	}
	if ev := events(); len(ev) != 1 || ev[0] != EventSession {
		t.Fatalf("events after connect: %v", ev)
	}
	if !m.Disconnect() || m.Disconnect() {
		t.Fatal("disconnect should report true once")
	}
	if m.DataAllowed() {
		t.Fatal("data allowed after disconnect")
	}
	events()

	// Radio off ends the session and detaches; connecting then fails.
	s2, err := m.Connect("internet", IPv4v6)
	if err != nil || s2.ID == s.ID {
		t.Fatalf("reconnect: %+v %v (previous id %d)", s2, err, s.ID)
	}
	events()
	m.SetRadio(false)
	if m.Session().Active || m.Attached() || m.DataAllowed() || m.RSSI() != 99 || m.Registration() != RegDeregistered {
		t.Fatalf("after radio off: session %+v attached %v", m.Session(), m.Attached())
	}
	if ev := events(); len(ev) != 4 {
		t.Fatalf("events after radio off: %v", ev)
	}
	if _, err := m.Connect("internet", IPv4); !errors.Is(err, ErrRadioOff) {
		t.Fatalf("connect with radio off: %v", err)
	}
	if err := m.SetAttached(true); !errors.Is(err, ErrRadioOff) {
		t.Fatalf("attach with radio off: %v", err)
	}
	m.SetRadio(true)
	if !m.Attached() {
		t.Fatal("radio on did not attach")
	}
	st := m.Stats()
	if st.Connects != 2 || st.Disconnects != 2 || st.ConnectFail != 3 {
		t.Fatalf("stats %+v", st)
	}
}

func TestIPDataGate(t *testing.T) {
	m, err := NewModem(ModemConfig{RequireConnect: true})
	if err != nil {
		t.Fatal(err)
	}
	r := newIPRig(t, ipRigConfig{ip: IPDataConfig{Format: framing.RawIP, Gate: m}})
	pkts := testPackets(3, 100)
	for _, p := range pkts {
		r.sendUL(p)
	}
	r.pumpUntil("gated uplink", func() bool { return r.ipd.Stats().DroppedGated == 3 })
	r.pumpFor(5 * time.Millisecond)
	if len(r.transfers) != 0 {
		t.Fatalf("%d DL transfers while gated", len(r.transfers))
	}
	if _, err := m.Connect("internet", IPv4); err != nil {
		t.Fatal(err)
	}
	for _, p := range pkts {
		r.sendUL(p)
	}
	s := r.waitAggregates(6) // 3 gated + 3 delivered
	got, _ := decodeDL(t, r.ipd.Config(), r.transfers)
	samePackets(t, got, pkts)
	checkConservation(t, s)
	if s.ULPackets != 6 || s.DroppedGated != 3 || s.Dropped() != 3 {
		t.Fatalf("stats %+v", s)
	}
}

func TestModemSessionByID(t *testing.T) {
	m, err := NewModem(ModemConfig{RequireConnect: true})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	n := 0
	defer m.Subscribe(func(e ModemEvent) {
		if e.Kind == EventSession {
			mu.Lock()
			n++
			mu.Unlock()
		}
	})()
	sessionEvents := func() int {
		mu.Lock()
		defer mu.Unlock()
		v := n
		n = 0
		return v
	}
	if _, err := m.SetSessionType(1, IPv4v6); !errors.Is(err, ErrNoSession) {
		t.Fatalf("type of no session: %v", err)
	}
	s, err := m.Connect("internet", IPv4)
	if err != nil {
		t.Fatal(err)
	}
	sessionEvents()
	if _, err := m.SetSessionType(s.ID+1, IPv4v6); !errors.Is(err, ErrNoSession) {
		t.Fatalf("type of another session: %v", err)
	}
	if _, err := m.SetSessionType(s.ID, 7); !errors.Is(err, ErrModemConfig) {
		t.Fatalf("bad type: %v", err)
	}
	if got, err := m.SetSessionType(s.ID, IPv4v6); err != nil || got.Type != IPv4v6 || m.Session().Type != IPv4v6 {
		t.Fatalf("widen: %+v %v", got, err)
	}
	if _, err := m.SetSessionType(s.ID, IPv4v6); err != nil {
		t.Fatal(err)
	}
	if ev := sessionEvents(); ev != 1 {
		t.Fatalf("%d session events for one change", ev)
	}
	if m.DisconnectID(s.ID+1) || !m.Session().Active {
		t.Fatal("DisconnectID of another session ended the active one")
	}
	if !m.DisconnectID(s.ID) || m.Session().Active || m.DataAllowed() || m.DisconnectID(s.ID) {
		t.Fatal("DisconnectID of the active session")
	}
	if ev := sessionEvents(); ev != 1 {
		t.Fatalf("%d session events for the disconnect", ev)
	}
	if st := m.Stats(); st.Disconnects != 1 {
		t.Fatalf("stats %+v", st)
	}
}
