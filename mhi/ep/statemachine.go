package ep

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/gomhi/gomhi/mhi/wire"
)

// controlRequests are the requests the register file and the fault methods
// leave for the control goroutine. Guarded by Device.regMu.
type controlRequests struct {
	reset         bool // MHICTRL.RESET, SOC reset request
	functionReset bool // the reset also clears host-programmed registers
	ctrlWritten   bool // MHICTRL written without RESET
	crdb          bool // command doorbell rung
	sysErr        bool // SYS_ERR entered; event and INTVEC still to send
	bhiTx         bool // IMGTXDB written: a BHI image to receive
	bhieTx        bool // TXVECDB written: a BHIe image to receive
	rddm          bool // RXVECDB written: a dump may be due
}

// session is everything the device learns from the host at M0 and forgets
// on reset: the context arrays, the event rings and the command ring.
type session struct {
	// ctx ends with the session (MHI reset, Close); it bounds event posting.
	ctx    context.Context
	cancel context.CancelFunc
	// active additionally ends on SYS_ERR; it bounds channel and command
	// processing.
	active     context.Context
	deactivate context.CancelFunc

	chCtxBase  uint64
	erCtxBase  uint64
	cmdCtxBase uint64

	events []*eventRing // one per event ring the host configured (NER)
	cmd    commandRing  // used only by the control goroutine
}

// controlLoop is the device's state machine and command processor, like
// the EP stack's state and command workers.
func (d *Device) controlLoop() {
	defer d.wg.Done()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		d.ctrlMu.Lock()
		wait := d.runControl()
		d.ctrlMu.Unlock()
		var fire <-chan time.Time
		if wait >= 0 {
			timer.Reset(wait)
			fire = timer.C
		}
		select {
		case <-d.ctx.Done():
			timer.Stop()
			return
		case <-d.ctrlKick:
		case <-fire:
		}
		timer.Stop()
	}
}

// runControl handles every pending request once. It returns how long to
// wait before the device is due to become READY, or -1 when no READY is
// due. ctrlMu must be held.
func (d *Device) runControl() time.Duration {
	d.regMu.Lock()
	req := d.pending
	d.pending = controlRequests{}
	d.regMu.Unlock()

	if req.reset {
		d.doReset(req.functionReset)
	}
	if req.sysErr {
		d.announceSysErr()
	}
	if req.bhiTx {
		d.bhiTransfer()
	}
	if req.bhieTx {
		d.bhieTransfer()
	}
	if req.sysErr || req.rddm {
		d.rddmTransfer()
	}
	d.becomeReadyIfDue()
	d.followRequestedState(req.ctrlWritten)
	if req.crdb {
		d.regMu.Lock()
		s := d.sess
		d.regMu.Unlock()
		if s != nil {
			d.processCommands(s)
		}
	}

	boot := d.advanceBoot()
	d.regMu.Lock()
	defer d.regMu.Unlock()
	if d.state != wire.StateReset || !d.readyPending || d.neverReady || d.boot.awaitImage {
		return boot
	}
	ready := max(time.Until(d.readyAt), 0)
	if boot >= 0 {
		return min(ready, boot)
	}
	return ready
}

// becomeReadyIfDue moves RESET to READY once ReadyDelay has passed, unless
// the NeverReady fault holds the device back.
func (d *Device) becomeReadyIfDue() {
	d.regMu.Lock()
	defer d.regMu.Unlock()
	if d.state != wire.StateReset || !d.readyPending || d.neverReady || d.boot.awaitImage || time.Now().Before(d.readyAt) {
		return
	}
	d.readyPending = false
	d.setStateLocked(wire.StateReady)
	d.regs.mhiStatus = uint32(wire.StateReady)<<wire.MHISTATUSStateShift | wire.MHISTATUSReady
	d.stats.stateChanges.Add(1)
	d.log.Debug("mhi-ep: READY")
}

