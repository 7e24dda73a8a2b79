package quirk_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhi/ep"
	"github.com/gomhi/gomhi/mhi/ep/ipdata"
	"github.com/gomhi/gomhi/mhi/ep/modem"
	"github.com/gomhi/gomhi/mhi/ep/quirk"
)

// TestQuirkRegistry: the eight quirks are there, each with a
// description and a source.
func TestQuirkRegistry(t *testing.T) {
	want := []string{"sdx72-mux-112", "autoconnect-pdn", "fcc-locked", "no-m3", "slow-ready", "mtu-1400",
		"ntb-sequence-glitch", "crash-on-connect"}
	for _, name := range want {
		q, ok := quirk.Lookup(name)
		if !ok {
			t.Errorf("quirk %s missing", name)
			continue
		}
		if q.Description == "" || q.Source == "" {
			t.Errorf("quirk %s: description %q, source %q", name, q.Description, q.Source)
		}
	}
	if n := len(quirk.All()); n < len(want) {
		t.Errorf("%d quirks, want at least %d", n, len(want))
	}
}

// TestQuirkParse: lists compose, parameters are checked, unknown names
// fail naming the known ones.
func TestQuirkParse(t *testing.T) {
	set, err := quirk.Parse("mtu-1400,no-m3", "slow-ready=3s", "no-m3")
	if err != nil {
		t.Fatal(err)
	}
	if got := set.String(); got != "mtu-1400,no-m3,slow-ready=3s" {
		t.Errorf("set %q", got)
	}
	_, err = quirk.Parse("mtu-1400,bogus")
	if !errors.Is(err, quirk.ErrUnknown) || !strings.Contains(err.Error(), "crash-on-connect") {
		t.Errorf("unknown quirk: %v, want ErrUnknown listing the known ones", err)
	}
	for _, bad := range []string{"slow-ready=soon", "mtu-1400=100", "no-m3=1", "ntb-sequence-glitch=0"} {
		if _, err := quirk.Parse(bad); !errors.Is(err, quirk.ErrParam) {
			t.Errorf("%s: %v, want ErrParam", bad, err)
		}
	}
}

// TestQuirkApply: every quirk adjusts the configuration it says, and they
// compose.
func TestQuirkApply(t *testing.T) {
	set, err := quirk.Parse(strings.Join(quirk.Names(), ","), "slow-ready=2s", "mtu-1400=1430")
	if err != nil {
		t.Fatal(err)
	}
	var ec ep.Config
	var mc modem.Config
	var dc ipdata.Config
	target := &quirk.Target{Device: &ec, Modem: &mc, IPData: &dc}
	if err := set.Apply(target); err != nil {
		t.Fatal(err)
	}
	switch {
	case !ec.NoM3 || ec.ReadyDelay != 2*time.Second:
		t.Errorf("device config: NoM3 %v, ReadyDelay %v", ec.NoM3, ec.ReadyDelay)
	case !mc.FCCLocked || !mc.AutoconnectPDN || mc.CrashOnConnect == nil || mc.Addressing.MTU != 1430:
		t.Errorf("modem config: FCC %v, autoconnect %v, crash hook %v, MTU %d", mc.FCCLocked, mc.AutoconnectPDN,
			mc.CrashOnConnect != nil, mc.Addressing.MTU)
	case dc.Session != 112 || dc.QMAPMux != 112 || dc.NetworkMTU != 1430 || dc.NTBSequenceGlitch != quirk.DefaultGlitchEvery:
		t.Errorf("IP data config: %+v", dc)
	}
	// Before the modem started, the crash hook does nothing.
	mc.CrashOnConnect()
}
