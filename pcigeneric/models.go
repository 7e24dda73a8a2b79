package pcigeneric

import (
	"fmt"
	"time"

	"github.com/gomhi/gomhi/mhi/wire"
)

// This file holds the data: the channel/event-ring configurations, the
// models and the ID table, after the latest pci_generic snapshot described
// in the project's facts sheet (section 5). Entries seen only as newer,
// unconfirmed patches (telit-fe912c04, telit-fe910c04, the generic
// qcom-sdx35m on 17cb:011a, foxconn-t99w760, NMEA 94/95 on Telit) are left
// out.

// PCI vendor IDs of the table.
const (
	VendorQualcomm  = 0x17cb
	VendorQuectel   = 0x1eac
	VendorFoxconn   = 0x105b
	VendorThales    = 0x1269 // Cinterion
	VendorNetprisma = 0x203e
	VendorHP        = 0x03f0
	VendorSierra    = 0x18d7 // subsystem vendor only
	VendorTelit     = 0x1c5d // subsystem vendor only
)

// Common parameters of every model and configuration.
const (
	defaultMaxChannels = 128
	commandElements    = 128
	defaultDMAWidth    = 32
	mru32K             = 32768
)

// Configuration builders. They encode the meaning of the channel and event
// macros of pci_generic: plain channels use doorbell mode, hardware (HW)
// channels burst mode with a doorbell-mode switch; event rings get vector
// index+1 and the moderation of their kind.

func chanPair(num uint8, name string, elems, evUL, evDL int, ee wire.ExecEnv, hw bool) []wire.ChannelConfig {
	mk := func(n uint8, d wire.Direction, ev int) wire.ChannelConfig {
		return wire.ChannelConfig{Num: n, Name: name, Elements: elems, EventRing: ev,
			Dir: d, EE: ee, Burst: hw, DBModeSwitch: hw}
	}
	return []wire.ChannelConfig{mk(num, wire.Uplink, evUL), mk(num+1, wire.Downlink, evDL)}
}

// pair is an AMSS channel pair on one event ring.
func pair(num uint8, name string, elems, ev int) []wire.ChannelConfig {
	return chanPair(num, name, elems, ev, ev, wire.EEAMSS, false)
}

// pairEE is a channel pair that exists in another EE (SBL, FP).
func pairEE(num uint8, name string, elems, ev int, ee wire.ExecEnv) []wire.ChannelConfig {
	return chanPair(num, name, elems, ev, ev, ee, false)
}

// swPair is an AMSS software data pair with one event ring per direction.
func swPair(num uint8, name string, elems, evUL, evDL int) []wire.ChannelConfig {
	return chanPair(num, name, elems, evUL, evDL, wire.EEAMSS, false)
}

// hwPair is a hardware (burst mode) data pair, one event ring per direction.
func hwPair(num uint8, name string, elems, evUL, evDL int) []wire.ChannelConfig {
	return chanPair(num, name, elems, evUL, evDL, wire.EEAMSS, true)
}

// single is a channel without a partner in the other direction.
func single(num uint8, name string, elems, ev int, d wire.Direction, ee wire.ExecEnv) []wire.ChannelConfig {
	return []wire.ChannelConfig{{Num: num, Name: name, Elements: elems, EventRing: ev, Dir: d, EE: ee}}
}

func channels(groups ...[]wire.ChannelConfig) []wire.ChannelConfig {
	var out []wire.ChannelConfig
	for _, g := range groups {
		out = append(out, g...)
	}
	return out
}

// ring describes an event ring before its vector is assigned.
type ring struct {
	kind  wire.EventRingKind
	elems int
	ch    int
}

func ctrlRing(n int) ring         { return ring{wire.EventCtrl, n, -1} }
func dataRing(n int) ring         { return ring{wire.EventData, n, -1} }
func swRing(n int) ring           { return ring{wire.EventSWData, n, -1} }
func hwRing(n int, ch uint8) ring { return ring{wire.EventHWData, n, int(ch)} }
func moderation(k wire.EventRingKind) int {
	switch k {
	case wire.EventData:
		return 5
	case wire.EventHWData:
		return 1
	}
	return 0
}

