package transcript

import (
	"strconv"
	"strings"

	"github.com/gomhi/gomhi/mhi/ep"
	"github.com/gomhi/gomhi/mhi/wire"
)

// maxPending bounds the doorbells kept for one ring whose context the
// device has not read: beyond it they are written at once with slot "?".
const maxPending = 4096

// addressRegisters are the registers whose value is a host address: the
// record says "addr" (or 0x0), never the address.
var addressRegisters = map[uint32]bool{
	wire.RegCCABAPLower: true, wire.RegCCABAPHigher: true,
	wire.RegECABAPLower: true, wire.RegECABAPHigher: true,
	wire.RegCRCBAPLower: true, wire.RegCRCBAPHigher: true,
	wire.RegMHICTRLBASELower: true, wire.RegMHICTRLBASEHigher: true,
	wire.RegMHICTRLLIMITLower: true, wire.RegMHICTRLLIMITHigher: true,
	wire.RegMHIDATABASELower: true, wire.RegMHIDATABASEHigher: true,
	wire.RegMHIDATALIMITLower: true, wire.RegMHIDATALIMITHigher: true,
	ep.BHIOffset + wire.BHIImgAddrLow: true, ep.BHIOffset + wire.BHIImgAddrHigh: true,
	ep.BHIEOffset + wire.BHIETxVecAddrLow: true, ep.BHIEOffset + wire.BHIETxVecAddrHigh: true,
	ep.BHIEOffset + wire.BHIERxVecAddrLow: true, ep.BHIEOffset + wire.BHIERxVecAddrHigh: true,
}

func hex(v uint64) string { return "0x" + strconv.FormatUint(v, 16) }

func dec[T ~uint8 | ~uint32 | ~uint64 | ~int](v T) string { return strconv.FormatUint(uint64(v), 10) }

// addrValue renders a host address: "addr", or 0x0 (which means something).
func addrValue(v uint64) string {
	if v == 0 {
		return "0x0"
	}
	return "addr"
}

// registerValue renders the value of the register at off.
func registerValue(off, v uint32) string {
	if addressRegisters[off] {
		return addrValue(uint64(v))
	}
	return hex(uint64(v))
}

// doorbellRing names the ring of the doorbell register at off and says
// whether off is its high half; ok is false for other registers.
func doorbellRing(off uint32) (ring string, high, ok bool) {
	const span = wire.MaxDoorbellChannels * wire.DoorbellStride
	high = off%wire.DoorbellStride == 4
	switch {
	case off == wire.RegCRDBLower || off == wire.RegCRDBHigher:
		return "cmd", off == wire.RegCRDBHigher, true
	case off >= ep.ChannelDoorbellOffset && off < ep.ChannelDoorbellOffset+span:
		n := (off - ep.ChannelDoorbellOffset) / wire.DoorbellStride
		if n == wire.WakeDoorbellChannel {
			return "wake", high, true
		}
		return "ch" + dec(n), high, true
	case off >= ep.EventDoorbellOffset && off < ep.EventDoorbellOffset+span:
		return "er" + dec((off-ep.EventDoorbellOffset)/wire.DoorbellStride), high, true
	}
	return "", false, false
}

// registerWriteLocked records a register write; a doorbell's two halves
// become one doorbell record when the low half latches it.
func (r *Recorder) registerWriteLocked(off, v uint32) {
	ring, high, ok := doorbellRing(off)
	if !ok {
		r.emitLocked(r.newLocked(KindRegWrite, ep.RegisterName(off), "value", registerValue(off, v)))
		return
	}
	lo := off &^ (wire.DoorbellStride - 1)
	h := r.halves[lo]
	if h == nil {
		h = &doorbellHalf{}
		r.halves[lo] = h
	}
	if high {
		h.hi, h.written = v, true
		return
	}
	order := "lo"
	if h.written {
		order = "hi-lo"
	}
	h.written = false
	value := uint64(h.hi)<<32 | uint64(v)
	rec := r.newLocked(KindDoorbell, ring, "order", order)
	if ring == "wake" {
		rec.Fields["value"] = hex(value)
		r.emitLocked(rec)
		return
	}
	if g, ok := r.rings[ring]; ok {
		rec.Fields["slot"] = g.slot(value)
		r.emitLocked(rec)
		return
	}
	if len(r.pending[ring]) >= maxPending {
		rec.Fields["slot"] = "?"
		r.emitLocked(rec)
		return
	}
	r.pending[ring] = append(r.pending[ring], pendingDoorbell{rec: rec, value: value})
}

