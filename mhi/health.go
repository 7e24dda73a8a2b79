package mhi

import (
	"fmt"
	"time"

	"github.com/gomhi/gomhi/mhi/wire"
)

// DefaultHealthInterval is the default Options.HealthInterval: Linux's
// mhi_pci_generic checks its modems every 2 s.
const DefaultHealthInterval = 2 * time.Second

// PMLinkDown is the name of the terminal host state PMState reports once
// the device stopped answering on the bus (ErrLinkDown).
const PMLinkDown = "LINK_DOWN"

// healthWorker checks, every interval while the host is in M0, that the
// device still answers on the bus. A PCI function that fell off the bus
// (surprise removal, a link that went down after completion timeouts)
// reads as all ones and takes writes without effect, and it raises no
// interrupt: without this check the host would sit in M0 and its clients
// would wait out every command's timeout. Linux's mhi_pci_generic reads
// the function's vendor ID from config space for the same purpose; the
// transport here gives only the MHI BAR, so the check reads MHIVER, a
// constant no live device reads as all ones. It runs from PowerUp to
// PowerDown.
func (c *Controller) healthWorker(stop <-chan struct{}, interval time.Duration) {
	defer c.wg.Done()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		if pmState(c.pmNow.Load()) != pmM0 {
			// M3 may be D3hot on a real function, where reads are all
			// ones; power-up, recovery and power-down read the device
			// themselves and time out on a dead one.
			continue
		}
		if cause := c.deviceGone(); cause != "" {
			c.linkDown(cause)
			return
		}
	}
}

// deviceGone reads MHIVER and, if it reads as all ones, MHISTATUS too; it
// returns why the device looks gone, or "" while it answers.
func (c *Controller) deviceGone() string {
	c.stats.HealthChecks.Add(1)
	v, err := c.t.Read32(wire.RegMHIVER)
	if err != nil {
		return fmt.Sprintf("reading MHIVER failed: %v", err)
	}
	if v != 0xFFFFFFFF {
		return ""
	}
	// One all-ones read could be a register of a device in flux; two
	// registers that never hold all ones cannot both be.
	st, err := c.t.Read32(wire.RegMHISTATUS)
	if err != nil {
		return fmt.Sprintf("MHIVER reads 0xffffffff, and reading MHISTATUS failed: %v", err)
	}
	if st != 0xFFFFFFFF {
		return ""
	}
	return "MHIVER and MHISTATUS read 0xffffffff"
}

// linkDown enters LINK_DOWN: the device is gone, so nothing more is
// written to it and nothing it might still post is read; every command
// and channel is aborted (queued buffers come back with wire.ErrAborted), and
// listeners get StatusLinkDown. The host leaves the device alone until
// PowerDown, which then skips the reset handshake a dead device cannot
// answer.
func (c *Controller) linkDown(cause string) {
	c.mu.Lock()
	if c.fencedLocked("link check") != nil {
		c.mu.Unlock()
		return
	}
	err := fmt.Errorf("%s: %w: %s", c.name, ErrLinkDown, cause)
	c.setPMLocked(pmLinkDown)
	c.gone = err
	c.mu.Unlock()
	c.abandonChannels()
	c.log.Error("device not responding: link down or device removed; channels stopped, the device is left alone until power-down", "cause", cause)
	c.notify(StatusEvent{Kind: StatusLinkDown, Err: err})
}

// LinkDown returns the error that put the controller in LINK_DOWN (it
// wraps ErrLinkDown), or nil.
func (c *Controller) LinkDown() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gone
}
