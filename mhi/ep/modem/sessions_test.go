package modem

import (
	"errors"
	"net/netip"
	"slices"
	"sync"
	"testing"

	"github.com/gomhi/gomhi/mhi/proto/mbim"
	"github.com/gomhi/gomhi/mhi/proto/qmi"
)

// These tests cover several data sessions at once (issue 23): the Modem's
// sessions by number, MBIM CONNECT/IP_CONFIGURATION per SessionId and
// QMI clients bound to mux ids.

// sessionEvents records the EventSession events a Modem publishes.
type sessionEvents struct {
	mu  sync.Mutex
	got []uint8
}

func (e *sessionEvents) on(ev Event) {
	if ev.Kind == EventSession {
		e.mu.Lock()
		e.got = append(e.got, ev.Session)
		e.mu.Unlock()
	}
}

func (e *sessionEvents) take() []uint8 {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := e.got
	e.got = nil
	slices.Sort(out)
	return out
}

func TestModemSessions(t *testing.T) {
	m, err := New(Config{RequireConnect: true, MaxSessions: 3})
	if err != nil {
		t.Fatal(err)
	}
	var evs sessionEvents
	t.Cleanup(m.Subscribe(evs.on))
	for n, apn := range []string{"internet", "ims", "mms"} {
		s, err := m.ConnectSession(uint8(n), apn, IPv4v6)
		if err != nil || s.Number != uint8(n) || !s.Active || s.APN != apn {
			t.Fatalf("connect %d: %+v %v", n, s, err)
		}
	}
	if got := evs.take(); !slices.Equal(got, []uint8{0, 1, 2}) {
		t.Fatalf("session events %v", got)
	}
	if _, err := m.ConnectSession(3, "x", IPv4); !errors.Is(err, ErrSessionLimit) {
		t.Fatalf("session 3 of 3: %v", err)
	}
	if _, err := m.ConnectSession(1, "ims", IPv4); !errors.Is(err, ErrSessionActive) {
		t.Fatalf("duplicate session 1: %v", err)
	}
	if got := len(m.Sessions()); got != 3 {
		t.Fatalf("%d sessions", got)
	}
	for n := range 256 {
		if want := n < 3; m.SessionAllowed(uint8(n)) != want {
			t.Fatalf("SessionAllowed(%d) = %v", n, !want)
		}
	}
	// The host ends session 1, the network session 2: the others stay.
	if !m.DisconnectSession(1) || m.DisconnectSession(1) {
		t.Fatal("DisconnectSession(1) twice")
	}
	if !m.NetworkDisconnect(2) || m.NetworkDisconnect(2) {
		t.Fatal("NetworkDisconnect(2) twice")
	}
	if !m.SessionOf(0).Active || m.SessionOf(1).Active || m.SessionOf(2).Active || !m.SessionAllowed(0) || m.SessionAllowed(1) || m.SessionAllowed(2) {
		t.Fatalf("sessions after ending 1 and 2: %+v", m.Sessions())
	}
	if got := evs.take(); !slices.Equal(got, []uint8{1, 2}) {
		t.Fatalf("session events %v", got)
	}
	// Restart ends every session, one event each.
	if _, err := m.ConnectSession(2, "mms", IPv4); err != nil {
		t.Fatal(err)
	}
	evs.take()
	m.Restart()
	if got := evs.take(); !slices.Equal(got, []uint8{0, 2}) || len(m.Sessions()) != 0 || m.DataAllowed() || m.SessionAllowed(0) {
		t.Fatalf("after restart: events %v, sessions %+v", got, m.Sessions())
	}
	if st := m.Stats(); st.Connects != 4 || st.Disconnects != 4 || st.NetworkDisconnects != 1 || st.ConnectFail != 2 {
		t.Fatalf("stats %+v", st)
	}
	// Radio off ends every session too.
	for n := range 3 {
		if _, err := m.ConnectSession(uint8(n), "internet", IPv4); err != nil {
			t.Fatal(err)
		}
	}
	evs.take()
	m.SetRadio(false)
	if got := evs.take(); !slices.Equal(got, []uint8{0, 1, 2}) {
		t.Fatalf("radio off: events %v", got)
	}
	if _, err := New(Config{MaxSessions: 257}); !errors.Is(err, ErrConfig) {
		t.Fatalf("MaxSessions 257: %v", err)
	}
}

