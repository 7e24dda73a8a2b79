package mhi

import (
	"errors"
	"fmt"
	"time"

	"github.com/gomhi/gomhi/mhi/wire"
)

// PowerUp brings the device from RESET to M0 in mission mode: it allocates
// the contexts and rings, waits for READY, programs the MMIO registers,
// arms the event rings, requests M0 and waits for the device to announce M0
// and the AMSS execution environment. On failure the device is reset and
// everything is freed again.
func (c *Controller) PowerUp() error {
	c.life.Lock()
	defer c.life.Unlock()
	c.mu.Lock()
	if c.pm != pmDisabled {
		pm := c.pm
		c.mu.Unlock()
		return fmt.Errorf("%s: power up in state %s: %w", c.name, pm, ErrWrongState)
	}
	c.setPMLocked(pmPowerUp)
	c.devState = wire.StateReset
	c.rec = recoveryState{}
	stop := make(chan struct{})
	c.stop, c.stopped = stop, false
	c.mu.Unlock()

	if err := c.allocate(); err != nil {
		c.mu.Lock()
		c.closeStopLocked()
		c.stop = nil
		c.setPMLocked(pmDisabled)
		c.mu.Unlock()
		return err
	}
	for _, er := range c.eventRings {
		c.wg.Add(1)
		go er.run(stop, c.poll)
	}
	c.wg.Add(2)
	go c.recoveryWorker(stop)
	go c.pmWorker(stop)
	if c.health > 0 {
		c.wg.Add(1)
		go c.healthWorker(stop, c.health)
	}
	c.t.SetInterruptHandler(c.onInterrupt)

	if err := c.bringUp(); err != nil {
		if terr := c.teardown(); terr != nil {
			c.log.Warn("reset after a failed power-up", "err", terr)
		}
		return err
	}
	return nil
}

// fenced returns an error once the controller may no longer drive the
// device: PowerDown began (ErrPoweredDown) or recovery gave up
// (ErrRecoveryFailed). Every step of power-up and recovery checks it.
func (c *Controller) fenced(what string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.fencedLocked(what)
}

func (c *Controller) fencedLocked(what string) error {
	switch c.pm {
	case pmShutdown, pmDisabled:
		return fmt.Errorf("%s: %s: %w", c.name, what, ErrPoweredDown)
	case pmFailed:
		return fmt.Errorf("%s: %s: %w", c.name, what, ErrRecoveryFailed)
	case pmLinkDown:
		return fmt.Errorf("%s: %s: %w", c.name, what, ErrLinkDown)
	}
	return nil
}

// poweringDown reports whether PowerDown has begun (or is done).
func (c *Controller) poweringDown() bool {
	p := pmState(c.pmNow.Load())
	return p == pmShutdown || p == pmDisabled
}

// promote moves the host state from one state to another, and fails
// (leaving it alone) when something else changed it meanwhile: PowerDown,
// SYS_ERR, or recovery giving up.
func (c *Controller) promote(from, to pmState, what string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.fencedLocked(what); err != nil {
		return err
	}
	if c.pm != from {
		if c.pm == pmSysErr {
			return fmt.Errorf("%s: %s: %w", c.name, what, ErrSysErr)
		}
		return fmt.Errorf("%s: %s in state %s: %w", c.name, what, c.pm, ErrWrongState)
	}
	c.setPMLocked(to)
	return nil
}

// readLayout reads MHIREGLEN and BHIOFF and checks them against the
// register space before anything is read or written at BHIOFF.
func (c *Controller) readLayout() error {
	regLen, err := c.read(wire.RegMHIREGLEN)
	if err != nil {
		return err
	}
	bar := c.barSize()
	if err := c.checkRegLen(regLen, bar); err != nil {
		return err
	}
	bhi, err := c.read(wire.RegBHIOFF)
	if err != nil {
		return err
	}
	if err := c.checkBlock("BHIOFF", bhi, wire.BHISize, regLen, bar); err != nil {
		return err
	}
	c.regLen, c.bhiOff = regLen, bhi
	return nil
}