func rings(rs ...ring) []wire.EventRingConfig {
	out := make([]wire.EventRingConfig, len(rs))
	for i, r := range rs {
		out[i] = wire.EventRingConfig{
			Elements:     r.elems,
			Kind:         r.kind,
			ModerationMs: moderation(r.kind),
			Vector:       i + 1,
			Hardware:     r.kind == wire.EventHWData,
			Channel:      r.ch,
		}
	}
	return out
}

func config(timeoutMs, readyMs int, chs []wire.ChannelConfig, ers []wire.EventRingConfig) wire.ControllerConfig {
	return wire.ControllerConfig{
		MaxChannels:     defaultMaxChannels,
		Timeout:         time.Duration(timeoutMs) * time.Millisecond,
		ReadyTimeout:    time.Duration(readyMs) * time.Millisecond,
		Channels:        chs,
		EventRings:      ers,
		CommandElements: commandElements,
	}
}

// Channel lists shared by several configurations.
var (
	qcomChannels = channels(
		pair(4, "DIAG", 16, 1),
		pair(12, "MBIM", 4, 0),
		pair(14, "QMI", 4, 0),
		pair(20, "IPCR", 8, 0),
		pairEE(34, "FIREHOSE", 32, 0, wire.EEFP),
		swPair(46, "IP_SW0", 64, 2, 3),
		hwPair(100, "IP_HW0", 128, 4, 5),
	)
	qcomRings = rings(ctrlRing(64), dataRing(128), swRing(64), swRing(64),
		hwRing(1024, 100), hwRing(2048, 101))

	// Quectel and Foxconn share the event-ring layout.
	quectelRings = rings(ctrlRing(128), dataRing(128), hwRing(1024, 100), hwRing(1024, 101))

	foxconnChannels = channels(
		pair(0, "LOOPBACK", 32, 0),
		pair(4, "DIAG", 32, 1),
		pair(12, "MBIM", 32, 0),
		pair(32, "DUN", 32, 0),
		pairEE(34, "FIREHOSE", 32, 0, wire.EEFP),
		hwPair(100, "IP_HW0_MBIM", 128, 2, 3),
	)

	telitFN990Rings = rings(ctrlRing(128), dataRing(128), hwRing(1024, 100), hwRing(2048, 101))
)