// contextLocked records a context and learns its ring: the doorbells that
// waited for it are written first (they came before).
func (r *Recorder) contextLocked(o ep.Observation) {
	name := ringName(o.Ring, o.Index)
	c := o.Context
	g := geometry{base: c.RBase, n: c.RLen / wire.ElementSize}
	rec := r.newLocked(KindContext, name)
	f := rec.Fields
	switch o.Ring {
	case ep.RingChannel:
		f["chstate"] = c.ChannelState().String()
		f["brstmode"] = dec(c.BurstMode())
		f["pollcfg"] = dec((c.Cfg & wire.ChCfgPollMask) >> wire.ChCfgPollShift)
		f["chtype"] = dec(c.Type)
		f["erindex"] = dec(c.Index)
		if rsvd := c.Cfg &^ 0xFFFF; rsvd != 0 {
			f["cfg_rsvd"] = hex(uint64(rsvd))
		}
	case ep.RingEvent:
		f["intmodt"] = dec(c.IntModT())
		f["intmodc"] = dec((c.Cfg >> 8) & 0xFF)
		f["ertype"] = dec(c.Type)
		f["msivec"] = dec(c.Index)
		if rsvd := c.Cfg & 0xFF; rsvd != 0 {
			f["cfg_rsvd"] = hex(uint64(rsvd))
		}
	default:
		for k, v := range map[string]uint32{"rsvd0": c.Cfg, "rsvd1": c.Type, "rsvd2": c.Index} {
			if v != 0 {
				f[k] = hex(uint64(v))
			}
		}
	}
	f["rbase"] = addrValue(c.RBase)
	f["rlen"] = dec(g.n)
	if c.RLen%wire.ElementSize != 0 {
		f["rlen"] = "bytes:" + dec(c.RLen)
	}
	f["aligned"] = strconv.FormatBool(c.RLen != 0 && c.RBase%c.RLen == 0)
	f["rp"] = g.slot(c.RP)
	f["wp"] = g.slot(c.WP)

	r.rings[name] = g
	delete(r.next, name)
	if rp, err := strconv.ParseUint(f["rp"], 10, 64); err == nil {
		r.next[name] = rp
	}
	for _, p := range r.pending[name] {
		p.rec.Fields["slot"] = g.slot(p.value)
		r.emitLocked(p.rec)
	}
	delete(r.pending, name)
	r.emitLocked(rec)
}

// elementLocked records an element the host posted, the first time the
// device reads it: a device that reads a slot again (a chain that was not
// complete yet) adds nothing.
func (r *Recorder) elementLocked(o ep.Observation) {
	name := ringName(o.Ring, o.Index)
	if next, ok := r.next[name]; ok && o.Slot != next {
		return
	}
	if g, ok := r.rings[name]; ok && g.n > 0 {
		r.next[name] = (o.Slot + 1) % g.n
	}
	el := o.Element
	rec := r.newLocked(KindElement, name, "slot", dec(o.Slot), "type", el.Type().String(), "ptr", addrValue(el.Ptr))
	f := rec.Fields
	if o.Ring == ep.RingCommand {
		f["chan"] = dec(el.Channel())
		if el.Dword0 != 0 {
			f["dword0"] = hex(uint64(el.Dword0))
		}
		if rsvd := el.Dword1 & 0xFFFF; rsvd != 0 {
			f["dword1_rsvd"] = hex(uint64(rsvd))
		}
	} else {
		f["len"] = dec(el.Length())
		f["flags"] = flagNames(el.Flags())
		if rsvd := el.Dword0 &^ 0xFFFF; rsvd != 0 {
			f["dword0_rsvd"] = hex(uint64(rsvd))
		}
		if rsvd := el.Dword1 &^ (0xFF<<16 | el.Flags()); rsvd != 0 {
			f["dword1_rsvd"] = hex(uint64(rsvd))
		}
	}
	r.emitLocked(rec)
}

// flagNames renders TRE flags as CHAIN|IEOB|IEOT|BEI, or "-".
func flagNames(flags uint32) string {
	var names []string
	for _, f := range []struct {
		bit  uint32
		name string
	}{{wire.TREChain, "CHAIN"}, {wire.TREIEOB, "IEOB"}, {wire.TREIEOT, "IEOT"}, {wire.TREBEI, "BEI"}} {
		if flags&f.bit != 0 {
			names = append(names, f.name)
		}
	}
	if len(names) == 0 {
		return "-"
	}
	return strings.Join(names, "|")
}

// ptrSlot renders ptr as ring#slot, or ring#? when the ring is unknown.
func (r *Recorder) ptrSlot(ring string, ptr uint64) string {
	if g, ok := r.rings[ring]; ok {
		return ring + "#" + g.slot(ptr)
	}
	return ring + "#?"
}

// eventLocked records an event the device posted.
func (r *Recorder) eventLocked(o ep.Observation) {
	el := o.Element
	rec := r.newLocked(KindEvent, ringName(ep.RingEvent, o.Index), "slot", dec(o.Slot), "type", el.Type().String())
	f := rec.Fields
	switch el.Type() {
	case wire.PktTxEvent:
		f["code"] = el.Code().String()
		f["len"] = dec(el.Length())
		f["chan"] = dec(el.Channel())
		f["tre"] = r.ptrSlot("ch"+dec(el.Channel()), el.Ptr)
	case wire.PktCmdCompletion:
		f["code"] = el.Code().String()
		f["cmd"] = r.ptrSlot("cmd", el.Ptr)
	case wire.PktStateChangeEvent:
		f["state"] = el.EventState().String()
	case wire.PktEEEvent:
		f["ee"] = el.EventEE().String()
	default:
		f["ptr"] = addrValue(el.Ptr)
		f["dword0"] = hex(uint64(el.Dword0))
		f["dword1"] = hex(uint64(el.Dword1))
	}
	r.emitLocked(rec)
}
