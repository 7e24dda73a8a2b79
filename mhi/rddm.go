package mhi

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/gomhi/gomhi/mhi/wire"
)

// ErrNoDump: the device crashed without entering RDDM, or RAM-dump
// collection is not enabled (Options.RDDMSize).
var ErrNoDump = errors.New("mhi: no RAM dump")

// rddmState is the host's RAM-dump collection. Guarded by Controller.mu
// except vt and seq, which only bringUp and the recovery worker touch.
type rddmState struct {
	size, segSize int
	vt            *vectorTable
	seq           uint32
	armed         atomic.Bool // the table is programmed in BHIe this power cycle
	// Results: the last dump, the number of crashes looked at (gen) and
	// the error of the last collection.
	last    []byte
	lastAt  time.Time
	gen     uint64
	lastErr error
}

// armRDDM programs the receive vector table, as Linux's mhi_rddm_prepare:
// RXVECADDR, RXVECSIZE and a random sequence in RXVECDB. The table is
// allocated once and kept until the memory is released.
func (c *Controller) armRDDM() error {
	r := &c.rddm
	if r.vt == nil {
		vt, err := c.newVectorTable(r.size, r.segSize)
		if err != nil {
			return err
		}
		r.vt = vt
	}
	// Each power-up starts with every entry at its full size: the device
	// rewrites them with what it used.
	for i, s := range r.vt.segs {
		binary.LittleEndian.PutUint64(r.vt.table.Bytes[i*wire.VectorEntrySize+8:], uint64(len(s.Bytes)))
	}
	bhie, err := c.bhieBlock()
	if err != nil {
		return err
	}
	r.seq = randomSeq()
	return c.bhiWrites([]regWrite{
		{bhie + wire.BHIERxVecAddrHigh, uint32(r.vt.table.IOVA >> 32)},
		{bhie + wire.BHIERxVecAddrLow, uint32(r.vt.table.IOVA)},
		{bhie + wire.BHIERxVecSize, uint32(len(r.vt.table.Bytes))},
		{bhie + wire.BHIERxVecDB, r.seq},
	})
}

// releaseRDDM frees the dump table (with the rest of the memory).
func (c *Controller) releaseRDDM() {
	c.freeVectorTable(c.rddm.vt)
	c.rddm.vt = nil
}

// collectRDDM runs in the recovery worker before the device is reset:
// when the device reports EE RDDM it waits for RXVECSTATUS to complete for
// the host's sequence and copies the dump out of the segments, each up to
// the length the device recorded in its entry (never more than the
// segment). The result is kept for LastDump and CollectDump.
func (c *Controller) collectRDDM() {
	r := &c.rddm
	if r.size == 0 || r.vt == nil || c.bhiOff == 0 {
		return
	}
	if !r.armed.Load() {
		c.finishDump(nil, fmt.Errorf("%s: no dump table in BHIe this power cycle: %w", c.name, ErrNoDump))
		return
	}
	ee, err := c.read(c.bhiOff + wire.BHIExecEnv)
	if err != nil || wire.ExecEnv(ee) != wire.EERDDM {
		c.finishDump(nil, fmt.Errorf("%s: device crashed in EE %s, not RDDM: %w", c.name, wire.ExecEnv(ee), ErrNoDump))
		return
	}
	bhie, err := c.bhieBlock()
	if err != nil {
		c.finishDump(nil, err)
		return
	}
	st, err := c.vecStatus(bhie+wire.BHIERxVecStatus, r.seq, c.Timeout())
	if err == nil && st != wire.BHIStatusSuccess {
		err = fmt.Errorf("%s: RAM dump failed (RXVECSTATUS status %d): %s: %w", c.name, st, c.bhiErrors(), ErrNoDump)
	}
	if err != nil {
		c.finishDump(nil, fmt.Errorf("%s: collecting the RAM dump: %w", c.name, err))
		return
	}
	var out []byte
	for i, s := range r.vt.segs {
		n := binary.LittleEndian.Uint64(r.vt.table.Bytes[i*wire.VectorEntrySize+8:])
		if n > uint64(len(s.Bytes)) {
			c.stats.BadRegister.Add(1)
			c.log.Warn("RAM dump segment length beyond its segment; clamped", "segment", i, "length", n, "segment_size", len(s.Bytes))
			n = uint64(len(s.Bytes))
		}
		out = append(out, s.Bytes[:n]...)
		if n < uint64(len(s.Bytes)) {
			break // the dump ends in this segment
		}
	}
	c.finishDump(out, nil)
}

// finishDump records the outcome of one crash's dump collection.
func (c *Controller) finishDump(dump []byte, err error) {
	if err != nil {
		c.stats.DumpErrors.Add(1)
		c.log.Warn("no RAM dump", "err", err)
	} else {
		c.stats.Dumps.Add(1)
		c.log.Info("RAM dump collected", "bytes", len(dump))
	}
	c.mu.Lock()
	c.rddm.gen++
	if err == nil {
		c.rddm.last, c.rddm.lastAt = dump, time.Now()
	}
	c.rddm.lastErr = err
	c.cond.Broadcast()
	c.mu.Unlock()
}

// LastDump returns the last RAM dump collected and when, or nil.
func (c *Controller) LastDump() ([]byte, time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rddm.last, c.rddm.lastAt
}

// DumpCapacity returns the bytes of host memory kept for a RAM dump
// (Options.RDDMSize; 0: collection is off).
func (c *Controller) DumpCapacity() int { return c.rddm.size }

// CollectDump makes the device crash into RDDM, as Linux's
// mhi_force_rddm_mode does (MHICTRL state SYS_ERR), and returns the RAM
// dump the recovery collects before it resets the device. It needs
// Options.RDDMSize and a device in M0; it fails wrapping ErrNoDump when the
// device crashes without a dump, ErrTimeout when nothing happens in time.
func (c *Controller) CollectDump(timeout time.Duration) ([]byte, error) {
	if c.rddm.size == 0 {
		return nil, fmt.Errorf("%s: RAM-dump collection is not enabled (Options.RDDMSize): %w", c.name, ErrNoDump)
	}
	if !c.rddm.armed.Load() {
		return nil, fmt.Errorf("%s: no dump table in the device's BHIe block (BHIEOFF unusable): %w", c.name, ErrNoDump)
	}
	c.mu.Lock()
	if c.pm != pmM0 {
		pm := c.pm
		c.mu.Unlock()
		return nil, fmt.Errorf("%s: RAM dump in state %s: %w", c.name, pm, ErrWrongState)
	}
	gen := c.rddm.gen
	c.mu.Unlock()
	c.gate.RLock()
	err := c.rmw(wire.RegMHICTRL, wire.MHICTRLStateMask, uint32(wire.StateSysErr)<<wire.MHICTRLStateShift)
	c.gate.RUnlock()
	if err != nil {
		return nil, err
	}
	// The dump comes with the recovery of the SYS_ERR this causes.
	if err := c.waitForAny("RAM dump", timeout, func() bool { return c.rddm.gen != gen }); err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.rddm.lastErr != nil {
		return nil, c.rddm.lastErr
	}
	return c.rddm.last, nil
}
