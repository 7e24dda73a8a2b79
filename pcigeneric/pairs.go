package pcigeneric

import (
	"github.com/gomhi/gomhi/mhi/proto/framing"
	"github.com/gomhi/gomhi/mhi/wire"
)

// The channel pairs a host gives a job by name, as Linux's device table
// names them. The mock modem (pcigeneric/mock, mhi/ep) serves the same
// names; this file keeps the host's side free of the mock.

// dataPairNames are the IP data channel pairs, in the order DataPair
// looks for them: the MBIM-framed pair first (ipdata.MBIMName), then
// the raw or QMAP pair (ipdata.Name).
var dataPairNames = []string{"IP_HW0_MBIM", "IP_HW0"}

// DataPair returns the name of a configuration's IP data channel pair:
// IP_HW0_MBIM or IP_HW0, or "" when it has neither.
func DataPair(cfg wire.ControllerConfig) string {
	for _, name := range dataPairNames {
		if _, ok := cfg.ChannelByName(name, wire.Uplink); ok {
			return name
		}
	}
	return ""
}

// PairFormat returns the framing Linux's driver for an IP data pair
// speaks, which a modem's network uses there unless told otherwise: MBIM
// NTB16 on IP_HW0_MBIM (mhi_wwan_mbim), raw IP on IP_HW0 (mhi_net) and
// any other pair.
func PairFormat(pair string) framing.Format {
	if pair == dataPairNames[0] {
		return framing.NTB16
	}
	return framing.RawIP
}

// controlPairNames are the control channel pairs a host exposes as ports
// (Linux's mhi_wwan_ctrl: MBIM, QMI, AT on DUN and DUN2), in the order
// they are looked for.
var controlPairNames = []string{"MBIM", "QMI", "DUN", "DUN2"}

// ControlPairs returns the control channel pairs of cfg a host exposes
// as ports — MBIM, QMI, DUN, DUN2 (AT) — in channel order. DIAG, SAHARA,
// FIREHOSE, IPCR and NMEA are left out.
func ControlPairs(cfg wire.ControllerConfig) []string {
	var out []string
	for _, ch := range cfg.Channels {
		if ch.Dir != wire.Uplink {
			continue
		}
		for _, n := range controlPairNames {
			if ch.Name == n {
				if _, ok := cfg.ChannelByName(n, wire.Downlink); ok {
					out = append(out, n)
				}
			}
		}
	}
	return out
}
