package ep

import (
	"math"
	"sync/atomic"
	"time"

	"github.com/gomhi/gomhi/mhi/simclock"
	"github.com/gomhi/gomhi/mhi/wire"
)

// Timing is what the modem's downlink data path takes in virtual time
// (Config.Clock). The DMA engine writes one host buffer (TRE) at a time:
// the first buffer of a transfer costs TransferSetup and PacketCost per
// packet of the transfer, every buffer ElementSetup, and every byte
// 1/DMABytesPerSecond; the buffer's completion event is posted when its
// write ends, and the next write starts then. With TREBurst the engine
// reads the host's TREs in bursts (see TREBurst). The zero value takes no
// time: a transfer is written as soon as there are buffers for it.
type Timing struct {
	// PacketCost is the modem's time per packet of a transfer (taking the
	// packet from its receive queue and framing it into the aggregate),
	// spent before the transfer's first buffer is written.
	PacketCost time.Duration
	// HeaderWindow and HeaderByteCost: the modem's CPU handles the first
	// HeaderWindow bytes of every packet itself (its headers; the rest of
	// a longer packet is moved by the hardware without it), at
	// HeaderByteCost nanoseconds per byte, spent with PacketCost before
	// the transfer's first buffer is written. A packet of n bytes costs
	// min(n, HeaderWindow)×HeaderByteCost. Zero: no such cost.
	HeaderWindow   int
	HeaderByteCost float64
	// TREBurst, if positive, is the number of TREs the engine reads from
	// the host's ring at a time. A busy period (downlink data queued after
	// none was) starts with a read of up to TREBurst of the TREs the host
	// has posted; when they are used up and data still waits, the engine
	// reads the ring again TREPoll later. Zero: every posted TRE is at
	// hand at once.
	TREBurst int
	// TREPoll is the time until the engine reads the ring again when its
	// burst of TREs is used up (with TREBurst).
	TREPoll time.Duration
	// TransferSetup is the DMA engine's time to start a transfer: reading
	// the aggregate's descriptor, setting up the copy.
	TransferSetup time.Duration
	// ElementSetup is its time per host buffer: reading the TRE, writing
	// the completion event.
	ElementSetup time.Duration
	// DMABytesPerSecond is the rate at which it writes into host memory
	// (0: instantly).
	DMABytesPerSecond float64
}

// dmaCost is the virtual time to write n bytes into one host buffer; first
// says it is the first buffer of its transfer, of units packets whose
// header bytes (see HeaderWindow) add up to headers.
func (t *Timing) dmaCost(first bool, n, units, headers int) time.Duration {
	d := t.ElementSetup
	if first {
		d += t.TransferSetup + time.Duration(units)*t.PacketCost
		if t.HeaderByteCost > 0 && headers > 0 {
			d += time.Duration(math.Round(float64(headers) * t.HeaderByteCost))
		}
	}
	if t.DMABytesPerSecond > 0 && n > 0 {
		d += time.Duration(math.Round(float64(n) * 1e9 / t.DMABytesPerSecond))
	}
	return d
}

// vworker runs a channel's work as events of the device's clock instead of
// on a goroutine. One timer serves everything: a kick (now), the end of a
// downlink buffer's DMA, a burst poll.
type vworker struct {
	timer *simclock.Timer
	// dma is set while a downlink buffer's write is in flight: the timer
	// fires at its end, and kicks meanwhile change nothing.
	dma atomic.Bool
	// With Timing.TREBurst: reread is set while the engine waits to read
	// the ring again (the timer fires then; kicks change nothing); busy
	// while a busy period lasts; cached is the TREs of the last read not
	// used yet. Used on the clock's goroutine only (under work).
	reread atomic.Bool
	busy   bool
	cached int
	// rereads counts the ring reads that had to wait TREPoll.
	rereads atomic.Uint64
}

// vinit gives the channel a virtual-time worker.
func (c *channel) vinit(clk *simclock.Scheduler) {
	c.v = &vworker{}
	c.v.timer = clk.NewTimer(c.vrun)
}

