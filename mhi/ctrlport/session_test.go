package ctrlport_test

import (
	"context"
	"errors"
	"net/netip"
	"sync"
	"testing"

	"github.com/gomhi/gomhi/mhi/ctrlport"
	"github.com/gomhi/gomhi/mhi/ep/modem"
)

// fakeHost records what a Session configures.
type fakeHost struct {
	mu       sync.Mutex
	applied  []ctrlport.SessionConfig
	removed  []ctrlport.SessionConfig
	applyErr error
}

func (h *fakeHost) Interface() string { return "tun-test" }

func (h *fakeHost) Apply(cfg ctrlport.SessionConfig) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.applied = append(h.applied, cfg)
	return h.applyErr
}

func (h *fakeHost) Remove(cfg ctrlport.SessionConfig) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.removed = append(h.removed, cfg)
	return nil
}

func (h *fakeHost) counts() (int, int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.applied), len(h.removed)
}

func newSession(t *testing.T, mc modem.Config, host *fakeHost) (*mockModem, *ctrlport.Port, *ctrlport.Session) {
	t.Helper()
	mc.RequireConnect = true
	mm := startMock(t, mc, modem.MBIMOptions{})
	p := openPort(t, mm, ctrlport.Options{})
	var opts ctrlport.SessionOptions
	if host != nil {
		opts.Host = host
	}
	s := ctrlport.NewSession(ctrlport.NewMBIMSession(p.Pair()), opts)
	t.Cleanup(s.Close)
	return mm, p, s
}

func TestSessionConnectDisconnect(t *testing.T) {
	host := &fakeHost{}
	mm, _, s := newSession(t, modem.Config{}, host)
	if st := s.State(); st.Connected() || st.Protocol != "mbim" || st.Interface != "tun-test" {
		t.Fatalf("initial state %+v", st)
	}
	if mm.modem.DataAllowed() {
		t.Fatal("data flows before connect")
	}
	// The MBIM function was never opened: the session opens it on
	// NotOpened.
	st, err := s.Connect(ctx(t), ctrlport.SessionRequest{APN: "internet"})
	if err != nil {
		t.Fatal(err)
	}
	want := ctrlport.SessionConfig{Protocol: "mbim", APN: "internet", IPType: "ipv4", IPv4: modem.DefaultIPv4,
		Gateway4: modem.DefaultGateway4, DNS4: []netip.Addr{modem.DefaultGateway4}, MTU: modem.DefaultSessionMTU}
	if !st.Connected() || !sameConfig(st.SessionConfig, want) {
		t.Fatalf("state after connect %+v, want %+v", st, want)
	}
	if !mm.modem.DataAllowed() || mm.modem.Session().APN != "internet" {
		t.Fatal("the modem's session is not connected")
	}
	if a, _ := host.counts(); a != 1 || !sameConfig(host.applied[0], want) {
		t.Fatalf("host applied %+v", host.applied)
	}
	if _, err := s.Connect(ctx(t), ctrlport.SessionRequest{APN: "other"}); !errors.Is(err, ctrlport.ErrSessionActive) {
		t.Fatalf("second connect: %v", err)
	}
	st, err = s.Disconnect(ctx(t))
	if err != nil || st.Connected() {
		t.Fatalf("disconnect: %+v %v", st, err)
	}
	if mm.modem.DataAllowed() {
		t.Fatal("data flows after disconnect")
	}
	if _, r := host.counts(); r != 1 {
		t.Fatalf("host removed %d times", r)
	}
	// Dual stack.
	st, err = s.Connect(ctx(t), ctrlport.SessionRequest{APN: "ims", IPType: "ipv4v6"})
	if err != nil || st.IPType != "ipv4v6" || st.IPv6 != modem.DefaultIPv6 || st.Gateway6 != modem.DefaultGateway6 || st.IPv4 != modem.DefaultIPv4 {
		t.Fatalf("ipv4v6 connect: %+v %v", st, err)
	}
	if _, err := s.Disconnect(ctx(t)); err != nil {
		t.Fatal(err)
	}
	st, err = s.Connect(ctx(t), ctrlport.SessionRequest{APN: "v6", IPType: "ipv6"})
	if err != nil || st.IPType != "ipv6" || st.IPv4.IsValid() || st.IPv6 != modem.DefaultIPv6 {
		t.Fatalf("ipv6 connect: %+v %v", st, err)
	}
	if got := s.Stats(); got.Connects != 3 || got.Disconnects != 2 || got.ConnectFailures != 1 || got.Connected != 1 {
		t.Errorf("stats %+v", got)
	}
}

