package ctrlport_test

import (
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
		}
	})
}
