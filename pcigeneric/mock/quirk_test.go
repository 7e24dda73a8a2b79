package mock_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhi"
	"github.com/gomhi/gomhi/mhi/ep/quirk"
	"github.com/gomhi/gomhi/mhi/loopback"
	"github.com/gomhi/gomhi/pcigeneric/mock"
)

// openQuirky opens the embedded mock of model with the quirks named; the
// caller powers it up.
func openQuirky(t *testing.T, model, quirks string) *mock.Mock {
	t.Helper()
	set, err := quirk.Parse(quirks)
	if err != nil {
		t.Fatal(err)
	}
	m, err := mock.Open(mock.Options{Model: model, Quirks: set})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	return m
}

// loopbackRuns checks that the LOOPBACK pair still carries data.
func loopbackRuns(t *testing.T, ctrl *mhi.Controller) {
	t.Helper()
	lb, err := loopback.Open(ctrl, loopback.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer lb.Close()
	res, err := lb.Run(loopback.RunOptions{Count: 20, MinSize: 64, MaxSize: 1500})
	if err != nil || res.Received != 20 || res.Mismatched != 0 {
		t.Fatalf("loopback: %+v, %v", res, err)
	}
}

// TestQuirkNoM3: a device that ignores M3: the first suspend times out,
// is withdrawn with an error that says the device may have no M3 and
// auto-suspend is off, and the device keeps running in M0; the second
// makes the host take it as one without M3; later suspends and
// auto-suspend are refused at once.
func TestQuirkNoM3(t *testing.T) {
	m := openQuirky(t, "telit-fn990", "no-m3")
	ctrl := m.Controller
	if err := ctrl.PowerUp(); err != nil {
		t.Fatal(err)
	}
	if err := ctrl.SetTimeout(300 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if err := ctrl.SetAutoSuspend(time.Hour); err != nil {
		t.Fatal(err)
	}
	err := ctrl.Suspend()
	if !errors.Is(err, mhi.ErrTimeout) || errors.Is(err, mhi.ErrNoM3) || !strings.Contains(err.Error(), "may not support M3") {
		t.Fatalf("suspend of a device without M3: %v", err)
	}
	t.Logf("first suspend: %v", err)
	if a := ctrl.AutoSuspend(); a != 0 {
		t.Errorf("auto-suspend %v after an ignored M3, want off", a)
	}
	loopbackRuns(t, ctrl)
	err = ctrl.Suspend()
	if !errors.Is(err, mhi.ErrTimeout) || !errors.Is(err, mhi.ErrNoM3) || !strings.Contains(err.Error(), "back in M0") {
		t.Fatalf("second suspend: %v", err)
	}
	t.Logf("second suspend: %v", err)
	if pm := ctrl.PMState(); pm != "M0" {
		t.Fatalf("host in %s after the refused suspend, want M0", pm)
	}
	loopbackRuns(t, ctrl)
	start := time.Now()
	if err := ctrl.Suspend(); !errors.Is(err, mhi.ErrNoM3) || time.Since(start) > 100*time.Millisecond {
		t.Fatalf("second suspend: %v after %v, want ErrNoM3 at once", err, time.Since(start))
	}
	if err := ctrl.SetAutoSuspend(time.Second); !errors.Is(err, mhi.ErrNoM3) {
		t.Fatalf("autosuspend: %v", err)
	}
	if st := ctrl.Stats(); st.SuspendsRefused != 1 || st.Suspends != 0 {
		t.Errorf("suspends %d, refused %d; want 0, 1", st.Suspends, st.SuspendsRefused)
	}
	if ds := m.Transport.Device().Stats(); ds.M3Refused != 2 || ds.M3Entries != 0 {
		t.Errorf("device: M3 refused %d, entered %d; want 2, 0", ds.M3Refused, ds.M3Entries)
	}
	loopbackRuns(t, ctrl)
}

// TestQuirkNoM3Table: the QDU100's table entry says no_m3, as Linux's:
// the host never asks it for M3.
func TestQuirkNoM3Table(t *testing.T) {
	m := openQuirky(t, "qcom-qdu100", "no-m3")
	if err := m.Controller.PowerUp(); err != nil {
		t.Fatal(err)
	}
	if err := m.Controller.Suspend(); !errors.Is(err, mhi.ErrNoM3) || errors.Is(err, mhi.ErrTimeout) {
		t.Fatalf("suspend: %v, want ErrNoM3 without asking the device", err)
	}
	if ds := m.Transport.Device().Stats(); ds.M3Refused != 0 {
		t.Errorf("the device was asked for M3 %d times", ds.M3Refused)
	}
}

// TestQuirkSlowReady: a modem slow to become READY is waited for within
// the ready timeout (and counted); with a shorter one the host gives up
// saying what it waited for and how to wait longer.
func TestQuirkSlowReady(t *testing.T) {
	// The delay runs from the modem's start, inside openQuirky: measure
	// from before it, so that a slow open cannot look like an early READY.
	start := time.Now()
	m := openQuirky(t, "telit-fn990", "slow-ready=2500ms")
	if err := m.Controller.PowerUp(); err != nil {
		t.Fatalf("power-up of a slow modem within the 20 s timeout: %v", err)
	}
	if d := time.Since(start); d < 2500*time.Millisecond {
		t.Errorf("up after %v, before the modem was READY", d)
	}
	if st := m.Controller.Stats(); st.SlowReadies != 1 {
		t.Errorf("slow_readies %d, want 1", st.SlowReadies)
	}

	m = openQuirky(t, "telit-fn990", "slow-ready=5s")
	if err := m.Controller.SetReadyTimeout(time.Second); err != nil {
		t.Fatal(err)
	}
	err := m.Controller.PowerUp()
	if !errors.Is(err, mhi.ErrTimeout) || !strings.Contains(err.Error(), "not READY") || !strings.Contains(err.Error(), "ready timeout 1s") {
		t.Fatalf("power-up with a 1 s ready timeout: %v", err)
	}
	t.Logf("gave up: %v", err)
}
