package mhinet

import (
	"sync/atomic"

	"github.com/gomhi/gomhi/mhi/proto/ntb"
	"github.com/gomhi/gomhi/mhi/proto/qmap"
)

// counters are the device's counters, updated atomically.
type counters struct {
	rxPackets, rxBytes  atomic.Uint64
	rxTransfers         atomic.Uint64 // complete transfers (aggregates) received
	rxElements          atomic.Uint64 // downlink elements completed with data
	rxOverflows         atomic.Uint64 // OVERFLOW completions
	rxChains            atomic.Uint64 // transfers that arrived over several elements
	rxFragments         atomic.Uint64 // elements that were part of a chain
	rxChainTooLong      atomic.Uint64 // chains dropped for exceeding MaxReassembly
	rxChainAborted      atomic.Uint64 // chains cut by a channel reset
	rxEmpty             atomic.Uint64 // zero-length transfers
	rxBadPacket         atomic.Uint64 // raw IP transfers that are not IPv4/IPv6
	rxReassemblyBusy    atomic.Uint64 // chains dropped: every reassembly buffer held
	refillStarved       atomic.Uint64
	refills             atomic.Uint64
	rxPostedHigh        atomic.Uint64 // most receive buffers posted at once
	txPackets, txBytes  atomic.Uint64 // packets the device consumed
	txTransfers         atomic.Uint64
	txQueued            atomic.Uint64 // packets queued on the uplink
	txTooLong           atomic.Uint64
	txEmpty             atomic.Uint64
	txBusy              atomic.Uint64 // Transmit calls that found no room
	txAborted           atomic.Uint64 // packets whose transfer was aborted (reset, SYS_ERR)
	txInFlightHigh      atomic.Uint64
	mruChanges          atomic.Uint64
	rxAbortedBuffers    atomic.Uint64
	txAggregatedPackets atomic.Uint64
	rxStaleCompletion   atomic.Uint64 // downlink completions for no posted buffer
	txStaleCompletion   atomic.Uint64 // uplink completions for no transmit buffer
	recoveries          atomic.Uint64
	refillErrors        atomic.Uint64 // refills the channel refused (buffers put back)
	rxUnreported        atomic.Uint64 // elements completed without an event of their own
	rxDroppedFragments  atomic.Uint64 // filled elements dropped with their transfer
	rxDroppedBytes      atomic.Uint64 // their bytes
	rxCopied            atomic.Uint64 // transfers copied out of DMA memory
	rxCopiedBytes       atomic.Uint64

	// transmit aggregation and zero-copy; see tx.go, txzc.go
	txAggClosedBytes, txAggClosedPackets atomic.Uint64
	txAggClosedTimer, txAggClosedFlush   atomic.Uint64
	txAggPending                         atomic.Uint64 // packets in the open aggregate
	txCopied, txZeroCopy, txZCFallback   atomic.Uint64
	txZCPending, txZCPendingHigh         atomic.Uint64
	txZCBusy, txZCReleased               atomic.Uint64
	txZCBadRelease                       atomic.Uint64
}

