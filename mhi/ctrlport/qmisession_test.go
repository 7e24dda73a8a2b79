package ctrlport_test

import (
	"errors"
	"net/netip"
	"path/filepath"
	"testing"

	"github.com/gomhi/gomhi/mhi/ctrlport"
	"github.com/gomhi/gomhi/mhi/ep/modem"
	"github.com/gomhi/gomhi/pcigeneric/mock"
)

// newQMISession starts a mock of a QMI-only model (RequireConnect), a port
// on its QMI pair and a Session over a QMISession on the port's pair.
func newQMISession(t *testing.T, host *fakeHost) (*mock.Mock, *ctrlport.Port, *ctrlport.Session) {
	t.Helper()
	m, err := mock.Open(mock.Options{Model: "telit-fn920c04", Modem: modem.Config{RequireConnect: true}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	if err := m.Controller.PowerUp(); err != nil {
		t.Fatal(err)
	}
	if m.Functions.QMI == nil {
		t.Fatal("the mock has no QMI function")
	}
	p, err := ctrlport.Open(m.Controller, "QMI", ctrlport.Options{Link: filepath.Join(t.TempDir(), "wwan0qmi0")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	var opts ctrlport.SessionOptions
	if host != nil {
		opts.Host = host
	}
	s := ctrlport.NewSession(ctrlport.NewQMISession(p.Pair()), opts)
	t.Cleanup(s.Close)
	return m, p, s
}

func TestQMISessionConnectDisconnect(t *testing.T) {
	host := &fakeHost{}
	m, _, s := newQMISession(t, host)
	if m.Modem.DataAllowed() {
		t.Fatal("data flows before connect")
	}
	st, err := s.Connect(ctx(t), ctrlport.SessionRequest{APN: "internet"})
	if err != nil {
		t.Fatal(err)
	}
	want := ctrlport.SessionConfig{Protocol: "qmi", APN: "internet", IPType: "ipv4", IPv4: modem.DefaultIPv4,
		Gateway4: modem.DefaultGateway4, DNS4: []netip.Addr{modem.DefaultGateway4}, MTU: modem.DefaultSessionMTU}
	if !st.Connected() || !sameConfig(st.SessionConfig, want) {
		t.Fatalf("connect: %+v, want %+v", st, want)
	}
	if !m.Modem.DataAllowed() || m.Modem.Session().APN != "internet" {
		t.Fatal("the modem's session is not connected")
	}
	if _, err := s.Connect(ctx(t), ctrlport.SessionRequest{APN: "internet"}); !errors.Is(err, ctrlport.ErrSessionActive) {
		t.Fatalf("second connect: %v", err)
	}
	if _, err := s.Disconnect(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if m.Modem.Session().Active || m.Modem.DataAllowed() {
		t.Fatal("the modem's session survived the disconnect")
	}

	// Dual stack: two calls, one per family, both families' settings.
	st, err = s.Connect(ctx(t), ctrlport.SessionRequest{APN: "internet", IPType: "ipv4v6"})
	if err != nil {
		t.Fatal(err)
	}
	if st.IPv4 != modem.DefaultIPv4 || st.IPv6 != modem.DefaultIPv6 || st.Gateway6 != modem.DefaultGateway6 || len(st.DNS6) != 1 || st.IPType != "ipv4v6" {
		t.Fatalf("ipv4v6: %+v", st)
	}
	if ses := m.Modem.Session(); !ses.Active || ses.Type != modem.IPv4v6 {
		t.Fatalf("modem session %+v", ses)
	}
	if _, err := s.Disconnect(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if m.Modem.Session().Active {
		t.Fatal("the dual-stack session survived the disconnect")
	}
	if qs := m.Functions.QMI.Stats(); qs.ClientsActive != 0 || qs.Malformed != 0 || qs.Dropped != 0 {
		t.Errorf("QMI stats after disconnect: %+v", qs)
	}

	// A refused call: no APN cannot happen (validated); the radio off can.
	m.Modem.SetRadio(false)
	_, err = s.Connect(ctx(t), ctrlport.SessionRequest{APN: "internet"})
	var qe *ctrlport.QMIError
	if !errors.Is(err, ctrlport.ErrSessionRefused) || !errors.As(err, &qe) {
		t.Fatalf("connect with the radio off: %v", err)
	}
	t.Logf("radio off: %v", err)
	if qs := m.Functions.QMI.Stats(); qs.ClientsActive != 0 {
		t.Errorf("a refused connect leaked %d client ids", qs.ClientsActive)
	}
}

// The modem ending the call (radio off) reaches the session through the
// WDS packet-service indication; a new connect works once the radio is
// back.
func TestQMISessionNetworkDisconnect(t *testing.T) {
	host := &fakeHost{}
	m, _, s := newQMISession(t, host)
	if _, err := s.Connect(ctx(t), ctrlport.SessionRequest{APN: "internet"}); err != nil {
		t.Fatal(err)
	}
	m.Modem.SetRadio(false)
	waitFor(t, "the session to notice the call ending", func() bool { return !s.State().Connected() })
	if _, r := host.counts(); r != 1 {
		t.Errorf("host removed %d times", r)
	}
	m.Modem.SetRadio(true)
	if _, err := s.Connect(ctx(t), ctrlport.SessionRequest{APN: "internet"}); err != nil {
		t.Fatal(err)
	}
	if qs := m.Functions.QMI.Stats(); qs.ClientsActive != 1 {
		t.Errorf("client ids active %d, want 1 (the new call's)", qs.ClientsActive)
	}
}
