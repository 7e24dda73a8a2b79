package hostile_test

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhi"
	"github.com/gomhi/gomhi/mhi/ep"
	"github.com/gomhi/gomhi/mhi/hostile"
	"github.com/gomhi/gomhi/mhi/wire"
)

// isDoorbell reports whether off is a doorbell register of the mock modem
// (command ring, channel or event ring doorbells).
func isDoorbell(off uint32) bool {
	return off == wire.RegCRDBLower || off == wire.RegCRDBHigher ||
		off >= ep.ChannelDoorbellOffset && off < ep.ChannelDoorbellOffset+wire.DoorbellStride*wire.MaxDoorbellChannels ||
		off >= ep.EventDoorbellOffset && off < ep.EventDoorbellOffset+wire.DoorbellStride*8
}

// checkFinalReset checks the end of a power-down in log: the host resets
// the device (MHICTRL.RESET) before it frees any memory, and after that
// reset it never again points the device at memory (CCABAP, ECABAP,
// CRCBAP other than 0), requests M0, or rings a doorbell.
func checkFinalReset(log []hostile.Record) error {
	firstFree := -1
	for i, r := range log {
		if r.Op == hostile.OpFree {
			firstFree = i
			break
		}
	}
	if firstFree < 0 {
		return fmt.Errorf("power-down freed nothing")
	}
	lastReset := -1
	for i := firstFree - 1; i >= 0; i-- {
		r := log[i]
		if r.Op == hostile.OpWrite && r.Off == wire.RegMHICTRL && r.Value&wire.MHICTRLReset != 0 {
			lastReset = i
			break
		}
	}
	if lastReset < 0 {
		return fmt.Errorf("memory freed (%v) without an MHI reset before it", log[firstFree])
	}
	for _, r := range log[lastReset+1:] {
		if r.Op != hostile.OpWrite {
			continue
		}
		switch {
		case r.Off >= wire.RegCCABAPLower && r.Off <= wire.RegCRCBAPHigher && r.Value != 0:
			return fmt.Errorf("after the final reset %v the host wrote a context base: %v", log[lastReset], r)
		case r.Off == wire.RegMHICTRL && r.Value&wire.MHICTRLReset == 0 &&
			wire.State((r.Value&wire.MHICTRLStateMask)>>wire.MHICTRLStateShift) == wire.StateM0:
			return fmt.Errorf("after the final reset %v the host requested M0: %v", log[lastReset], r)
		case isDoorbell(r.Off):
			return fmt.Errorf("after the final reset %v the host rang a doorbell: %v", log[lastReset], r)
		}
	}
	return nil
}

// Finding 1 of issue 11: PowerDown racing SYS_ERR recovery left the device
// in M0 pointing at freed memory. Many rounds of SYS_ERR followed, after a
// random short delay, by PowerDown: the device must see a reset last, be
// out of M0 when memory is freed and stay out of it, and nothing may write
// freed memory.
func TestPowerDownFencesRecovery(t *testing.T) {
	rounds := 40
	if testing.Short() {
		rounds = 15
	}
	base := runtime.NumGoroutine()
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range rounds {
		delay := time.Duration(rng.IntN(3000)) * time.Microsecond
		t.Run(fmt.Sprintf("round%02d_%v", i, delay), func(t *testing.T) {
			r := newMockRig(t, mhi.Options{})
			if err := r.ctrl.PowerUp(); err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			var atFree []wire.State
			r.h.SetHooks(hostile.Hooks{Free: func(mhi.DMABuffer) {
				mu.Lock()
				atFree = append(atFree, r.dev.State())
				mu.Unlock()
			}})
			r.h.ClearLog()
			r.dev.InjectSysErr()
			time.Sleep(delay)
			start := time.Now()
			if err := r.ctrl.PowerDown(); err != nil {
				t.Logf("PowerDown: %v", err)
			}
			t.Logf("PowerDown took %v", time.Since(start))
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("PowerDown took %v", d)
			}
			if err := checkFinalReset(r.h.Log()); err != nil {
				t.Error(err)
			}
			mu.Lock()
			for _, s := range atFree {
				if s == wire.StateM0 {
					t.Errorf("device in M0 when the host freed its memory")
					break
				}
			}
			mu.Unlock()
			time.Sleep(5 * time.Millisecond) // a late M0 request would land by now
			if s := r.dev.State(); s == wire.StateM0 {
				t.Errorf("device in M0 after power-down")
			}
			if v := r.h.Violations(); len(v) > 0 {
				t.Errorf("use of freed memory:\n%s", strings.Join(v, "\n"))
			}
		})
	}
	settleGoroutines(t, base)
}