// configs are the named MHI configurations.
var configs = map[string]wire.ControllerConfig{
	"modem_qcom_v1": config(8000, 0, qcomChannels, qcomRings),
	"modem_qcom_v2": config(8000, 50000, qcomChannels, qcomRings),
	"quectel_em1xx": config(20000, 0, channels(
		pair(0, "NMEA", 32, 0),
		pairEE(2, "SAHARA", 32, 0, wire.EESBL),
		pair(4, "DIAG", 32, 1),
		pair(12, "MBIM", 32, 0),
		pair(32, "DUN", 32, 0),
		pairEE(34, "FIREHOSE", 32, 0, wire.EEFP),
		hwPair(100, "IP_HW0_MBIM", 128, 2, 3),
	), quectelRings),
	"foxconn_sdx55": config(20000, 0, foxconnChannels, quectelRings),
	"foxconn_sdx61": config(20000, 0, channels(foxconnChannels[:10],
		pair(50, "NMEA", 32, 0), foxconnChannels[10:]), quectelRings),
	"foxconn_sdx72": config(20000, 50000, foxconnChannels, quectelRings),
	"mv3x": config(20000, 0, channels(
		pair(0, "LOOPBACK", 64, 0),
		pair(12, "MBIM", 64, 0),
		hwPair(100, "IP_HW0_MBIM", 512, 2, 3),
	), rings(ctrlRing(256), dataRing(256), hwRing(1024, 100), hwRing(1024, 101))),
	"sierra_em919x": config(24000, 0, channels(
		single(2, "SAHARA", 32, 0, wire.Uplink, wire.EESBL),
		single(3, "SAHARA", 256, 0, wire.Downlink, wire.EESBL),
		pair(4, "DIAG", 32, 0),
		pair(12, "MBIM", 128, 0),
		pair(14, "QMI", 32, 0),
		pair(32, "DUN", 32, 0),
		hwPair(100, "IP_HW0", 512, 1, 2),
	), rings(ctrlRing(2048), hwRing(2048, 100), hwRing(2048, 101))),
	"telit_fn980_hw_v1": config(20000, 0, channels(
		pair(14, "QMI", 32, 0),
		pair(20, "IPCR", 16, 0),
		hwPair(100, "IP_HW0", 128, 1, 2),
	), rings(ctrlRing(128), hwRing(1024, 100), hwRing(2048, 101))),
	"telit_fn990": config(20000, 0, channels(
		pairEE(2, "SAHARA", 32, 0, wire.EESBL),
		pair(4, "DIAG", 64, 1),
		pair(12, "MBIM", 32, 0),
		pair(32, "DUN", 32, 0),
		pair(92, "DUN2", 32, 1),
		hwPair(100, "IP_HW0_MBIM", 128, 2, 3),
	), telitFN990Rings),
	"telit_fn920c04": config(50000, 0, channels(
		pairEE(2, "SAHARA", 32, 0, wire.EESBL),
		pair(4, "DIAG", 64, 1),
		pair(14, "QMI", 32, 0),
		pair(32, "DUN", 32, 0),
		pairEE(34, "FIREHOSE", 32, 0, wire.EEFP),
		pair(92, "DUN2", 32, 1),
		hwPair(100, "IP_HW0", 128, 2, 3),
	), telitFN990Rings),
	"qdu100": config(120000, 0, channels(
		pair(0, "LOOPBACK", 32, 2),
		pairEE(2, "SAHARA", 128, 1, wire.EESBL),
		pair(4, "DIAG", 64, 3),
		// Linux declares QDSS as an uplink channel numbered 9. MHI numbers
		// uplink channels even and downlink odd, and ControllerConfig
		// enforces that, so the model keeps the number and makes it the
		// downlink (device → host) channel, which is what a trace channel
		// carries.
		single(9, "QDSS", 64, 3, wire.Downlink, wire.EEAMSS),
		pair(14, "NMEA", 32, 4),
		pair(16, "CSM_CTRL", 32, 4),
		pair(40, "MHI_PHC", 32, 4),
		swPair(46, "IP_SW0", 256, 5, 5),
	), rings(ctrlRing(64), swRing(256), swRing(64), swRing(256), swRing(256),
		swRing(512), swRing(512), swRing(512))),
	"sa8775p": config(8000, 0, channels(
		swPair(46, "IP_SW0", 2048, 1, 2),
	), rings(ctrlRing(64), swRing(64), swRing(64))),
}

// Firmware images shared by several models.
const (
	edlSDX55Foxconn = "qcom/sdx55m/foxconn/prog_firehose_sdx55.mbn"
	edlSDX65Foxconn = "qcom/sdx65m/foxconn/prog_firehose_lite.elf"
	edlSDX24Foxconn = "qcom/sdx24m/foxconn/prog_firehose_sdx24.mbn"
	edlSDX72Foxconn = "qcom/sdx72m/foxconn/edl.mbn"
	edlSDX61Foxconn = "qcom/sdx61/foxconn/prog_firehose_lite.elf"
	edlSDX24        = "qcom/prog_firehose_sdx24.mbn"
	edlSDX6x        = "qcom/prog_firehose_sdx6x.elf"
)

