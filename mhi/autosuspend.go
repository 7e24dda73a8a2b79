package mhi

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/gomhi/gomhi/mhi/wire"
)

// autoSuspend is the host's runtime power management, as Linux's
// runtime PM with autosuspend drives mhi_pm_suspend/resume: after Idle
// without a doorbell or an event the device is put in M3, and a doorbell
// wanted in M3 brings it back to M0 first.
type autoSuspend struct {
	idle   atomic.Int64 // nanoseconds; 0: off
	last   atomic.Int64 // unix nanoseconds of the last activity
	wake   atomic.Bool  // a doorbell waits for M0
	kick   chan struct{}
	worker bool // the worker runs (PowerUp started it)
}

// noteActivity records a doorbell or a processed event.
func (c *Controller) noteActivity() { c.pmAuto.last.Store(time.Now().UnixNano()) }

// requestWake asks the PM worker to resume the device: a doorbell is held
// back in M3. It does nothing unless auto-suspend is on.
func (c *Controller) requestWake() {
	if c.pmAuto.idle.Load() == 0 {
		return
	}
	c.pmAuto.wake.Store(true)
	c.kickPM()
}

func (c *Controller) kickPM() {
	select {
	case c.pmAuto.kick <- struct{}{}:
	default:
	}
}

// SetAutoSuspend sets the idle time after which the host suspends the
// device (M3) by itself, and resumes it when a channel wants to ring a
// doorbell; 0 turns it off. Linux's mhi_pci_generic uses 2 s.
func (c *Controller) SetAutoSuspend(idle time.Duration) error {
	if idle < 0 || idle > time.Hour || idle > 0 && idle < time.Millisecond {
		return fmt.Errorf("%s: auto-suspend delay %v outside 1ms..1h (0: off): %w", c.name, idle, wire.ErrConfig)
	}
	if idle > 0 && c.noM3.Load() {
		return fmt.Errorf("%s: auto-suspend refused: %w", c.name, ErrNoM3)
	}
	c.pmAuto.idle.Store(int64(idle))
	c.noteActivity()
	c.kickPM()
	return nil
}

// AutoSuspend returns the auto-suspend delay (0: off).
func (c *Controller) AutoSuspend() time.Duration { return time.Duration(c.pmAuto.idle.Load()) }

// pmWorker suspends an idle device and resumes it on demand. It runs from
// PowerUp to PowerDown.
func (c *Controller) pmWorker(stop <-chan struct{}) {
	defer c.wg.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		wait := time.Hour
		if idle := time.Duration(c.pmAuto.idle.Load()); idle > 0 {
			switch c.PMState() {
			case pmNames[pmM0]:
				due := time.Unix(0, c.pmAuto.last.Load()).Add(idle)
				if d := time.Until(due); d > 0 {
					wait = d
				} else if err := c.autoSuspendNow(); err != nil {
					c.log.Warn("auto-suspend", "err", err)
					c.noteActivity() // try again after another idle period
					wait = idle
				} else {
					continue
				}
			case pmNames[pmM3]:
				if c.pmAuto.wake.Swap(false) {
					if err := c.Resume(); err != nil {
						c.log.Warn("auto-resume", "err", err)
					}
					c.noteActivity()
					continue
				}
			}
		}
		timer.Reset(wait)
		select {
		case <-stop:
			return
		case <-c.pmAuto.kick:
		case <-timer.C:
		}
		timer.Stop()
	}
}

// autoSuspendNow suspends the idle device; a doorbell that came meanwhile
// wakes it again at once.
func (c *Controller) autoSuspendNow() error {
	if err := c.Suspend(); err != nil {
		if errors.Is(err, ErrWrongState) || errors.Is(err, ErrNoM3) && c.AutoSuspend() == 0 {
			return nil
		}
		return err
	}
	c.stats.AutoSuspends.Add(1)
	c.log.Debug("auto-suspended after idle", "idle", c.AutoSuspend())
	return nil
}
