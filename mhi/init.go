package mhi

import (
	"fmt"

	"github.com/gomhi/gomhi/mhi/wire"
)

// allocate builds the context arrays and all rings in DMA memory. It runs
// once; later power-ups reuse the memory.
func (c *Controller) allocate() error {
	if c.allocated {
		return nil
	}
	var err error
	fail := func(e error) error {
		c.release()
		return fmt.Errorf("%s: %w", c.name, e)
	}
	if c.chCtx, err = c.t.Alloc(wire.ContextSize*c.cfg.MaxChannels, 64); err != nil {
		return fail(err)
	}
	if c.erCtx, err = c.t.Alloc(wire.ContextSize*len(c.cfg.EventRings), 64); err != nil {
		return fail(err)
	}
	if c.cmdCtx, err = c.t.Alloc(wire.ContextSize, 64); err != nil {
		return fail(err)
	}
	if c.cmd.ring, err = newRing(c.t, c.cfg.CommandElements); err != nil {
		return fail(err)
	}
	vectors := c.t.Vectors()
	sharedVector := vectors < 1+len(c.cfg.EventRings)
	c.eventRings = make([]*EventRing, len(c.cfg.EventRings))
	for i, erc := range c.cfg.EventRings {
		r, err := newRing(c.t, erc.Elements)
		if err != nil {
			return fail(err)
		}
		vec := erc.Vector
		if sharedVector || vec >= vectors {
			vec = 0
		}
		c.eventRings[i] = &EventRing{ctrl: c, index: i, cfg: erc, ring: r, vector: vec, notify: make(chan struct{}, 1)}
	}
	for _, ch := range c.channels {
		if ch == nil {
			continue
		}
		r, err := newRing(c.t, ch.cfg.Elements)
		if err != nil {
			return fail(err)
		}
		ch.ring = r
		ch.slots = make([]slot, ch.cfg.Elements)
		ch.er = c.eventRings[ch.cfg.EventRing]
		ch.bei = c.cfg.EventRings[ch.cfg.EventRing].ModerationMs != 0
	}
	c.allocated = true
	c.initContexts()
	return nil
}

// release frees all DMA memory.
func (c *Controller) release() {
	free := func(b *DMABuffer) {
		if b.Bytes != nil {
			_ = c.t.Free(*b)
			*b = DMABuffer{}
		}
	}
	free(&c.chCtx)
	free(&c.erCtx)
	free(&c.cmdCtx)
	free(&c.cmd.mem)
	for _, er := range c.eventRings {
		if er != nil {
			free(&er.mem)
		}
	}
	c.eventRings = nil
	c.releaseRDDM()
	for _, ch := range c.channels {
		if ch != nil {
			free(&ch.ring.mem)
		}
	}
	c.allocated = false
}

// initContexts writes every context in its initial (disabled, empty) form
// and resets the host's ring indices.
func (c *Controller) initContexts() {
	clear(c.chCtx.Bytes)
	for _, ch := range c.channels {
		if ch == nil {
			continue
		}
		// Under the channel's lock: in a SYS_ERR recovery clients may
		// be looking at the ring (Channel.Free from a refill).
		ch.mu.Lock()
		ch.ring.reset()
		ch.writeContext(wire.ChannelDisabled, false)
		ch.mu.Unlock()
	}
	for i, er := range c.eventRings {
		er.ring.reset()
		er.devRP = 0
		er.forgetBadRP()
		ctx := wire.Context{
			Cfg:   uint32(er.cfg.ModerationMs) << wire.IntModTShift,
			Type:  wire.ERTypeValid,
			Index: uint32(er.vector),
			RBase: er.base(),
			RLen:  er.length(),
			RP:    er.base(),
			WP:    er.base(),
		}
		ctx.Put(c.erCtx.Bytes[i*wire.ContextSize:])
	}
	c.cmd.ring.reset()
	wire.Context{RBase: c.cmd.base(), RLen: c.cmd.length(), RP: c.cmd.base(), WP: c.cmd.base()}.Put(c.cmdCtx.Bytes)
}

// MinRegLen is the smallest MHIREGLEN the host accepts: the MHI control
// registers. CHDBOFF, ERDBOFF, BHIOFF and BHIEOFF must point at or beyond
// it, so that no doorbell or BHI access lands on a control register.
const MinRegLen = 0x100

