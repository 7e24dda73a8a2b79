package ep

import (
	"fmt"
	"time"

	"github.com/gomhi/gomhi/mhi/wire"
)

// The downlink worker: write the head transfer of the downlink queue
// (channel_queue.go) into the host's TREs, one TRE at a time, with an
// OVERFLOW completion for every piece but the last and EOT for it.
// Everything here runs with work held, unless it says otherwise.

// stopFinishTimeout bounds how long a downlink STOP waits for host buffers
// to finish the transfer in progress before pausing mid-transfer.
const stopFinishTimeout = 500 * time.Millisecond

// serviceDL writes queued downlink transfers into the host's TREs.
// wantWork is true when data waits for TREs. While a STOP is pending
// (stopReq) it finishes the transfer in progress and starts no other.
func (c *channel) serviceDL() (progressed, wantWork bool) {
	for c.canRun() {
		stepped, want := c.stepDL()
		if !stepped {
			return progressed, want
		}
		progressed = true
	}
	return progressed, false
}

// stepDL writes the next piece of the head downlink transfer into the next
// host TRE, or rejects a bad TRE. stepped reports that a TRE was consumed;
// wantWork that data waits for TREs.
func (c *channel) stepDL() (stepped, wantWork bool) {
	if c.dlOff == 0 && c.stopReq.Load() {
		return false, false
	}
	data, ok := c.headDL()
	if !ok {
		return false, false
	}
	if c.available() == 0 {
		c.refreshWrite()
		if c.available() == 0 {
			return false, true
		}
	}
	addr := c.ring.addr(c.rd)
	el, n, err := c.writeDLPiece(addr, data)
	if err != nil {
		c.rejectTRE(addr, el, err) // the data goes into the next TRE
		return true, false
	}
	c.completeDLPiece(addr, el, n, data)
	return true, false
}

// writeDLPiece reads the TRE at addr and writes the next piece of data
// (from dlOff) into its buffer. It returns the TRE and the bytes written.
func (c *channel) writeDLPiece(addr uint64, data []byte) (el wire.Element, n int, err error) {
	el, err = c.readTRE(addr)
	if err != nil {
		return el, 0, err
	}
	c.lastBufLen.Store(el.Length())
	n = min(len(data)-c.dlOff, int(el.Length()))
	if n > 0 {
		if err = c.d.mem.WriteAt(data[c.dlOff:c.dlOff+n], el.Ptr); err != nil {
			return el, n, fmt.Errorf("buffer of TRE at 0x%x: %w", addr, err)
		}
	}
	return el, n, nil
}

// completeDLPiece consumes the TRE at addr, which received n bytes of the
// head transfer data, and posts its completion: EOT for the last piece,
// OVERFLOW for the others. The last piece takes the transfer off the
// queue.
func (c *channel) completeDLPiece(addr uint64, el wire.Element, n int, data []byte) {
	c.dlOff += n
	last := c.dlOff == len(data)
	c.advance()
	code := wire.CCOverflow
	if last {
		code = wire.CCEOT
		c.d.stats.dlTransfers.Add(1)
		c.d.stats.dlBytes.Add(uint64(len(data)))
	}
	c.postTransfer(addr, code, uint32(n), el.Length(), el.Flags()&wire.TREBEI != 0)
	if last {
		c.popDL()
		if c.d.debug {
			c.d.log.Debug("mhi-ep: downlink transfer", "channel", c.num, "bytes", len(data))
		}
	}
}

// finishForStop is the downlink half of STOP_CHAN, run by the control
// goroutine without work held: the worker stops at the next transfer
// boundary (stopReq); then, holding work, it finishes whatever the worker
// left half written, waiting a bounded time (stopFinishTimeout) for the
// host to post the buffers the transfer still needs: the host keeps
// handling completions and refilling while it waits for the STOP to
// complete.
func (c *channel) finishForStop() {
	c.stopReq.Store(true)
	c.work.Lock()
	deadline := time.Now().Add(stopFinishTimeout)
	for c.started && c.canRun() && c.dlOff > 0 {
		c.serviceDL()
		if c.dlOff == 0 || !time.Now().Before(deadline) {
			break
		}
		c.work.Unlock()
		time.Sleep(c.d.cfg.BurstPollInterval)
		c.work.Lock()
	}
	c.work.Unlock()
}
