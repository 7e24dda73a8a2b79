package ep

import (
	"github.com/gomhi/gomhi/mhi/wire"
)

// doorbell is one 64-bit doorbell register: the host writes the high half
// first and the low half last; the low write latches the value.
type doorbell struct {
	lo, hi uint32
	seq    uint32 // number of latches since power-on; compared, never reset
}

// value returns the latched 64-bit value.
func (db *doorbell) value() uint64 { return uint64(db.hi)<<32 | uint64(db.lo) }

// clear forgets the value (after a reset) but keeps counting latches.
func (db *doorbell) clear() { db.lo, db.hi = 0, 0 }

// registerFile holds the register values that are stored rather than
// computed. Guarded by Device.regMu.
type registerFile struct {
	mhiCfg    uint32
	mhiCtrl   uint32
	mhiStatus uint32
	ccabap    [2]uint32 // low, high
	ecabap    [2]uint32
	crcbap    [2]uint32
	ctrlBase  [2]uint32
	ctrlLimit [2]uint32
	dataBase  [2]uint32
	dataLimit [2]uint32
	crdb      doorbell
	chdb      [wire.MaxDoorbellChannels]doorbell
	erdb      []doorbell
	bhi       [wire.BHISize / 4]uint32  // host-writable BHI words
	bhie      [wire.BHIESize / 4]uint32 // host-writable BHIe words
}

// init sets the power-on values.
func (r *registerFile) init(cfg *Config, nER int) {
	r.mhiCfg = powerOnMHICfg(cfg)
	r.mhiCtrl, r.mhiStatus = 0, 0
	r.ccabap, r.ecabap, r.crcbap = [2]uint32{}, [2]uint32{}, [2]uint32{}
	r.ctrlBase, r.ctrlLimit, r.dataBase, r.dataLimit = [2]uint32{}, [2]uint32{}, [2]uint32{}, [2]uint32{}
	r.bhi = [wire.BHISize / 4]uint32{}
	r.bhie = [wire.BHIESize / 4]uint32{}
	if r.erdb == nil {
		r.erdb = make([]doorbell, nER)
	}
	r.clearDoorbells()
}

// clearDoorbells forgets every latched doorbell value.
func (r *registerFile) clearDoorbells() {
	r.crdb.clear()
	for i := range r.chdb {
		r.chdb[i].clear()
	}
	for i := range r.erdb {
		r.erdb[i].clear()
	}
}

// powerOnMHICfg computes MHICFG from the configuration: NCH, NHWCH (burst
// channels), NER and NHWER.
func powerOnMHICfg(cfg *Config) uint32 {
	nhwch := 0
	for _, ch := range cfg.MHI.Channels {
		if ch.Burst {
			nhwch++
		}
	}
	v := uint32(cfg.MHI.MaxChannels) & wire.MHICFGNCHMask
	v |= uint32(nhwch) << wire.MHICFGNHWCHShift & wire.MHICFGNHWCHMask
	v |= uint32(len(cfg.MHI.EventRings)) << wire.MHICFGNERShift & wire.MHICFGNERMask
	v |= uint32(cfg.MHI.HWEventRings()) << wire.MHICFGNHWERShift & wire.MHICFGNHWERMask
	return v
}

func join64(p [2]uint32) uint64 { return uint64(p[1])<<32 | uint64(p[0]) }

// ReadRegister returns the 32-bit register at byte offset off of the MHI
// BAR, as the host sees it. Offsets that are unaligned, beyond RegLen or
// reserved read as 0 and are counted in Stats.BadRegisterAccesses.
func (d *Device) ReadRegister(off uint32) uint32 {
	if off%4 != 0 || off >= d.cfg.RegLen {
		d.badRegister("read", off)
		return 0
	}
	d.regMu.Lock()
	v, ok := d.readRegisterLocked(off)
	if d.observing() {
		d.observe(Observation{Kind: ObserveRegisterRead, Offset: off, Value: uint64(v)})
	}
	d.regMu.Unlock()
	if !ok {
		d.badRegister("read", off)
	}
	return v
}

// readRegisterLocked decodes a read; ok is false for reserved offsets.
func (d *Device) readRegisterLocked(off uint32) (uint32, bool) {
	r := &d.regs
	if db, high, ok := d.doorbellAt(off); ok {
		if high {
			return db.hi, true
		}
		return db.lo, true
	}
	if off >= BHIOffset && off < BHIOffset+wire.BHISize {
		return d.readBHILocked(off - BHIOffset)
	}
	if off >= BHIEOffset && off < BHIEOffset+wire.BHIESize {
		return d.readBHIELocked(off - BHIEOffset)
	}
	switch off {
	case wire.RegMHIREGLEN:
		return d.cfg.RegLen, true
	case wire.RegMHIVER:
		return wire.MHIVersion1, true
	case wire.RegMHICFG:
		return r.mhiCfg, true
	case wire.RegCHDBOFF:
		return ChannelDoorbellOffset, true
	case wire.RegERDBOFF:
		return EventDoorbellOffset, true
	case wire.RegBHIOFF:
		return BHIOffset, true
	case wire.RegBHIEOFF:
		return BHIEOffset, true
	case wire.RegDEBUGOFF:
		return DebugOffset, true
	case wire.RegMHICTRL:
		return r.mhiCtrl, true
	case wire.RegMHISTATUS:
		return r.mhiStatus, true
	case wire.RegSOCRESETREQ:
		return 0, true
	case wire.RegSOCHWVERSION:
		return d.cfg.SoCHWVersion, true
	}
	if p := r.pairAt(off); p != nil {
		return p[off/4%2], true
	}
	return 0, false
}

