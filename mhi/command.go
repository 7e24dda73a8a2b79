package mhi

import (
	"fmt"
	"sync"
	"time"

	"github.com/gomhi/gomhi/mhi/wire"
)

// commandRing is the host's command ring. Commands are issued one at a time
// and each waits for its completion event.
//
// Its locks are in the Controller's lock order (see Controller): issue
// after chanOps and before procMu, mu after EventRing.mu and before
// Channel.mu.
type commandRing struct {
	ring
	// issue serialises commands: held from posting a command until its
	// completion, abort or timeout.
	issue sync.Mutex

	// mu guards the ring's indices, waiting and done: taken by the sender,
	// by the completion (under the event ring's mu) and by aborts, and
	// held by a recovery's context rewrite around the channels' mu.
	mu      sync.Mutex
	waiting int // index of the outstanding command, -1 if none
	done    chan wire.CompletionCode
}

// send posts a command for channel ch and waits for its completion.
func (c *Controller) sendCommand(t wire.PacketType, ch uint8) error {
	cr := &c.cmd
	cr.issue.Lock()
	defer cr.issue.Unlock()

	c.mu.Lock()
	quit := c.stop
	ferr := c.fencedLocked(fmt.Sprintf("%s channel %d", t, ch))
	if ferr == nil && c.pm == pmSysErr {
		// The device will not answer; the recovery aborts commands in
		// flight and issues its own once the device is back in M0.
		ferr = fmt.Errorf("%s: %s channel %d: %w", c.name, t, ch, ErrRecovering)
	}
	c.mu.Unlock()
	if ferr != nil {
		return ferr
	}
	c.procMu.RLock()
	if !c.allocated || quit == nil {
		c.procMu.RUnlock()
		return fmt.Errorf("%s: %s channel %d: %w", c.name, t, ch, ErrPoweredDown)
	}
	done := make(chan wire.CompletionCode, 1)
	cr.mu.Lock()
	idx := cr.wp
	cr.put(idx, wire.CommandElement(t, ch))
	cr.wp = cr.next(cr.wp)
	cr.waiting, cr.done = idx, done
	wp := cr.iova(cr.wp)
	cr.mu.Unlock()
	wire.Store64(c.cmdCtx.Bytes, wire.CtxWP, wp)
	c.stats.Commands.Add(1)
	err := c.gatedDoorbell(wire.RegCRDBLower, wp)
	c.procMu.RUnlock()
	if err != nil {
		cr.abort()
		return fmt.Errorf("%s: %s channel %d: %w", c.name, t, ch, err)
	}

	timer := time.NewTimer(c.Timeout())
	defer timer.Stop()
	select {
	case code, ok := <-done:
		if !ok {
			return fmt.Errorf("%s: %s channel %d aborted: %w", c.name, t, ch, ErrSysErr)
		}
		if code != wire.CCSuccess {
			return fmt.Errorf("%s: %s channel %d completed with %s: %w", c.name, t, ch, code, ErrCommandFailed)
		}
		return nil
	case <-timer.C:
		cr.abort()
		return fmt.Errorf("%s: %s channel %d: no completion within %v: %w", c.name, t, ch, c.Timeout(), ErrTimeout)
	case <-quit:
		cr.abort()
		return fmt.Errorf("%s: %s channel %d: %w", c.name, t, ch, ErrPoweredDown)
	}
}

// complete handles a command completion event.
func (cr *commandRing) complete(c *Controller, ev wire.Element) {
	idx, err := cr.index(ev.Ptr)
	if err != nil {
		c.stats.BadEventPtr.Add(1)
		c.log.Warn("command completion outside the command ring", "event", ev, "err", err)
		return
	}
	cr.mu.Lock()
	defer cr.mu.Unlock()
	if cr.done == nil || idx != cr.waiting {
		c.stats.StaleCompletion.Add(1)
		c.log.Warn("command completion for no outstanding command", "event", ev)
		return
	}
	cr.rp = cr.next(idx)
	cr.done <- ev.Code()
	cr.done, cr.waiting = nil, -1
}

// abort fails the outstanding command, if any.
func (cr *commandRing) abort() {
	cr.mu.Lock()
	defer cr.mu.Unlock()
	if cr.done != nil {
		close(cr.done)
		cr.done, cr.waiting = nil, -1
	}
}
