package mock

import (
	"fmt"
	"hash/fnv"
	"log/slog"
	"strings"

	"github.com/gomhi/gomhi/mhi/ep"
	"github.com/gomhi/gomhi/mhi/ep/ipdata"
	"github.com/gomhi/gomhi/mhi/ep/modem"
	"github.com/gomhi/gomhi/mhi/ep/quirk"
	"github.com/gomhi/gomhi/mhi/proto/framing"
	"github.com/gomhi/gomhi/mhi/proto/mbim"
	"github.com/gomhi/gomhi/mhi/wire"
	"github.com/gomhi/gomhi/pcigeneric"
)

// This file builds the mock modem's device side from a device-table entry:
// its identity (derived from the entry's product name, deterministic per
// model), its shared cellular state (modem.Modem) and the functions on its
// channel pairs — IP data on IP_HW0/IP_HW0_MBIM, MBIM on "MBIM" — as both
// the embedded mock (Open) and the vfio-user server use them.

// The modem gates every session's IP data on its own (modem.Modem implements
// ipdata.SessionGate): no silent fallback to one gate for all sessions.
var _ ipdata.SessionGate = (*modem.Modem)(nil)

// Identity returns what the mock modem impersonating table entry e
// says about itself. Manufacturer and model come from the entry's product
// name ("Telit FN990" → "Telit", "FN990"; a parenthesised chipset and a
// ", variant" suffix are left out); the firmware and hardware revisions
// and the IMEI (with a valid Luhn check digit) are derived from a hash of
// the model and product names, so they are the same in every run. IMSI,
// ICCID and the home network are the modem package's defaults.
func Identity(e pcigeneric.Entry) modem.Identity {
	manufacturer, model, hw := splitProduct(e.Product)
	h := fnv.New64a()
	name := ""
	if e.Info != nil {
		name = e.Info.Name
	}
	h.Write([]byte(name + "\x00" + e.Product))
	sum := h.Sum64()
	if hw == "" {
		hw = fmt.Sprintf("rev %d", 1+sum%4)
	}
	compact := strings.ToUpper(strings.ReplaceAll(model, " ", ""))
	firmware := fmt.Sprintf("%s.%02d.%02d.%03d-gomhi", compact, 1+(sum>>8)%9, (sum>>16)%100, (sum>>24)%1000)
	return modem.Identity{
		Manufacturer: manufacturer,
		Model:        model,
		Firmware:     firmware,
		Hardware:     hw,
		IMEI:         mockIMEI(sum >> 32),
	}
}

// splitProduct cuts a product name into manufacturer (the first word) and
// model (the rest, up to " (" or ", "; a leading "variant of " dropped).
// A " hardware revision N" in the model becomes the hardware string
// "rev N".
func splitProduct(product string) (manufacturer, model, hw string) {
	manufacturer, model, _ = strings.Cut(strings.TrimSpace(product), " ")
	if i := strings.Index(model, " ("); i >= 0 {
		model = model[:i]
	}
	if i := strings.Index(model, ", "); i >= 0 {
		model = model[:i]
	}
	model = strings.TrimPrefix(model, "variant of ")
	if m, rev, ok := strings.Cut(model, " hardware revision "); ok {
		model, hw = m, "rev "+rev
	}
	if model == "" {
		model = manufacturer
	}
	return manufacturer, model, hw
}

// mockIMEI builds a 15-digit IMEI from h: the type allocation code "35"
// and six digits, a six-digit serial number, and the Luhn check digit.
func mockIMEI(h uint64) string {
	body := fmt.Sprintf("35%06d%06d", h%1000000, (h/1000000)%1000000)
	return body + string(rune('0'+luhnDigit(body)))
}

// luhnDigit returns the check digit that makes digits+check pass the Luhn
// test (ISO/IEC 7812-1), as 3GPP TS 23.003 prescribes for the IMEI.
func luhnDigit(digits string) int {
	sum := 0
	double := true // the rightmost payload digit is doubled
	for i := len(digits) - 1; i >= 0; i-- {
		d := int(digits[i] - '0')
		if double {
			d *= 2
			if d > 9 {
				d -= 9
			}
		}
		sum += d
		double = !double
	}
	return (10 - sum%10) % 10
}