// pairAt returns the host-programmed 64-bit register pair containing off.
func (r *registerFile) pairAt(off uint32) *[2]uint32 {
	switch off &^ 4 {
	case wire.RegCCABAPLower:
		return &r.ccabap
	case wire.RegECABAPLower:
		return &r.ecabap
	case wire.RegCRCBAPLower:
		return &r.crcbap
	case wire.RegMHICTRLBASELower:
		return &r.ctrlBase
	case wire.RegMHICTRLLIMITLower:
		return &r.ctrlLimit
	case wire.RegMHIDATABASELower:
		return &r.dataBase
	case wire.RegMHIDATALIMITLower:
		return &r.dataLimit
	}
	return nil
}

// doorbellAt decodes off as a doorbell register: command, channel or event
// ring doorbell, and whether it is the high half.
func (d *Device) doorbellAt(off uint32) (db *doorbell, high bool, ok bool) {
	r := &d.regs
	switch {
	case off == wire.RegCRDBLower || off == wire.RegCRDBHigher:
		return &r.crdb, off == wire.RegCRDBHigher, true
	case off >= ChannelDoorbellOffset && off < ChannelDoorbellOffset+wire.DoorbellStride*wire.MaxDoorbellChannels:
		rel := off - ChannelDoorbellOffset
		return &r.chdb[rel/wire.DoorbellStride], rel%wire.DoorbellStride == 4, true
	case off >= EventDoorbellOffset && off < EventDoorbellOffset+wire.DoorbellStride*uint32(len(r.erdb)):
		rel := off - EventDoorbellOffset
		return &r.erdb[rel/wire.DoorbellStride], rel%wire.DoorbellStride == 4, true
	}
	return nil, false, false
}

// bhiWritable reports whether the host may write the BHI register at rel.
func bhiWritable(rel uint32) bool {
	switch rel {
	case wire.BHIImgAddrLow, wire.BHIImgAddrHigh, wire.BHIImgSize, wire.BHIImgTxDB,
		wire.BHIIntVec, wire.BHIStatus:
		return true
	}
	return false
}

// readBHILocked reads the BHI register at rel (offset from BHIOFF).
func (d *Device) readBHILocked(rel uint32) (uint32, bool) {
	switch {
	case bhiWritable(rel):
		return d.regs.bhi[rel/4], true
	case rel == wire.BHIVersionMinor:
		return 0, true
	case rel == wire.BHIVersionMajor:
		return 1, true
	case rel == wire.BHIExecEnv:
		return uint32(d.ee), true
	case rel == wire.BHISerialNum:
		return d.cfg.SerialNumber, true
	case rel == wire.BHIErrCode, rel == wire.BHIErrDbg1, rel == wire.BHIErrDbg2, rel == wire.BHIErrDbg3:
		return d.bhiOwnedLocked(rel)
	case rel == wire.BHISBLAntiRollV, rel == wire.BHINumSeg:
		return 0, true
	case rel >= wire.BHIMSMHWID0 && rel < wire.BHIMSMHWID0+4*wire.BHIMSMHWIDCount:
		return 0, true
	case rel >= wire.BHIOEMPKHash0 && rel < wire.BHIOEMPKHash0+4*wire.BHIOEMPKHashRegs:
		return d.cfg.OEMPKHash[(rel-wire.BHIOEMPKHash0)/4], true
	}
	return 0, false
}

// bhieWritable reports whether the host may write the BHIe register at rel.
func bhieWritable(rel uint32) bool {
	switch rel {
	case wire.BHIETxVecAddrLow, wire.BHIETxVecAddrHigh, wire.BHIETxVecSize, wire.BHIETxVecDB,
		wire.BHIERxVecAddrLow, wire.BHIERxVecAddrHigh, wire.BHIERxVecSize, wire.BHIERxVecDB:
		return true
	}
	return false
}