// Stats is a snapshot of a device's counters. Every packet the device took
// in is in exactly one of: delivered (RxPackets / TxPackets) or a named
// error or drop counter — once the uplink is idle; until then a transmitted
// packet may also be in flight (queued, not yet completed) or waiting
// in the open aggregate (TxAggPending).
type Stats struct {
	MRU          int    `json:"mru"`
	MTU          int    `json:"mtu"`
	PoolBuffers  int    `json:"pool_buffers"`
	PoolMemory   int    `json:"pool_memory_bytes"`
	PoolFree     int    `json:"pool_free"`
	RxPosted     int    `json:"rx_posted"`
	RxPostedHigh uint64 `json:"rx_posted_high_water"`

	// PoolPrivateMemory is the host memory of the receive buffers'
	// private copies (copy-on-receive; 0 without it).
	PoolPrivateMemory int `json:"pool_private_memory_bytes"`
	// RxCopy is "on" when received transfers are copied out of DMA memory
	// before delivery, "off" for zero-copy delivery.
	RxCopy string `json:"rx_copy"`
	// RxMaxChain is the most elements one chained transfer may hold in
	// the current pool (Config.MaxChainElements, derived or set).
	RxMaxChain int `json:"rx_max_chain_elements"`

	RxPackets     uint64 `json:"rx_packets"`
	RxBytes       uint64 `json:"rx_bytes"`
	RxTransfers   uint64 `json:"rx_transfers"`
	RxElements    uint64 `json:"rx_elements"`
	RxOverflows   uint64 `json:"rx_overflow_events"`
	RxChains      uint64 `json:"rx_chains"`
	RxFragments   uint64 `json:"rx_fragments_chained"`
	RxErrors      uint64 `json:"rx_errors"`
	RxDropped     uint64 `json:"rx_dropped"`
	RefillStarved uint64 `json:"refill_starved"`
	Refills       uint64 `json:"refills"`
	MRUChanges    uint64 `json:"mru_changes"`
	Recoveries    uint64 `json:"recoveries"`

	RxChainTooLong   uint64 `json:"rx_chain_too_long"`
	RxChainAborted   uint64 `json:"rx_chain_aborted"`
	RxReassemblyBusy uint64 `json:"rx_reassembly_busy"`
	RxEmpty          uint64 `json:"rx_empty"`
	RxBadPacket      uint64 `json:"rx_bad_packet"`
	RxStale          uint64 `json:"rx_stale_completions"`
	// RxUnreported counts transfers lost because the device completed
	// their element without an event of its own (an event naming a later
	// element), so their length is unknown; dropped.
	RxUnreported uint64 `json:"rx_unreported"`
	// RxDroppedFragments and RxDroppedBytes count the filled elements (and
	// their bytes) of every transfer dropped by the counters above:
	// chains too long, aborted or unreported, and the rest of a dropped
	// transfer. Their buffers went back to the pool at once.
	RxDroppedFragments uint64 `json:"rx_dropped_fragments"`
	RxDroppedBytes     uint64 `json:"rx_dropped_bytes"`
	// RxCopied and RxCopiedBytes count the transfers (and bytes) copied out
	// of DMA memory by copy-on-receive. Chained transfers are reassembled
	// in host memory whatever the mode and are not counted here.
	RxCopied      uint64 `json:"rx_copied"`
	RxCopiedBytes uint64 `json:"rx_copied_bytes"`
	// RefillErrors counts refills the channel refused (the buffers went
	// back to the pool; the next completion or restart refills again).
	RefillErrors uint64 `json:"refill_errors"`

	TxPackets      uint64 `json:"tx_packets"`
	TxBytes        uint64 `json:"tx_bytes"`
	TxTransfers    uint64 `json:"tx_transfers"`
	TxQueued       uint64 `json:"tx_queued"`
	TxAggregated   uint64 `json:"tx_aggregated_packets"`
	TxErrors       uint64 `json:"tx_errors"`
	TxDropped      uint64 `json:"tx_dropped"`
	TxBusy         uint64 `json:"tx_busy"`
	TxTooLong      uint64 `json:"tx_too_long"`
	TxEmpty        uint64 `json:"tx_empty"`
	TxInFlightHigh uint64 `json:"tx_in_flight_high_water"`
	// TxStale counts uplink completions whose cookie names no transmit
	// buffer (RxStale is its downlink counterpart).
	TxStale uint64 `json:"tx_stale_completions"`

	// Transmit aggregates closed because the next packet would pass
	// TXAggMaxBytes, because they held TXAggMaxPackets, by the
	// TXAggTimeout timer, and by Flush (or the end of a call with a
	// negative timeout, or a zero-copy packet that must follow them).
	TxAggClosedBytes   uint64 `json:"tx_agg_closed_bytes"`
	TxAggClosedPackets uint64 `json:"tx_agg_closed_packets"`
	TxAggClosedTimer   uint64 `json:"tx_agg_closed_timer"`
	TxAggClosedFlush   uint64 `json:"tx_agg_closed_flush"`
	// TxAggPending is the number of packets in the open aggregate.
	TxAggPending uint64 `json:"tx_agg_pending"`
	// Packets queued by copying (Transmit, or TransmitZC's fallback) and
	// without copying (TransmitZC); TxZeroCopyFallback counts the
	// TransmitZC packets copied because half the ring was pending.
	TxCopied           uint64 `json:"tx_copied"`
	TxZeroCopy         uint64 `json:"tx_zerocopy"`
	TxZeroCopyFallback uint64 `json:"tx_zerocopy_fallback"`
	// Zero-copy slots the modem holds now, and at most so far.
	TxZCPending     uint64 `json:"tx_zerocopy_pending"`
	TxZCPendingHigh uint64 `json:"tx_zerocopy_pending_high_water"`
	// TXBuffer calls that found no free slot; slots the modem released;
	// release-ring entries rejected (unknown slot, stale tag, overrun).
	TxZCBusy       uint64 `json:"tx_zerocopy_busy"`
	TxZCReleased   uint64 `json:"tx_zerocopy_released"`
	TxZCBadRelease uint64 `json:"tx_zerocopy_bad_release"`

	// RxNTBSequenceGaps counts received NTBs whose wSequence did not
	// follow the previous one's (the datagrams are delivered; logged at
	// most every 10 s).
	RxNTBSequenceGaps uint64 `json:"rx_ntb_sequence_gaps"`
	// TxSession is the MBIM session id or QMAP mux id transmitted on;
	// TxSessionFollows counts the times it followed the modem's downlink
	// (Config.FollowSession).
	TxSession        uint64 `json:"tx_session"`
	TxSessionFollows uint64 `json:"tx_session_follows"`

	// Parse errors by reason (MBIM and QMAP formats).
	NTB  ntb.Stats  `json:"ntb"`
	QMAP qmap.Stats `json:"qmap"`

	// GSO counts TransmitGSO's software segmentation.
	GSO GSOStats `json:"gso"`
}