func sameConfig(a, b ctrlport.SessionConfig) bool {
	if len(a.DNS4) != len(b.DNS4) || len(a.DNS6) != len(b.DNS6) {
		return false
	}
	for i := range a.DNS4 {
		if a.DNS4[i] != b.DNS4[i] {
			return false
		}
	}
	for i := range a.DNS6 {
		if a.DNS6[i] != b.DNS6[i] {
			return false
		}
	}
	a.DNS4, a.DNS6, b.DNS4, b.DNS6 = nil, nil, nil, nil
	return a.Protocol == b.Protocol && a.APN == b.APN && a.IPType == b.IPType && a.IPv4 == b.IPv4 &&
		a.Gateway4 == b.Gateway4 && a.IPv6 == b.IPv6 && a.Gateway6 == b.Gateway6 && a.MTU == b.MTU
}

func TestSessionRequestErrors(t *testing.T) {
	mm, _, s := newSession(t, modem.Config{}, nil)
	for _, req := range []ctrlport.SessionRequest{{}, {APN: "x", IPType: "ipv5"}} {
		if _, err := s.Connect(ctx(t), req); !errors.Is(err, ctrlport.ErrSessionRequest) {
			t.Errorf("%+v: %v", req, err)
		}
	}
	if st := s.State(); st.Connected() || st.LastError == "" {
		t.Errorf("state %+v", st)
	}
	// The radio off: the session switches it on (as ModemManager's
	// enable does) and connects.
	mm.modem.SetRadio(false)
	if _, err := s.Connect(ctx(t), ctrlport.SessionRequest{APN: "internet"}); err != nil {
		t.Fatalf("connect with the radio off: %v", err)
	}
	if !mm.modem.Radio() {
		t.Error("the radio is still off")
	}
}

// A session connected by someone else (mbimcli on the port) is reported
// by the modem as MaxActivatedContexts: ErrSessionActive. Disconnect
// ends it whoever connected it.
func TestSessionConnectedElsewhere(t *testing.T) {
	mm, _, s := newSession(t, modem.Config{}, nil)
	if _, err := mm.modem.Connect("elsewhere", modem.IPv4); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Connect(ctx(t), ctrlport.SessionRequest{APN: "internet"}); !errors.Is(err, ctrlport.ErrSessionActive) {
		t.Fatalf("connect: %v", err)
	}
	if _, err := s.Disconnect(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if mm.modem.Session().Active {
		t.Fatal("the modem's session survived Disconnect")
	}
}

// The host side failing undoes the modem's session.
func TestSessionHostFailure(t *testing.T) {
	host := &fakeHost{applyErr: errors.New("no such interface")}
	mm, _, s := newSession(t, modem.Config{}, host)
	_, err := s.Connect(ctx(t), ctrlport.SessionRequest{APN: "internet"})
	if !errors.Is(err, ctrlport.ErrHostConfig) {
		t.Fatalf("connect: %v", err)
	}
	if mm.modem.Session().Active || mm.modem.DataAllowed() {
		t.Fatal("the modem's session stays connected after the host failed")
	}
	if s.State().Connected() {
		t.Fatal("state says connected")
	}
}

// The modem ending the session (radio off) is noticed through the
// indications: the host is unconfigured and the state follows.
func TestSessionNetworkDisconnect(t *testing.T) {
	host := &fakeHost{}
	mm, _, s := newSession(t, modem.Config{}, host)
	if _, err := s.Connect(ctx(t), ctrlport.SessionRequest{APN: "internet"}); err != nil {
		t.Fatal(err)
	}
	mm.modem.SetRadio(false)
	waitFor(t, "the session to notice the radio going off", func() bool { return !s.State().Connected() })
	if _, r := host.counts(); r != 1 {
		t.Errorf("host removed %d times", r)
	}
	if st := s.Stats(); st.NetworkDisconnects != 1 {
		t.Errorf("stats %+v", st)
	}
	// A connect now fails (radio off), one after the radio is back works.
	mm.modem.SetRadio(true)
	if _, err := s.Connect(context.Background(), ctrlport.SessionRequest{APN: "internet"}); err != nil {
		t.Fatal(err)
	}
}
