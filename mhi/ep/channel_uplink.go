package ep

import (
	"fmt"
	"slices"

	"github.com/gomhi/gomhi/mhi/wire"
)

// The uplink worker: read a chain of TREs (one transfer) from the host's
// ring, hand its bytes to the Function, complete its TREs. Everything here
// runs with work held.

// pendingTRE is a TRE read from the ring and not yet completed.
type pendingTRE struct {
	addr uint64
	el   wire.Element
}

// gatherResult says what gatherUL found.
type gatherResult int

const (
	gatherComplete   gatherResult = iota // a whole transfer is in ulData
	gatherIncomplete                     // the chain continues past the write pointer
	gatherBad                            // a bad TRE was rejected
)

// serviceUL reads uplink transfers, hands them to the Function and
// completes their TREs. wantWork is false when processing was aborted.
func (c *channel) serviceUL() (progressed, wantWork bool) {
	for c.canRun() {
		avail := c.available()
		if avail == 0 {
			c.refreshWrite()
			if avail = c.available(); avail == 0 {
				c.idleUL()
				return progressed, true
			}
		}
		switch c.gatherUL(avail) {
		case gatherBad:
			progressed = true
			continue
		case gatherIncomplete:
			c.refreshWrite()
			if c.available() == avail {
				c.idleUL()
				return progressed, true
			}
			continue
		}
		if !c.deliverUL() {
			return progressed, false
		}
		c.completeUL()
		progressed = true
	}
	return progressed, false
}

// gatherUL reads the TREs of one transfer from the read pointer, without
// consuming them, and concatenates their buffers into ulData.
func (c *channel) gatherUL(avail uint64) gatherResult {
	c.ulData = c.ulData[:0]
	c.ulTREs = c.ulTREs[:0]
	idx := c.rd
	for range avail {
		addr := c.ring.addr(idx)
		el, err := c.readTRE(addr)
		if err == nil {
			err = c.appendULBuffer(addr, el)
		}
		if err != nil {
			// The chain so far is consumed with the bad TRE and its data
			// dropped: the host cannot get a whole transfer out of it.
			for range c.ulTREs {
				c.advance()
			}
			c.rejectTRE(addr, el, err)
			return gatherBad
		}
		c.ulTREs = append(c.ulTREs, pendingTRE{addr: addr, el: el})
		idx = c.ring.next(idx)
		if el.Flags()&wire.TREChain == 0 {
			return gatherComplete
		}
	}
	return gatherIncomplete
}

// appendULBuffer appends the buffer of the TRE at addr to ulData.
func (c *channel) appendULBuffer(addr uint64, el wire.Element) error {
	n := int(el.Length())
	off := len(c.ulData)
	c.ulData = slices.Grow(c.ulData, n)[:off+n]
	if n == 0 {
		return nil
	}
	if err := c.d.mem.ReadAt(c.ulData[off:], el.Ptr); err != nil {
		return fmt.Errorf("buffer of TRE at 0x%x: %w", addr, err)
	}
	return nil
}

// idleUL tells an Idler Function that the uplink ran dry after at least
// one delivered transfer.
func (c *channel) idleUL() {
	if !c.ulBusy {
		return
	}
	c.ulBusy = false
	if idler, ok := c.pipe.fn.(Idler); ok {
		idler.Idle(c.pipe)
	}
}

// deliverUL hands ulData to the Function; false means processing was
// aborted and the transfer stays unconsumed.
func (c *channel) deliverUL() bool {
	fn := c.pipe.fn
	if fn == nil {
		c.d.stats.ulDiscarded.Add(1)
		return true
	}
	c.ulBusy = true
	if err := fn.Receive(c.runCtx, c.pipe, c.ulData); err != nil {
		if c.runCtx.Err() != nil {
			return false
		}
		c.d.stats.ulDiscarded.Add(1)
		c.d.log.Warn("mhi-ep: function dropped an uplink transfer", "channel", c.num,
			"bytes", len(c.ulData), "err", err)
	}
	return true
}

// completeUL consumes the gathered TREs and posts their completions: EOB
// for a chained TRE with IEOB, EOT for the last TRE with IEOT, nothing
// otherwise.
func (c *channel) completeUL() {
	// Counted before the host can see the completions, so that a host that
	// has them also sees the counters.
	c.d.stats.ulTransfers.Add(1)
	c.d.stats.ulBytes.Add(uint64(len(c.ulData)))
	for _, t := range c.ulTREs {
		c.advance()
		flags, n := t.el.Flags(), t.el.Length()
		chained := flags&wire.TREChain != 0
		var code wire.CompletionCode
		switch {
		case chained && flags&wire.TREIEOB != 0:
			code = wire.CCEOB
		case !chained && flags&wire.TREIEOT != 0:
			code = wire.CCEOT
		default:
			continue
		}
		c.postTransfer(t.addr, code, n, n, flags&wire.TREBEI != 0)
	}
	if c.d.debug {
		c.d.log.Debug("mhi-ep: uplink transfer", "channel", c.num, "bytes", len(c.ulData), "tres", len(c.ulTREs))
	}
}
