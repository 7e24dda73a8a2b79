package mhi

import (
	"fmt"
	"time"
)

// PowerUp brings the device from RESET to M0 in mission mode: it allocates
// the contexts and rings, waits for READY, programs the MMIO registers,
// arms the event rings, requests M0 and waits for the device to announce M0
// and the AMSS execution environment.
func (c *Controller) PowerUp() error {
	c.mu.Lock()
	if c.pm != pmDisabled {
		pm := c.pm
		c.mu.Unlock()
		return fmt.Errorf("%s: power up in state %s: %w", c.name, pm, ErrWrongState)
	}
	c.pm = pmPowerUp
	c.devState = StateReset
	c.mu.Unlock()

	if err := c.allocate(); err != nil {
		c.setPM(pmDisabled)
		return err
	}
	c.stop = make(chan struct{})
	for _, er := range c.eventRings {
		c.wg.Add(1)
		go er.run(c.stop, c.poll)
	}
	c.wg.Add(1)
	go c.recoveryWorker(c.stop)
	c.t.SetInterruptHandler(c.onInterrupt)

	if err := c.bringUp(); err != nil {
		c.shutdown()
		return err
	}
	return nil
}

func (c *Controller) setPM(p pmState) {
	c.mu.Lock()
	c.pm = p
	c.cond.Broadcast()
	c.mu.Unlock()
}

// bringUp runs the power-up sequence proper, from the device in any state to
// M0 in mission mode. Used by PowerUp and by SYS_ERR recovery.
func (c *Controller) bringUp() error {
	var err error
	if c.bhiOff, err = c.read(RegBHIOFF); err != nil {
		return err
	}
	if err := c.write(c.bhiOff+BHIIntVec, 0); err != nil {
		return err
	}
	eev, err := c.read(c.bhiOff + BHIExecEnv)
	if err != nil {
		return err
	}
	ee := ExecEnv(eev)
	switch {
	case ee == EEAMSS || ee == EEPTHRU:
	case ee.InPBL():
		return fmt.Errorf("%s: device in %s needs a firmware download, which gomhi does not do: %w", c.name, ee, ErrWrongState)
	default:
		return fmt.Errorf("%s: device in execution environment %s cannot be powered up: %w", c.name, ee, ErrWrongState)
	}
	st, err := c.read(RegMHISTATUS)
	if err != nil {
		return err
	}
	if st&MHISTATUSSysErr != 0 || State((st&MHISTATUSStateMask)>>MHISTATUSStateShift) == StateSysErr {
		if err := c.resetDevice(); err != nil {
			return err
		}
	}
	if err := c.waitReady(); err != nil {
		return err
	}
	c.mu.Lock()
	c.devState = StateReady
	c.eeSeen = false
	c.mu.Unlock()
	if err := c.initMMIO(); err != nil {
		return err
	}
	for _, er := range c.eventRings {
		if !er.cfg.Hardware {
			if err := er.arm(); err != nil {
				return err
			}
		}
	}
	if err := c.rmw(RegMHICTRL, MHICTRLStateMask, uint32(StateM0)<<MHICTRLStateShift); err != nil {
		return err
	}
	if err := c.waitFor("M0", c.Timeout(), func() bool { return c.devState == StateM0 }); err != nil {
		return err
	}
	c.setPM(pmM0)
	if err := c.waitFor("mission mode", c.Timeout(), func() bool { return c.eeSeen }); err != nil {
		return err
	}
	// Mission mode: re-read EXECENV as Linux does, then arm the hardware rings.
	if eev, err = c.read(c.bhiOff + BHIExecEnv); err != nil {
		return err
	}
	if !ExecEnv(eev).MissionMode() {
		return fmt.Errorf("%s: EE event said mission mode but EXECENV reads %s: %w", c.name, ExecEnv(eev), ErrBadDevice)
	}
	for _, er := range c.eventRings {
		if er.cfg.Hardware {
			if err := er.arm(); err != nil {
				return err
			}
		}
	}
	c.log.Info("powered up", "state", StateM0, "ee", ExecEnv(eev))
	return nil
}

