package hostile_test

import (
	"encoding/binary"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhi"
	"github.com/gomhi/gomhi/mhi/hostile"
	"github.com/gomhi/gomhi/mhi/testenv/poll"
	"github.com/gomhi/gomhi/mhi/wire"
)

// The boot, RAM-dump and power-management paths against a lying device:
// firmware downloads the device never answers or answers with nonsense, a
// device that never leaves PBL, EE events out of order, RAM dumps that
// never come, come for another sequence or claim more bytes than the host
// gave. Each attack ends in a clear error or a counted, clamped value,
// within the suite's time budget, with no DMA memory left and no use of
// freed memory (runAttacks).

// testFirmware serves a 64 KiB image for PBL and EDL.
func testFirmware(full bool) *mhi.Firmware {
	img := make([]byte, 64<<10)
	for i := range img {
		img[i] = byte(i)
	}
	return &mhi.Firmware{FullImage: full, SBLSize: 16 << 10, SegmentSize: 16 << 10,
		Load: func(wire.ExecEnv) (string, []byte, error) { return "test.mbn", img, nil }}
}

// inPBL pins EXECENV to PBL before power-up.
var inPBL = pinAfter(hostile.BHIOffset+wire.BHIExecEnv, uint32(wire.EEPBL))

// bhiStatus pins BHI_STATUS.
func bhiStatus(v uint32) func(*testing.T, *scriptRig) {
	return pinAfter(hostile.BHIOffset+wire.BHIStatus, v)
}

// firmwareErrors is the counter of failed downloads.
func firmwareErrors(s mhi.ControllerStatsSnapshot) uint64 { return s.FirmwareErrors }

// resetBeforeFree checks that the host reset the device after its last
// image doorbell and before it freed the image: a device that did not
// answer may still be reading it.
func resetBeforeFree(t *testing.T, r *scriptRig) {
	t.Helper()
	db := -1
	log := r.h.Log()
	for i, rec := range log {
		if rec.Op == hostile.OpWrite && rec.Off == hostile.BHIOffset+wire.BHIImgTxDB {
			db = i
		}
	}
	if db < 0 {
		t.Fatal("the host never rang IMGTXDB")
	}
	for _, rec := range log[db:] {
		switch rec.Op {
		case hostile.OpReset:
			return
		case hostile.OpFree:
			t.Fatalf("image freed (%s) before the device was reset", rec)
		}
	}
	t.Fatal("no reset after the unanswered download")
}

// rxSeq returns the sequence the host wrote to RXVECDB and the IOVA of
// its receive vector table.
func rxSeq(t *testing.T, r *scriptRig) (uint32, uint64) {
	t.Helper()
	var seq uint32
	var lo, hi uint32
	for _, rec := range r.h.Log() {
		if rec.Op != hostile.OpWrite {
			continue
		}
		switch rec.Off {
		case hostile.BHIEOffset + wire.BHIERxVecDB:
			seq = rec.Value
		case hostile.BHIEOffset + wire.BHIERxVecAddrLow:
			lo = rec.Value
		case hostile.BHIEOffset + wire.BHIERxVecAddrHigh:
			hi = rec.Value
		}
	}
	if seq == 0 {
		t.Fatal("the host never armed RXVECDB")
	}
	return seq, uint64(hi)<<32 | uint64(lo)
}

// crashIntoRDDM pins EXECENV to RDDM and makes the device enter SYS_ERR;
// fix, if set, runs once the host has given up on the dump, and unpins
// EXECENV so that the recovery can finish.
func crashIntoRDDM(t *testing.T, r *scriptRig, fix func()) {
	t.Helper()
	before := r.ctrl.Stats()
	r.dev.SetRegister(hostile.BHIOffset+wire.BHIExecEnv, uint32(wire.EERDDM))
	r.dev.EnterSysErr()
	if !poll.Until(2*time.Second, func() bool {
		s := r.ctrl.Stats()
		return s.Dumps+s.DumpErrors > before.Dumps+before.DumpErrors
	}) {
		t.Fatalf("no dump outcome after the crash: %+v", r.ctrl.Stats())
	}
	if fix != nil {
		fix()
	}
	r.dev.UnpinRegister(hostile.BHIOffset + wire.BHIExecEnv)
	if !poll.Until(2*time.Second, func() bool { return r.ctrl.PMState() == "M0" }) {
		t.Fatalf("not recovered after the dump: %s", r.ctrl.PMState())
	}
}