// bringUp runs the power-up sequence proper, from the device in any state to
// M0 in mission mode. Used by PowerUp and by SYS_ERR recovery. It stops at
// the first step that finds the controller fenced (PowerDown).
func (c *Controller) bringUp() error {
	if err := c.fenced("power up"); err != nil {
		return err
	}
	if err := c.bootToReady(); err != nil {
		return err
	}
	if err := c.fenced("power up"); err != nil {
		return err
	}
	if err := c.initMMIO(); err != nil {
		return err
	}
	if err := c.armEventRings(false); err != nil {
		return err
	}
	if err := c.fenced("power up"); err != nil {
		return err
	}
	if err := c.rmw(wire.RegMHICTRL, wire.MHICTRLStateMask, uint32(wire.StateM0)<<wire.MHICTRLStateShift); err != nil {
		return err
	}
	if err := c.waitFor("M0", c.Timeout(), func() bool { return c.devState == wire.StateM0 }); err != nil {
		return err
	}
	if err := c.prepareRDDM(); err != nil {
		return err
	}
	if err := c.promote(pmPowerUp, pmM0, "entering M0"); err != nil {
		return err
	}
	return c.enterMissionMode()
}

// bootToReady takes the device from any state to READY: it reads the
// register layout, masks the BHI interrupt, loads an image over BHI if the
// device waits in PBL or EDL, resets a device in SYS_ERR and waits for
// READY.
func (c *Controller) bootToReady() error {
	if err := c.readLayout(); err != nil {
		return err
	}
	if err := c.write(c.bhiOff+wire.BHIIntVec, 0); err != nil {
		return err
	}
	eev, err := c.read(c.bhiOff + wire.BHIExecEnv)
	if err != nil {
		return err
	}
	ee := wire.ExecEnv(eev)
	switch {
	case ee == wire.EEAMSS || ee == wire.EEPTHRU || ee == wire.EESBL:
	case ee == wire.EEPBL || ee == wire.EEEDL:
		if err := c.loadBHI(ee); err != nil {
			return err
		}
	default:
		return fmt.Errorf("%s: device in execution environment %s cannot be powered up: %w", c.name, ee, ErrWrongState)
	}
	st, err := c.read(wire.RegMHISTATUS)
	if err != nil {
		return err
	}
	if st&wire.MHISTATUSSysErr != 0 || wire.State((st&wire.MHISTATUSStateMask)>>wire.MHISTATUSStateShift) == wire.StateSysErr {
		if err := c.resetDevice(true); err != nil {
			return err
		}
	}
	if err := c.waitReady(); err != nil {
		return err
	}
	c.mu.Lock()
	c.devState = wire.StateReady
	c.eeSeen = false
	c.mu.Unlock()
	return nil
}

// armEventRings arms the software event rings, or with hardware the
// hardware (data path) ones.
func (c *Controller) armEventRings(hardware bool) error {
	for _, er := range c.eventRings {
		if er.cfg.Hardware == hardware {
			if err := er.arm(); err != nil {
				return err
			}
		}
	}
	return nil
}

// prepareRDDM puts the RAM-dump table in BHIe, as Linux's
// mhi_rddm_prepare does, when dumps are configured. A device whose BHIe
// block is unusable runs without dumps for this power cycle.
func (c *Controller) prepareRDDM() error {
	if c.rddm.size <= 0 {
		return nil
	}
	c.rddm.armed.Store(false)
	if err := c.armRDDM(); errors.Is(err, ErrBadDevice) {
		c.log.Warn("RAM-dump collection off for this power cycle", "err", err)
	} else if err != nil {
		return err
	} else {
		c.rddm.armed.Store(true)
	}
	return nil
}

