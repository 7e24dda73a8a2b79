package soak

import (
	"fmt"
	"slices"
	"strings"

	"github.com/gomhi/gomhi/mhi/ep/ipdata"
	"github.com/gomhi/gomhi/mhinet"
)

// hostCounts are the mhinet counters the soak accounts with, summed over
// every data device the run used (one per session).
type hostCounts struct {
	TxPackets, TxDropped, TxErrors, TxAggPending          uint64
	RxPackets, RxTransfers, RxDropped, RxErrors           uint64
	RxChainAborted, RxChainTooLong, RxReassemblyBusy      uint64
	RxUnreported, RxEmpty, RxBadPacket, RxStale, RxNTBErr uint64
	RxQMAPErr, Recoveries, MRUChanges, RefillErrors       uint64
}

func hostOf(s mhinet.Stats) hostCounts {
	return hostCounts{
		TxPackets: s.TxPackets, TxDropped: s.TxDropped, TxErrors: s.TxErrors, TxAggPending: s.TxAggPending,
		RxPackets: s.RxPackets, RxTransfers: s.RxTransfers, RxDropped: s.RxDropped, RxErrors: s.RxErrors,
		RxChainAborted: s.RxChainAborted, RxChainTooLong: s.RxChainTooLong, RxReassemblyBusy: s.RxReassemblyBusy,
		RxUnreported: s.RxUnreported, RxEmpty: s.RxEmpty, RxBadPacket: s.RxBadPacket, RxStale: s.RxStale,
		RxNTBErr: s.NTB.Errors(), RxQMAPErr: s.QMAP.Errors(), Recoveries: s.Recoveries, MRUChanges: s.MRUChanges,
		RefillErrors: s.RefillErrors,
	}
}

// fields lists the counters with their names, for sums and reports.
func (h *hostCounts) fields() []struct {
	name string
	v    *uint64
} {
	return []struct {
		name string
		v    *uint64
	}{
		{"tx_packets", &h.TxPackets}, {"tx_dropped", &h.TxDropped}, {"tx_errors", &h.TxErrors},
		{"tx_agg_pending", &h.TxAggPending}, {"rx_packets", &h.RxPackets}, {"rx_transfers", &h.RxTransfers},
		{"rx_dropped", &h.RxDropped}, {"rx_errors", &h.RxErrors}, {"rx_chain_aborted", &h.RxChainAborted},
		{"rx_chain_too_long", &h.RxChainTooLong}, {"rx_reassembly_busy", &h.RxReassemblyBusy},
		{"rx_unreported", &h.RxUnreported}, {"rx_empty", &h.RxEmpty}, {"rx_bad_packet", &h.RxBadPacket},
		{"rx_stale_completions", &h.RxStale}, {"rx_ntb_errors", &h.RxNTBErr}, {"rx_qmap_errors", &h.RxQMAPErr},
		{"recoveries", &h.Recoveries}, {"mru_changes", &h.MRUChanges}, {"refill_errors", &h.RefillErrors},
	}
}

func (h hostCounts) plus(o hostCounts) hostCounts {
	fs, os := h.fields(), o.fields()
	for i := range fs {
		*fs[i].v += *os[i].v
	}
	return h
}

// minus returns h − o counter by counter (gauges such as TxAggPending
// are taken from h).
func (h hostCounts) minus(o hostCounts) hostCounts {
	fs, os := h.fields(), o.fields()
	for i := range fs {
		if fs[i].name != "tx_agg_pending" {
			*fs[i].v -= *os[i].v
		}
	}
	return h
}

// modemDelta is what the modem's IP data function did between two
// snapshots.
type modemDelta struct {
	ul, gen, dl, droppedQueued uint64
	pendingBefore, pendingNow  uint64
	drops                      map[string]uint64 // by reason, packets
	deagg                      uint64
}

func modemBetween(a, b ipdata.Stats) modemDelta {
	d := modemDelta{
		ul: b.ULPackets - a.ULPackets, gen: b.GenPackets - a.GenPackets, dl: b.DLPackets - a.DLPackets,
		droppedQueued: b.DLDroppedQueued - a.DLDroppedQueued,
		pendingBefore: a.Pending, pendingNow: b.Pending,
		deagg: b.DeaggErrors() - a.DeaggErrors(),
	}
	d.drops = map[string]uint64{
		"modem_dropped_sunk":         b.DroppedSunk - a.DroppedSunk,
		"modem_dropped_aborted":      b.DroppedAborted - a.DroppedAborted,
		"modem_dropped_too_large":    b.DroppedTooLarge - a.DroppedTooLarge,
		"modem_dropped_empty":        b.DroppedEmpty - a.DroppedEmpty,
		"modem_dropped_reset":        b.DroppedReset - a.DroppedReset,
		"modem_dropped_not_answered": b.DroppedNotAnswered - a.DroppedNotAnswered,
		"modem_dropped_shaped":       b.DroppedShaped - a.DroppedShaped,
		"modem_dropped_gated":        b.DroppedGated - a.DroppedGated,
	}
	return d
}