// followRequestedState compares the state the host requests in MHICTRL
// with the current one and performs the transition the EP stack allows.
// written tells whether the host wrote MHICTRL since the last call, so
// that refused transitions are logged once.
func (d *Device) followRequestedState(written bool) {
	d.regMu.Lock()
	req := wire.State((d.regs.mhiCtrl & wire.MHICTRLStateMask) >> wire.MHICTRLStateShift)
	cur := d.state
	d.regMu.Unlock()
	switch {
	case req == cur:
	case req == wire.StateM0 && cur == wire.StateReady:
		d.enterM0FromReady()
	case req == wire.StateM0 && cur == wire.StateM3:
		d.resumeM0()
	case req == wire.StateM3 && cur == wire.StateM0 && d.cfg.NoM3:
		if written {
			d.stats.m3Refused.Add(1)
			d.log.Warn("mhi-ep: host requested M3, which this device does not support (no M3): staying in M0")
		}
	case req == wire.StateM3 && cur == wire.StateM0:
		d.enterM3()
	case req == wire.StateSysErr:
		d.enterSysErr(false)
	case req == wire.StateM0 && cur == wire.StateReset:
		// Early M0 request: honoured once the device is READY.
	default:
		if written {
			d.log.Warn("mhi-ep: host requested an unsupported transition", "from", cur, "to", req)
		}
	}
}

// enterM0FromReady reads the context bases, starts a session and announces
// M0 and the AMSS execution environment on event ring 0.
func (d *Device) enterM0FromReady() {
	d.regMu.Lock()
	ner := int((d.regs.mhiCfg & wire.MHICFGNERMask) >> wire.MHICFGNERShift)
	if ner == 0 || ner > len(d.regs.erdb) {
		d.log.Warn("mhi-ep: host NER unusable, using the configured count",
			"ner", ner, "configured", len(d.regs.erdb))
		ner = len(d.regs.erdb)
	}
	s := &session{
		chCtxBase:  join64(d.regs.ccabap),
		erCtxBase:  join64(d.regs.ecabap),
		cmdCtxBase: join64(d.regs.crcbap),
		events:     make([]*eventRing, ner),
	}
	s.ctx, s.cancel = context.WithCancel(d.ctx)
	s.active, s.deactivate = context.WithCancel(s.ctx)
	for i := range s.events {
		s.events[i] = &eventRing{index: i, ctxIOVA: s.erCtxBase + uint64(i)*wire.ContextSize}
	}
	crdbSeq := d.regs.crdb.seq
	d.sess = s
	d.setStateLocked(wire.StateM0)
	d.regs.mhiStatus = uint32(wire.StateM0)<<wire.MHISTATUSStateShift | wire.MHISTATUSReady
	d.stats.stateChanges.Add(1)
	ee := d.bootEEAtM0Locked()
	d.regMu.Unlock()

	d.log.Debug("mhi-ep: M0", "ccabap", s.chCtxBase, "ecabap", s.erCtxBase, "crcbap", s.cmdCtxBase, "ner", ner, "ee", ee)
	d.startCommandRing(s, crdbSeq)
	d.postControlEvent(s, wire.StateChangeEvent(wire.StateM0))
	d.postControlEvent(s, wire.EEEvent(ee))
	d.kickControl() // the SBL's boot of AMSS may be due
}

// resumeM0 leaves M3: channels kept their state and resume. Burst
// channels are put back in doorbell mode before the host hears of M0:
// Linux sets its own doorbell mode and rings the doorbell of every
// channel with work pending as soon as it handles the M0 event, and a
// resync noticed after that doorbell would end the polling the doorbell
// started, leaving the host updating only the context wp of a channel
// nobody polls.
func (d *Device) resumeM0() {
	for _, c := range d.chanList {
		c.resyncDoorbellMode()
	}
	d.changePowerState(wire.StateM0, &d.stats.m3Exits, "mhi-ep: M3 -> M0")
	if hook := d.afterResumeEvent.Load(); hook != nil {
		(*hook)()
	}
	for _, c := range d.chanList {
		c.poke()
	}
}

// enterM3 suspends: channel processing pauses until M0.
func (d *Device) enterM3() {
	d.changePowerState(wire.StateM3, &d.stats.m3Entries, "mhi-ep: M0 -> M3")
}

// changePowerState moves between M0 and M3: the state and MHISTATUS
// change, the change is counted (in counter too) and logged (msg), and
// the host gets a state change event.
func (d *Device) changePowerState(st wire.State, counter *atomic.Uint64, msg string) {
	d.regMu.Lock()
	s := d.sess
	d.setStateLocked(st)
	d.regs.mhiStatus = uint32(st)<<wire.MHISTATUSStateShift | wire.MHISTATUSReady
	d.stats.stateChanges.Add(1)
	counter.Add(1)
	d.regMu.Unlock()
	d.log.Debug(msg)
	if s != nil {
		d.postControlEvent(s, wire.StateChangeEvent(st))
	}
}

