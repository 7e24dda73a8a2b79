package hostile_test

import (
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhi"
	"github.com/gomhi/gomhi/mhi/hostile"
	"github.com/gomhi/gomhi/mhi/testenv/poll"
	"github.com/gomhi/gomhi/mhi/wire"
)

// attackBudget bounds the time of one attack, power-down included.
const attackBudget = 3 * time.Second

// attack is one malicious-device scenario of the suite. docs/RELIABILITY.md
// lists them with what the host does and what it counts.
type attack struct {
	name string
	dev  hostile.DeviceConfig // the device (default: honest)
	opts mhi.Options
	run  func(t *testing.T, r *scriptRig)
}

// runAttacks runs each attack as a subtest on a fresh rig: the attack's
// own assertions, then a bounded power-down, no use of freed memory, no
// DMA memory left allocated, the device out of M0, no goroutine left.
func runAttacks(t *testing.T, attacks []attack) {
	seen := map[string]bool{}
	for _, a := range attacks {
		if seen[a.name] {
			t.Fatalf("attack %q listed twice", a.name)
		}
		seen[a.name] = true
		t.Run(a.name, func(t *testing.T) {
			base := runtime.NumGoroutine()
			start := time.Now()
			r := newScriptRig(t, a.dev, a.opts)
			func() {
				defer func() {
					if t.Failed() {
						t.Logf("host stats: %+v", r.ctrl.Stats())
						t.Logf("device stats: %+v", r.dev.Stats())
					}
				}()
				a.run(t, r)
			}()
			r.close(t)
			if d := time.Since(start); d > attackBudget {
				t.Errorf("attack took %v, budget %v", d, attackBudget)
			}
			settleGoroutines(t, base)
		})
	}
}

// powerUpFails expects PowerUp to fail with want, the host back in
// DISABLED, and counter (when given) above zero.
func powerUpFails(want error, counter func(mhi.ControllerStatsSnapshot) uint64) func(*testing.T, *scriptRig) {
	return func(t *testing.T, r *scriptRig) {
		start := time.Now()
		err := r.ctrl.PowerUp()
		t.Logf("PowerUp after %v: %v", time.Since(start), err)
		if !errors.Is(err, want) {
			t.Fatalf("PowerUp = %v, want %v", err, want)
		}
		if pm := r.ctrl.PMState(); pm != "DISABLED" {
			t.Errorf("host state %s after a failed power-up, want DISABLED", pm)
		}
		if counter != nil && counter(r.ctrl.Stats()) == 0 {
			t.Errorf("failure not counted: %+v", r.ctrl.Stats())
		}
	}
}

func badRegister(s mhi.ControllerStatsSnapshot) uint64 { return s.BadRegister }

// pinAfter returns a step pinning register off of the device to v.
func pinAfter(off, v uint32) func(*testing.T, *scriptRig) {
	return func(t *testing.T, r *scriptRig) { r.dev.SetRegister(off, v) }
}

// seq runs steps in order.
func seq(steps ...func(*testing.T, *scriptRig)) func(*testing.T, *scriptRig) {
	return func(t *testing.T, r *scriptRig) {
		for _, s := range steps {
			s(t, r)
			if t.Failed() {
				return
			}
		}
	}
}

// startDL starts downlink channel num with a tracker and queues n buffers
// of size bytes (cookies 0..n-1).
func startDL(t *testing.T, r *scriptRig, num uint8, n, size int) (*mhi.Channel, *tracker, []mhi.DMABuffer) {
	t.Helper()
	ch, err := r.ctrl.Channel(num)
	if err != nil {
		t.Fatal(err)
	}
	k := newTracker()
	if err := ch.Start(k.handle); err != nil {
		t.Fatalf("start channel %d: %v", num, err)
	}
	var bufs []mhi.DMABuffer
	xs := make([]mhi.Transfer, n)
	for i := range xs {
		b := r.buf(t, size)
		bufs = append(bufs, b)
		xs[i] = mhi.Transfer{IOVA: b.IOVA, Len: size, Flags: mhi.FlagEOT, Cookie: uint64(i)}
		k.queue(uint64(i))
	}
	if err := ch.Queue(xs); err != nil {
		t.Fatalf("queue on channel %d: %v", num, err)
	}
	return ch, k, bufs
}

// treIOVA returns the IOVA of element i of channel num's transfer ring.
func treIOVA(t *testing.T, r *scriptRig, num uint8, i int) uint64 {
	t.Helper()
	ch, err := r.ctrl.Channel(num)
	if err != nil {
		t.Fatal(err)
	}
	return ch.Status().RingBase + uint64(i)*wire.ElementSize
}

// expectCounter waits up to a second for counter to reach want.
func expectCounter(t *testing.T, r *scriptRig, what string, want uint64, counter func(mhi.ControllerStatsSnapshot) uint64) {
	t.Helper()
	if !poll.Until(time.Second, func() bool { return counter(r.ctrl.Stats()) >= want }) {
		t.Fatalf("%s = %d, want %d", what, counter(r.ctrl.Stats()), want)
	}
}