// enterMissionMode waits for mission mode, re-reads EXECENV as Linux does,
// then arms the hardware rings.
func (c *Controller) enterMissionMode() error {
	if err := c.waitMissionMode(); err != nil {
		return err
	}
	eev, err := c.read(c.bhiOff + wire.BHIExecEnv)
	if err != nil {
		return err
	}
	if !wire.ExecEnv(eev).MissionMode() {
		c.stats.BadRegister.Add(1)
		return fmt.Errorf("%s: EE event said mission mode but EXECENV reads %s: %w", c.name, wire.ExecEnv(eev), ErrBadDevice)
	}
	if err := c.armEventRings(true); err != nil {
		return err
	}
	c.log.Info("powered up", "state", wire.StateM0, "ee", wire.ExecEnv(eev))
	return nil
}

// waitMissionMode waits for the EE event of mission mode. A device that
// announces SBL first boots AMSS by itself, or, with a full-image
// firmware, gets AMSS over BHIe now.
func (c *Controller) waitMissionMode() error {
	full := c.fw != nil && c.fw.FullImage && c.fbcImage != nil
	if full {
		if err := c.waitFor("EE SBL", c.Timeout(), func() bool { return c.eeSeen || c.ee == wire.EESBL }); err != nil {
			return err
		}
		c.mu.Lock()
		sbl := !c.eeSeen && c.ee == wire.EESBL
		c.mu.Unlock()
		if sbl {
			if err := c.loadBHIe(); err != nil {
				return err
			}
		}
	}
	c.fbcImage = nil
	return c.waitFor("mission mode", c.Timeout(), func() bool { return c.eeSeen })
}

// pollReg polls register off until done(value) holds or the timeout passes.
// An abortable poll also ends, with ErrPoweredDown, as soon as PowerDown
// begins; the final reset of PowerDown is not abortable.
func (c *Controller) pollReg(off uint32, timeout time.Duration, abortable bool, done func(uint32) bool) (uint32, error) {
	deadline := time.Now().Add(timeout)
	delay := 100 * time.Microsecond
	var quit <-chan struct{}
	if abortable {
		c.mu.Lock()
		quit = c.stop
		c.mu.Unlock()
	}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		v, err := c.read(off)
		if err != nil {
			return v, err
		}
		if done(v) {
			return v, nil
		}
		if time.Now().After(deadline) {
			return v, ErrTimeout
		}
		if abortable && c.poweringDown() {
			return v, fmt.Errorf("%s: polling register 0x%x: %w", c.name, off, ErrPoweredDown)
		}
		timer.Reset(delay)
		select {
		case <-timer.C:
		case <-quit:
		}
		if delay < 25*time.Millisecond { // Linux polls every 25 ms
			delay *= 2
		}
	}
}

func (c *Controller) readyTimeout() time.Duration {
	if d := time.Duration(c.readyTO.Load()); d > 0 {
		return d
	}
	if c.cfg.ReadyTimeout > c.Timeout() {
		return c.cfg.ReadyTimeout
	}
	return c.Timeout()
}

// waitReady waits for MHICTRL.RESET to clear and MHISTATUS.READY to be set.
func (c *Controller) waitReady() error {
	to := c.readyTimeout()
	if v, err := c.pollReg(wire.RegMHICTRL, to, true, func(v uint32) bool { return v&wire.MHICTRLReset == 0 }); err != nil {
		return fmt.Errorf("%s: MHICTRL.RESET still set after %v (MHICTRL=0x%x): %w", c.name, to, v, err)
	}
	ready := func(v uint32) bool { return v&wire.MHISTATUSReady != 0 && v&wire.MHISTATUSSysErr == 0 }
	start := time.Now()
	first := min(to, ReadyNotice)
	v, err := c.pollReg(wire.RegMHISTATUS, first, true, ready)
	if errors.Is(err, ErrTimeout) && to > first {
		// A slow modem (Linux's ready_timeout_ms): say so, and wait on.
		c.stats.SlowReadies.Add(1)
		c.log.Info("device not READY yet; waiting for it", "waited", first, "timeout", to)
		v, err = c.pollReg(wire.RegMHISTATUS, to-first, true, ready)
	}
	if err != nil {
		if errors.Is(err, ErrTimeout) {
			return fmt.Errorf("%s: device not READY after %v (MHISTATUS=0x%x): gave up at the ready timeout %v "+
				"(a slow modem may need a longer one: mhictl up --ready-timeout): %w", c.name, time.Since(start).Round(time.Millisecond), v, to, err)
		}
		return fmt.Errorf("%s: device not READY after %v (MHISTATUS=0x%x): %w", c.name, time.Since(start).Round(time.Millisecond), v, err)
	}
	if d := time.Since(start); d > first {
		c.log.Info("device READY after a slow start", "waited", d.Round(time.Millisecond), "timeout", to)
	}
	return nil
}