// enterSysErr puts the device in SYS_ERR at once (MHISTATUS, processing
// halted) and leaves the event and the BHI interrupt to the control
// goroutine. fault tells whether it was injected.
func (d *Device) enterSysErr(fault bool) {
	d.regMu.Lock()
	if d.state == wire.StateSysErr {
		d.regMu.Unlock()
		return
	}
	from := d.state
	d.setStateLocked(wire.StateSysErr)
	d.regs.mhiStatus = d.regs.mhiStatus&wire.MHISTATUSReady |
		uint32(wire.StateSysErr)<<wire.MHISTATUSStateShift | wire.MHISTATUSSysErr
	if d.sess != nil {
		d.sess.deactivate()
	}
	rddm := d.enterRDDMLocked()
	d.pending.sysErr = true
	d.stats.stateChanges.Add(1)
	d.regMu.Unlock()
	if fault {
		d.stats.faultsInjected.Add(1)
	}
	d.log.Warn("mhi-ep: SYS_ERR", "from", from, "injected", fault, "rddm", rddm)
	d.kickControl()
}

// announceSysErr raises the BHI INTVEC vector and posts STATE_CHANGE(SYS_ERR)
// on event ring 0 when the host has set one up.
func (d *Device) announceSysErr() {
	d.regMu.Lock()
	if d.state != wire.StateSysErr {
		d.regMu.Unlock()
		return // a reset overtook the error
	}
	s := d.sess
	vector := int(d.regs.bhi[wire.BHIIntVec/4])
	rddm := d.ee == wire.EERDDM
	d.regMu.Unlock()
	// INTVEC first: the host learns of the error from MHISTATUS even if
	// event ring 0 happens to be full.
	d.raise(vector)
	if s != nil {
		if rddm {
			// EXECENV already reads RDDM; the EE event says so on the ring.
			d.postControlEvent(s, wire.EEEvent(wire.EERDDM))
		}
		d.postControlEvent(s, wire.StateChangeEvent(wire.StateSysErr))
	}
}

// abortSessionLocked cancels everything in flight so that a reset never
// waits behind it. regMu must be held.
func (d *Device) abortSessionLocked() {
	if d.sess != nil {
		d.sess.cancel()
	}
}

// doReset performs an MHI reset: transfers aborted, rings forgotten, pending
// downlink data dropped (and counted), INTVEC cleared, MHICTRL and MHISTATUS
// zeroed, READY due after ReadyDelay. functionReset also restores the
// host-programmed registers. ctrlMu must be held.
func (d *Device) doReset(functionReset bool) {
	d.regMu.Lock()
	s := d.sess
	d.sess = nil
	d.regMu.Unlock()
	if s != nil {
		s.cancel()
	}
	// Quiesce every channel before telling the host the reset is done: after
	// MHICTRL.RESET reads 0 the device must not touch host memory.
	for _, c := range d.chanList {
		c.resetForMHIReset()
	}
	if s != nil {
		d.stopModeration(s)
	}

	d.regMu.Lock()
	if functionReset {
		d.regs.init(&d.cfg, len(d.regs.erdb))
	}
	if functionReset || d.ee == wire.EERDDM {
		// A SoC reset reboots the modem, and so does an MHI reset of a
		// crashed one (RDDM): back to the boot start, or EDL when the
		// host armed it.
		d.startEELocked()
	}
	d.regs.clearDoorbells()
	d.regs.bhi[wire.BHIIntVec/4] = 0
	d.regs.mhiCtrl = 0
	d.regs.mhiStatus = 0
	d.setStateLocked(wire.StateReset)
	d.stats.stateChanges.Add(1)
	d.pending.sysErr = false
	d.readyPending = true
	d.readyAt = time.Now().Add(d.cfg.ReadyDelay)
	for i := range d.erSignals {
		d.erSignals[i].broadcast()
	}
	d.regMu.Unlock()
	d.stats.resets.Add(1)
	d.log.Debug("mhi-ep: reset", "function_reset", functionReset)
	for _, c := range d.chanList {
		c.notifyState()
	}
}