// stillM0 checks the host is in M0 and its data path works.
func stillM0(t *testing.T, r *scriptRig) {
	t.Helper()
	if pm := r.ctrl.PMState(); pm != "M0" {
		t.Fatalf("host state %s, want M0", pm)
	}
	sendUL(t, r, hostile.LoopbackUL)
}

// noCompletion checks that a tracker got no completion within 50 ms.
func noCompletion(t *testing.T, k *tracker) {
	t.Helper()
	time.Sleep(50 * time.Millisecond)
	if c := k.completions(); len(c) != 0 {
		t.Fatalf("completions delivered for a bad event: %+v", c)
	}
	k.check(t)
}

// eventRing returns the IOVA and length of event ring i.
func eventRing(t *testing.T, r *scriptRig, i int) (base, length uint64) {
	t.Helper()
	c, err := r.dev.Context(hostile.EventContext, i)
	if err != nil {
		t.Fatal(err)
	}
	return c.RBase, c.RLen
}

// TestMaliciousDevice is the malicious-device suite on the scripted device.
func TestMaliciousDevice(t *testing.T) {
	runAttacks(t, []attack{
		// --- bring-up: the device never gets there, or lies on the way ---
		{name: "never-ready", dev: hostile.DeviceConfig{Behaviour: hostile.Behaviour{NeverReady: true}},
			run: powerUpFails(mhi.ErrTimeout, nil)},
		{name: "reset-never-completes", dev: hostile.DeviceConfig{Behaviour: hostile.Behaviour{ResetStuck: true}},
			run: func(t *testing.T, r *scriptRig) {
				r.dev.EnterSysErr() // the host must reset a device found in SYS_ERR
				powerUpFails(mhi.ErrTimeout, nil)(t, r)
				// The final MHI reset failed too: the host fell back on a
				// function-level reset before freeing its memory.
				flr := false
				for _, rec := range r.h.Log() {
					flr = flr || rec.Op == hostile.OpReset
				}
				if !flr {
					t.Errorf("no function-level reset after the MHI reset failed")
				}
			}},
		{name: "never-enters-m0", dev: hostile.DeviceConfig{Behaviour: hostile.Behaviour{IgnoreM0: true}},
			run: powerUpFails(mhi.ErrTimeout, nil)},
		{name: "no-mission-mode-event", dev: hostile.DeviceConfig{Behaviour: hostile.Behaviour{NoEEEvent: true}},
			run: powerUpFails(mhi.ErrTimeout, nil)},
		{name: "execenv-pbl", run: seq(pinAfter(hostile.BHIOffset+wire.BHIExecEnv, uint32(wire.EEPBL)),
			powerUpFails(mhi.ErrWrongState, nil))},
		{name: "execenv-garbage", run: seq(pinAfter(hostile.BHIOffset+wire.BHIExecEnv, 0xDEADBEEF),
			powerUpFails(mhi.ErrWrongState, nil))},
		{name: "execenv-not-mission-mode-after-m0", run: seq(pinAfter(hostile.BHIOffset+wire.BHIExecEnv, uint32(wire.EEPTHRU)),
			powerUpFails(mhi.ErrBadDevice, badRegister))},
		{name: "mhireglen-too-small", run: seq(pinAfter(wire.RegMHIREGLEN, 0x10),
			powerUpFails(mhi.ErrBadDevice, badRegister))},
		{name: "mhireglen-beyond-bar", run: seq(pinAfter(wire.RegMHIREGLEN, 0x10000), pinAfter(wire.RegCHDBOFF, 0x8000),
			powerUpFails(mhi.ErrBadDevice, badRegister))},
		{name: "chdboff-no-room-for-doorbells", run: seq(pinAfter(wire.RegCHDBOFF, 0xE00),
			powerUpFails(mhi.ErrBadDevice, badRegister))},
		{name: "chdboff-wraps", run: seq(pinAfter(wire.RegCHDBOFF, 0xFFFFFF00),
			powerUpFails(mhi.ErrBadDevice, badRegister))},
		{name: "chdboff-misaligned", run: seq(pinAfter(wire.RegCHDBOFF, 0x402),
			powerUpFails(mhi.ErrBadDevice, badRegister))},
		{name: "chdboff-on-control-registers", run: seq(pinAfter(wire.RegCHDBOFF, 0x30),
			powerUpFails(mhi.ErrBadDevice, badRegister))},
		{name: "erdboff-wraps", run: seq(pinAfter(wire.RegERDBOFF, 0xFFFFFFF8),
			powerUpFails(mhi.ErrBadDevice, badRegister))},
		{name: "bhioff-wraps-onto-mhicfg", run: func(t *testing.T, r *scriptRig) {
			// BHIOFF+INTVEC (0x20) wraps to 0x10, MHICFG.
			r.dev.SetRegister(wire.RegBHIOFF, 0xFFFFFFF0)
			powerUpFails(mhi.ErrBadDevice, badRegister)(t, r)
			for _, rec := range r.h.Log() {
				if rec.Op == hostile.OpWrite && rec.Off == wire.RegMHICFG {
					t.Fatalf("the host wrote MHICFG through the wrapped BHIOFF: %v", rec)
				}
			}
		}},
		{name: "bhioff-block-past-reglen", run: seq(pinAfter(wire.RegBHIOFF, 0xF80),
			powerUpFails(mhi.ErrBadDevice, badRegister))},
		{name: "bhieoff-garbage", run: func(t *testing.T, r *scriptRig) {
			r.dev.SetRegister(wire.RegBHIEOFF, 0xFFFFFFFF)
			mustPowerUp(t, r) // BHIe is not used: counted, not fatal
			if n := r.ctrl.Stats().BadRegister; n != 1 {
				t.Fatalf("bad_register = %d, want 1", n)
			}
			stillM0(t, r)
		}},
		{name: "register-reads-fail", run: func(t *testing.T, r *scriptRig) {
			errDead := errors.New("link down")
			r.h.SetHooks(hostile.Hooks{Read: func(off, v uint32, err error) (uint32, error) {
				if off == wire.RegMHISTATUS {
					return 0xFFFFFFFF, errDead
				}
				return v, err
			}})
			powerUpFails(errDead, nil)(t, r)
		}},
		{name: "register-reads-fail-after-power-up", run: func(t *testing.T, r *scriptRig) {
			mustPowerUp(t, r)
			errDead := errors.New("link down")
			r.h.SetHooks(hostile.Hooks{Read: func(off, v uint32, err error) (uint32, error) { return 0xFFFFFFFF, errDead }})
			for range 100 {
				r.h.Raise(0) // the BHI vector makes the host read MHISTATUS
			}
			if _, err := r.ctrl.RegDump(); !errors.Is(err, errDead) {
				t.Errorf("RegDump = %v, want the transport's error", err)
			}
			if _, err := r.ctrl.ReadBHI(); !errors.Is(err, errDead) {
				t.Errorf("ReadBHI = %v, want the transport's error", err)
			}
			// Reads that fail are a device off the bus: the health check
			// (every 2 s) may have noticed it meanwhile.
			if pm := r.ctrl.PMState(); pm != "M0" && pm != mhi.PMLinkDown {
				t.Errorf("host state %s", pm)
			}
			r.h.SetHooks(hostile.Hooks{})
		}},
		{name: "regdump-bhioff-lie", run: func(t *testing.T, r *scriptRig) {
			mustPowerUp(t, r)
			r.dev.SetRegister(wire.RegBHIOFF, 0xFFFFFF00)
			r.h.ClearLog()
			regs, err := r.ctrl.RegDump()
			if !errors.Is(err, mhi.ErrBadDevice) || len(regs) != len(wire.MHIRegisters) {
				t.Fatalf("RegDump = %d registers, %v; want the %d MHI registers and ErrBadDevice", len(regs), err, len(wire.MHIRegisters))
			}
			if _, err := r.ctrl.ReadBHI(); !errors.Is(err, mhi.ErrBadDevice) {
				t.Fatalf("ReadBHI = %v, want ErrBadDevice", err)
			}
			for _, rec := range r.h.Log() {
				if rec.Op == hostile.OpRead && rec.Off >= hostile.DefaultRegLen {
					t.Fatalf("read beyond the register space: %v", rec)
				}
			}
		}},

		// --- doorbells ---
		{name: "doorbell-write-fails", run: func(t *testing.T, r *scriptRig) {
			mustPowerUp(t, r)
			ch, err := r.ctrl.Channel(hostile.LoopbackUL)
			if err != nil {
				t.Fatal(err)
			}
			k := newTracker()
			if err := ch.Start(k.handle); err != nil {
				t.Fatal(err)
			}
			errDB := errors.New("doorbell write lost")
			db := uint32(hostile.CHDBOffset + wire.DoorbellStride*hostile.LoopbackUL)
			r.h.SetHooks(hostile.Hooks{Write: func(off, v uint32) (bool, error) {
				if off == db || off == db+4 {
					return false, errDB
				}
				return true, nil
			}})
			b := r.buf(t, 64)
			k.queue(1, 2)
			err = ch.Queue([]mhi.Transfer{{IOVA: b.IOVA, Len: 64, Flags: mhi.FlagEOT, Cookie: 1}, {IOVA: b.IOVA, Len: 32, Flags: mhi.FlagEOT, Cookie: 2}})
			if !errors.Is(err, mhi.ErrDoorbell) || !errors.Is(err, errDB) {
				t.Fatalf("Queue with a failing doorbell = %v, want ErrDoorbell wrapping the transport's error", err)
			}
			if p := ch.Pending(); p != 2 {
				t.Fatalf("%d elements pending, want 2 (they stay queued)", p)
			}
			if n := r.ctrl.Stats().DoorbellErrors; n != 1 {
				t.Fatalf("doorbell_errors = %d, want 1", n)
			}
			if n := ch.Stats().DoorbellErrors.Load(); n != 1 {
				t.Fatalf("channel doorbell errors = %d, want 1", n)
			}
			r.h.SetHooks(hostile.Hooks{})
			if err := ch.Kick(); err != nil {
				t.Fatalf("Kick: %v", err)
			}
			if !poll.Until(time.Second, func() bool { return len(k.completions()) == 2 }) {
				t.Fatalf("completions after Kick: %+v", k.completions())
			}
			k.check(t)
		}},

		// --- event ring read pointer ---
		{name: "event-rp-outside-ring", run: func(t *testing.T, r *scriptRig) {
			mustPowerUp(t, r)
			base, length := eventRing(t, r, 0)
			if err := r.dev.SetEventRP(0, base+length); err != nil {
				t.Fatal(err)
			}
			for range 16 { // fewer looks than BadEventRingRPLimit, polls included
				r.h.Raise(1)
				time.Sleep(100 * time.Microsecond)
			}
			time.Sleep(5 * time.Millisecond)
			s := r.ctrl.Stats()
			if s.BadEventRingRP != 1 {
				t.Fatalf("bad_event_ring_rp = %d after one bad value seen %d times, want 1", s.BadEventRingRP, s.Interrupts)
			}
			if s.DeviceErrorRecoveries != 0 {
				t.Fatalf("recovery after %d looks, limit %d", s.Interrupts, mhi.BadEventRingRPLimit)
			}
			// The device never repairs it: after BadEventRingRPLimit looks
			// the host recovers the device, which here then behaves.
			for range mhi.BadEventRingRPLimit {
				r.h.Raise(1)
			}
			expectCounter(t, r, "device_error_recoveries", 1, func(s mhi.ControllerStatsSnapshot) uint64 { return s.DeviceErrorRecoveries })
			expectCounter(t, r, "recoveries", 1, func(s mhi.ControllerStatsSnapshot) uint64 { return s.Recoveries })
			stillM0(t, r)
		}},
		{name: "event-rp-misaligned-and-changing", run: func(t *testing.T, r *scriptRig) {
			mustPowerUp(t, r)
			base, length := eventRing(t, r, 0)
			for i, rp := range []uint64{base + 8, base + 24, base - 16} {
				if err := r.dev.SetEventRP(0, rp); err != nil {
					t.Fatal(err)
				}
				expectCounter(t, r, "bad_event_ring_rp", uint64(i+1), func(s mhi.ControllerStatsSnapshot) uint64 { return s.BadEventRingRP })
				for range 5 { // the same bad value again: not counted again
					r.h.Raise(1)
				}
				time.Sleep(5 * time.Millisecond)
				if n := r.ctrl.Stats().BadEventRingRP; n != uint64(i+1) {
					t.Fatalf("bad_event_ring_rp = %d after %d distinct bad values", n, i+1)
				}
			}
			// The device repairs the pointer: back to normal.
			if err := r.dev.SetEventRP(0, base); err != nil {
				t.Fatal(err)
			}
			// Moved back to base, the read pointer leaves the device one
			// free slot until the host has consumed the ring up to it and
			// handed the slots back (its write pointer just behind base);
			// this scripted device drops an event that finds the ring
			// full instead of waiting, so wait for the host first.
			var c wire.Context
			if !poll.Until(5*time.Second, func() bool {
				var err error
				if c, err = r.dev.Context(hostile.EventContext, 0); err != nil {
					t.Fatal(err)
				}
				return c.WP == base+length-wire.ElementSize
			}) {
				t.Fatalf("the host did not consume the repaired ring: wp 0x%x, want 0x%x", c.WP, base+length-wire.ElementSize)
			}
			stillM0(t, r)
		}},

		// --- transfer events ---
		{name: "event-unknown-channel", run: func(t *testing.T, r *scriptRig) {
			mustPowerUp(t, r)
			_, k, _ := startDL(t, r, hostile.LoopbackDL, 2, 256)
			if err := r.dev.Post(0, wire.TransferEvent(treIOVA(t, r, hostile.LoopbackDL, 0), wire.CCEOT, 10, 77)); err != nil {
				t.Fatal(err)
			}
			expectCounter(t, r, "unknown_channel", 1, func(s mhi.ControllerStatsSnapshot) uint64 { return s.UnknownChannel })
			noCompletion(t, k)
		}},
		{name: "event-on-wrong-ring", run: func(t *testing.T, r *scriptRig) {
			mustPowerUp(t, r)
			_, k, _ := startDL(t, r, hostile.DataDL, 2, 256) // completions belong on ring 1
			if err := r.dev.Post(0, wire.TransferEvent(treIOVA(t, r, hostile.DataDL, 0), wire.CCEOT, 10, hostile.DataDL)); err != nil {
				t.Fatal(err)
			}
			expectCounter(t, r, "unknown_channel", 1, func(s mhi.ControllerStatsSnapshot) uint64 { return s.UnknownChannel })
			noCompletion(t, k)
		}},
		{name: "event-names-unqueued-element", run: func(t *testing.T, r *scriptRig) {
			mustPowerUp(t, r)
			_, k, _ := startDL(t, r, hostile.LoopbackDL, 2, 256)
			if err := r.dev.Post(0, wire.TransferEvent(treIOVA(t, r, hostile.LoopbackDL, 5), wire.CCEOT, 10, hostile.LoopbackDL)); err != nil {
				t.Fatal(err)
			}
			expectCounter(t, r, "bad_event_ptr", 1, func(s mhi.ControllerStatsSnapshot) uint64 { return s.BadEventPtr })
			noCompletion(t, k)
		}},
		{name: "event-pointer-outside-ring", run: func(t *testing.T, r *scriptRig) {
			mustPowerUp(t, r)
			_, k, _ := startDL(t, r, hostile.LoopbackDL, 2, 256)
			if err := r.dev.Post(0, wire.TransferEvent(treIOVA(t, r, hostile.LoopbackDL, 16), wire.CCEOT, 10, hostile.LoopbackDL),
				wire.TransferEvent(0, wire.CCEOT, 10, hostile.LoopbackDL),
				wire.TransferEvent(^uint64(0)-7, wire.CCEOT, 10, hostile.LoopbackDL)); err != nil {
				t.Fatal(err)
			}
			expectCounter(t, r, "bad_event_ptr", 3, func(s mhi.ControllerStatsSnapshot) uint64 { return s.BadEventPtr })
			noCompletion(t, k)
		}},
		{name: "event-pointer-misaligned", run: func(t *testing.T, r *scriptRig) {
			mustPowerUp(t, r)
			_, k, _ := startDL(t, r, hostile.LoopbackDL, 2, 256)
			if err := r.dev.Post(0, wire.TransferEvent(treIOVA(t, r, hostile.LoopbackDL, 0)+4, wire.CCEOT, 10, hostile.LoopbackDL)); err != nil {
				t.Fatal(err)
			}
			expectCounter(t, r, "bad_event_ptr", 1, func(s mhi.ControllerStatsSnapshot) uint64 { return s.BadEventPtr })
			noCompletion(t, k)
		}},
		{name: "event-length-beyond-buffer", run: func(t *testing.T, r *scriptRig) {
			mustPowerUp(t, r)
			_, k, _ := startDL(t, r, hostile.LoopbackDL, 2, 256)
			r.dev.SetBehaviour(hostile.Behaviour{Event: func(_ int, ev *wire.Element) bool {
				if ev.Type() == wire.PktTxEvent {
					ev.Dword0 |= 0xFFFF
				}
				return true
			}})
			if _, err := r.dev.CompleteDL(hostile.LoopbackDL, make([]byte, 100), wire.CCEOT); err != nil {
				t.Fatal(err)
			}
			if !poll.Until(time.Second, func() bool { return len(k.completions()) == 1 }) {
				t.Fatal("no completion")
			}
			if c := k.completions()[0]; c.Len != 256 || c.Cookie != 0 {
				t.Fatalf("completion %+v, want the length clamped to the 256-byte buffer", c)
			}
			if n := r.ctrl.Stats().LengthClamped; n != 1 {
				t.Fatalf("length_clamped = %d", n)
			}
			k.check(t)
		}},
		{name: "event-bogus-completion-code", run: func(t *testing.T, r *scriptRig) {
			mustPowerUp(t, r)
			_, k, _ := startDL(t, r, hostile.LoopbackDL, 2, 256)
			if _, err := r.dev.CompleteDL(hostile.LoopbackDL, []byte("x"), 0x7F); err != nil {
				t.Fatal(err)
			}
			expectCounter(t, r, "bad_code", 1, func(s mhi.ControllerStatsSnapshot) uint64 { return s.BadCode })
			noCompletion(t, k)
		}},
		{name: "event-bad-tre-code", run: func(t *testing.T, r *scriptRig) {
			mustPowerUp(t, r)
			_, k, _ := startDL(t, r, hostile.LoopbackDL, 2, 256)
			if _, err := r.dev.CompleteDL(hostile.LoopbackDL, []byte("x"), wire.CCBadTRE); err != nil {
				t.Fatal(err)
			}
			if !poll.Until(time.Second, func() bool { return len(k.completions()) == 1 }) {
				t.Fatal("no completion")
			}
			if c := k.completions()[0]; !errors.Is(c.Err, mhi.ErrBadDevice) || c.Len != 0 {
				t.Fatalf("completion %+v, want ErrBadDevice and no data", c)
			}
			k.check(t)
		}},
		{name: "event-unknown-type", run: func(t *testing.T, r *scriptRig) {
			mustPowerUp(t, r)
			if err := r.dev.Post(0, wire.Element{Ptr: 0xdead, Dword0: 0xffffffff, Dword1: 0x99 << 16}, wire.Element{}); err != nil {
				t.Fatal(err)
			}
			expectCounter(t, r, "unknown_event", 2, func(s mhi.ControllerStatsSnapshot) uint64 { return s.UnknownEvent })
			stillM0(t, r)
		}},
		{name: "event-completes-element-twice", run: func(t *testing.T, r *scriptRig) {
			mustPowerUp(t, r)
			_, k, _ := startDL(t, r, hostile.LoopbackDL, 2, 256)
			at, err := r.dev.CompleteDL(hostile.LoopbackDL, []byte("once"), wire.CCEOT)
			if err != nil {
				t.Fatal(err)
			}
			if err := r.dev.Post(0, wire.TransferEvent(at, wire.CCEOT, 4, hostile.LoopbackDL)); err != nil {
				t.Fatal(err)
			}
			expectCounter(t, r, "bad_event_ptr", 1, func(s mhi.ControllerStatsSnapshot) uint64 { return s.BadEventPtr })
			if c := k.completions(); len(c) != 1 || c[0].Cookie != 0 || c[0].Len != 4 {
				t.Fatalf("completions %+v, want exactly one for cookie 0", c)
			}
			k.check(t)
		}},
		{name: "event-after-channel-reset", run: func(t *testing.T, r *scriptRig) {
			mustPowerUp(t, r)
			ch, k, _ := startDL(t, r, hostile.LoopbackDL, 2, 256)
			if err := ch.Reset(); err != nil {
				t.Fatal(err)
			}
			if err := r.dev.Post(0, wire.TransferEvent(treIOVA(t, r, hostile.LoopbackDL, 0), wire.CCEOT, 10, hostile.LoopbackDL)); err != nil {
				t.Fatal(err)
			}
			expectCounter(t, r, "stale_completion", 1, func(s mhi.ControllerStatsSnapshot) uint64 { return s.StaleCompletion })
			time.Sleep(20 * time.Millisecond)
			if c := k.completions(); len(c) != 0 {
				t.Fatalf("completions after reset: %+v", c)
			}
			k.check(t)
		}},
		{name: "event-storm", run: func(t *testing.T, r *scriptRig) {
			mustPowerUp(t, r)
			const storm = 5000
			start := time.Now()
			for posted := 0; posted < storm; {
				if err := r.dev.Post(0, wire.StateChangeEvent(wire.StateM0)); err != nil {
					time.Sleep(50 * time.Microsecond) // ring full: the host drains it
					if time.Since(start) > 2*time.Second {
						t.Fatalf("the host stopped draining after %d events: %v", posted, err)
					}
					continue
				}
				posted++
			}
			expectCounter(t, r, "state_changes", storm, func(s mhi.ControllerStatsSnapshot) uint64 { return s.StateChanges })
			t.Logf("%d events in %v", storm, time.Since(start))
			stillM0(t, r)
		}},
		{name: "interrupt-storm", run: func(t *testing.T, r *scriptRig) {
			mustPowerUp(t, r)
			start := time.Now()
			for i := range 30000 {
				r.h.Raise(i % 3)
			}
			t.Logf("30000 interrupts in %v", time.Since(start))
			if n := r.ctrl.Stats().Interrupts; n < 30000 {
				t.Fatalf("interrupts = %d", n)
			}
			stillM0(t, r)
		}},

		// --- state and EE events ---
		{name: "state-events-out-of-order", run: func(t *testing.T, r *scriptRig) {
			mustPowerUp(t, r)
			if err := r.dev.Post(0, wire.StateChangeEvent(wire.StateReady), wire.StateChangeEvent(wire.StateM3),
				wire.StateChangeEvent(wire.StateReset), wire.StateChangeEvent(0x42), wire.StateChangeEvent(wire.StateM0)); err != nil {
				t.Fatal(err)
			}
			expectCounter(t, r, "state_changes", 6, func(s mhi.ControllerStatsSnapshot) uint64 { return s.StateChanges })
			stillM0(t, r)
		}},
		{name: "ee-event-lies", run: func(t *testing.T, r *scriptRig) {
			mustPowerUp(t, r)
			if err := r.dev.Post(0, wire.EEEvent(wire.EEPBL), wire.EEEvent(0x77), wire.EEEvent(wire.EEAMSS)); err != nil {
				t.Fatal(err)
			}
			if !poll.Until(time.Second, func() bool {
				n := 0
				for _, ev := range r.statusEvents() {
					if ev.Kind == mhi.StatusEE {
						n++
					}
				}
				return n >= 3
			}) {
				t.Fatalf("status events %+v, want three EE changes", r.statusEvents())
			}
			stillM0(t, r)
		}},

		// --- command ring ---
		{name: "command-completion-never-sent", run: func(t *testing.T, r *scriptRig) {
			mustPowerUp(t, r)
			c, err := r.dev.Context(hostile.CommandContext, 0)
			if err != nil {
				t.Fatal(err)
			}
			if err := r.dev.Post(0, wire.CommandCompletionEvent(c.RBase+3*wire.ElementSize, wire.CCSuccess),
				wire.CommandCompletionEvent(c.RBase+c.RLen, wire.CCSuccess)); err != nil {
				t.Fatal(err)
			}
			expectCounter(t, r, "stale_completion", 1, func(s mhi.ControllerStatsSnapshot) uint64 { return s.StaleCompletion })
			expectCounter(t, r, "bad_event_ptr", 1, func(s mhi.ControllerStatsSnapshot) uint64 { return s.BadEventPtr })
			stillM0(t, r)
		}},
		{name: "command-never-answered", run: func(t *testing.T, r *scriptRig) {
			mustPowerUp(t, r)
			r.dev.SetBehaviour(hostile.Behaviour{IgnoreCommands: true})
			ch, _ := r.ctrl.Channel(hostile.LoopbackUL)
			start := time.Now()
			if err := ch.Start(nil); !errors.Is(err, mhi.ErrTimeout) {
				t.Fatalf("Start = %v, want ErrTimeout", err)
			}
			t.Logf("timed out after %v", time.Since(start))
			r.dev.SetBehaviour(hostile.Behaviour{})
			// The device answers the old command late: a stale completion.
			stillM0(t, r)
			if n := r.ctrl.Stats().StaleCompletion; n != 1 {
				t.Fatalf("stale_completion = %d, want 1 (the late answer)", n)
			}
		}},
		{name: "command-fails", run: func(t *testing.T, r *scriptRig) {
			mustPowerUp(t, r)
			r.dev.SetBehaviour(hostile.Behaviour{CommandCode: wire.CCUndefinedErr})
			ch, _ := r.ctrl.Channel(hostile.LoopbackUL)
			if err := ch.Start(nil); !errors.Is(err, mhi.ErrCommandFailed) {
				t.Fatalf("Start = %v, want ErrCommandFailed", err)
			}
		}},

		// --- contexts in host memory ---
		{name: "context-tampered", run: func(t *testing.T, r *scriptRig) {
			mustPowerUp(t, r)
			ch, _, _ := startDL(t, r, hostile.LoopbackDL, 2, 256)
			want := ch.Status().RingBase
			a, err := r.dev.ContextAddr(hostile.ChannelContext, hostile.LoopbackDL)
			if err != nil {
				t.Fatal(err)
			}
			junk := make([]byte, wire.ContextSize)
			for i := range junk {
				junk[i] = 0xEE
			}
			if err := r.dev.WriteHost(a, junk); err != nil {
				t.Fatal(err)
			}
			// The host never trusts what it wrote into a context: its ring
			// is its own bookkeeping.
			if got := ch.Status().RingBase; got != want {
				t.Fatalf("ring base %x after the context was overwritten, want %x", got, want)
			}
			stillM0(t, r)
		}},

		// --- SYS_ERR, suspend, resume ---
		{name: "sys-err-storm", run: func(t *testing.T, r *scriptRig) {
			mustPowerUp(t, r)
			r.dev.SetBehaviour(hostile.Behaviour{SysErrAtM0: true})
			start := time.Now()
			r.dev.EnterSysErr()
			if !poll.Until(2*time.Second, func() bool { return r.ctrl.PMState() == mhi.PMRecoveryFailed }) {
				t.Fatalf("host state %s, want %s (recovery %+v)", r.ctrl.PMState(), mhi.PMRecoveryFailed, r.ctrl.Recovery())
			}
			t.Logf("gave up after %v: %+v", time.Since(start), r.ctrl.Recovery())
			rec := r.ctrl.Recovery()
			if !rec.Failed || rec.Attempts != mhi.DefaultRecoveryLimit {
				t.Fatalf("recovery %+v, want failed after %d attempts", rec, mhi.DefaultRecoveryLimit)
			}
			if resets := r.dev.Stats().Resets; resets > mhi.DefaultRecoveryLimit+1 {
				t.Fatalf("%d device resets for %d attempts", resets, mhi.DefaultRecoveryLimit)
			}
			var failed *mhi.StatusEvent
			poll.Until(time.Second, func() bool {
				for _, ev := range r.statusEvents() {
					if ev.Kind == mhi.StatusFailed {
						failed = &ev
					}
				}
				return failed != nil
			})
			if failed == nil || !errors.Is(failed.Err, mhi.ErrRecoveryFailed) {
				t.Fatalf("status events %+v, want StatusFailed with ErrRecoveryFailed", r.statusEvents())
			}
			// RECOVERY_FAILED leaves the device alone.
			r.h.ClearLog()
			r.dev.EnterSysErr()
			time.Sleep(60 * time.Millisecond) // three poll intervals
			for _, rec := range r.h.Log() {
				if rec.Op == hostile.OpWrite {
					t.Fatalf("the host wrote the device in RECOVERY_FAILED: %v", rec)
				}
			}
			ch, _ := r.ctrl.Channel(hostile.LoopbackUL)
			if err := ch.Start(nil); !errors.Is(err, mhi.ErrRecoveryFailed) {
				t.Fatalf("Start in RECOVERY_FAILED = %v", err)
			}
			if s := r.ctrl.Stats(); s.RecoveryFailed != 1 || s.RecoveryGaveUp != 1 {
				t.Fatalf("stats %+v", s)
			}
		}},
		{name: "mhistatus-claims-sys-err", opts: mhi.Options{RecoveryLimit: 2}, run: func(t *testing.T, r *scriptRig) {
			mustPowerUp(t, r)
			r.dev.SetRegister(wire.RegMHISTATUS, wire.MHISTATUSSysErr|wire.MHISTATUSReady|0xFF00)
			r.h.Raise(0)
			if !poll.Until(2*time.Second, func() bool { return r.ctrl.PMState() == mhi.PMRecoveryFailed }) {
				t.Fatalf("host state %s (recovery %+v)", r.ctrl.PMState(), r.ctrl.Recovery())
			}
			if rec := r.ctrl.Recovery(); rec.Failures != 2 {
				t.Fatalf("recovery %+v, want two failed attempts", rec)
			}
		}},
		{name: "never-acknowledges-m3", run: func(t *testing.T, r *scriptRig) {
			mustPowerUp(t, r)
			r.dev.SetBehaviour(hostile.Behaviour{IgnoreM3: true})
			if err := r.ctrl.Suspend(); !errors.Is(err, mhi.ErrTimeout) {
				t.Fatalf("Suspend = %v, want ErrTimeout", err)
			}
			if n := r.ctrl.Stats().StateTimeouts; n != 1 {
				t.Fatalf("state_timeouts = %d", n)
			}
			stillM0(t, r)
			r.dev.SetBehaviour(hostile.Behaviour{})
			if err := r.ctrl.Suspend(); err != nil {
				t.Fatalf("Suspend once the device behaves: %v", err)
			}
			if err := r.ctrl.Resume(); err != nil {
				t.Fatalf("Resume: %v", err)
			}
			stillM0(t, r)
		}},
		{name: "never-acknowledges-m0-after-m3", run: func(t *testing.T, r *scriptRig) {
			mustPowerUp(t, r)
			if err := r.ctrl.Suspend(); err != nil {
				t.Fatal(err)
			}
			r.dev.SetBehaviour(hostile.Behaviour{IgnoreM0: true})
			if err := r.ctrl.Resume(); !errors.Is(err, mhi.ErrTimeout) {
				t.Fatalf("Resume = %v, want ErrTimeout", err)
			}
			r.dev.SetBehaviour(hostile.Behaviour{}) // recovery finds it sane again
			expectCounter(t, r, "recoveries", 1, func(s mhi.ControllerStatsSnapshot) uint64 { return s.Recoveries })
			if n := r.ctrl.Stats().DeviceErrorRecoveries; n != 1 {
				t.Fatalf("device_error_recoveries = %d", n)
			}
			stillM0(t, r)
		}},
		{name: "powerdown-during-sys-err-storm", run: func(t *testing.T, r *scriptRig) {
			mustPowerUp(t, r)
			r.dev.SetBehaviour(hostile.Behaviour{SysErrAtM0: true})
			r.h.ClearLog()
			r.dev.EnterSysErr()
			time.Sleep(15 * time.Millisecond) // in the middle of the retries
			if err := r.ctrl.PowerDown(); err != nil {
				t.Logf("PowerDown: %v", err)
			}
			if err := checkFinalReset(r.h.Log()); err != nil {
				t.Fatal(err)
			}
		}},
	})
}