func (d modemDelta) dropped() uint64 {
	var t uint64
	for _, v := range d.drops {
		t += v
	}
	return t
}

// Names of the drop counters the soak adds to the stack's own.
const (
	// dropULUnconfirmed: packets the host counted as aborted (tx_dropped)
	// that the modem had nevertheless taken (its ULPackets): an uplink
	// transfer the modem consumed, in whole or in part, whose completion
	// the host never saw because a reset or SYS_ERR came first. They are
	// subtracted, or they would be counted twice.
	dropULUnconfirmed = "ul_consumed_unconfirmed"
	// dropLostInModem: vfio-user only, packets missing after a phase in
	// which the served modem was killed (SIGKILL), whose fate its
	// counters would have told: what its queues and the rings held, at
	// most faultBound per kill.
	dropLostInModem = "lost_in_modem"
)

// phaseCheck is the exact conservation check of one phase.
type phaseCheck struct {
	sent       uint64
	rx         ReceiverCounts
	host       hostCounts // deltas
	modem      *modemDelta
	generator  bool
	recoveries uint64 // host recoveries during the phase (SYS_ERR, SoC reset)
	kills      uint64 // vfio-user: served modems killed during the phase
	bound      uint64 // most packets one kill may take with it

	drops    map[string]uint64 // filled by evaluate: named drops of the phase
	problems []string          // filled by evaluate: why it does not hold
}

// evaluate checks the phase and fills drops and problems.
func (c *phaseCheck) evaluate() {
	c.drops = map[string]uint64{}
	c.problems = c.problems[:0]
	c.checkReceiver()
	counted := c.checkHostTx()
	var negative uint64 // counted twice: subtracted
	if c.modem != nil {
		counted, negative = c.checkModem(counted)
	}
	// End to end: every packet sent arrived or is counted, exactly.
	missing := c.sent - min(c.sent, c.rx.Unique)
	if c.modem == nil {
		counted, negative = c.explainKills(missing, counted, negative)
	}
	if missing+negative != counted {
		c.bad("conservation: sent %d = delivered %d + counted drops %d − counted twice %d does not hold: %d unaccounted",
			c.sent, c.rx.Unique, counted, negative, int64(missing)+int64(negative)-int64(counted))
	}
	for k, v := range c.drops {
		if v == 0 {
			delete(c.drops, k)
		}
	}
}

// bad records a problem of the phase.
func (c *phaseCheck) bad(format string, args ...any) {
	c.problems = append(c.problems, fmt.Sprintf(format, args...))
}

// checkReceiver checks that the receiver got exactly what the host
// delivered, all of it good.
func (c *phaseCheck) checkReceiver() {
	h := c.host
	if h.RxPackets != c.rx.Handed {
		c.bad("host rx_packets %d but the receiver was handed %d", h.RxPackets, c.rx.Handed)
	}
	if c.rx.Duplicates > 0 {
		c.bad("%d duplicate packets", c.rx.Duplicates)
	}
	if c.rx.Corrupt > 0 {
		c.bad("%d corrupt packets", c.rx.Corrupt)
	}
	if c.rx.Late > 0 {
		c.bad("%d packets of an earlier phase, arriving after it was closed", c.rx.Late)
	}
	if c.rx.LateDuplicates > 0 {
		c.bad("%d packets of the previous phase delivered a second time", c.rx.LateDuplicates)
	}
	if c.rx.OutOfRange > 0 {
		c.bad("%d packets with a sequence number never sent", c.rx.OutOfRange)
	}
}