// modelList is every model. Fields left out are zero: no firmware, no EDL
// image, no trigger, MRU chosen by the network driver, no sideband wake.
var modelList = []ModemInfo{
	{Name: "qcom-sa8775p", ConfigName: "sa8775p", MRUDefault: mru32K},
	{Name: "qcom-sdx75m", ConfigName: "modem_qcom_v2", Firmware: "qcom/sdx75m/xbl.elf",
		EDLImage: "qcom/sdx75m/edl.mbn", EDLTrigger: true},
	{Name: "qcom-sdx65m", ConfigName: "modem_qcom_v1", Firmware: "qcom/sdx65m/xbl.elf",
		EDLImage: "qcom/sdx65m/edl.mbn", EDLTrigger: true},
	{Name: "qcom-sdx55m", ConfigName: "modem_qcom_v1", Firmware: "qcom/sdx55m/sbl1.mbn",
		EDLImage: "qcom/sdx55m/edl.mbn", EDLTrigger: true, MRUDefault: mru32K},
	{Name: "qcom-sdx24", ConfigName: "modem_qcom_v1", EDLImage: edlSDX24, SidebandWake: true},
	{Name: "qcom-qdu100", ConfigName: "qdu100", Firmware: "qcom/qdu100/xbl_s.melf",
		EDLTrigger: true, NoM3: true, ResetOnRemove: true, VFDMAWidth: 40},
	{Name: "quectel-em1xx", ConfigName: "quectel_em1xx", EDLImage: edlSDX24,
		MRUDefault: mru32K, SidebandWake: true},
	{Name: "quectel-rm5xx", ConfigName: "quectel_em1xx", EDLImage: edlSDX6x,
		MRUDefault: mru32K, SidebandWake: true},
	{Name: "foxconn-sdx55", ConfigName: "foxconn_sdx55", EDLImage: edlSDX55Foxconn, EDLTrigger: true, MRUDefault: mru32K},
	{Name: "foxconn-t99w175", ConfigName: "foxconn_sdx55", EDLImage: edlSDX55Foxconn, EDLTrigger: true, MRUDefault: mru32K},
	{Name: "foxconn-dw5930e", ConfigName: "foxconn_sdx55", EDLImage: edlSDX55Foxconn, EDLTrigger: true, MRUDefault: mru32K},
	{Name: "foxconn-t99w368", ConfigName: "foxconn_sdx55", EDLImage: edlSDX65Foxconn, EDLTrigger: true, MRUDefault: mru32K},
	{Name: "foxconn-t99w373", ConfigName: "foxconn_sdx55", EDLImage: edlSDX65Foxconn, EDLTrigger: true, MRUDefault: mru32K},
	{Name: "foxconn-dw5932e", ConfigName: "foxconn_sdx55", EDLImage: edlSDX65Foxconn, EDLTrigger: true, MRUDefault: mru32K},
	{Name: "foxconn-t99w510", ConfigName: "foxconn_sdx55", EDLImage: edlSDX24Foxconn, EDLTrigger: true, MRUDefault: mru32K},
	{Name: "foxconn-t99w640", ConfigName: "foxconn_sdx72", EDLImage: edlSDX72Foxconn, EDLTrigger: true, MRUDefault: mru32K, MuxIDBase: 112},
	{Name: "foxconn-dw5934e", ConfigName: "foxconn_sdx72", EDLImage: edlSDX72Foxconn, EDLTrigger: true, MRUDefault: mru32K, MuxIDBase: 112},
	{Name: "foxconn-t99w696", ConfigName: "foxconn_sdx61", EDLImage: edlSDX61Foxconn, EDLTrigger: true, MRUDefault: mru32K},
	{Name: "cinterion-mv31", ConfigName: "mv3x", MRUDefault: mru32K},
	{Name: "cinterion-mv32", ConfigName: "mv3x", MRUDefault: mru32K},
	{Name: "sierra-em919x", ConfigName: "sierra_em919x", MRUDefault: mru32K},
	{Name: "telit-fn980-hwv1", ConfigName: "telit_fn980_hw_v1", Firmware: "qcom/sdx55m/sbl1.mbn",
		EDLImage: "qcom/sdx55m/edl.mbn", MRUDefault: mru32K},
	{Name: "telit-fn990", ConfigName: "telit_fn990", MRUDefault: mru32K},
	{Name: "telit-fe990a", ConfigName: "telit_fn990", MRUDefault: mru32K},
	{Name: "telit-fn920c04", ConfigName: "telit_fn920c04", EDLTrigger: true, MRUDefault: mru32K},
	{Name: "telit-fn990b40", ConfigName: "telit_fn920c04", EDLTrigger: true, MRUDefault: mru32K},
	{Name: "telit-fe990b40", ConfigName: "telit_fn920c04", EDLTrigger: true, MRUDefault: mru32K},
	{Name: "netprisma-lcur57", ConfigName: "quectel_em1xx", EDLImage: edlSDX24,
		MRUDefault: mru32K, SidebandWake: true},
	{Name: "netprisma-fcun69", ConfigName: "quectel_em1xx", EDLImage: edlSDX6x,
		MRUDefault: mru32K, SidebandWake: true},
}