// vkick schedules the channel's work now, unless a DMA is in flight (its
// end runs the work anyway).
func (c *channel) vkick() {
	if c.v.dma.Load() || c.v.reread.Load() {
		return
	}
	c.v.timer.Reset(0)
}

// vstop cancels the virtual worker's pending event (device closing).
func (c *channel) vstop() {
	if c.v != nil {
		c.v.timer.Stop()
		c.v.dma.Store(false)
		c.v.reread.Store(false)
	}
}

// vrun is the channel's work in virtual time, run by the clock: finish the
// downlink buffer whose DMA ends now, then start the next one or poll as a
// burst channel does.
func (c *channel) vrun() {
	c.work.Lock()
	defer c.work.Unlock()
	stepped := false
	if c.v.dma.Swap(false) && c.canRun() {
		stepped, _ = c.stepDL()
		if stepped {
			c.v.cached--
		}
	}
	rereadNow := c.v.reread.Swap(false)
	if !c.canRun() {
		return
	}
	if c.dbModeResync.Swap(false) {
		c.polling, c.idlePolls = false, 0
	}
	c.refreshWrite()
	if c.cfg.Dir == wire.Uplink {
		progressed, wantWork := c.serviceUL()
		if c.pollAgain(progressed, wantWork) {
			c.v.timer.Reset(c.d.cfg.BurstPollInterval)
		}
		return
	}
	cost, ok, wantWork := c.peekDL()
	if burst := c.d.cfg.Timing.TREBurst; burst > 0 {
		switch {
		case !ok && !wantWork:
			// Nothing queued: the busy period ends; TREs read and not
			// used are read again by the next one.
			c.v.busy, c.v.cached = false, 0
		case ok && (!c.v.busy || rereadNow):
			c.v.busy = true
			c.v.cached = int(min(uint64(burst), c.available()))
		case ok && c.v.cached <= 0:
			c.v.reread.Store(true)
			c.v.rereads.Add(1)
			c.v.timer.Reset(c.d.cfg.Timing.TREPoll)
			return
		}
	}
	if ok {
		c.v.dma.Store(true)
		c.v.timer.Reset(cost)
		return
	} else if c.pollAgain(stepped, wantWork) {
		c.v.timer.Reset(c.d.cfg.BurstPollInterval)
	}
}

// peekDL reports whether the next downlink buffer can be written (data
// queued, a TRE posted, no STOP pending) and what writing it costs; the
// write itself happens at the end of that time (stepDL). wantWork is true
// when data waits for a TRE. work must be held.
func (c *channel) peekDL() (cost time.Duration, ok, wantWork bool) {
	if c.dlOff == 0 && c.stopReq.Load() {
		return 0, false, false
	}
	c.mu.Lock()
	if c.qCount == 0 {
		c.mu.Unlock()
		return 0, false, false
	}
	remaining := len(c.q[c.qHead]) - c.dlOff
	units, headers := c.qUnits[c.qHead], c.qHeaders[c.qHead]
	c.mu.Unlock()
	if c.available() == 0 {
		c.refreshWrite()
		if c.available() == 0 {
			return 0, false, true
		}
	}
	n := 0
	if el, err := c.readTRE(c.ring.addr(c.rd)); err == nil {
		n = min(remaining, int(el.Length()))
	}
	return c.d.cfg.Timing.dmaCost(c.dlOff == 0, n, units, headers), true, false
}

// Wake runs the work of channel ch now, as a doorbell does, without
// latching a doorbell value. A driver of virtual time calls it when the
// host has published something a device watching its contexts would notice
// (a burst-mode channel's write pointer, updated in memory without a
// doorbell), so that the modelled modem sees it when the host has posted
// it rather than at its next poll. It does nothing for an unknown channel.
func (d *Device) Wake(ch uint8) {
	if c := d.channelByNum(ch); c != nil {
		c.poke()
	}
}