// The detectors the suite relies on must themselves work: a device write to
// freed memory, a host write after free and a double free are reported.
func TestUseAfterFreeDetectors(t *testing.T) {
	m := hostile.NewMemory()
	b, err := m.Alloc(64, 64)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Free(b); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Slice(b.IOVA+8, 4); !errors.Is(err, wire.ErrBounds) {
		t.Fatalf("device access to freed memory: %v", err)
	}
	b.Bytes[3] = 1 // the host writes after free
	_ = m.Free(b)
	v := m.Violations()
	if len(v) != 3 {
		t.Fatalf("violations %q, want device access, double free and write after free", v)
	}
	for _, want := range []string{"device access", "double free", "written after free"} {
		found := false
		for _, s := range v {
			found = found || strings.Contains(s, want)
		}
		if !found {
			t.Errorf("no %q in %q", want, v)
		}
	}

	tr := hostile.Wrap(hostile.NewDevice(hostile.DeviceConfig{}), hostile.Options{})
	defer tr.Close()
	q, err := tr.Alloc(32, 64)
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Free(q); err != nil {
		t.Fatal(err)
	}
	q.Bytes[31] = 7
	if v := tr.Violations(); len(v) != 1 {
		t.Fatalf("quarantine violations %q, want one", v)
	}
}