// noM3Strikes is the number of M3 requests in a row a device must ignore
// (staying in M0) before the host takes it as one without M3.
const noM3Strikes = 2

// ReadyNotice is how long the host waits for READY before it says that
// the device is slow to become READY (and counts it in SlowReadies).
const ReadyNotice = 2 * time.Second

// SetReadyTimeout changes how long the host waits for READY at power-up
// and after a reset (0: what the configuration gives).
func (c *Controller) SetReadyTimeout(d time.Duration) error {
	if d < 0 || d > 10*time.Minute || d > 0 && d < time.Millisecond {
		return fmt.Errorf("%s: ready timeout %v outside 1ms..10m (0: the configuration's): %w", c.name, d, wire.ErrConfig)
	}
	c.readyTO.Store(int64(d))
	return nil
}

// ReadyTimeout returns how long the host waits for READY.
func (c *Controller) ReadyTimeout() time.Duration { return c.readyTimeout() }

// NoM3 reports whether the host refuses to suspend the device: its table
// entry says it has no M3, or it ignored an M3 request.
func (c *Controller) NoM3() bool { return c.noM3.Load() }

// resetDevice sets MHICTRL.RESET and waits for the device to clear it.
func (c *Controller) resetDevice(abortable bool) error {
	if err := c.rmw(wire.RegMHICTRL, wire.MHICTRLReset, wire.MHICTRLReset); err != nil {
		return err
	}
	to := c.Timeout()
	if v, err := c.pollReg(wire.RegMHICTRL, to, abortable, func(v uint32) bool { return v&wire.MHICTRLReset == 0 }); err != nil {
		return fmt.Errorf("%s: device did not finish MHI reset within %v (MHICTRL=0x%x): %w", c.name, to, v, err)
	}
	c.mu.Lock()
	c.devState = wire.StateReset
	c.mu.Unlock()
	// The device clears INTVEC on reset.
	if c.bhiOff == 0 {
		return nil // BHIOFF never passed its checks
	}
	return c.write(c.bhiOff+wire.BHIIntVec, 0)
}

// Suspend moves the device from M0 to M3. Channels keep their state. When
// the device does not acknowledge M3 within the timeout, the request is
// withdrawn: a device still in M0 leaves the host in M0 (doorbells held
// back meanwhile are rung), any other answer starts a recovery as from
// SYS_ERR. Either way Suspend returns an error wrapping ErrTimeout.
func (c *Controller) Suspend() error {
	if c.noM3.Load() {
		c.stats.SuspendsRefused.Add(1)
		return fmt.Errorf("%s: suspend refused: %w: the device table or an ignored M3 request says so; the device stays in M0 and keeps running", c.name, ErrNoM3)
	}
	c.mu.Lock()
	if c.pm != pmM0 {
		pm := c.pm
		c.mu.Unlock()
		return fmt.Errorf("%s: suspend in state %s: %w", c.name, pm, ErrWrongState)
	}
	c.setPMLocked(pmM3)
	c.mu.Unlock()
	if err := c.rmw(wire.RegMHICTRL, wire.MHICTRLStateMask, uint32(wire.StateM3)<<wire.MHICTRLStateShift); err != nil {
		// The request did not reach the device: the host stays in M0.
		if perr := c.promote(pmM3, pmM0, "suspend"); perr == nil {
			c.onM0()
		}
		return err
	}
	err := c.waitFor("M3", c.Timeout(), func() bool { return c.devState == wire.StateM3 })
	if err == nil {
		c.m3Ignored.Store(0)
		c.stats.Suspends.Add(1)
		return nil
	}
	if !errors.Is(err, ErrTimeout) {
		return err // SYS_ERR or power-down took over
	}
	c.stats.StateTimeouts.Add(1)
	return c.abandonSuspend(err)
}

