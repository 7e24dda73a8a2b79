package ctrlport_test

import (
	"net/netip"
	"testing"

	"github.com/gomhi/gomhi/mhi/ctrlport"
	"github.com/gomhi/gomhi/mhi/proto/mbim"
)

// fakeTransport records sends and lets the test deliver "downlink"
// messages to the subscriber.
type fakeTransport struct{ sub func([]byte) }

func (f *fakeTransport) Send([]byte) error { return nil }
func (f *fakeTransport) Subscribe(fn func([]byte)) func() {
	f.sub = fn
	return func() {}
}

// FuzzSessionReceive feeds arbitrary downlink transfers — what a broken or
// hostile modem may send — to the MBIM and QMI session clients' receive
// paths (frames, indications, stray replies) and the WDS settings parser.
// Nothing may panic; a settings parse that succeeds yields addresses of
// the asked family only.
func FuzzSessionReceive(f *testing.F) {
	f.Add([]byte{0x01, 0x0c, 0x00, 0x80, 0x01, 0x04, 0x04, 0x01, 0x00, 0x22, 0x00, 0x00, 0x00}, uint8(4))
	f.Add(mbim.AppendFunctionError(nil, 3, mbim.ErrorNotOpened), uint8(6))
	ci := mbim.ConnectInfo{ActivationState: mbim.ActivationStateDeactivated}
	f.Add(mbim.AppendIndicateStatus(nil, 0, mbim.ServiceBasicConnect, mbim.CIDConnect, ci.AppendTo(nil)), uint8(4))
	// GET_CURRENT_SETTINGS TLVs: IPv4 198.18.0.1, mask /24, gateway, MTU.
	f.Add([]byte{0x1e, 4, 0, 1, 0, 0x12, 0xc6, 0x21, 4, 0, 0, 0xff, 0xff, 0xff, 0x20, 4, 0, 2, 0, 0x12, 0xc6, 0x29, 4, 0, 0xdc, 5, 0, 0}, uint8(4))
	// Two MBIM messages in one transfer; a QMUX response whose result TLV
	// runs past the frame.
	f.Add(append(mbim.AppendOpenDone(nil, 1, mbim.StatusSuccess), mbim.AppendFunctionError(nil, 2, mbim.ErrorUnknown)...), uint8(4))
	f.Add([]byte{0x01, 0x12, 0x00, 0x80, 0x01, 0x04, 0x02, 0x01, 0x00, 0x2d, 0x00, 0x07, 0x00, 0x02, 0x00, 0x04, 0x00, 0x00, 0x00}, uint8(4))
	f.Fuzz(func(t *testing.T, b []byte, family uint8) {
		var mt, qt fakeTransport
		ms := ctrlport.NewMBIMSession(&mt)
		defer ms.Close()
		qs := ctrlport.NewQMISession(&qt)
		defer qs.Close()
		ms.Notify(func() {})
		qs.Notify(func() {})
		mt.sub(b)
		qt.sub(b)
		fam := uint8(4)
		if family%2 == 1 {
			fam = 6
		}
		var cfg ctrlport.SessionConfig
		if err := ctrlport.ParseWDSSettings(b, fam, &cfg); err == nil {
			if fam == 4 && (!cfg.IPv4.IsValid() || cfg.IPv6.IsValid()) || fam == 6 && (!cfg.IPv6.IsValid() || cfg.IPv4.IsValid()) {
				t.Fatalf("family %d parsed as %+v", fam, cfg)
			}
			if cfg.IPv4.IsValid() && cfg.IPv4.Bits() > 32 || cfg.IPv6.IsValid() && cfg.IPv6.Bits() > 128 || cfg.MTU < 0 {
				t.Fatalf("out-of-range values %+v", cfg)
			}
			// What the host would apply obeys the rules of
			// CheckSessionConfig.
			if out, err := ctrlport.CheckSessionConfig(cfg); err == nil {
				checkAccepted(t, out)
			}
		}
	})
}

// checkAccepted fails when a configuration CheckSessionConfig accepted
// breaks one of its rules.
func checkAccepted(t *testing.T, c ctrlport.SessionConfig) {
	t.Helper()
	host := func(p netip.Prefix, min int) bool {
		a := p.Addr()
		return a.IsGlobalUnicast() && !a.IsLinkLocalUnicast() && !a.Is4In6() && p.Bits() >= min &&
			!(a.Is4() && (a.As4()[0] == 0 || a.As4()[0] >= 240))
	}
	if !c.IPv4.IsValid() && !c.IPv6.IsValid() ||
		c.IPv4.IsValid() && (!c.IPv4.Addr().Is4() || !host(c.IPv4, ctrlport.MinIPv4Prefix)) ||
		c.IPv6.IsValid() && (!c.IPv6.Addr().Is6() || !host(c.IPv6, ctrlport.MinIPv6Prefix)) ||
		len(c.DNS4) > ctrlport.MaxSessionDNS || len(c.DNS6) > ctrlport.MaxSessionDNS ||
		c.MTU != 0 && (c.MTU < ctrlport.MinSessionMTU || c.MTU > ctrlport.MaxSessionMTU || c.IPv6.IsValid() && c.MTU < ctrlport.MinSessionMTU6) {
		t.Fatalf("accepted %+v", c)
	}
	for _, a := range append(append([]netip.Addr{c.Gateway4, c.Gateway6}, c.DNS4...), c.DNS6...) {
		if a.IsValid() && (a.IsUnspecified() || a.IsMulticast() || a.IsLoopback() || a.Is4In6()) {
			t.Fatalf("accepted peer %v in %+v", a, c)
		}
	}
}
