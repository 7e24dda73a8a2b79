package hostile_test

// Regression tests for the host-core findings of issue 11 (1, 3, 4, 5 in
// the numbering). They use only the API that existed before the
// fixes, so that each can be run against the unfixed code and seen to
// fail; the suite in attacks_test.go checks the same behaviour in more
// detail with the new API (counters, sentinels, RECOVERY_FAILED).

import (
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhi"
	"github.com/gomhi/gomhi/mhi/hostile"
	"github.com/gomhi/gomhi/mhi/testenv/poll"
	"github.com/gomhi/gomhi/mhi/wire"
)

// Finding 3: a device that raises SYS_ERR at every M0 must not get an
// unbounded stream of resets: recovery backs off and gives up, leaving the
// controller in RECOVERY_FAILED.
func TestFindingSysErrStormIsBounded(t *testing.T) {
	base := runtime.NumGoroutine()
	r := newScriptRig(t, hostile.DeviceConfig{}, mhi.Options{})
	mustPowerUp(t, r)
	r.dev.SetBehaviour(hostile.Behaviour{SysErrAtM0: true})
	r.dev.EnterSysErr()
	time.Sleep(time.Second)
	resets := r.dev.Stats().Resets
	pm := r.ctrl.Status().PM
	t.Logf("after 1 s: %d device resets, host state %s", resets, pm)
	if resets > 10 {
		t.Errorf("%d device resets within a second of a SYS_ERR storm, want at most 10", resets)
	}
	if pm != "RECOVERY_FAILED" {
		t.Errorf("host state %s, want RECOVERY_FAILED", pm)
	}
	// Left alone from then on.
	time.Sleep(100 * time.Millisecond)
	if later := r.dev.Stats().Resets; later != resets {
		t.Errorf("%d more resets in RECOVERY_FAILED", later-resets)
	}
	r.close(t)
	settleGoroutines(t, base)
}

// Finding 4: Channel.Queue must report a failed doorbell write.
func TestFindingQueueReportsDoorbellFailure(t *testing.T) {
	r := newScriptRig(t, hostile.DeviceConfig{}, mhi.Options{})
	defer r.close(t)
	mustPowerUp(t, r)
	ch, err := r.ctrl.Channel(hostile.LoopbackUL)
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Start(nil); err != nil {
		t.Fatal(err)
	}
	errDB := errors.New("doorbell write lost")
	r.h.SetHooks(hostile.Hooks{Write: func(off, v uint32) (bool, error) {
		if off >= hostile.CHDBOffset && off < hostile.ERDBOffset {
			return false, errDB
		}
		return true, nil
	}})
	b := r.buf(t, 64)
	err = ch.Queue([]mhi.Transfer{{IOVA: b.IOVA, Len: 64, Flags: mhi.FlagEOT}})
	if !errors.Is(err, errDB) {
		t.Fatalf("Queue with a failing doorbell write = %v, want the write's error", err)
	}
	if p := ch.Pending(); p != 1 {
		t.Fatalf("%d elements pending after the failed doorbell, want 1", p)
	}
	r.h.SetHooks(hostile.Hooks{})
}

// Finding 4: BHIOFF is checked before the host writes at BHIOFF+INTVEC; a
// BHIOFF of 0xFFFFFFF0 would wrap that write onto MHICFG (0x10).
func TestFindingBHIOFFCheckedBeforeUse(t *testing.T) {
	r := newScriptRig(t, hostile.DeviceConfig{}, mhi.Options{})
	defer r.close(t)
	r.dev.SetRegister(wire.RegBHIOFF, 0xFFFFFFF0)
	err := r.ctrl.PowerUp()
	for _, rec := range r.h.Log() {
		if rec.Op == hostile.OpWrite && rec.Off == wire.RegMHICFG {
			t.Errorf("the host wrote MHICFG through the wrapped BHIOFF: %v", rec)
		}
	}
	if !errors.Is(err, mhi.ErrBadDevice) {
		t.Fatalf("PowerUp = %v, want ErrBadDevice", err)
	}
}