// pollReg polls register off until done(value) holds or the timeout passes.
func (c *Controller) pollReg(off uint32, timeout time.Duration, done func(uint32) bool) (uint32, error) {
	deadline := time.Now().Add(timeout)
	delay := 100 * time.Microsecond
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
		if c.shuttingDown() {
			return v, ErrPoweredDown
		}
		time.Sleep(delay)
		if delay < 25*time.Millisecond { // Linux polls every 25 ms
			delay *= 2
		}
	}
}

func (c *Controller) readyTimeout() time.Duration {
	if c.cfg.ReadyTimeout > c.Timeout() {
		return c.cfg.ReadyTimeout
	}
	return c.Timeout()
}

// waitReady waits for MHICTRL.RESET to clear and MHISTATUS.READY to be set.
func (c *Controller) waitReady() error {
	to := c.readyTimeout()
	if v, err := c.pollReg(RegMHICTRL, to, func(v uint32) bool { return v&MHICTRLReset == 0 }); err != nil {
		return fmt.Errorf("%s: MHICTRL.RESET still set after %v (MHICTRL=0x%x): %w", c.name, to, v, err)
	}
	v, err := c.pollReg(RegMHISTATUS, to, func(v uint32) bool {
		return v&MHISTATUSReady != 0 && v&MHISTATUSSysErr == 0
	})
	if err != nil {
		return fmt.Errorf("%s: device not READY after %v (MHISTATUS=0x%x): %w", c.name, to, v, err)
	}
	return nil
}

// resetDevice sets MHICTRL.RESET and waits for the device to clear it.
func (c *Controller) resetDevice() error {
	if err := c.rmw(RegMHICTRL, MHICTRLReset, MHICTRLReset); err != nil {
		return err
	}
	to := c.Timeout()
	if v, err := c.pollReg(RegMHICTRL, to, func(v uint32) bool { return v&MHICTRLReset == 0 }); err != nil {
		return fmt.Errorf("%s: device did not finish MHI reset within %v (MHICTRL=0x%x): %w", c.name, to, v, err)
	}
	c.mu.Lock()
	c.devState = StateReset
	c.mu.Unlock()
	// The device clears INTVEC on reset.
	return c.write(c.bhiOff+BHIIntVec, 0)
}

// Suspend moves the device from M0 to M3. Channels keep their state.
func (c *Controller) Suspend() error {
	c.mu.Lock()
	if c.pm != pmM0 {
		pm := c.pm
		c.mu.Unlock()
		return fmt.Errorf("%s: suspend in state %s: %w", c.name, pm, ErrWrongState)
	}
	c.pm = pmM3
	c.mu.Unlock()
	if err := c.rmw(RegMHICTRL, MHICTRLStateMask, uint32(StateM3)<<MHICTRLStateShift); err != nil {
		return err
	}
	return c.waitFor("M3", c.Timeout(), func() bool { return c.devState == StateM3 })
}

// Resume moves the device from M3 back to M0 and rings held-back doorbells.
func (c *Controller) Resume() error {
	c.mu.Lock()
	if c.pm != pmM3 {
		pm := c.pm
		c.mu.Unlock()
		return fmt.Errorf("%s: resume in state %s: %w", c.name, pm, ErrWrongState)
	}
	c.mu.Unlock()
	st, err := c.read(RegMHISTATUS)
	if err != nil {
		return err
	}
	if s := State((st & MHISTATUSStateMask) >> MHISTATUSStateShift); s != StateM3 {
		return fmt.Errorf("%s: resume: device reports %s, not M3: %w", c.name, s, ErrWrongState)
	}
	if err := c.rmw(RegMHICTRL, MHICTRLStateMask, uint32(StateM0)<<MHICTRLStateShift); err != nil {
		return err
	}
	// pm becomes M0 before the M0 event is handled so held doorbells ring.
	c.setPM(pmM0)
	return c.waitFor("M0", c.Timeout(), func() bool { return c.devState == StateM0 })
}

