package ctrlport_test

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhi/ctrlport"
	"github.com/gomhi/gomhi/mhi/ep/modem"
	"github.com/gomhi/gomhi/mhi/ep/quirk"
	"github.com/gomhi/gomhi/mhi/proto/mbim"
	"github.com/gomhi/gomhi/pcigeneric/mock"
)

// quirkSession starts the embedded mock of model with the quirks named,
// powers it up and returns a session on its pair (MBIM or QMI).
func quirkSession(t *testing.T, model, pair, quirks string) (*mock.Mock, *ctrlport.Session) {
	m, _, s := quirkPortSession(t, model, pair, quirks)
	return m, s
}

// quirkPortSession is quirkSession, with the port.
func quirkPortSession(t *testing.T, model, pair, quirks string) (*mock.Mock, *ctrlport.Port, *ctrlport.Session) {
	t.Helper()
	set, err := quirk.Parse(quirks)
	if err != nil {
		t.Fatal(err)
	}
	m, err := mock.Open(mock.Options{Model: model, Modem: modem.Config{RequireConnect: true}, Quirks: set})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	if err := m.Controller.PowerUp(); err != nil {
		t.Fatal(err)
	}
	p, err := ctrlport.Open(m.Controller, pair, ctrlport.Options{Link: filepath.Join(t.TempDir(), "wwan0port0")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	var client ctrlport.SessionClient
	if pair == "QMI" {
		client = ctrlport.NewQMISession(p.Pair())
	} else {
		client = ctrlport.NewMBIMSession(p.Pair())
	}
	s := ctrlport.NewSession(client, ctrlport.SessionOptions{})
	t.Cleanup(s.Close)
	return m, p, s
}

// TestQuirkFCCLockedMBIM: an FCC-locked modem refuses to switch its radio
// on; the connect fails saying so and what unlocks it. Once unlocked with
// Quectel's public procedure (what 'mbimcli --quectel-set-radio-state=on'
// sends), the session connects.
func TestQuirkFCCLockedMBIM(t *testing.T) {
	m, p, s := quirkPortSession(t, "telit-fn990", "MBIM", "fcc-locked")
	_, err := s.Connect(ctx(t), ctrlport.SessionRequest{APN: "internet"})
	if !errors.Is(err, ctrlport.ErrFCCLocked) || !errors.Is(err, ctrlport.ErrSessionRefused) ||
		!strings.Contains(err.Error(), "radio FCC-locked") || !strings.Contains(err.Error(), "unlock") {
		t.Fatalf("connect of an FCC-locked modem: %v", err)
	}
	t.Logf("FCC-locked: %v", err)
	if m.Modem.Radio() || m.Modem.Session().Active {
		t.Fatal("the locked modem's radio or session is on")
	}
	c := ctrlport.NewMBIMClient(p.Pair(), ctrlport.MBIMClientOptions{FirstTID: 0x100})
	defer c.Close()
	quectel := func(ct mbim.CommandType, info []byte) uint32 {
		t.Helper()
		st, out, err := c.Command(ctx(t), mbim.ServiceQuectel, mbim.CIDQuectelRadioState, ct, info)
		v, verr := out.U32(0)
		if err != nil || st != mbim.StatusSuccess || verr != nil {
			t.Fatalf("Quectel RADIO_STATE %s: %v %v %v", ct, st, err, verr)
		}
		return v
	}
	if v := quectel(mbim.CommandQuery, nil); v != mbim.QuectelRadioFCCLocked {
		t.Fatalf("Quectel radio state %d, want fcc-locked (4)", v)
	}
	if v := quectel(mbim.CommandSet, []byte{1, 0, 0, 0}); v != mbim.QuectelRadioOn || m.Modem.FCCLocked() {
		t.Fatalf("after the unlock: Quectel radio state %d, locked %v", v, m.Modem.FCCLocked())
	}
	if _, err := s.Connect(ctx(t), ctrlport.SessionRequest{APN: "internet"}); err != nil {
		t.Fatalf("connect after the unlock: %v", err)
	}
}

// TestQuirkFCCLockedQMI: QMI's DMS SET_OPERATING_MODE online fails with
// InvalidTransition on an FCC-locked modem, and a start-network meets a
// radio that is off.
func TestQuirkFCCLockedQMI(t *testing.T) {
	m, s := quirkSession(t, "telit-fn920c04", "QMI", "fcc-locked")
	if err := m.Modem.PowerRadio(true); !errors.Is(err, modem.ErrFCCLocked) {
		t.Fatalf("radio on: %v", err)
	}
	if _, err := s.Connect(ctx(t), ctrlport.SessionRequest{APN: "internet"}); !errors.Is(err, ctrlport.ErrSessionRefused) {
		t.Fatalf("connect: %v", err)
	}
}

// TestQuirkAutoconnectPDNMBIM: the modem's autoconnect holds the PDN, so
// the first CONNECT fails with CONTEXT_NOT_ACTIVATED; the session
// deactivates and connects on its second try.
func TestQuirkAutoconnectPDNMBIM(t *testing.T) {
	m, s := quirkSession(t, "telit-fn990", "MBIM", "autoconnect-pdn")
	if _, err := s.Connect(ctx(t), ctrlport.SessionRequest{APN: "internet"}); err != nil {
		t.Fatalf("connect: %v", err)
	}
	if st := m.Modem.Stats(); st.ConnectFail != 1 || st.Connects != 1 || m.Modem.PDNHeld() {
		t.Errorf("modem: %+v, PDN held %v; want one refused activation, then one session", st, m.Modem.PDNHeld())
	}
	if by := m.Functions.MBIM.Stats().ByStatus; by["ContextNotActivated"] != 1 {
		t.Errorf("MBIM statuses %v, want one ContextNotActivated", by)
	}
}

// TestQuirkAutoconnectPDNQMI: QMI's START_NETWORK fails with call-end
// reason 241 while the modem's autoconnect holds the PDN.
func TestQuirkAutoconnectPDNQMI(t *testing.T) {
	m, s := quirkSession(t, "telit-fn920c04", "QMI", "autoconnect-pdn")
	_, err := s.Connect(ctx(t), ctrlport.SessionRequest{APN: "internet"})
	if !errors.Is(err, ctrlport.ErrSessionRefused) || !strings.Contains(err.Error(), "241") {
		t.Fatalf("connect: %v, want a refusal naming call-end reason 241", err)
	}
	if !m.Modem.PDNHeld() {
		t.Fatal("the PDN was released")
	}
	m.Modem.ReleasePDN()
	if _, err := s.Connect(ctx(t), ctrlport.SessionRequest{APN: "internet"}); err != nil {
		t.Fatalf("connect after the release: %v", err)
	}
}

// TestQuirkCrashOnConnect: the first CONNECT crashes the modem (SYS_ERR);
// the host recovers it and the next connect succeeds.
func TestQuirkCrashOnConnect(t *testing.T) {
	m, s := quirkSession(t, "telit-fn990", "MBIM", "crash-on-connect")
	_, err := s.Connect(ctx(t), ctrlport.SessionRequest{APN: "internet"})
	if !errors.Is(err, ctrlport.ErrDeviceDown) {
		t.Fatalf("connect the modem crashed on: %v, want ErrDeviceDown", err)
	}
	t.Logf("connect during the crash: %v", err)
	waitFor(t, "the host to recover from the SYS_ERR", func() bool {
		st := m.Controller.Stats()
		return st.SysErrs >= 1 && st.Recoveries >= 1 && m.Controller.PMState() == "M0"
	})
	if _, err := s.Connect(ctx(t), ctrlport.SessionRequest{APN: "internet"}); err != nil {
		t.Fatalf("connect after the recovery: %v", err)
	}
	if st := m.Modem.Stats(); st.Restarts != 1 || st.Connects != 1 {
		t.Errorf("modem %+v, want one restart and one session", st)
	}
}

// TestQuirkCrashOnConnectQMI: the same over QMI: the START_NETWORK the
// modem crashes on fails at once, the next connect succeeds.
func TestQuirkCrashOnConnectQMI(t *testing.T) {
	m, s := quirkSession(t, "telit-fn920c04", "QMI", "crash-on-connect")
	start := time.Now()
	_, err := s.Connect(ctx(t), ctrlport.SessionRequest{APN: "internet"})
	if err == nil || !errors.Is(err, ctrlport.ErrDeviceDown) || time.Since(start) > 3*time.Second {
		t.Fatalf("connect during the crash: %v after %v, want ErrDeviceDown at once", err, time.Since(start))
	}
	waitFor(t, "the host to recover from the SYS_ERR", func() bool {
		st := m.Controller.Stats()
		return st.SysErrs >= 1 && st.Recoveries >= 1 && m.Controller.PMState() == "M0"
	})
	if _, err := s.Connect(ctx(t), ctrlport.SessionRequest{APN: "internet"}); err != nil {
		t.Fatalf("connect after the recovery: %v", err)
	}
}