// checkHostTx checks the host's transmit side (every packet Transmit
// took is completed, aborted or rejected), records its drops and returns
// how many it counted.
func (c *phaseCheck) checkHostTx() (counted uint64) {
	h := c.host
	txSent := uint64(0)
	if !c.generator {
		txSent = c.sent
	}
	if got := h.TxPackets + h.TxDropped + h.TxErrors; got != txSent || h.TxAggPending != 0 {
		c.bad("host transmit: %d packets taken, tx_packets %d + tx_dropped %d + tx_errors %d = %d, %d in the open aggregate",
			txSent, h.TxPackets, h.TxDropped, h.TxErrors, got, h.TxAggPending)
	}
	c.drops["host_tx_errors"] = h.TxErrors
	c.drops["host_tx_dropped"] = h.TxDropped
	return h.TxErrors + h.TxDropped
}

// checkModem checks the modem's own conservation and the links between
// it and the host, records the modem's drops and returns the drops
// counted so far (counted plus the modem's) and those counted twice.
func (c *phaseCheck) checkModem(counted uint64) (uint64, uint64) {
	h, m := c.host, c.modem
	var negative uint64
	in, out := m.ul+m.gen+m.pendingBefore, m.dl+m.dropped()+m.pendingNow
	if in != out || m.pendingNow != 0 {
		c.bad("modem: in %d (ul %d, generated %d, pending before %d) ≠ out %d (dl %d, dropped %d, pending %d)",
			in, m.ul, m.gen, m.pendingBefore, out, m.dl, m.dropped(), m.pendingNow)
	}
	if c.generator && m.gen != c.sent {
		c.bad("generator: %d packets asked, %d generated", c.sent, m.gen)
	}
	if m.deagg > 0 {
		c.bad("modem: %d malformed uplink aggregates", m.deagg)
	}
	for k, v := range m.drops {
		c.drops[k] = v
		counted += v
	}
	// Uplink link: the modem took at least what the host saw
	// completed, and no more than the host put on the ring.
	switch {
	case m.ul < h.TxPackets:
		c.bad("uplink: the host saw %d packets completed, the modem received %d", h.TxPackets, m.ul)
	case m.ul > h.TxPackets+h.TxDropped:
		c.bad("uplink: the modem received %d packets, the host queued %d", m.ul, h.TxPackets+h.TxDropped)
	default:
		negative = m.ul - h.TxPackets
		c.drops[dropULUnconfirmed] = negative
	}
	// Downlink link: what the modem put whole into host buffers is
	// what the host delivered.
	c.drops["modem_dl_dropped_queued"] = m.droppedQueued
	counted += m.droppedQueued
	reached := m.dl - m.droppedQueued
	switch {
	case reached == h.RxPackets:
	case reached < h.RxPackets:
		c.bad("downlink: the host delivered %d packets, the modem sent %d (%d dropped in its queue)", h.RxPackets, m.dl, m.droppedQueued)
	default:
		c.bad("downlink: %d packets the modem wrote whole into host buffers were never delivered and no host counter names them "+
			"(modem dl %d − dropped in queue %d − host rx_packets %d; host rx_dropped %d, rx_errors %d, chain_aborted %d; %d recoveries in the phase)",
			reached-h.RxPackets, m.dl, m.droppedQueued, h.RxPackets, h.RxDropped, h.RxErrors, h.RxChainAborted, c.recoveries)
	}
	return counted, negative
}

// explainKills accounts, without modem counters (vfio-user, a served
// modem killed during the phase: its counters died with it), for the
// difference between the missing and the counted packets, within the
// bound per kill; it returns the updated counted and counted-twice drops.
func (c *phaseCheck) explainKills(missing, counted, negative uint64) (uint64, uint64) {
	h := c.host
	switch {
	case missing+negative == counted:
	case c.kills == 0:
		c.bad("%d packets sent, %d delivered: %d missing, %d counted (host tx_dropped %d, tx_errors %d), no modem counters and no modem killed in the phase",
			c.sent, c.rx.Unique, missing, counted, h.TxDropped, h.TxErrors)
	case missing > counted && missing-counted <= c.kills*c.bound:
		c.drops[dropLostInModem] = missing - counted
		counted = missing
	case missing < counted && counted-missing <= c.kills*c.bound:
		negative = counted - missing
		c.drops[dropULUnconfirmed] = negative
	default:
		c.bad("%d packets sent, %d delivered, %d counted: %d unexplained after %d modem kills (bound %d per kill)",
			c.sent, c.rx.Unique, counted, int64(missing)-int64(counted), c.kills, c.bound)
	}
	return counted, negative
}

// describe formats the named drops.
func describeDrops(d map[string]uint64) string {
	if len(d) == 0 {
		return "none"
	}
	keys := make([]string, 0, len(d))
	for k := range d {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %d", k, d[k])
	}
	return b.String()
}
