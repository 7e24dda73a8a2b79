package mhi

import (
	"fmt"
	"time"

	"github.com/gomhi/gomhi/mhi/wire"
)

// recoveryState is the bookkeeping of SYS_ERR recovery. Guarded by
// Controller.mu; reset by PowerUp.
type recoveryState struct {
	consecutive int           // attempts since the device last ran for RecoveryWindow
	backoff     time.Duration // wait before the attempt in progress or next
	stableSince time.Time     // end of the last successful attempt, zero after a failure
	failed      bool          // gave up: RECOVERY_FAILED
	lastErr     error         // error of the last failed attempt
	// hostRequested: the next attempt follows a reset the host asked for
	// (SoCReset), not a device fault; it starts a fresh count.
	hostRequested bool
}

// RecoveryStatus describes SYS_ERR recovery for status displays.
type RecoveryStatus struct {
	// Attempts and Failures count recovery attempts and failed ones since
	// the controller was built.
	Attempts uint64 `json:"attempts"`
	Failures uint64 `json:"failures"`
	// Consecutive is the number of attempts since the device last ran for
	// Options.RecoveryWindow; the controller gives up at
	// Options.RecoveryLimit.
	Consecutive int `json:"consecutive"`
	// Limit is Options.RecoveryLimit (negative: none).
	Limit int `json:"limit"`
	// Backoff is the wait before the attempt in progress or the next one.
	Backoff time.Duration `json:"backoff_ns"`
	// Failed is true in the terminal state RECOVERY_FAILED.
	Failed bool `json:"failed"`
	// LastError is the error of the last failed attempt.
	LastError string `json:"last_error,omitempty"`
}

// Recovery returns the state of SYS_ERR recovery.
func (c *Controller) Recovery() RecoveryStatus {
	c.mu.Lock()
	r := RecoveryStatus{
		Consecutive: c.rec.consecutive, Limit: c.recLimit, Backoff: c.rec.backoff, Failed: c.rec.failed,
	}
	if c.rec.lastErr != nil {
		r.LastError = c.rec.lastErr.Error()
	}
	c.mu.Unlock()
	r.Attempts, r.Failures = c.stats.RecoveryAttempts.Load(), c.stats.RecoveryFailures.Load()
	return r
}

// kickRecovery wakes the recovery worker.
func (c *Controller) kickRecovery() {
	select {
	case c.recoverCh <- struct{}{}:
	default:
	}
}

// requestRecovery starts a recovery for a device fault the host detected
// itself (not a SYS_ERR the device announced), when the host is in M0 or
// M3 (a power-up in progress fails on its own). reason is logged.
func (c *Controller) requestRecovery(reason string) {
	c.mu.Lock()
	ok := c.pm == pmM0 || c.pm == pmM3
	if ok {
		c.setPMLocked(pmSysErr)
	}
	c.mu.Unlock()
	if !ok {
		return
	}
	c.stats.DeviceErrorRecoveries.Add(1)
	c.log.Warn("device fault; recovering as from SYS_ERR", "reason", reason)
	c.kickRecovery()
}

// nextAttempt decides, before a recovery attempt, whether to give up and
// how long to wait first: the first attempt after the device ran for
// RecoveryWindow starts at once, each further consecutive one waits twice
// as long as the one before (RecoveryBackoff, up to RecoveryBackoffMax).
func (c *Controller) nextAttempt() (wait time.Duration, giveUp bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := &c.rec
	if r.hostRequested || (!r.stableSince.IsZero() && time.Since(r.stableSince) >= c.recWindow) {
		r.consecutive = 0
		r.hostRequested = false
	}
	if c.recLimit >= 0 && r.consecutive >= c.recLimit {
		return 0, true
	}
	if r.consecutive > 0 {
		wait = c.recBackoff
		for i := 1; i < r.consecutive && wait < c.recBackoffMax; i++ {
			wait *= 2
		}
		wait = min(wait, c.recBackoffMax)
	}
	r.consecutive++
	r.backoff = wait
	return wait, false
}

// recoveryWorker recovers from SYS_ERR: it aborts every channel, resets the
// device, powers it up again and restarts the channels clients had started.
// Consecutive attempts back off exponentially; after RecoveryLimit of them
// the controller gives up (RECOVERY_FAILED).
func (c *Controller) recoveryWorker(stop <-chan struct{}) {
	defer c.wg.Done()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		select {
		case <-stop:
			return
		case <-c.recoverCh:
		}
		wait, giveUp := c.nextAttempt()
		if giveUp {
			c.giveUp()
			continue
		}
		if wait > 0 {
			timer.Reset(wait)
			select {
			case <-stop:
				return
			case <-timer.C:
			}
		}
		if c.fenced("recovery") != nil {
			continue
		}
		c.stats.RecoveryAttempts.Add(1)
		err := c.recover() // notifies StatusSysErr

		select {
		case <-stop:
			return
		default:
		}
		if err != nil {
			c.stats.RecoveryFailures.Add(1)
			c.log.Error("SYS_ERR recovery failed", "err", err)
			c.mu.Lock()
			c.rec.lastErr, c.rec.stableSince = err, time.Time{}
			retry := c.fencedLocked("recovery") == nil
			if retry {
				c.setPMLocked(pmSysErr)
			}
			c.mu.Unlock()
			c.notify(StatusEvent{Kind: StatusRecoveryFailed, Err: err})
			if retry {
				c.kickRecovery() // try again, after a longer wait, or give up
			}
			continue
		}
		c.mu.Lock()
		c.rec.stableSince, c.rec.backoff = time.Now(), 0
		c.mu.Unlock()
		c.stats.Recoveries.Add(1)
		c.log.Info("recovered from SYS_ERR")
		c.notify(StatusEvent{Kind: StatusRecovered})
	}
}