// LuhnValid reports whether s is all digits and passes the Luhn test.
func LuhnValid(s string) bool {
	if len(s) < 2 {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return luhnDigit(s[:len(s)-1]) == int(s[len(s)-1]-'0')
}

// ModemOptions configure the device side of a mock modem.
type ModemOptions struct {
	// IPData configures the IP data function (see Options.IPData; nil:
	// the pair's own framing).
	IPData *ipdata.Config
	// Modem overrides the modem's configuration: non-empty identity
	// fields replace the derived ones (Identity); addressing, radio,
	// signal, the gating of IP data on a session (RequireConnect) and
	// the number of sessions (MaxSessions, default 8) as in
	// modem.Config. WireBase, when zero, becomes the wire id the IP data
	// numbers session 0 with: the model's MuxIDBase, or 112 with the
	// sdx72-mux-112 quirk.
	Modem modem.Config
	// Logger receives the functions' logs (nil: discard).
	Logger *slog.Logger
	// Quirks are the field failures the modem reproduces (mhi/ep/quirk,
	// docs/QUIRKS.md), applied to the device, modem and IP data
	// configurations built from the other options.
	Quirks quirk.Set
}

// SWDataPair is the name of the software IP data channel pair (46/47).
const SWDataPair = "IP_SW0"

// Functions are the functions of one mock modem's channel pairs and
// the state they share.
type Functions struct {
	// Modem is the cellular state the control functions share and the IP
	// data function is gated by.
	Modem *modem.Modem
	// DataPair names the IP data pair ("" if the model has none); IPData
	// is its function.
	DataPair string
	IPData   *ipdata.Function
	// SWData is the function of the software data pair IP_SW0 (channels
	// 46/47; Linux 6.12+ gives it an mhi_swip interface), raw IP in the
	// main pair's mode, gated like it; nil if the model has no IP_SW0.
	SWData *ipdata.Function
	// MBIM answers on the "MBIM" pair (nil if the model has none).
	MBIM *modem.MBIM
	// QMI answers on the "QMI" pair (nil if the model has none).
	QMI *modem.QMI
	// AT answers on "DUN" and "DUN2" (nil if the model has neither).
	AT *modem.AT
	// ControlPairs lists the control channel pairs given a function, in
	// channel order.
	ControlPairs []string
	// Quirks are the field failures the modem reproduces.
	Quirks quirk.Set

	target *quirk.Target
}

// Start hands the started endpoint to the quirks that act on the running
// modem (crash-on-connect). Whoever builds the ep.Device from NewConfig's
// configuration calls it before a host drives the device.
func (f *Functions) Start(dev *ep.Device) {
	if f.target != nil {
		f.target.Start(quirk.Running{Device: dev, Modem: f.Modem})
	}
}

// ModemStats are the modem side's counters, as the attribute tree
// shows them (stats/modem).
type ModemStats struct {
	IPULPackets    uint64 `json:"ip_ul_packets"`
	IPDLPackets    uint64 `json:"ip_dl_packets"`
	IPAnswered     uint64 `json:"ip_answered"`
	IPDropped      uint64 `json:"ip_dropped"`
	IPDroppedGated uint64 `json:"ip_dropped_gated"`
	// IPDroppedOverMTU counts uplink packets the network dropped for
	// being longer than its MTU (the mtu-1400 quirk); IPNTBGlitches the
	// downlink NTBs whose sequence number skipped (ntb-sequence-glitch).
	IPDroppedOverMTU uint64 `json:"ip_dropped_over_mtu"`
	IPNTBGlitches    uint64 `json:"ip_ntb_sequence_glitches"`

	Connects        uint64 `json:"connects"`
	Disconnects     uint64 `json:"disconnects"`
	ConnectFailures uint64 `json:"connect_failures"`
	// SessionActive is 1 while session 0 is connected.
	SessionActive uint64 `json:"session_active"`

	MBIMMessagesIn     uint64 `json:"mbim_messages_in"`
	MBIMMessagesOut    uint64 `json:"mbim_messages_out"`
	MBIMCommands       uint64 `json:"mbim_commands"`
	MBIMCommandsFailed uint64 `json:"mbim_commands_failed"`
	MBIMNotSupported   uint64 `json:"mbim_not_supported"`
	MBIMFunctionErrors uint64 `json:"mbim_function_errors"`
	MBIMIndications    uint64 `json:"mbim_indications"`
	MBIMDropped        uint64 `json:"mbim_dropped"`

	QMIFramesIn       uint64 `json:"qmi_frames_in"`
	QMIFramesOut      uint64 `json:"qmi_frames_out"`
	QMIErrorResponses uint64 `json:"qmi_error_responses"`
	QMIMalformed      uint64 `json:"qmi_malformed"`
	QMIDropped        uint64 `json:"qmi_dropped"`
	QMIIndications    uint64 `json:"qmi_indications"`
	QMIClientsActive  uint64 `json:"qmi_clients_active"`

	ATLines  uint64 `json:"at_lines"`
	ATOK     uint64 `json:"at_ok"`
	ATErrors uint64 `json:"at_errors"`
}

// Stats returns the counters of the modem side.
func (f *Functions) Stats() ModemStats {
	var s ModemStats
	if f.IPData != nil {
		st := f.IPData.Stats()
		s.IPULPackets, s.IPDLPackets, s.IPAnswered = st.ULPackets, st.DLPackets, st.Answered
		s.IPDropped, s.IPDroppedGated = st.Dropped(), st.DroppedGated
		s.IPDroppedOverMTU, s.IPNTBGlitches = st.DroppedOverMTU, st.NTBSequenceGlitches
	}
	if f.Modem != nil {
		st := f.Modem.Stats()
		s.Connects, s.Disconnects, s.ConnectFailures = st.Connects, st.Disconnects, st.ConnectFail
		if f.Modem.Session().Active {
			s.SessionActive = 1
		}
	}
	if f.MBIM != nil {
		st := f.MBIM.Stats()
		s.MBIMMessagesIn, s.MBIMMessagesOut = st.MessagesIn, st.MessagesOut
		s.MBIMCommands, s.MBIMCommandsFailed, s.MBIMNotSupported = st.Commands, st.CommandsFailed, st.NotSupported
		s.MBIMFunctionErrors, s.MBIMIndications = st.FunctionErrors, st.Indications
		s.MBIMDropped = st.DroppedShort + st.DroppedReplies + st.IndicationsDropped
	}
	if f.QMI != nil {
		st := f.QMI.Stats()
		s.QMIFramesIn, s.QMIFramesOut, s.QMIErrorResponses = st.FramesIn, st.FramesOut, st.ErrorResponses
		s.QMIMalformed, s.QMIDropped, s.QMIIndications, s.QMIClientsActive = st.Malformed, st.Dropped+st.IndicationsDropped, st.Indications, st.ClientsActive
	}
	if f.AT != nil {
		st := f.AT.Stats()
		s.ATLines, s.ATOK, s.ATErrors = st.Lines+st.Repeats+st.TooLong, st.OK, st.Errors
	}
	return s
}

// NewConfig builds the device-side configuration of a mock modem
// impersonating table entry e: the model's channels plus LOOPBACK, a
// serial number derived from the model's name, a modem.Modem with the
// entry's identity (Identity, overridden by opts.Modem), the IP data
// function on the data pair (gated by the Modem) and the control
// functions the model's pairs call for: MBIM on "MBIM", QMI on "QMI", AT
// on "DUN" and "DUN2" (one AT function for both), all on the one Modem.
// Other pairs (DIAG, IPCR…) consume and count what the host sends.
func NewConfig(e pcigeneric.Entry, opts ModemOptions) (ep.Config, *Functions, error) {
	if e.Info == nil {
		return ep.Config{}, nil, fmt.Errorf("pcigeneric: mock for %q: %w: the entry has no model", e.Product, pcigeneric.ErrUnknownModel)
	}
	info := e.Info
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cfg := info.Config.WithLoopback()
	h := fnv.New32a()
	h.Write([]byte(info.Name))
	ec := ep.Config{MHI: cfg, SerialNumber: h.Sum32(), Logger: log, Functions: map[string]ep.Function{}}

	mc := opts.Modem
	mc.Identity = mergeIdentity(Identity(e), mc.Identity)
	var dc *ipdata.Config
	if pair := pcigeneric.DataPair(cfg); pair != "" {
		c := ipdata.Config{Format: pcigeneric.PairFormat(pair)}
		if opts.IPData != nil {
			c = *opts.IPData
		}
		// The model numbers session 0 on the wire with its mux-id base
		// (112 on the SDX72 in MBIM mode), unless the caller chose.
		if c.Session == 0 {
			c.Session = info.MuxIDBase
		}
		if c.QMAPMux == 0 {
			c.QMAPMux = info.MuxIDBase
		}
		dc = &c
	}
	target := &quirk.Target{Device: &ec, Modem: &mc, IPData: dc}
	if err := opts.Quirks.Apply(target); err != nil {
		return ep.Config{}, nil, fmt.Errorf("pcigeneric: mock %s: %w", info.Name, err)
	}
	if mc.WireBase == 0 {
		mc.WireBase = wireBase(info, dc)
	}
	m, err := modem.New(mc)
	if err != nil {
		return ep.Config{}, nil, fmt.Errorf("pcigeneric: mock %s: %w", info.Name, err)
	}
	fns := &Functions{Modem: m, Quirks: opts.Quirks, target: target}
	if err := fns.addDataFunctions(ec.Functions, cfg, dc, opts.IPData != nil && opts.IPData.Responder); err != nil {
		return ep.Config{}, nil, err
	}
	if err := fns.addControlFunctions(ec.Functions, cfg, log); err != nil {
		return ep.Config{}, nil, err
	}
	return ec, fns, nil
}

// wireBase is the wire id of the modem's session 0: what its IP data
// numbers it with (after the quirks: sdx72-mux-112), else the model's
// mux-id base.
func wireBase(info *pcigeneric.ModemInfo, dc *ipdata.Config) uint8 {
	switch {
	case dc == nil:
		return info.MuxIDBase
	case dc.Format == framing.QMAP:
		return dc.QMAPMux
	}
	return dc.Session
}

// addDataFunctions puts the IP data function on the model's data pair (dc:
// the caller's configuration or loopback in the pair's own framing, with
// the quirks applied) and a raw one on the software data pair if the model
// has it (answering if responder), both gated by the Modem, into fnByPair.
func (fns *Functions) addDataFunctions(fnByPair map[string]ep.Function, cfg wire.ControllerConfig, ic *ipdata.Config, responder bool) error {
	if pair := pcigeneric.DataPair(cfg); pair != "" && ic != nil {
		dc := *ic
		dc.Gate = fns.Modem
		ipd, err := ipdata.New(dc)
		if err != nil {
			return err
		}
		fnByPair[pair] = ipd
		fns.DataPair, fns.IPData = pair, ipd
	}
	if _, ok := cfg.ChannelByName(SWDataPair, wire.Uplink); ok {
		sw, err := ipdata.New(ipdata.Config{Format: framing.RawIP, Responder: responder, Gate: fns.Modem})
		if err != nil {
			return err
		}
		fnByPair[SWDataPair] = sw
		fns.SWData = sw
	}
	return nil
}

// addControlFunctions puts the control functions the model's pairs call
// for into fnByPair: MBIM, QMI, and one AT function for DUN and DUN2, all
// on the Modem, and lists their pairs in fns.ControlPairs.
func (fns *Functions) addControlFunctions(fnByPair map[string]ep.Function, cfg wire.ControllerConfig, log *slog.Logger) error {
	mbimStats, qmiStats := fns.packetStatistics()
	for _, pair := range pcigeneric.ControlPairs(cfg) {
		switch pair {
		case modem.MBIMName:
			fn, err := modem.NewMBIM(fns.Modem, modem.MBIMOptions{Logger: log, PacketStatistics: mbimStats})
			if err != nil {
				return err
			}
			fnByPair[pair] = fn
			fns.MBIM = fn
		case modem.QMIName:
			fn, err := modem.NewQMI(fns.Modem, modem.QMIOptions{Logger: log, PacketStatistics: qmiStats})
			if err != nil {
				return err
			}
			fnByPair[pair] = fn
			fns.QMI = fn
		case modem.DUNName, modem.DUN2Name:
			if fns.AT == nil {
				fn, err := modem.NewAT(fns.Modem, modem.ATOptions{Logger: log})
				if err != nil {
					return err
				}
				fns.AT = fn
			}
			fnByPair[pair] = fns.AT
		default:
			continue
		}
		fns.ControlPairs = append(fns.ControlPairs, pair)
	}
	return nil
}

// packetStatistics returns what the control functions report as the
// session's packet statistics (MBIM PACKET_STATISTICS, QMI WDS
// GET_PACKET_STATISTICS): the data function's counters, uplink being what
// the host transmitted. Both are nil without a data function.
func (fns *Functions) packetStatistics() (func() mbim.PacketStatistics, func() modem.PacketCounters) {
	ipd := fns.IPData
	if ipd == nil {
		return nil, nil
	}
	mbimStats := func() mbim.PacketStatistics {
		st := ipd.Stats()
		return mbim.PacketStatistics{InOctets: st.DLBytes, InPackets: st.DLPackets,
			OutOctets: st.ULBytes, OutPackets: st.ULPackets, OutDiscards: uint32(min(st.DroppedGated, 0xFFFFFFFF))}
	}
	qmiStats := func() modem.PacketCounters {
		st := ipd.Stats()
		return modem.PacketCounters{TxPackets: st.ULPackets, RxPackets: st.DLPackets,
			TxBytes: st.ULBytes, RxBytes: st.DLBytes, TxDropped: st.DroppedGated}
	}
	return mbimStats, qmiStats
}

// mergeIdentity returns base with the non-empty fields of over.
func mergeIdentity(base, over modem.Identity) modem.Identity {
	for _, f := range []struct{ dst, src *string }{
		{&base.Manufacturer, &over.Manufacturer}, {&base.Model, &over.Model},
		{&base.Firmware, &over.Firmware}, {&base.Hardware, &over.Hardware},
		{&base.IMEI, &over.IMEI}, {&base.IMSI, &over.IMSI}, {&base.ICCID, &over.ICCID},
		{&base.MSISDN, &over.MSISDN}, {&base.ProviderID, &over.ProviderID},
		{&base.ProviderName, &over.ProviderName},
	} {
		if *f.src != "" {
			*f.dst = *f.src
		}
	}
	return base
}
