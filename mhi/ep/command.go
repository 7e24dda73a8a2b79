package ep

import (
	"github.com/gomhi/gomhi/mhi/wire"
)

// commandRing is the device's side of the command ring. Only the control
// goroutine touches it.
type commandRing struct {
	ok      bool // the command context was usable
	ring    ringGeometry
	rd, wr  uint64
	dbSeq   uint32 // CRDB latch count already applied
	badDB   uint64 // last invalid doorbell value logged
	elem    [wire.ElementSize]byte
	ctxBuf  [wire.ContextSize]byte
	ctxIOVA uint64
}

// startCommandRing loads the command ring from the command context at M0.
// Doorbells latched before (seq up to crdbSeq) belong to an earlier session.
func (d *Device) startCommandRing(s *session, crdbSeq uint32) {
	cr := &s.cmd
	cr.ctxIOVA = s.cmdCtxBase
	cr.dbSeq = crdbSeq
	ctx, err := d.readContext(cr.ctxIOVA, &cr.ctxBuf)
	if err == nil && d.observing() {
		d.observe(Observation{Kind: ObserveContext, Ring: RingCommand, Context: ctx})
	}
	if err == nil {
		cr.ring, err = d.newRingGeometry(ctx.RBase, ctx.RLen)
	}
	if err != nil {
		d.boundsViolation("bad command ring context", "crcbap", cr.ctxIOVA, "err", err)
		return
	}
	rd, ok := cr.ring.index(ctx.RP)
	if !ok {
		d.boundsViolation("command ring rp outside the ring", "rp", ctx.RP, "base", cr.ring.base, "end", cr.ring.end())
		return
	}
	cr.rd, cr.wr = rd, rd
	if wr, ok := cr.ring.index(ctx.WP); ok {
		cr.wr = wr
	}
	cr.ok = true
}

// processCommands executes the commands from the device's read pointer up
// to the latest command doorbell, replying to each on event ring 0.
func (d *Device) processCommands(s *session) {
	cr := &s.cmd
	if !cr.ok {
		d.boundsViolation("command doorbell without a usable command ring")
		return
	}
	value, seq := d.latchedDoorbell(&d.regs.crdb)
	if seq != cr.dbSeq {
		cr.dbSeq = seq
		if wr, ok := cr.ring.index(value); ok {
			cr.wr = wr
		} else if value != cr.badDB {
			cr.badDB = value
			d.boundsViolation("command doorbell outside the command ring", "value", value,
				"base", cr.ring.base, "end", cr.ring.end())
		}
	}
	for cr.rd != cr.wr && s.active.Err() == nil {
		addr := cr.ring.addr(cr.rd)
		el, err := d.readElement(addr, &cr.elem)
		code := wire.CCUndefinedErr
		var started *channel
		if err != nil {
			d.boundsViolation("command element unreadable", "addr", addr, "err", err)
		} else {
			if d.observing() {
				d.observe(Observation{Kind: ObserveElement, Ring: RingCommand, Slot: cr.rd, Element: el})
			}
			code, started = d.executeCommand(s, el)
		}
		cr.rd = cr.ring.next(cr.rd)
		if err := d.store64(cr.ctxIOVA+wire.CtxRP, cr.ring.addr(cr.rd)); err != nil {
			d.boundsViolation("command context rp not writable", "err", err)
		}
		d.stats.commands.Add(1)
		if code != wire.CCSuccess {
			d.stats.commandErrors.Add(1)
		}
		d.postControlEvent(s, wire.CommandCompletionEvent(addr, code))
		if started != nil {
			started.activate()
		}
	}
}

// executeCommand carries out one command element and returns the
// completion code to reply with and, for a successful START, the channel to
// activate once the completion is posted.
func (d *Device) executeCommand(s *session, el wire.Element) (wire.CompletionCode, *channel) {
	t := el.Type()
	if t == wire.PktNoopCmd {
		return wire.CCSuccess, nil
	}
	if t != wire.PktStartChanCmd && t != wire.PktStopChanCmd && t != wire.PktResetChanCmd {
		d.log.Warn("mhi-ep: unknown command", "element", el)
		return wire.CCUndefinedErr, nil
	}
	num := el.Channel()
	c := d.channelByNum(num)
	if c == nil {
		// Linux's EP stack skips commands for channels it does not have and
		// never replies, which leaves the host waiting for a timeout. We
		// reply UNDEFINED_ERR so that the host fails the request cleanly.
		d.log.Warn("mhi-ep: command for a channel the device does not offer", "command", t, "channel", num)
		return wire.CCUndefinedErr, nil
	}
	d.log.Debug("mhi-ep: command", "command", t, "channel", num)
	switch t {
	case wire.PktStartChanCmd:
		if err := c.start(s); err != nil {
			d.boundsViolation("START_CHAN refused: bad channel context", "channel", num, "err", err)
			return wire.CCUndefinedErr, nil
		}
		return wire.CCSuccess, c
	case wire.PktStopChanCmd:
		c.stop()
	case wire.PktResetChanCmd:
		c.reset()
	}
	return wire.CCSuccess, nil
}