// recoveryWorker recovers from SYS_ERR: it aborts every channel, resets the
// device, powers it up again and restarts the channels clients had started.
func (c *Controller) recoveryWorker(stop <-chan struct{}) {
	defer c.wg.Done()
	for {
		select {
		case <-stop:
			return
		case <-c.recoverCh:
		}
		c.notify(StatusEvent{Kind: StatusSysErr})
		err := c.recover()
		select {
		case <-stop:
			return
		default:
		}
		if err != nil {
			c.log.Error("SYS_ERR recovery failed", "err", err)
			c.setPM(pmSysErr)
			c.notify(StatusEvent{Kind: StatusRecoveryFailed, Err: err})
			continue
		}
		c.stats.Recoveries.Add(1)
		c.log.Info("recovered from SYS_ERR")
		c.notify(StatusEvent{Kind: StatusRecovered})
	}
}

func (c *Controller) recover() error {
	c.cmd.abort()
	var restart []*Channel
	for _, ch := range c.channels {
		if ch == nil {
			continue
		}
		ch.mu.Lock()
		if ch.wanted {
			restart = append(restart, ch)
		}
		ch.state = ChannelDisabled
		ch.mu.Unlock()
		ch.abort()
	}
	if err := c.resetDevice(); err != nil {
		return err
	}
	c.procMu.Lock()
	c.cmd.mu.Lock()
	c.initContexts()
	c.cmd.mu.Unlock()
	c.procMu.Unlock()
	c.setPM(pmPowerUp)
	if err := c.bringUp(); err != nil {
		return err
	}
	for _, ch := range restart {
		if err := ch.Start(nil); err != nil {
			return fmt.Errorf("restarting channel %d: %w", ch.cfg.Num, err)
		}
	}
	return nil
}

// PowerDown resets the device, returns every queued buffer with ErrAborted,
// stops the controller's goroutines and frees its memory.
func (c *Controller) PowerDown() error {
	c.mu.Lock()
	if c.pm == pmDisabled {
		c.mu.Unlock()
		return nil
	}
	c.mu.Unlock()
	err := c.resetDevice()
	c.shutdown()
	if err != nil {
		return fmt.Errorf("%s: power down: %w", c.name, err)
	}
	return nil
}

func (c *Controller) shutdown() {
	c.setPM(pmShutdown)
	c.cmd.abort()
	c.t.SetInterruptHandler(nil)
	if c.stop != nil {
		close(c.stop)
		c.wg.Wait()
		c.stop = nil
	}
	for _, ch := range c.channels {
		if ch != nil {
			ch.mu.Lock()
			ch.state = ChannelDisabled
			ch.wanted = false
			ch.mu.Unlock()
			ch.abort()
		}
	}
	c.procMu.Lock()
	c.release()
	c.procMu.Unlock()
	c.mu.Lock()
	c.pm = pmDisabled
	c.devState = StateReset
	c.cond.Broadcast()
	c.mu.Unlock()
}

func (c *Controller) shuttingDown() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pm == pmShutdown
}

// SoCReset asks the device for a SoC reset (MHI_SOC_RESET_REQ) and recovers
// from it as from SYS_ERR: channels are aborted, the device is brought back
// to M0 and the channels clients had started are restarted. Listeners get
// StatusSysErr, then StatusRecovered (or StatusRecoveryFailed). SoCReset
// returns once the reset is requested; recovery runs in the background.
func (c *Controller) SoCReset() error {
	c.mu.Lock()
	if c.pm != pmM0 && c.pm != pmM3 {
		pm := c.pm
		c.mu.Unlock()
		return fmt.Errorf("%s: SoC reset in state %s: %w", c.name, pm, ErrWrongState)
	}
	c.pm = pmSysErr
	c.mu.Unlock()
	if err := c.write(RegSOCRESETREQ, SOCResetReqBit); err != nil {
		return err
	}
	// Read back to flush the posted write, as Linux does.
	if _, err := c.read(RegSOCRESETREQ); err != nil {
		return err
	}
	c.stats.SoCResets.Add(1)
	select {
	case c.recoverCh <- struct{}{}:
	default:
	}
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
		return fmt.Errorf("%s: timeout %v outside 1ms..10m: %w", c.name, d, ErrConfig)
	}
	c.mu.Lock()
	c.cfg.Timeout = d
	c.mu.Unlock()
	return nil
}