func powerUp(t *testing.T, r *scriptRig) {
	t.Helper()
	if err := r.ctrl.PowerUp(); err != nil {
		t.Fatal(err)
	}
}

func TestMaliciousBoot(t *testing.T) {
	fw := mhi.Options{Firmware: testFirmware(false)}
	rddm := mhi.Options{RDDMSize: 64 << 10, RDDMSegmentSize: 16 << 10}
	runAttacks(t, []attack{
		// --- BHI download ---
		{name: "pbl-no-firmware", run: seq(inPBL, powerUpFails(mhi.ErrFirmware, nil))},
		{name: "pbl-never-answers", opts: fw, run: seq(inPBL, powerUpFails(mhi.ErrFirmware, firmwareErrors), resetBeforeFree)},
		{name: "bhi-status-error", opts: fw, run: seq(inPBL, bhiStatus(wire.BHIStatusError<<wire.BHIStatusShift),
			powerUpFails(mhi.ErrFirmware, firmwareErrors))},
		{name: "bhi-status-garbage", opts: fw, run: seq(inPBL, bhiStatus(1<<wire.BHIStatusShift),
			powerUpFails(mhi.ErrBadDevice, badRegister))},
		// The image is accepted, yet the device never leaves PBL: READY never comes.
		{name: "never-leaves-pbl", opts: fw, dev: hostile.DeviceConfig{Behaviour: hostile.Behaviour{NeverReady: true}},
			run: seq(inPBL, bhiStatus(wire.BHIStatusSuccess<<wire.BHIStatusShift), powerUpFails(mhi.ErrTimeout, nil))},
		// --- EE events out of order ---
		// The device says AMSS before SBL although the host holds a full
		// image for BHIe, while EXECENV still reads PBL.
		{name: "amss-event-while-execenv-pbl", opts: mhi.Options{Firmware: testFirmware(true)},
			run: seq(inPBL, bhiStatus(wire.BHIStatusSuccess<<wire.BHIStatusShift), powerUpFails(mhi.ErrBadDevice, badRegister))},
		// After M0 the device announces RDDM, SBL and PBL but never mission mode.
		{name: "ee-events-out-of-order", dev: hostile.DeviceConfig{Behaviour: hostile.Behaviour{NoEEEvent: true}},
			run: func(t *testing.T, r *scriptRig) {
				var posted atomic.Bool
				go func() {
					if poll.Until(time.Second, func() bool { return r.dev.State() == wire.StateM0 }) {
						_ = r.dev.Post(0, wire.EEEvent(wire.EERDDM), wire.EEEvent(wire.EESBL), wire.EEEvent(wire.EEPBL), wire.EEEvent(0xEE))
						posted.Store(true)
					}
				}()
				powerUpFails(mhi.ErrTimeout, nil)(t, r)
				if !posted.Load() {
					t.Fatal("the events were not posted")
				}
			}},
		// The full-image download over BHIe is never answered.
		{name: "bhie-never-answers", opts: mhi.Options{Firmware: testFirmware(true)}, dev: hostile.DeviceConfig{Behaviour: hostile.Behaviour{NoEEEvent: true}},
			run: func(t *testing.T, r *scriptRig) {
				r.dev.SetRegister(hostile.BHIOffset+wire.BHIExecEnv, uint32(wire.EEPBL))
				r.dev.SetRegister(hostile.BHIOffset+wire.BHIStatus, wire.BHIStatusSuccess<<wire.BHIStatusShift)
				go func() {
					if poll.Until(time.Second, func() bool { return r.dev.State() == wire.StateM0 }) {
						_ = r.dev.Post(0, wire.EEEvent(wire.EESBL))
					}
				}()
				powerUpFails(mhi.ErrFirmware, firmwareErrors)(t, r)
			}},
		// --- RAM dumps ---
		{name: "rddm-never-completes", opts: rddm, run: func(t *testing.T, r *scriptRig) {
			powerUp(t, r)
			crashIntoRDDM(t, r, nil)
			// One error per recovery attempt that found the device in RDDM.
			if s := r.ctrl.Stats(); s.DumpErrors == 0 || s.Dumps != 0 {
				t.Fatalf("dumps %d, errors %d; want 0 and at least 1", s.Dumps, s.DumpErrors)
			}
			stillM0(t, r)
		}},
		{name: "rddm-stale-sequence", opts: rddm, run: func(t *testing.T, r *scriptRig) {
			powerUp(t, r)
			seq, _ := rxSeq(t, r)
			r.dev.SetRegister(hostile.BHIEOffset+wire.BHIERxVecStatus, wire.BHIStatusSuccess<<wire.BHIStatusShift|(seq^1)&wire.BHITxDBSeqMask)
			crashIntoRDDM(t, r, nil)
			if s := r.ctrl.Stats(); s.DumpErrors == 0 || s.Dumps != 0 {
				t.Fatalf("a status for another sequence was taken: dumps %d, errors %d", s.Dumps, s.DumpErrors)
			}
		}},
		{name: "rddm-length-lies", opts: rddm, run: func(t *testing.T, r *scriptRig) {
			powerUp(t, r)
			seq, table := rxSeq(t, r)
			var e [8]byte
			binary.LittleEndian.PutUint64(e[:], 1<<40)
			for i := range 4 { // four 16 KiB segments: every entry claims a terabyte
				if err := r.dev.WriteHost(table+uint64(16*i)+8, e[:]); err != nil {
					t.Fatal(err)
				}
			}
			r.dev.SetRegister(hostile.BHIEOffset+wire.BHIERxVecStatus, wire.BHIStatusSuccess<<wire.BHIStatusShift|seq)
			bad := r.ctrl.Stats().BadRegister
			crashIntoRDDM(t, r, nil)
			dump, _ := r.ctrl.LastDump()
			if s := r.ctrl.Stats(); s.Dumps != 1 || len(dump) != 64<<10 || s.BadRegister < bad+4 {
				t.Fatalf("dump of %d bytes (want the 64 KiB the host gave), dumps %d, bad registers %d→%d", len(dump), s.Dumps, bad, s.BadRegister)
			}
		}},
		{name: "rddm-bhieoff-outside", opts: rddm, run: seq(pinAfter(wire.RegBHIEOFF, 0xFFFFFF00), func(t *testing.T, r *scriptRig) {
			powerUp(t, r) // runs, without dumps
			crashIntoRDDM(t, r, nil)
			if _, err := r.ctrl.CollectDump(time.Second); !errors.Is(err, mhi.ErrNoDump) {
				t.Fatalf("CollectDump = %v, want ErrNoDump", err)
			}
		})},
		// --- power management ---
		// A resume requested by traffic queued in M3 while the device
		// ignores M0: the host recovers the device; nothing hangs.
		{name: "autosuspend-resume-ignored", run: func(t *testing.T, r *scriptRig) {
			powerUp(t, r)
			if err := r.ctrl.SetAutoSuspend(20 * time.Millisecond); err != nil {
				t.Fatal(err)
			}
			// Both sides in M3: the device, and the host, which has seen
			// the device's STATE_CHANGE and finished its suspend (until
			// then a Resume finds nothing to resume).
			if !poll.Until(time.Second, func() bool {
				return r.dev.State() == wire.StateM3 && r.ctrl.PMState() == "M3" && r.ctrl.Stats().AutoSuspends == 1
			}) {
				t.Fatalf("no auto-suspend: device %s, host %s, %d auto-suspends", r.dev.State(), r.ctrl.PMState(), r.ctrl.Stats().AutoSuspends)
			}
			r.dev.SetBehaviour(hostile.Behaviour{IgnoreM0: true})
			if err := r.ctrl.SetAutoSuspend(0); err != nil {
				t.Fatal(err)
			}
			if err := r.ctrl.Resume(); !errors.Is(err, mhi.ErrTimeout) {
				t.Fatalf("Resume = %v, want ErrTimeout", err)
			}
			expectCounter(t, r, "state timeouts", 1, func(s mhi.ControllerStatsSnapshot) uint64 { return s.StateTimeouts })
			r.dev.SetBehaviour(hostile.Behaviour{})
		}},
	})
}
