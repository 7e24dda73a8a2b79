package sysfs

// The descriptions of the counter groups under devices/<dev>/stats/. The
// groups' attributes are made from struct fields (counterAttrs), which
// carry a JSON name and no description; this catalogue gives each one its
// description (the HELP text of its Prometheus family), whether it is a
// counter or a gauge, and its unit. A field missing here is exposed as an
// "undocumented" counter, which TestEveryMetricDocumented fails on: add
// its entry when adding a field to one of these structs.

// statDoc describes one attribute of a counter group.
type statDoc struct {
	help string
	kind MetricKind
	unit Unit
	// name, if set, is the metric name part instead of the attribute's.
	name string
}

// counter, counterBytes, gauge, gaugeBytes and gaugeMs build statDocs.
func counter(help string) statDoc      { return statDoc{help: help, kind: Counter} }
func counterBytes(help string) statDoc { return statDoc{help: help, kind: Counter, unit: UnitBytes} }
func gauge(help string) statDoc        { return statDoc{help: help, kind: Gauge} }
func gaugeBytes(help string) statDoc   { return statDoc{help: help, kind: Gauge, unit: UnitBytes} }
func gaugeMs(help string) statDoc      { return statDoc{help: help, kind: Gauge, unit: UnitMilliseconds} }

// renamed gives d a metric name part of its own.
func (d statDoc) renamed(name string) statDoc { d.name = name; return d }

// undocumented is the description of a group attribute statDocs lacks.
const undocumented = "(undocumented) counter "

// describeStat sets a's description, metric kind and unit from statDocs.
func describeStat(group string, a *Attr) {
	d, ok := statDocs[group][a.Name]
	if !ok {
		a.Doc = undocumented + a.Doc
		a.Metric = Counter
		return
	}
	a.Doc, a.Metric, a.Unit, a.MetricName = d.help, d.kind, d.unit, d.name
}