// checkRegLen checks MHIREGLEN against the BAR size (0: unknown).
func (c *Controller) checkRegLen(regLen uint32, bar uint64) error {
	if regLen < MinRegLen || regLen%4 != 0 || bar != 0 && uint64(regLen) > bar {
		c.stats.BadRegister.Add(1)
		return fmt.Errorf("%s: %w: MHIREGLEN 0x%x: want a multiple of 4 from 0x%x up to the BAR size 0x%x", c.name, ErrBadDevice, regLen, MinRegLen, bar)
	}
	return nil
}

// checkBlock checks that a block of size bytes at the offset off the device
// published in register name lies inside the register space: 4-byte
// aligned, past the control registers, and ending within MHIREGLEN (which
// checkRegLen already bounded by the BAR), computed without overflow.
func (c *Controller) checkBlock(name string, off uint32, size uint64, regLen uint32, bar uint64) error {
	if off%4 != 0 || off < MinRegLen || uint64(off)+size > uint64(regLen) {
		c.stats.BadRegister.Add(1)
		return fmt.Errorf("%s: %w: %s 0x%x: 0x%x bytes there do not fit 4-byte aligned in [0x%x, 0x%x) (MHIREGLEN 0x%x, BAR 0x%x)",
			c.name, ErrBadDevice, name, off, size, MinRegLen, regLen, regLen, bar)
	}
	return nil
}

// initMMIO reads the device's doorbell offsets and programs the context
// bases, the address limits and the event ring counts (NER, then NHWER, a
// read-modify-write each), in Linux's order.
// readLayout has checked MHIREGLEN and BHIOFF.
func (c *Controller) initMMIO() error {
	var err error
	if c.chdbOff, err = c.read(wire.RegCHDBOFF); err != nil {
		return err
	}
	if c.erdbOff, err = c.read(wire.RegERDBOFF); err != nil {
		return err
	}
	ner := uint32(len(c.cfg.EventRings))
	bar := c.barSize()
	if err := c.checkBlock("CHDBOFF", c.chdbOff, wire.DoorbellStride*wire.MaxDoorbellChannels, c.regLen, bar); err != nil {
		return err
	}
	if err := c.checkBlock("ERDBOFF", c.erdbOff, wire.DoorbellStride*uint64(ner), c.regLen, bar); err != nil {
		return err
	}
	// BHIe is used only for a full-image download and RDDM, which check
	// BHIEOFF themselves: a bad value is counted and logged here.
	bhie, err := c.read(wire.RegBHIEOFF)
	if err != nil {
		return err
	}
	if bhie != 0 && c.checkBlock("BHIEOFF", bhie, wire.BHIESize, c.regLen, bar) != nil {
		c.log.Warn("BHIEOFF outside the register space; BHIe unusable", "bhieoff", fmt.Sprintf("0x%x", bhie))
	}
	for _, w := range []struct {
		off uint32
		v   uint64
	}{
		{wire.RegCCABAPLower, c.chCtx.IOVA},
		{wire.RegECABAPLower, c.erCtx.IOVA},
		{wire.RegCRCBAPLower, c.cmdCtx.IOVA},
	} {
		if err := c.write64(w.off, w.v); err != nil {
			return err
		}
	}
	const iovaStop = 0xFFFFFFFF // 32-bit DMA width, as every modem in Linux's table
	for _, w := range []struct {
		off uint32
		v   uint64
	}{
		{wire.RegMHICTRLBASELower, 0},
		{wire.RegMHIDATABASELower, 0},
		{wire.RegMHICTRLLIMITLower, iovaStop},
		{wire.RegMHIDATALIMITLower, iovaStop},
	} {
		if err := c.write64(w.off, w.v); err != nil {
			return err
		}
	}
	// The event ring counts last, one field at a time, as Linux 6.1 to 7.3
	// do (their transcripts: docs/FIDELITY.md §10).
	if err := c.rmw(wire.RegMHICFG, wire.MHICFGNERMask, ner<<wire.MHICFGNERShift); err != nil {
		return err
	}
	return c.rmw(wire.RegMHICFG, wire.MHICFGNHWERMask, uint32(c.cfg.HWEventRings())<<wire.MHICFGNHWERShift)
}

func (c *Controller) chdb(ch uint8) uint32 { return c.chdbOff + wire.DoorbellStride*uint32(ch) }
func (c *Controller) erdb(i int) uint32    { return c.erdbOff + wire.DoorbellStride*uint32(i) }