// drainEvents handles every event the device has posted on every ring.
func (c *Controller) drainEvents() {
	c.procMu.RLock()
	rings := c.eventRings
	c.procMu.RUnlock()
	for _, er := range rings {
		er.process(false)
	}
}

// giveUp enters RECOVERY_FAILED: every channel is aborted, the device is
// reset once more so that it stops, and from then on the controller leaves
// it alone until PowerDown.
func (c *Controller) giveUp() {
	c.mu.Lock()
	if c.fencedLocked("recovery") != nil {
		c.mu.Unlock()
		return
	}
	c.setPMLocked(pmFailed)
	c.rec.failed = true
	n, last := c.rec.consecutive, c.rec.lastErr
	c.mu.Unlock()
	c.stats.RecoveryGaveUp.Add(1)
	c.abandonChannels()
	err := fmt.Errorf("%s: %w: gave up after %d consecutive recoveries (last error: %v); the device is left alone until power-down", c.name, ErrRecoveryFailed, n, last)
	c.mu.Lock()
	c.rec.lastErr = err
	c.mu.Unlock()
	// Stop the device; it may still be in M0. Ended early by PowerDown.
	if rerr := c.resetDevice(true); rerr != nil {
		c.log.Warn("reset on giving up", "err", rerr)
	}
	c.log.Error("SYS_ERR recovery gave up", "consecutive", n, "last_err", last)
	c.notify(StatusEvent{Kind: StatusFailed, Err: err})
}

// abandonChannels, once the host entered a terminal state
// (RECOVERY_FAILED, LINK_DOWN), waits for the data-path writes in flight,
// aborts the command waiting and disables every channel, returning its
// queued buffers with wire.ErrAborted.
func (c *Controller) abandonChannels() {
	c.gate.Lock()
	c.gate.Unlock() // an empty critical section on purpose: no data-path write is in flight after it
	c.cmd.abort()
	for _, ch := range c.channels {
		if ch == nil {
			continue
		}
		ch.mu.Lock()
		ch.state = wire.ChannelDisabled
		ch.mu.Unlock()
		ch.abort()
	}
}

// recover runs one recovery attempt. It observes PowerDown at every step.
func (c *Controller) recover() error {
	// Wake a client command waiting on the device in SYS_ERR, then keep
	// every client Start, Stop and Reset out until the channels run again
	// (a client that comes meanwhile finds pm SYS_ERR and is refused, or
	// waits for the restart).
	c.cmd.abort()
	c.chanOps.Lock()
	defer c.chanOps.Unlock()
	if err := c.fenced("recovery"); err != nil {
		return err
	}
	// Stop the device first: once reset it posts nothing more, so
	// draining the event rings then hands every completion it posted
	// before the error to its client, and the clients hear of the SYS_ERR
	// (the rest of their buffers aborted) only after that: nothing the
	// device delivered is lost without a name.
	c.collectRDDM() // a crashed device's RAM dump, before the reset clears it
	resetErr := c.resetDevice(true)
	if resetErr == nil {
		c.drainEvents()
	}
	c.notify(StatusEvent{Kind: StatusSysErr})
	var restart []*Channel
	for _, ch := range c.channels {
		if ch == nil {
			continue
		}
		ch.mu.Lock()
		if ch.wanted {
			restart = append(restart, ch)
		}
		ch.state = wire.ChannelDisabled
		ch.mu.Unlock()
		ch.abort()
	}
	if resetErr != nil {
		return resetErr
	}
	if err := c.fenced("recovery"); err != nil {
		return err
	}
	c.procMu.Lock()
	c.cmd.mu.Lock()
	c.initContexts()
	c.cmd.mu.Unlock()
	c.procMu.Unlock()
	if err := c.promote(pmSysErr, pmPowerUp, "recovery"); err != nil {
		return err
	}
	if err := c.bringUp(); err != nil {
		return err
	}
	for _, ch := range restart {
		if err := ch.start(nil); err != nil {
			return fmt.Errorf("restarting channel %d: %w", ch.cfg.Num, err)
		}
	}
	return nil
}