// readBHIELocked reads the BHIe register at rel (offset from BHIEOFF).
func (d *Device) readBHIELocked(rel uint32) (uint32, bool) {
	switch {
	case bhieWritable(rel):
		return d.regs.bhie[rel/4], true
	case rel == wire.BHIEMSMSOCID:
		return 0, true
	case rel == wire.BHIETxVecStatus:
		return d.boot.txStatus, true
	case rel == wire.BHIERxVecStatus:
		return d.boot.rxStatus, true
	}
	return 0, false
}

// WriteRegister performs a host write of v to the 32-bit register at byte
// offset off. It never blocks: it latches the value and wakes the worker
// concerned. Unaligned, out-of-range, reserved and read-only offsets are
// ignored and counted in Stats.BadRegisterAccesses.
func (d *Device) WriteRegister(off, v uint32) {
	if off%4 != 0 || off >= d.cfg.RegLen {
		d.badRegister("write", off)
		return
	}
	d.regMu.Lock()
	if d.observing() {
		// Before the write takes effect: what it sets off comes after.
		d.observe(Observation{Kind: ObserveRegisterWrite, Offset: off, Value: uint64(v)})
	}
	ok := d.writeRegisterLocked(off, v)
	d.regMu.Unlock()
	if !ok {
		d.badRegister("write", off)
	}
}

// writeRegisterLocked applies a write; ok is false when it was ignored.
func (d *Device) writeRegisterLocked(off, v uint32) bool {
	r := &d.regs
	if db, high, ok := d.doorbellAt(off); ok {
		if high {
			db.hi = v
			return true
		}
		db.lo = v
		db.seq++
		d.doorbellLatchedLocked(db, off)
		return true
	}
	if off >= BHIOffset && off < BHIOffset+wire.BHISize {
		rel := off - BHIOffset
		if !bhiWritable(rel) {
			return false
		}
		r.bhi[rel/4] = v
		if rel == wire.BHIImgTxDB {
			d.pending.bhiTx = true
			d.kickControl()
		}
		return true
	}
	if off >= BHIEOffset && off < BHIEOffset+wire.BHIESize {
		rel := off - BHIEOffset
		if !bhieWritable(rel) {
			return false
		}
		r.bhie[rel/4] = v
		switch rel {
		case wire.BHIETxVecDB:
			d.pending.bhieTx = true
			d.kickControl()
		case wire.BHIERxVecDB:
			d.boot.rxArmed, d.boot.dumped = true, false
			d.pending.rddm = true
			d.kickControl()
		}
		return true
	}
	switch off {
	case wire.RegMHICFG:
		const hostFields = wire.MHICFGNERMask | wire.MHICFGNHWERMask
		r.mhiCfg = r.mhiCfg&^hostFields | v&hostFields
		return true
	case wire.RegMHICTRL:
		r.mhiCtrl = v & (wire.MHICTRLStateMask | wire.MHICTRLReset)
		if v&wire.MHICTRLReset != 0 {
			// Abort now, so that nothing in flight keeps the reset waiting.
			d.abortSessionLocked()
			d.pending.reset = true
		} else {
			d.pending.ctrlWritten = true
		}
		d.kickControl()
		return true
	case wire.RegSOCRESETREQ:
		if v&wire.SOCResetReqBit != 0 {
			d.abortSessionLocked()
			d.pending.reset = true
			d.pending.functionReset = true
			d.kickControl()
		}
		return true
	}
	if p := r.pairAt(off); p != nil {
		p[off/4%2] = v
		return true
	}
	return false
}

// doorbellLatchedLocked wakes whoever waits for the doorbell that was just
// latched at off.
func (d *Device) doorbellLatchedLocked(db *doorbell, off uint32) {
	switch {
	case db == &d.regs.crdb:
		d.stats.commandDoorbells.Add(1)
		d.pending.crdb = true
		d.kickControl()
	case off >= EventDoorbellOffset:
		n := (off - EventDoorbellOffset) / wire.DoorbellStride
		d.stats.eventDoorbells.Add(1)
		d.erSignals[n].broadcast()
	default:
		n := (off - ChannelDoorbellOffset) / wire.DoorbellStride
		if n == edlDoorbellSlot && db.lo == edlCookie {
			d.boot.edlArmed = true // the next SoC reset enters EDL
		}
		if n == wire.WakeDoorbellChannel {
			return // device wake: nothing to do for a mock
		}
		d.stats.channelDoorbells.Add(1)
		if c := d.channels[n]; c != nil {
			c.poke()
		}
	}
}

// badRegister counts and logs an access to a register that does not exist.
func (d *Device) badRegister(op string, off uint32) {
	d.stats.badRegisterAccesses.Add(1)
	if d.debug {
		d.log.Debug("mhi-ep: bad register access ignored", "op", op, "offset", off)
	}
}

// latchedDoorbell returns the value and latch count of a doorbell.
func (d *Device) latchedDoorbell(db *doorbell) (uint64, uint32) {
	d.regMu.Lock()
	defer d.regMu.Unlock()
	return db.value(), db.seq
}