// abandonSuspend withdraws an M3 request the device did not acknowledge:
// it requests M0 again and, when the device reports M0, puts the host back
// in M0; otherwise it starts a recovery.
func (c *Controller) abandonSuspend(cause error) error {
	to := c.Timeout()
	werr := c.rmw(wire.RegMHICTRL, wire.MHICTRLStateMask, uint32(wire.StateM0)<<wire.MHICTRLStateShift)
	var st uint32
	if werr == nil {
		st, werr = c.pollReg(wire.RegMHISTATUS, to, true, func(v uint32) bool {
			return v&wire.MHISTATUSSysErr == 0 && wire.State((v&wire.MHISTATUSStateMask)>>wire.MHISTATUSStateShift) == wire.StateM0
		})
	}
	if werr == nil {
		c.mu.Lock()
		back := c.pm == pmM3
		if back {
			c.setPMLocked(pmM0)
			c.devState = wire.StateM0
		}
		c.mu.Unlock()
		if back {
			c.onM0()
			// A device that stays in M0 when asked for M3 may have no M3
			// (as the QDU100): auto-suspend, which would hold the data
			// path for a timeout every idle period, is turned off; a
			// second ignored request in a row and the host stops asking.
			auto := c.pmAuto.idle.Swap(0) > 0
			if c.m3Ignored.Add(1) >= noM3Strikes {
				c.noM3.Store(true)
				c.log.Warn("device ignored M3 again; suspend withdrawn, back in M0; treating it as a device without M3 from now on",
					"timeout", to, "autosuspend_turned_off", auto)
				return fmt.Errorf("%s: suspend: device ignored M3 again (%v); suspend withdrawn, host and device back in M0 "+
					"and running; the device is taken as one without M3 (as Linux's no_m3), further suspends are refused: %w: %w", c.name, to, ErrNoM3, cause)
			}
			c.log.Warn("device did not acknowledge M3; suspend withdrawn, back in M0; it may not support M3", "timeout", to, "autosuspend_turned_off", auto)
			return fmt.Errorf("%s: suspend: device did not acknowledge M3 within %v; suspend withdrawn, host and device back in M0 "+
				"and running; the device may not support M3 (as the QDU100, Linux's no_m3): auto-suspend is off, and if it ignores M3 "+
				"once more suspends are refused: %w", c.name, to, cause)
		}
	}
	devState := wire.State((st & wire.MHISTATUSStateMask) >> wire.MHISTATUSStateShift)
	c.requestRecovery(fmt.Sprintf("M3 not acknowledged, device reports %s (MHISTATUS=0x%x)", devState, st))
	return fmt.Errorf("%s: suspend: device did not acknowledge M3 within %v and reports %s (MHISTATUS=0x%x); recovering it: %w", c.name, to, devState, st, cause)
}