func TestModemSessionGateAndQuirks(t *testing.T) {
	m, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	if !m.SessionAllowed(0) || !m.SessionAllowed(255) || !m.DataAllowed() {
		t.Fatal("without RequireConnect every session's data must flow")
	}
	// The autoconnect's PDN is session 0's: session 1 connects.
	crashes := 0
	m, err = New(Config{AutoconnectPDN: true, RequireConnect: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Connect("internet", IPv4); !errors.Is(err, ErrPDNHeld) {
		t.Fatalf("session 0 with the PDN held: %v", err)
	}
	if _, err := m.ConnectSession(1, "ims", IPv4); err != nil {
		t.Fatalf("session 1 with session 0's PDN held: %v", err)
	}
	if !m.DataAllowed() || m.SessionAllowed(0) || !m.SessionAllowed(1) {
		t.Fatal("gate: DataAllowed means any session; SessionAllowed(0) not")
	}
	// The crash comes with the first activation, whatever its session.
	m, err = New(Config{CrashOnConnect: func() { crashes++ }})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.ConnectSession(5, "ims", IPv4); !errors.Is(err, ErrCrashed) || crashes != 1 {
		t.Fatalf("first connect (session 5): %v, %d crashes", err, crashes)
	}
	if _, err := m.ConnectSession(5, "ims", IPv4); err != nil || crashes != 1 {
		t.Fatalf("second connect: %v", err)
	}
}

func TestModemAddressingOf(t *testing.T) {
	m, err := New(Config{Addressing: SessionAddressing{DNS4: []netip.Addr{DefaultGateway4, netip.MustParseAddr("9.9.9.9")}}})
	if err != nil {
		t.Fatal(err)
	}
	if a := m.AddressingOf(0); a.IPv4 != DefaultIPv4 || a.Gateway6 != DefaultGateway6 {
		t.Fatalf("session 0: %+v", a)
	}
	a := m.AddressingOf(3)
	for _, c := range []struct{ got, want string }{
		{a.IPv4.String(), "198.18.3.1/24"}, {a.Gateway4.String(), "198.18.3.2"},
		{a.DNS4[0].String(), "198.18.3.2"}, {a.DNS4[1].String(), "9.9.9.9"},
		{a.IPv6.String(), "fd00:6d68:6900:3::1/64"}, {a.Gateway6.String(), "fd00:6d68:6900:3::2"},
		{a.DNS6[0].String(), "fd00:6d68:6900:3::2"},
	} {
		if c.got != c.want {
			t.Errorf("session 3: %s, want %s", c.got, c.want)
		}
	}
	if a.MTU != DefaultSessionMTU {
		t.Errorf("MTU %d", a.MTU)
	}
	if m.Addressing().DNS4[0] != DefaultGateway4 {
		t.Error("AddressingOf changed the configured addressing")
	}
}

// mbimActivate activates MBIM session sid.
func (r *mbimRig) activate(sid uint32, apn string, ipType uint32) (mbim.Status, mbim.ConnectInfo) {
	r.t.Helper()
	s, in := r.cmd(mbim.CIDConnect, mbim.CommandSet, (&mbim.ConnectSet{SessionID: sid, ActivationCommand: mbim.ActivationCommandActivate,
		AccessString: apn, IPType: ipType, ContextType: mbim.ContextTypeInternet}).AppendTo(nil))
	return s, must(mbim.ParseConnectInfo(in))
}

// connectIndications sends the pending indications and returns the
// CONNECT ones by SessionId.
func (r *mbimRig) connectIndications() map[uint32]mbim.ConnectInfo {
	r.t.Helper()
	r.f.sendIndications(r.rec)
	out := map[uint32]mbim.ConnectInfo{}
	for _, m := range r.rec.take(r.t) {
		if m.Type == mbim.TypeIndicateStatus && m.CID == mbim.CIDConnect {
			ci := must(mbim.ParseConnectInfo(m.Info))
			out[ci.SessionID] = ci
		}
	}
	return out
}

func TestMBIMSessions(t *testing.T) {
	r := newMBIMRig(t, Config{RequireConnect: true, MaxSessions: 3}, MBIMOptions{})
	r.open()
	for sid, apn := range []string{"internet", "ims", "mms"} {
		if s, ci := r.activate(uint32(sid), apn, mbim.IPTypeIPv4v6); s != mbim.StatusSuccess || ci.SessionID != uint32(sid) ||
			ci.ActivationState != mbim.ActivationStateActivated {
			t.Fatalf("activate %d: %s %+v", sid, s, ci)
		}
	}
	if got := r.connectIndications(); len(got) != 3 || got[2].ActivationState != mbim.ActivationStateActivated {
		t.Fatalf("CONNECT indications %+v", got)
	}
	seen := map[netip.Prefix]bool{}
	for sid := range uint32(3) {
		q := must(mbim.ParseConnectInfo(r.ok(mbim.CIDConnect, mbim.CommandQuery, (&mbim.ConnectInfo{SessionID: sid}).AppendTo(nil))))
		if q.SessionID != sid || q.ActivationState != mbim.ActivationStateActivated {
			t.Fatalf("query %d: %+v", sid, q)
		}
		cfg := must(mbim.ParseIPConfiguration(r.ok(mbim.CIDIPConfiguration, mbim.CommandQuery, (&mbim.IPConfiguration{SessionID: sid}).AppendTo(nil))))
		a := r.m.AddressingOf(uint8(sid))
		if cfg.SessionID != sid || len(cfg.IPv4Addresses) != 1 || cfg.IPv4Addresses[0] != a.IPv4 || cfg.IPv4Gateway != a.Gateway4 ||
			len(cfg.IPv6Addresses) != 1 || cfg.IPv6Addresses[0] != a.IPv6 || seen[a.IPv4] || seen[a.IPv6] {
			t.Fatalf("IP_CONFIGURATION %d: %+v (want %+v)", sid, cfg, a)
		}
		seen[a.IPv4], seen[a.IPv6] = true, true
	}
	// Beyond the limit, and a second activation of an active session.
	if s, ci := r.activate(3, "x", mbim.IPTypeIPv4); s != mbim.StatusMaxActivatedContexts || ci.SessionID != 3 ||
		ci.ActivationState != mbim.ActivationStateDeactivated {
		t.Fatalf("session 3 of 3: %s %+v", s, ci)
	}
	// 256 is no session 0 (the byte's wrap).
	if s, ci := r.activate(256, "x", mbim.IPTypeIPv4); s != mbim.StatusMaxActivatedContexts || ci.SessionID != 256 || r.m.SessionOf(0).APN != "internet" {
		t.Fatalf("session 256: %s %+v", s, ci)
	}
	s, _ := r.cmd(mbim.CIDConnect, mbim.CommandSet, (&mbim.ConnectSet{SessionID: 256, ActivationCommand: mbim.ActivationCommandDeactivate}).AppendTo(nil))
	if s != mbim.StatusMaxActivatedContexts || !r.m.SessionOf(0).Active {
		t.Fatalf("deactivate session 256: %s, session 0 %+v", s, r.m.SessionOf(0))
	}
	if s, ci := r.activate(1, "ims", mbim.IPTypeIPv4); s != mbim.StatusMaxActivatedContexts || ci.ActivationState != mbim.ActivationStateActivated {
		t.Fatalf("duplicate session 1: %s %+v", s, ci)
	}
	if s, _ := r.cmd(mbim.CIDIPConfiguration, mbim.CommandQuery, (&mbim.IPConfiguration{SessionID: 7}).AppendTo(nil)); s != mbim.StatusContextNotActivated {
		t.Fatalf("IP_CONFIGURATION of session 7: %s", s)
	}
	// The host deactivates session 1: the others stay.
	s, in := r.cmd(mbim.CIDConnect, mbim.CommandSet, (&mbim.ConnectSet{SessionID: 1, ActivationCommand: mbim.ActivationCommandDeactivate}).AppendTo(nil))
	if ci := must(mbim.ParseConnectInfo(in)); s != mbim.StatusSuccess || ci.SessionID != 1 || ci.ActivationState != mbim.ActivationStateDeactivated {
		t.Fatalf("deactivate 1: %s %+v", s, ci)
	}
	if !r.m.SessionOf(0).Active || r.m.SessionOf(1).Active || !r.m.SessionOf(2).Active {
		t.Fatalf("sessions %+v", r.m.Sessions())
	}
	if got := r.connectIndications(); len(got) != 1 || got[1].ActivationState != mbim.ActivationStateDeactivated {
		t.Fatalf("CONNECT indications after deactivating 1: %+v", got)
	}
	// The network ends session 2: one indication, for SessionId 2.
	r.m.NetworkDisconnect(2)
	// It carries the network's cause (#36, regular deactivation), which
	// ModemManager shows; the host's own deactivation of 1 carried none.
	if got := r.connectIndications(); len(got) != 1 || got[2].ActivationState != mbim.ActivationStateDeactivated ||
		got[2].NwError != CauseRegularDeactivation {
		t.Fatalf("CONNECT indications after the network ended 2: %+v", got)
	}
	if !r.m.SessionOf(0).Active {
		t.Fatal("the network's disconnect of session 2 ended session 0")
	}
	// A restart ends the rest.
	r.activate(1, "ims", mbim.IPTypeIPv4)
	r.connectIndications()
	r.m.Restart()
	got := r.connectIndications()
	if len(got) != 2 || got[0].ActivationState != mbim.ActivationStateDeactivated || got[1].ActivationState != mbim.ActivationStateDeactivated {
		t.Fatalf("CONNECT indications after restart: %+v", got)
	}
	caps := must(mbim.ParseDeviceCaps(r.ok(mbim.CIDDeviceCaps, mbim.CommandQuery, nil)))
	if caps.MaxSessions != 3 {
		t.Fatalf("DEVICE_CAPS MaxSessions %d", caps.MaxSessions)
	}
}

// bindMux binds WDS client cid to mux id mux.
func bindMux(mux uint8) func(b *qmi.Builder) {
	return func(b *qmi.Builder) {
		b.Begin(wdsTLVEndpoint)
		b.Put32(3) // PCIe
		b.Put32(2)
		b.End()
		b.TLVU8(wdsTLVMuxID, mux)
	}
}

func startAPN(apn string) func(b *qmi.Builder) {
	return func(b *qmi.Builder) {
		b.TLVString(0x14, apn)
		b.TLVU8(0x19, wdsFamilyIPv4)
	}
}

func TestQMISessions(t *testing.T) {
	h := newQMITester(t, Config{RequireConnect: true, MaxSessions: 3, WireBase: 112}, QMIOptions{})
	status := func(cid uint8) uint8 { return tlv(t, h.ok(qmi.WDS, cid, qmi.WDSGetPacketServiceStatus, nil), 0x01)[0] }
	// Session 0 on an unbound client, 1 and 2 on clients bound to mux
	// ids 113 and 114 (base 112).
	var cids [3]uint8
	for n, apn := range []string{"internet", "ims", "mms"} {
		cids[n] = h.alloc(qmi.WDS)
		if n > 0 {
			h.ok(qmi.WDS, cids[n], qmi.WDSBindMuxDataPort, bindMux(112+uint8(n)))
		}
		h.ok(qmi.WDS, cids[n], qmi.WDSStartNetwork, startAPN(apn))
		h.indication(qmi.WDS, cids[n], qmi.WDSGetPacketServiceStatus)
		if s := h.m.SessionOf(uint8(n)); !s.Active || s.APN != apn {
			t.Fatalf("session %d: %+v", n, s)
		}
	}
	for n, cid := range cids {
		f := h.ok(qmi.WDS, cid, qmi.WDSGetCurrentSettings, nil)
		a := h.m.AddressingOf(uint8(n))
		if got := tlvU32(t, f, 0x1E); got != v4le(a.IPv4.Addr()) || tlvU32(t, f, 0x20) != v4le(a.Gateway4) {
			t.Fatalf("session %d: address %08x, want %v", n, got, a.IPv4)
		}
		if n > 0 && a.IPv4 == h.m.AddressingOf(0).IPv4 {
			t.Fatal("sessions share an address")
		}
	}
	// Limit: mux 115 is session 3 of 3.
	extra := h.alloc(qmi.WDS)
	h.fails(qmi.WDS, extra, qmi.WDSBindMuxDataPort, bindMux(115), qmi.ErrInvalidArgument)
	// Duplicate: another client on mux 113 with another APN.
	h.ok(qmi.WDS, extra, qmi.WDSBindMuxDataPort, bindMux(113))
	h.fails(qmi.WDS, extra, qmi.WDSStartNetwork, startAPN("other"), qmi.ErrCallFailed)
	h.fails(qmi.WDS, extra, qmi.WDSBindMuxDataPort, nil, qmi.ErrMissingArgument)
	// STOP_NETWORK on session 1's client ends session 1 only.
	h.ok(qmi.WDS, cids[1], qmi.WDSStopNetwork, func(b *qmi.Builder) { b.TLVU32(0x01, wdsGlobalHandle) })
	h.indication(qmi.WDS, cids[1], qmi.WDSGetPacketServiceStatus)
	if !h.m.SessionOf(0).Active || h.m.SessionOf(1).Active || !h.m.SessionOf(2).Active {
		t.Fatalf("sessions after stopping 1: %+v", h.m.Sessions())
	}
	// The network ends session 2: its client hears, the others not.
	h.m.NetworkDisconnect(2)
	ind := h.indication(qmi.WDS, cids[2], qmi.WDSGetPacketServiceStatus)
	if st := tlv(t, ind, 0x01)[0]; st != wdsDisconnected {
		t.Fatalf("session 2's client: status %d", st)
	}
	if status(cids[0]) != wdsConnected || status(cids[2]) != wdsDisconnected || !h.m.SessionOf(0).Active {
		t.Fatal("the network's disconnect of session 2 touched session 0")
	}
	for _, f := range h.inds {
		if f.Client == cids[0] {
			t.Fatalf("session 0's client got %s", f.Name())
		}
	}
	// Releasing session 0's client ends session 0.
	h.ok(qmi.CTL, 0, qmi.CTLReleaseCID, func(b *qmi.Builder) { b.TLV(0x01, []byte{uint8(qmi.WDS), cids[0]}) })
	if len(h.m.Sessions()) != 0 || h.m.DataAllowed() {
		t.Fatalf("sessions after release: %+v", h.m.Sessions())
	}
}

// BenchmarkSessionAllowed is the per-packet gate: lock-free, no
// allocation.
func BenchmarkSessionAllowed(b *testing.B) {
	m, err := New(Config{RequireConnect: true})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := m.ConnectSession(1, "ims", IPv4); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	n := 0
	for i := 0; b.Loop(); i++ {
		if m.SessionAllowed(uint8(i)) {
			n++
		}
	}
	if n == 0 {
		b.Fatal("session 1 never allowed")
	}
}