// Finding 4: offsets are checked against the BAR the transport maps, not
// only the MHIREGLEN the device claims.
func TestFindingOffsetsCheckedAgainstBAR(t *testing.T) {
	r := newScriptRig(t, hostile.DeviceConfig{}, mhi.Options{})
	defer r.close(t)
	// The BAR is 4 KiB; the device claims 64 KiB and puts the channel
	// doorbells at 32 KiB.
	r.dev.SetRegister(wire.RegMHIREGLEN, 0x10000)
	r.dev.SetRegister(wire.RegCHDBOFF, 0x8000)
	if err := r.ctrl.PowerUp(); !errors.Is(err, mhi.ErrBadDevice) {
		t.Fatalf("PowerUp = %v, want ErrBadDevice", err)
	}
}

// Finding 4: RegDump follows BHIOFF only after checking it.
func TestFindingRegDumpChecksBHIOFF(t *testing.T) {
	r := newScriptRig(t, hostile.DeviceConfig{}, mhi.Options{})
	defer r.close(t)
	mustPowerUp(t, r)
	r.dev.SetRegister(wire.RegBHIOFF, 0xFFFFFF00)
	r.h.ClearLog()
	_, err := r.ctrl.RegDump()
	for _, rec := range r.h.Log() {
		if rec.Op == hostile.OpRead && rec.Off >= hostile.DefaultRegLen {
			t.Errorf("RegDump read 0x%x, beyond the register space", rec.Off)
		}
	}
	if !errors.Is(err, mhi.ErrBadDevice) {
		t.Fatalf("RegDump = %v, want ErrBadDevice", err)
	}
}

// Finding 5: a suspend the device never acknowledges must not leave the
// host in M3 for good.
func TestFindingUnacknowledgedSuspend(t *testing.T) {
	r := newScriptRig(t, hostile.DeviceConfig{}, mhi.Options{})
	defer r.close(t)
	mustPowerUp(t, r)
	r.dev.SetBehaviour(hostile.Behaviour{IgnoreM3: true})
	if err := r.ctrl.Suspend(); !errors.Is(err, mhi.ErrTimeout) {
		t.Fatalf("Suspend = %v, want ErrTimeout", err)
	}
	if pm := r.ctrl.Status().PM; pm != "M0" {
		t.Fatalf("host state %s after the unacknowledged suspend, want M0", pm)
	}
	sendUL(t, r, hostile.LoopbackUL)
}

// Finding 5: a bad event-ring read pointer left in place is counted once,
// not once per interrupt.
func TestFindingBadEventRingRPCountedOnce(t *testing.T) {
	r := newScriptRig(t, hostile.DeviceConfig{}, mhi.Options{})
	defer r.close(t)
	mustPowerUp(t, r)
	c, err := r.dev.Context(hostile.EventContext, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.dev.SetEventRP(0, c.RBase+c.RLen); err != nil {
		t.Fatal(err)
	}
	for range 20 {
		r.h.Raise(1)
		time.Sleep(time.Millisecond)
	}
	if n := r.ctrl.Stats().BadEventRingRP; n != 1 {
		t.Fatalf("bad_event_ring_rp = %d for one bad value seen on 20 interrupts, want 1", n)
	}
}

// Finding 5: a ring the device never repairs is treated as a device error
// and recovered (within the recovery limit), not ignored forever.
func TestFindingStuckBadEventRingRPRecovers(t *testing.T) {
	r := newScriptRig(t, hostile.DeviceConfig{}, mhi.Options{})
	defer r.close(t)
	mustPowerUp(t, r)
	c, err := r.dev.Context(hostile.EventContext, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.dev.SetEventRP(0, c.RBase+c.RLen); err != nil {
		t.Fatal(err)
	}
	for range 100 {
		r.h.Raise(1)
		time.Sleep(100 * time.Microsecond)
	}
	if !poll.Until(2*time.Second, func() bool { return r.ctrl.Stats().Recoveries >= 1 && r.ctrl.Status().PM == "M0" }) {
		t.Fatalf("no recovery from a read pointer stuck outside the ring: %+v", r.ctrl.Status().Stats)
	}
	sendUL(t, r, hostile.LoopbackUL)
}