// idRow is one table row before it is linked to its model.
type idRow struct {
	vendor, device       uint16
	subVendor, subDevice uint32
	product, model       string
}

// idTable is the ID table in Linux's match order.
var idTable = []idRow{
	{VendorQualcomm, 0x0116, AnyID, AnyID, "Qualcomm SA8775P", "qcom-sa8775p"},
	{VendorQualcomm, 0x011a, VendorTelit, 0x2020, "Telit FN920C04 (SDX35)", "telit-fn920c04"},
	{VendorQualcomm, 0x0304, AnyID, AnyID, "Qualcomm SDX24 reference", "qcom-sdx24"},
	{VendorQualcomm, 0x0306, VendorQualcomm, 0x010c, "Foxconn SDX55", "foxconn-sdx55"},
	{VendorQualcomm, 0x0306, VendorSierra, 0x0200, "Sierra EM919x (SDX55)", "sierra-em919x"},
	{VendorQualcomm, 0x0308, VendorSierra, 0x0301, "Sierra EM929x (SDX65)", "sierra-em919x"},
	{VendorQualcomm, 0x0306, VendorTelit, 0x2000, "Telit FN980 hardware revision 1", "telit-fn980-hwv1"},
	{VendorQualcomm, 0x0306, AnyID, AnyID, "Qualcomm SDX55 reference", "qcom-sdx55m"},
	{VendorQualcomm, 0x0308, VendorTelit, 0x2010, "Telit FN990", "telit-fn990"},
	{VendorQualcomm, 0x0308, VendorTelit, 0x2015, "Telit FE990A", "telit-fe990a"},
	{VendorQualcomm, 0x0308, VendorFoxconn, AnyID, "Foxconn T99W696 (SDX61)", "foxconn-t99w696"},
	{VendorQualcomm, 0x0308, AnyID, AnyID, "Qualcomm SDX65 reference", "qcom-sdx65m"},
	{VendorQualcomm, 0x0309, VendorTelit, 0x201a, "Telit FN990B40 (SDX72)", "telit-fn990b40"},
	{VendorQualcomm, 0x0309, VendorTelit, 0x2025, "Telit FE990B40 (SDX72)", "telit-fe990b40"},
	{VendorQualcomm, 0x0309, AnyID, AnyID, "Qualcomm SDX75 reference", "qcom-sdx75m"},
	{VendorQualcomm, 0x0601, AnyID, AnyID, "Qualcomm QDU100 (X100 DU)", "qcom-qdu100"},
	{VendorQuectel, 0x1001, AnyID, AnyID, "Quectel EM120R-GL (SDX24)", "quectel-em1xx"},
	{VendorQuectel, 0x1002, AnyID, AnyID, "Quectel EM160R-GL (SDX24)", "quectel-em1xx"},
	{VendorQuectel, 0x1004, AnyID, AnyID, "Quectel RM520N-GL (SDX6x), eSIM", "quectel-rm5xx"},
	{VendorQuectel, 0x1007, AnyID, AnyID, "Quectel RM520N-GL (SDX6x), Lenovo", "quectel-rm5xx"},
	{VendorQuectel, 0x100d, AnyID, AnyID, "Quectel EM160R-GL", "quectel-em1xx"},
	{VendorQuectel, 0x2001, AnyID, AnyID, "Quectel EM120R-GL for FCCL", "quectel-em1xx"},
	{VendorFoxconn, 0xe0ab, AnyID, AnyID, "Foxconn T99W175 (SDX55)", "foxconn-t99w175"},
	{VendorFoxconn, 0xe0b0, AnyID, AnyID, "Dell DW5930e (SDX55), eSIM", "foxconn-dw5930e"},
	{VendorFoxconn, 0xe0b1, AnyID, AnyID, "Dell DW5930e (SDX55), non-eSIM", "foxconn-dw5930e"},
	{VendorFoxconn, 0xe0bf, AnyID, AnyID, "Foxconn T99W175 (SDX55), new baseline", "foxconn-t99w175"},
	{VendorFoxconn, 0xe0c3, AnyID, AnyID, "Foxconn T99W175 (SDX55)", "foxconn-t99w175"},
	{VendorFoxconn, 0xe0d8, AnyID, AnyID, "Foxconn T99W368 (SDX65)", "foxconn-t99w368"},
	{VendorFoxconn, 0xe0d9, AnyID, AnyID, "Foxconn T99W373 (SDX62)", "foxconn-t99w373"},
	{VendorFoxconn, 0xe0f0, AnyID, AnyID, "Foxconn T99W510 (SDX24), variant 1", "foxconn-t99w510"},
	{VendorFoxconn, 0xe0f1, AnyID, AnyID, "Foxconn T99W510 (SDX24), variant 2", "foxconn-t99w510"},
	{VendorFoxconn, 0xe0f2, AnyID, AnyID, "Foxconn T99W510 (SDX24), variant 3", "foxconn-t99w510"},
	{VendorFoxconn, 0xe0f5, AnyID, AnyID, "Dell DW5932e (SDX62), eSIM", "foxconn-dw5932e"},
	{VendorFoxconn, 0xe0f9, AnyID, AnyID, "Dell DW5932e (SDX62), non-eSIM", "foxconn-dw5932e"},
	{VendorFoxconn, 0xe118, AnyID, AnyID, "Foxconn T99W640 (SDX72)", "foxconn-t99w640"},
	{VendorFoxconn, 0xe11d, AnyID, AnyID, "Dell DW5934e (SDX72), eSIM", "foxconn-dw5934e"},
	{VendorFoxconn, 0xe11e, AnyID, AnyID, "Dell DW5934e (SDX72), non-eSIM", "foxconn-dw5934e"},
	{VendorThales, 0x00b3, AnyID, AnyID, "Cinterion MV31-W", "cinterion-mv31"},
	{VendorThales, 0x00b4, AnyID, AnyID, "Cinterion MV31-W, new baseline", "cinterion-mv31"},
	{VendorThales, 0x00ba, AnyID, AnyID, "Cinterion MV32-WA", "cinterion-mv32"},
	{VendorThales, 0x00bb, AnyID, AnyID, "Cinterion MV32-WB", "cinterion-mv32"},
	{VendorHP, 0x0a6c, AnyID, AnyID, "HP variant of Foxconn T99W175 (SDX55)", "foxconn-t99w175"},
	{VendorNetprisma, 0x1000, AnyID, AnyID, "Netprisma LCUR57 (SDX24)", "netprisma-lcur57"},
	{VendorNetprisma, 0x1001, AnyID, AnyID, "Netprisma FCUN69 (SDX6x)", "netprisma-fcun69"},
}

// models and table are built from the lists above at init.
var (
	models map[string]*ModemInfo
	table  []entry
)

func init() {
	models = make(map[string]*ModemInfo, len(modelList))
	for i := range modelList {
		m := &modelList[i]
		cfg, ok := configs[m.ConfigName]
		if !ok {
			panic(fmt.Sprintf("pcigeneric: model %s: no configuration %q", m.Name, m.ConfigName))
		}
		m.Config = cfg
		m.DMAWidth = defaultDMAWidth
		if _, dup := models[m.Name]; dup {
			panic("pcigeneric: model listed twice: " + m.Name)
		}
		models[m.Name] = m
	}
	table = make([]entry, len(idTable))
	for i, r := range idTable {
		m, ok := models[r.model]
		if !ok {
			panic(fmt.Sprintf("pcigeneric: table row %d: no model %q", i, r.model))
		}
		table[i] = entry{
			match:   Match{Vendor: r.vendor, Device: r.device, SubVendor: r.subVendor, SubDevice: r.subDevice},
			product: r.product,
			info:    m,
		}
	}
}
