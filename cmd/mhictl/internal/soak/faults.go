package soak

import (
	"math/rand/v2"
	"time"
)

// faultMark changes whenever a fault that can cost in-flight data on
// every channel happens: an injected SYS_ERR, a SoC reset, a modem kill.
func (r *runner) faultMark() uint64 {
	return r.sysErrs.Load() + r.socResets.Load() + r.modemRestarts.Load()
}

// schedule is the next time of one kind of fault.
type schedule struct {
	gap  time.Duration // least gap; negative: never
	next time.Time
	rng  *rand.Rand
}

// after returns the next time: the least gap plus an exponential extra of
// mean gap/2.
func (s *schedule) after(t time.Time) {
	extra := time.Duration(s.rng.ExpFloat64() * float64(s.gap) / 2)
	s.next = t.Add(s.gap + extra)
}

// faults injects faults at seeded random times until the run ends.
func (r *runner) faults() {
	now := time.Now()
	mk := func(gap time.Duration, stream uint64) *schedule {
		s := &schedule{gap: gap, rng: r.rngFor(stream)}
		if gap > 0 {
			// The first comes sooner: a quarter of the gap, plus an
			// exponential extra of the same mean.
			s.next = now.Add(gap/4 + time.Duration(s.rng.ExpFloat64()*float64(gap)/4))
		}
		return s
	}
	sysErr := mk(r.o.SysErrGap, 10)
	restart := mk(r.o.RestartGap, 11)
	lbRestart := mk(r.o.LoopbackRestartGap, 12)
	modem := mk(r.o.ModemRestartGap, 13)
	if r.o.Transport != VFIOUser {
		modem.gap = -1
	}
	var stallAt time.Time
	if r.o.sabotage.stallDataDevice {
		stallAt = now.Add(r.o.sabotage.stallDataAfter)
	}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-r.ctx.Done():
			return
		case t := <-tick.C:
			if r.done() {
				continue // the last phase is settling: no more faults
			}
			if sysErr.gap > 0 && t.After(sysErr.next) {
				r.sysErrBurst(sysErr.rng)
				sysErr.after(time.Now())
			}
			if restart.gap > 0 && t.After(restart.next) {
				r.restartData(restart.rng)
				restart.after(time.Now())
			}
			if lbRestart.gap > 0 && t.After(lbRestart.next) {
				r.lb.restart.Store(true)
				lbRestart.after(time.Now())
			}
			// A kill waits while a phase is being judged: a phase whose
			// modem was killed is judged without its counters (the
			// bound), and one that does not balance must not get there
			// by a kill that came after its traffic.
			if modem.gap > 0 && t.After(modem.next) && !r.settling() {
				r.restartModem()
				modem.after(time.Now())
			}
			if !stallAt.IsZero() && t.After(stallAt) {
				// Again and again: an MRU change would restart it.
				r.stallDownlink()
			}
		}
	}
}

// settling reports whether a phase is being judged (its traffic over).
func (r *runner) settling() bool {
	p := r.mon.currentPhase()
	return p != nil && p.settling.Load()
}

// sysErrBurst injects one to three SYS_ERRs 0.3–2 s apart (in process),
// or writes soc_reset in the attribute tree (vfio-user: the modem is in
// another process). The host recovers by itself; mhinet and the LOOPBACK
// client re-post their buffers when it has.
func (r *runner) sysErrBurst(rng *rand.Rand) {
	n := 1 + rng.IntN(3)
	for i := 0; i < n; i++ {
		if i > 0 && !r.sleep(300*time.Millisecond+time.Duration(rng.Int64N(int64(1700*time.Millisecond)))) {
			return
		}
		if r.waitRecovered() != nil {
			return
		}
		r.injectFault()
	}
}

// injectFault puts the in-process modem in SYS_ERR, or (vfio-user) writes
// soc_reset in the attribute tree; the host recovers from either. Control
// operations (MRU writes, data restarts, LOOPBACK reopenings) go on
// meanwhile and may overlap the recovery.
func (r *runner) injectFault() {
	s, release := r.current()
	if s == nil {
		release()
		return
	}
	if s.epd != nil {
		s.epd.InjectSysErr()
		r.sysErrs.Add(1)
	} else {
		if err := r.tree.Set("devices/"+devName+"/soc_reset", "1"); err != nil {
			release()
			return
		}
		r.socResets.Add(1)
	}
	release()
}

// waitRecovered waits until no recovery is in progress, so that faults
// do not pile up on one recovery; the run's end is its only error.
func (r *runner) waitRecovered() error {
	for r.recovering.Load() > 0 {
		if !r.sleep(5 * time.Millisecond) {
			return r.ctx.Err()
		}
	}
	return nil
}

// restartData takes the data device down and up again (its channels
// reset and restarted, its pools rebuilt), retrying Up while the
// controller refuses it.
func (r *runner) restartData(rng *rand.Rand) {
	r.restarting.Add(1)
	defer r.restarting.Add(-1)
	s, release := r.current()
	defer release()
	if s == nil {
		return
	}
	_ = s.dev.Down()
	time.Sleep(time.Duration(rng.Int64N(int64(20 * time.Millisecond))))
	deadline := time.Now().Add(r.o.Stall)
	for {
		err := s.dev.Up()
		if err == nil {
			r.dataRestarts.Add(1)
			return
		}
		if time.Now().After(deadline) {
			r.fail("stuck", "data channels (%s): Up refused for %v after a restart: %v", s.pair, r.o.Stall, err)
			return
		}
		if r.ctx.Err() != nil {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// restartModem kills the served modem's process, lets the host notice,
// closes the host side, starts a new server and attaches to it.
func (r *runner) restartModem() {
	r.restarting.Add(1)
	defer r.restarting.Add(-1)
	r.sessMu.Lock()
	old := r.sess
	r.lb.closeLocked()
	if old != nil {
		old.kill()
		// The host notices: the connection ends.
		select {
		case <-old.gone():
		case <-time.After(r.o.Stall):
			r.sessMu.Unlock()
			r.fail("stuck", "the host did not notice the modem server's death (pid %d) within %v", old.pid(), r.o.Stall)
			return
		}
		old.close() // Down aborts what was queued: counted before retiring
		r.retire(old)
		r.sess = nil
	}
	r.modemRestarts.Add(1)
	r.sessMu.Unlock()
	n := 1 + int(r.modemRestarts.Load())
	s, err := r.open(r.ctx, n)
	if err != nil {
		if r.ctx.Err() == nil {
			r.fail("error", "re-attaching to a new modem server (session %d): %v", n, err)
		}
		return
	}
	r.setSession(s)
}

// stallDownlink (sabotage) stops the data downlink channel behind mhinet's
// back: the modem stops writing, the host stops receiving. Called on
// every tick once due.
func (r *runner) stallDownlink() {
	s, release := r.current()
	defer release()
	if s == nil {
		return
	}
	_, dl := s.channels()
	_ = dl.Stop() // refused while stopped: it stays so
}