// Resume moves the device from M3 back to M0 and rings held-back doorbells.
// When the device does not announce M0 in time but MHISTATUS reads M0, the
// resume stands; otherwise a recovery starts and Resume returns an error
// wrapping ErrTimeout.
func (c *Controller) Resume() error {
	c.mu.Lock()
	if c.pm != pmM3 {
		pm := c.pm
		c.mu.Unlock()
		return fmt.Errorf("%s: resume in state %s: %w", c.name, pm, ErrWrongState)
	}
	c.mu.Unlock()
	st, err := c.read(wire.RegMHISTATUS)
	if err != nil {
		return err
	}
	if s := wire.State((st & wire.MHISTATUSStateMask) >> wire.MHISTATUSStateShift); s != wire.StateM3 {
		return fmt.Errorf("%s: resume: device reports %s, not M3: %w", c.name, s, ErrWrongState)
	}
	if err := c.rmw(wire.RegMHICTRL, wire.MHICTRLStateMask, uint32(wire.StateM0)<<wire.MHICTRLStateShift); err != nil {
		return err
	}
	// pm becomes M0 before the M0 event is handled so held doorbells ring.
	if err := c.promote(pmM3, pmM0, "resume"); err != nil {
		return err
	}
	to := c.Timeout()
	err = c.waitFor("M0", to, func() bool { return c.devState == wire.StateM0 })
	if err == nil {
		c.stats.Resumes.Add(1)
		c.ringEventRings()
		c.onM0() // in case the M0 event was handled before the host left M3
		return nil
	}
	if !errors.Is(err, ErrTimeout) {
		return err
	}
	c.stats.StateTimeouts.Add(1)
	st, rerr := c.read(wire.RegMHISTATUS)
	if rerr == nil && st&wire.MHISTATUSSysErr == 0 && wire.State((st&wire.MHISTATUSStateMask)>>wire.MHISTATUSStateShift) == wire.StateM0 {
		c.mu.Lock()
		if c.devState == wire.StateM3 {
			c.devState = wire.StateM0
		}
		c.mu.Unlock()
		c.ringEventRings()
		c.onM0()
		c.log.Warn("device reports M0 but never announced it", "timeout", to)
		return nil
	}
	s := wire.State((st & wire.MHISTATUSStateMask) >> wire.MHISTATUSStateShift)
	c.requestRecovery(fmt.Sprintf("M0 not acknowledged after M3, device reports %s (MHISTATUS=0x%x)", s, st))
	return fmt.Errorf("%s: resume: device did not announce M0 within %v and reports %s; recovering it: %w", c.name, to, s, err)
}

// ringEventRings rings every event ring's doorbell with the host's write
// pointer, as Linux's M0 transition does after M3 (mhi_pm_m0_transition):
// the device learns each ring's free space again, whether or not it kept
// it in M3. Failures are counted in DoorbellErrors.
func (c *Controller) ringEventRings() {
	c.procMu.RLock()
	defer c.procMu.RUnlock()
	for _, er := range c.eventRings {
		er.mu.Lock()
		_ = c.gatedDoorbell(c.erdb(er.index), er.iova(er.wp))
		er.mu.Unlock()
	}
}

// PowerDown resets the device, returns every queued buffer with wire.ErrAborted,
// stops the controller's goroutines and frees its memory. It first fences
// SYS_ERR recovery and any power-up in progress, so that the last thing the
// device sees before the memory is freed is a reset (and its context base
// registers cleared). It must not be called from a status listener.
func (c *Controller) PowerDown() error {
	c.mu.Lock()
	if c.pm == pmDisabled {
		c.mu.Unlock()
		return nil
	}
	c.setPMLocked(pmShutdown)
	c.closeStopLocked()
	c.mu.Unlock()
	// A power-up in progress sees the fence and gives up.
	c.life.Lock()
	defer c.life.Unlock()
	c.mu.Lock()
	done := c.pm == pmDisabled // the failed power-up tore everything down
	c.mu.Unlock()
	if done {
		return nil
	}
	if err := c.teardown(); err != nil {
		return fmt.Errorf("%s: power down: %w", c.name, err)
	}
	return nil
}