// statDocs holds, per counter group (stats/<group>; "ports" for
// stats/ports/<port>), the description of each attribute.
var statDocs = map[string]map[string]statDoc{
	// mhi.ControllerStatsSnapshot.
	"mhi": {
		"interrupts":              counter("interrupts (MSI vectors) the controller handled"),
		"doorbells":               counter("doorbells the controller rang (channel, event ring and command doorbells)"),
		"events":                  counter("events the controller read from its event rings"),
		"events_by_poll":          counter("events found by polling the event rings rather than after an interrupt"),
		"event_passes":            counter("passes over an event ring that found events (each handles at most the event quota)"),
		"event_quota_reached":     counter("event-ring passes that stopped at the event quota with events left for the next pass"),
		"commands":                counter("commands the controller sent on the command ring"),
		"state_changes":           counter("MHI state-change events the device sent"),
		"bad_event_ring_rp":       counter("event ring read pointers the device published outside the ring (device misbehaviour; events ignored until repaired)"),
		"bad_event_ptr":           counter("transfer or command completions whose pointer named no queued element (device misbehaviour)"),
		"unknown_channel":         counter("transfer events for a channel that does not exist or is not on that event ring (device misbehaviour)"),
		"bad_code":                counter("transfer events with an unknown completion code (device misbehaviour)"),
		"length_clamped":          counter("transfer completions longer than their buffer, clamped to it (device misbehaviour)"),
		"unknown_event":           counter("events of an unknown type (device misbehaviour)"),
		"stale_completion":        counter("completions for a disabled channel or for no outstanding command"),
		"sys_errs":                counter("SYS_ERR states the device entered"),
		"recoveries":              counter("recoveries that brought the device back to M0"),
		"soc_resets":              counter("SoC resets the host requested"),
		"doorbell_errors":         counter("doorbell writes the transport failed"),
		"bad_register":            counter("register values the device published that the host refused (MHIREGLEN, CHDBOFF, ERDBOFF, BHIOFF, BHIEOFF, EXECENV)"),
		"recovery_attempts":       counter("SYS_ERR recovery attempts"),
		"recovery_failures":       counter("SYS_ERR recovery attempts that failed"),
		"recovery_gave_up":        counter("times recovery gave up and the controller entered RECOVERY_FAILED"),
		"device_error_recoveries": counter("recoveries the host started for a device fault other than SYS_ERR (an event ring read pointer outside its ring, an unacknowledged M3 or M0)"),
		"state_timeouts":          counter("M3 and M0 transitions the device did not acknowledge in time"),
		"recovery_consecutive":    gauge("consecutive recovery attempts so far (0 when the device is healthy)"),
		"recovery_backoff_ms":     gaugeMs("backoff before the next recovery attempt"),
		"recovery_failed":         gauge("1 while the controller is in RECOVERY_FAILED (recovery gave up; the device is left alone until powered down), else 0"),
		"firmware_images":         counter("firmware images downloaded to the device (BHI in PBL or EDL, BHIe in SBL)"),
		"firmware_errors":         counter("firmware downloads that failed: no image, refused by the device (BHI error code), or no answer in time"),
		"dumps":                   counter("RAM dumps collected after a crash into RDDM"),
		"dump_errors":             counter("crashes without a usable RAM dump (not in RDDM, dump failed or timed out)"),
		"suspends":                counter("M0 to M3 transitions the device acknowledged"),
		"resumes":                 counter("M3 to M0 transitions the device acknowledged"),
		"auto_suspends":           counter("suspends the host made by itself after autosuspend_ms without activity"),
		"suspends_refused":        counter("suspends refused because the device has no M3 (its table entry's no_m3, or it ignored an M3 request)"),
		"slow_readies":            counter("waits for READY (power-up, resets) that took longer than 2 s: a slow modem (Linux's ready_timeout_ms)"),
		"health_checks":           counter("checks that the device still answers on the bus (MHIVER, every 2 s in M0)"),
		"link_down":               gauge("1 while the controller is in LINK_DOWN (the device reads as all ones or its accesses fail: off the bus or removed; left alone until powered down), else 0"),
	},
	// mhinet.Stats, with its nested GSOStats as gso_….
	"net": {
		"mru":                            gaugeBytes("receive buffer size of the data channel (MRU)"),
		"mtu":                            gaugeBytes("largest packet the network device transmits (MTU)"),
		"pool_buffers":                   gauge("receive buffers in the pool"),
		"pool_memory_bytes":              gaugeBytes("DMA memory of the receive buffer pool"),
		"pool_private_memory_bytes":      gaugeBytes("host memory of the receive buffers' private copies (copy-on-receive; 0 without it)"),
		"pool_free":                      gauge("receive buffers free in the pool"),
		"rx_posted":                      gauge("receive buffers posted on the downlink ring"),
		"rx_posted_high_water":           gauge("most receive buffers posted at once"),
		"rx_max_chain_elements":          gauge("most elements one chained downlink transfer may hold"),
		"rx_packets":                     counter("packets received and delivered"),
		"rx_ntb_sequence_gaps":           counter("received NTBs whose sequence number did not follow the previous one's (a modem's sequence glitch; the datagrams are delivered, the log says so at most every 10 s)"),
		"tx_session":                     gauge("MBIM session id or QMAP mux id the uplink is sent on"),
		"tx_session_follows":             counter("times the uplink followed the session or mux id the modem sends the downlink on (a modem numbering its session from 112)"),
		"rx_bytes":                       counterBytes("bytes of the packets received and delivered"),
		"rx_transfers":                   counter("complete downlink transfers (aggregates) received"),
		"rx_elements":                    counter("downlink elements completed with data"),
		"rx_overflow_events":             counter("OVERFLOW completions on the downlink"),
		"rx_chains":                      counter("downlink transfers that arrived over several elements"),
		"rx_fragments_chained":           counter("downlink elements that were part of a chain"),
		"rx_errors":                      counter("downlink transfers with an error: rx_empty plus rx_bad_packet"),
		"rx_dropped":                     counter("downlink transfers dropped: chains too long, aborted, reassembly busy, unreported"),
		"refill_starved":                 counter("ring refills that found the buffer pool empty"),
		"refills":                        counter("refills of the downlink ring with receive buffers"),
		"mru_changes":                    counter("MRU changes applied"),
		"recoveries":                     counter("restarts of the data channel after a SYS_ERR recovery"),
		"rx_chain_too_long":              counter("chained downlink transfers dropped for exceeding the reassembly limit"),
		"rx_chain_aborted":               counter("chained downlink transfers cut by a channel reset"),
		"rx_reassembly_busy":             counter("chained downlink transfers dropped because every reassembly buffer was held"),
		"rx_empty":                       counter("zero-length downlink transfers"),
		"rx_bad_packet":                  counter("raw-IP downlink transfers that are not IPv4 or IPv6"),
		"rx_stale_completions":           counter("downlink completions that named no posted buffer"),
		"rx_unreported":                  counter("downlink transfers lost because the device completed their element without an event of its own"),
		"rx_dropped_fragments":           counter("filled downlink elements dropped with their transfer"),
		"rx_dropped_bytes":               counterBytes("bytes of the downlink elements dropped with their transfer"),
		"rx_copied":                      counter("downlink transfers copied out of DMA memory (copy-on-receive)"),
		"rx_copied_bytes":                counterBytes("bytes copied out of DMA memory (copy-on-receive)"),
		"refill_errors":                  counter("ring refills the channel refused (the buffers went back to the pool)"),
		"tx_packets":                     counter("packets the device consumed on the uplink"),
		"tx_bytes":                       counterBytes("bytes of the packets the device consumed on the uplink"),
		"tx_transfers":                   counter("uplink transfers the device completed"),
		"tx_queued":                      counter("packets queued on the uplink"),
		"tx_aggregated_packets":          counter("packets sent inside an aggregate (MBIM NTB, QMAP)"),
		"tx_errors":                      counter("uplink packets refused: tx_too_long plus tx_empty"),
		"tx_dropped":                     counter("uplink packets whose transfer was aborted (reset, SYS_ERR) or not queued"),
		"tx_busy":                        counter("transmit calls that found no free buffer or ring room"),
		"tx_too_long":                    counter("uplink packets longer than the MTU"),
		"tx_empty":                       counter("empty uplink packets"),
		"tx_in_flight_high_water":        gauge("most uplink transfers in flight at once"),
		"tx_stale_completions":           counter("uplink completions that named no transmit buffer"),
		"tx_agg_closed_bytes":            counter("uplink aggregates closed because the next packet would pass the byte limit").renamed("tx_agg_closed_by_size"),
		"tx_agg_closed_packets":          counter("uplink aggregates closed because they held the packet limit").renamed("tx_agg_closed_by_count"),
		"tx_agg_closed_timer":            counter("uplink aggregates closed by the aggregation timer").renamed("tx_agg_closed_by_timer"),
		"tx_agg_closed_flush":            counter("uplink aggregates closed by a flush").renamed("tx_agg_closed_by_flush"),
		"tx_agg_pending":                 gauge("packets in the open uplink aggregate"),
		"tx_copied":                      counter("uplink packets queued by copying"),
		"tx_zerocopy":                    counter("uplink packets queued without copying"),
		"tx_zerocopy_fallback":           counter("zero-copy uplink packets copied because half the ring was pending"),
		"tx_zerocopy_pending":            gauge("zero-copy uplink slots the modem holds"),
		"tx_zerocopy_pending_high_water": gauge("most zero-copy uplink slots the modem held at once"),
		"tx_zerocopy_busy":               counter("zero-copy buffer requests that found no free slot"),
		"tx_zerocopy_released":           counter("zero-copy uplink slots the modem released"),
		"tx_zerocopy_bad_release":        counter("zero-copy release entries rejected (unknown slot, stale tag, overrun)"),
		"gso_super_packets":              counter("GSO super-packets segmented in software"),
		"gso_segments":                   counter("packets cut from GSO super-packets"),
		"gso_plain":                      counter("non-GSO packets passed through the segmentation path"),
		"gso_checksummed":                counter("plain packets whose partial checksum was finished"),
		"gso_dropped_segments":           counter("segments produced but never queued (busy uplink, failed device)"),
		"gso_err_short":                  counter("packets dropped by segmentation as shorter than a header or length they declare"),
		"gso_err_bad_header":             counter("packets dropped by segmentation for an inconsistent virtio_net_hdr or IP/L4 header"),
		"gso_err_unsupported":            counter("packets dropped by segmentation for using what is not segmented (UFO, IPv6 extension headers…)"),
		"gso_err_too_many_segments":      counter("super-packets that need more segments than allowed"),
		"gso_err_segment_too_long":       counter("super-packets whose segments would pass the MTU, and plain packets longer than it"),
	},
	// ctrlport.SessionStats.
	"session": {
		"connects":            counter("data sessions connected"),
		"connect_failures":    counter("connect requests that failed"),
		"disconnects":         counter("data sessions disconnected by the host"),
		"disconnect_failures": counter("disconnect requests that failed"),
		"network_disconnects": counter("data sessions the modem ended on its own (radio off, detach, another client)"),
		"connected":           gauge("1 while the data session is connected, else 0"),

		// What a hostile modem makes the session refuse or check.
		"config_refused": counter("connects refused because the modem assigned an invalid configuration (addresses, prefixes, gateways, DNS servers, MTU)"),
		"state_checks":   counter("times the session asked the modem whether it still stands, after an indication said it might not"),
	},
	// Per session (stats/sessions/<N>/, beside the "session" counters of
	// that session): tun.SessionStats of the session's interface; and the
	// demultiplexer's tun.MuxStats in stats/sessions/ itself.
	"sessions": {
		"rx_packets":          counter("packets of this session delivered to its interface"),
		"rx_bytes":            counterBytes("bytes of the packets of this session delivered to its interface"),
		"tx_packets":          counter("packets of this session's interface sent on the uplink with its session id or mux id"),
		"tx_bytes":            counterBytes("bytes of the packets of this session's interface sent on the uplink"),
		"rx_dropped":          counter("packets of this session dropped on the way to its interface (queue full, interface gone)"),
		"tx_dropped":          counter("packets of this session's interface dropped on the way to the uplink"),
		"rx_session_mismatch": counter("downlink packets of one session addressed into another session's prefixes and none of their own (a device that put them in the wrong NDP or under the wrong mux id): counted and released, never delivered through the wrong interface"),
		"rx_session_unknown":  counter("downlink packets for a session with no interface (one the host has not connected, or a session or mux id the device invented): counted and released, never delivered to another session"),
		"rx_batches":          counter("receive batches the demultiplexer routed to the sessions' interfaces"),
		"rx_batches_split":    counter("receive batches that held more than one session (or an unknown one) and were split"),
	},
	// The embedded mock modem's ipdata.SessionStats, per session
	// (stats/modem_sessions/<N>/).
	"modem_sessions": {
		"ul_packets":    counter("mock modem: uplink IP packets it took on this session"),
		"ul_bytes":      counterBytes("mock modem: bytes of the uplink IP packets it took on this session"),
		"gen_packets":   counter("mock modem: packets its generator made on this session"),
		"dl_packets":    counter("mock modem: IP packets of this session it committed to the downlink"),
		"dl_bytes":      counterBytes("mock modem: IP bytes of this session it committed to the downlink (framing excluded)"),
		"pending":       gauge("mock modem: packets of this session waiting in its open downlink aggregate"),
		"dropped":       counter("mock modem: packets of this session it dropped, for any reason"),
		"dropped_gated": counter("mock modem: packets of this session it dropped for want of a connected session"),
	},
	// ctrlport.PortStats, with its pair's PairStats as pair_….
	"ports": {
		"ul_messages":        counter("messages framed from the port's clients and queued on the uplink channel"),
		"ul_bytes":           counterBytes("bytes of the messages framed from the port's clients"),
		"ul_garbage_bytes":   counterBytes("client bytes skipped because no message could start there"),
		"ul_framing_errors":  counter("runs of client bytes skipped as garbage (framing errors)"),
		"ul_partial_dropped": counter("incomplete client messages discarded after a silence"),
		"ul_send_failed":     counter("client messages the uplink channel did not take"),
		"dl_messages":        counter("downlink messages written to the port's pseudo-terminal"),
		"dl_bytes":           counterBytes("bytes of the downlink messages written to the pseudo-terminal"),
		"dl_queue_full":      counter("downlink messages dropped because the queue to the pseudo-terminal was full"),
		"dl_write_timeouts":  counter("downlink messages dropped because no client read them in time"),
		"dl_stale_flushes":   counter("discards of unread downlink bytes a departed client left"),
		"dl_stale_bytes":     counterBytes("unread downlink bytes discarded"),
		"pair_ul_messages":   counter("uplink transfers queued on the control channel pair"),
		"pair_ul_bytes":      counterBytes("bytes of the uplink transfers queued on the control channel pair"),
		"pair_ul_done":       counter("uplink transfers of the control channel pair the device completed"),
		"pair_ul_aborted":    counter("uplink transfers of the control channel pair lost to a channel reset, SYS_ERR or close"),
		"pair_ul_dropped":    counter("uplink messages the control channel pair did not queue (timeout, closed)"),
		"pair_dl_messages":   counter("downlink transfers received on the control channel pair"),
		"pair_dl_bytes":      counterBytes("bytes of the downlink transfers received on the control channel pair"),
		"pair_dl_chained":    counter("downlink transfers joined from OVERFLOW pieces"),
		"pair_dl_too_large":  counter("downlink transfers dropped for exceeding the largest message"),
		"pair_dl_cut":        counter("downlink transfers cut short by SYS_ERR or a reset"),

		// Downlink lies of a hostile device, counted and survived.
		"pair_dl_chain_stalled": counter("downlink transfers dropped because their next OVERFLOW piece never came"),
		"pair_dl_empty":         counter("downlink elements the device completed with no data"),
		"pair_dl_unreported":    counter("downlink elements the device completed without an event of their own, dropped with the transfer they ended"),
		"pair_dl_bad_transfers": counter("downlink elements the device failed (BAD_TRE); their buffers were posted again"),

		"pair_repost_errors": counter("downlink buffers the control channel pair failed to post again"),
		"pair_sys_errs":      counter("SYS_ERRs the control channel pair went through"),
		"pair_recoveries":    counter("recoveries after which the control channel pair was restarted"),
	},
	// pcigeneric/mock.ModemStats: the embedded mock modem's own side.
	"modem": {
		"ip_ul_packets":            counter("mock modem: uplink IP packets it received"),
		"ip_dl_packets":            counter("mock modem: downlink IP packets it sent"),
		"ip_answered":              counter("mock modem: uplink packets its network answered (echo replies)"),
		"ip_dropped":               counter("mock modem: IP packets it dropped"),
		"ip_dropped_gated":         counter("mock modem: IP packets it dropped for want of a connected session"),
		"ip_dropped_over_mtu":      counter("mock modem: uplink IP packets its network dropped for being longer than its MTU (quirk mtu-1400)"),
		"ip_ntb_sequence_glitches": counter("mock modem: downlink NTBs whose sequence number it made skip (quirk ntb-sequence-glitch)"),
		"connects":                 counter("mock modem: data sessions connected"),
		"disconnects":              counter("mock modem: data sessions disconnected"),
		"connect_failures":         counter("mock modem: connect requests it refused"),
		"session_active":           gauge("mock modem: 1 while its data session 0 is active, else 0"),
		"mbim_messages_in":         counter("mock modem: MBIM messages received"),
		"mbim_messages_out":        counter("mock modem: MBIM messages sent"),
		"mbim_commands":            counter("mock modem: MBIM commands answered"),
		"mbim_commands_failed":     counter("mock modem: MBIM commands answered with a failure status"),
		"mbim_not_supported":       counter("mock modem: MBIM commands answered NoDeviceSupport"),
		"mbim_function_errors":     counter("mock modem: MBIM FUNCTION_ERROR messages sent"),
		"mbim_indications":         counter("mock modem: MBIM indications sent"),
		"mbim_dropped":             counter("mock modem: MBIM messages, replies and indications dropped"),
		"qmi_frames_in":            counter("mock modem: QMUX frames received"),
		"qmi_frames_out":           counter("mock modem: QMUX frames sent"),
		"qmi_error_responses":      counter("mock modem: QMI responses with an error result"),
		"qmi_malformed":            counter("mock modem: QMI requests whose TLVs did not parse"),
		"qmi_dropped":              counter("mock modem: QMUX frames and indications dropped"),
		"qmi_indications":          counter("mock modem: QMI indications sent"),
		"qmi_clients_active":       gauge("mock modem: QMI client ids allocated"),
		"at_lines":                 counter("mock modem: AT command lines received"),
		"at_ok":                    counter("mock modem: AT lines answered OK"),
		"at_errors":                counter("mock modem: AT lines answered with an error"),
	},
}