func (c *counters) snapshot(s *Stats) {
	s.RxPackets, s.RxBytes = c.rxPackets.Load(), c.rxBytes.Load()
	s.RxTransfers, s.RxElements = c.rxTransfers.Load(), c.rxElements.Load()
	s.RxOverflows, s.RxChains, s.RxFragments = c.rxOverflows.Load(), c.rxChains.Load(), c.rxFragments.Load()
	s.RxChainTooLong, s.RxChainAborted = c.rxChainTooLong.Load(), c.rxChainAborted.Load()
	s.RxReassemblyBusy, s.RxEmpty, s.RxBadPacket = c.rxReassemblyBusy.Load(), c.rxEmpty.Load(), c.rxBadPacket.Load()
	s.RxStale = c.rxStaleCompletion.Load()
	s.RxUnreported = c.rxUnreported.Load()
	s.RxDroppedFragments, s.RxDroppedBytes = c.rxDroppedFragments.Load(), c.rxDroppedBytes.Load()
	s.RxCopied, s.RxCopiedBytes = c.rxCopied.Load(), c.rxCopiedBytes.Load()
	s.RefillErrors = c.refillErrors.Load()
	s.RefillStarved, s.Refills, s.RxPostedHigh = c.refillStarved.Load(), c.refills.Load(), c.rxPostedHigh.Load()
	s.TxPackets, s.TxBytes, s.TxTransfers = c.txPackets.Load(), c.txBytes.Load(), c.txTransfers.Load()
	s.TxQueued, s.TxAggregated = c.txQueued.Load(), c.txAggregatedPackets.Load()
	s.TxTooLong, s.TxEmpty, s.TxBusy = c.txTooLong.Load(), c.txEmpty.Load(), c.txBusy.Load()
	s.TxInFlightHigh = c.txInFlightHigh.Load()
	s.TxStale = c.txStaleCompletion.Load()
	s.TxAggClosedBytes, s.TxAggClosedPackets = c.txAggClosedBytes.Load(), c.txAggClosedPackets.Load()
	s.TxAggClosedTimer, s.TxAggClosedFlush = c.txAggClosedTimer.Load(), c.txAggClosedFlush.Load()
	s.TxAggPending = c.txAggPending.Load()
	s.TxCopied, s.TxZeroCopy, s.TxZeroCopyFallback = c.txCopied.Load(), c.txZeroCopy.Load(), c.txZCFallback.Load()
	s.TxZCPending, s.TxZCPendingHigh = c.txZCPending.Load(), c.txZCPendingHigh.Load()
	s.TxZCBusy, s.TxZCReleased, s.TxZCBadRelease = c.txZCBusy.Load(), c.txZCReleased.Load(), c.txZCBadRelease.Load()
	s.MRUChanges = c.mruChanges.Load()
	s.Recoveries = c.recoveries.Load()
	s.RxDropped = s.RxChainTooLong + s.RxChainAborted + s.RxReassemblyBusy + s.RxUnreported
	s.RxErrors = s.RxEmpty + s.RxBadPacket
	s.TxErrors = s.TxTooLong + s.TxEmpty
	s.TxDropped = c.txAborted.Load()
}

func maxStore(a *atomic.Uint64, v uint64) {
	for {
		old := a.Load()
		if v <= old || a.CompareAndSwap(old, v) {
			return
		}
	}
}