// teardown stops the controller: it fences and waits for every goroutine
// (event rings, recovery), quiesces the device, returns every buffer and
// frees the memory. c.life must be held.
func (c *Controller) teardown() error {
	c.mu.Lock()
	c.setPMLocked(pmShutdown)
	c.closeStopLocked()
	gone := c.gone
	c.mu.Unlock()
	c.cmd.abort()
	c.wg.Wait() // recovery and the event goroutines are gone
	// Barrier: data-path writes that passed their check before SHUTDOWN
	// finish now; later ones see SHUTDOWN and write nothing.
	c.gate.Lock()
	c.gate.Unlock() // an empty critical section on purpose: the barrier
	var err error
	if gone == nil {
		err = c.quiesce()
	} else {
		// A device off the bus answers no reset; waiting for it would
		// only hold the caller for the reset timeout.
		c.log.Info("power down: the device is not responding; no reset", "cause", gone)
	}
	c.t.SetInterruptHandler(nil)
	c.cmd.abort()
	for _, ch := range c.channels {
		if ch != nil {
			ch.mu.Lock()
			ch.state = wire.ChannelDisabled
			ch.wanted = false
			ch.mu.Unlock()
			ch.abort()
		}
	}
	c.procMu.Lock()
	c.release()
	c.procMu.Unlock()
	c.mu.Lock()
	c.setPMLocked(pmDisabled)
	c.devState = wire.StateReset
	c.stop = nil
	c.gone = nil
	c.mu.Unlock()
	return err
}

// quiesce is the last word to the device before its memory is freed: an
// MHI reset (a function-level reset when the device does not finish it),
// then the context base registers cleared, so that the device is out of M0
// and points at nothing of ours.
func (c *Controller) quiesce() error {
	err := c.resetDevice(false)
	if err != nil {
		c.log.Warn("MHI reset failed; function-level reset", "err", err)
		if rerr := c.t.Reset(); rerr != nil {
			err = errors.Join(err, fmt.Errorf("%s: function-level reset: %w", c.name, rerr))
		}
	}
	for _, off := range []uint32{wire.RegCCABAPLower, wire.RegECABAPLower, wire.RegCRCBAPLower} {
		if werr := c.write64(off, 0); werr != nil {
			return errors.Join(err, werr)
		}
	}
	return err
}

// SoCReset asks the device for a SoC reset (MHI_SOC_RESET_REQ) and recovers
// from it as from SYS_ERR: channels are aborted, the device is brought back
// to M0 and the channels clients had started are restarted. Listeners get
// StatusSysErr, then StatusRecovered (or StatusRecoveryFailed). SoCReset
// returns once the reset is requested; recovery runs in the background.
func (c *Controller) SoCReset() error {
	c.gate.RLock()
	defer c.gate.RUnlock()
	c.mu.Lock()
	if c.pm != pmM0 && c.pm != pmM3 {
		pm := c.pm
		c.mu.Unlock()
		return fmt.Errorf("%s: SoC reset in state %s: %w", c.name, pm, ErrWrongState)
	}
	c.setPMLocked(pmSysErr)
	// The host asked for this reset: it is not the device crashing, so it
	// starts a fresh count of recovery attempts (no backoff, no step
	// towards RecoveryLimit).
	c.rec.hostRequested = true
	c.mu.Unlock()
	// The host is in SYS_ERR now: a recovery follows even when the request
	// did not reach the device (it resets the device, or gives up), or the
	// controller would stay in SYS_ERR for good, refusing its clients and
	// keeping a client's Reset waiting.
	defer c.kickRecovery()
	if err := c.write(wire.RegSOCRESETREQ, wire.SOCResetReqBit); err != nil {
		return err
	}
	// Read back to flush the posted write, as Linux does.
	if _, err := c.read(wire.RegSOCRESETREQ); err != nil {
		return err
	}
	c.stats.SoCResets.Add(1)
	return nil
}

// Timeout returns the command and state-change timeout.
func (c *Controller) Timeout() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cfg.Timeout
}

// SetTimeout changes the command and state-change timeout.
func (c *Controller) SetTimeout(d time.Duration) error {
	if d < time.Millisecond || d > 10*time.Minute {
		return fmt.Errorf("%s: timeout %v outside 1ms..10m: %w", c.name, d, wire.ErrConfig)
	}
	c.mu.Lock()
	c.cfg.Timeout = d
	c.mu.Unlock()
	return nil
}
