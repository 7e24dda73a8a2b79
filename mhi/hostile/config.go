package hostile

import (
	"time"

	"github.com/gomhi/gomhi/mhi/wire"
)

// Channel numbers of Config.
const (
	LoopbackUL = 0  // LOOPBACK uplink, event ring 0
	LoopbackDL = 1  // LOOPBACK downlink, event ring 0
	DataUL     = 14 // "DATA" uplink, event ring 1
	DataDL     = 15 // "DATA" downlink, event ring 1
)

// Config is a small MHI configuration both the scripted Device and the mock
// modem of mhi/ep serve: a LOOPBACK pair (0/1, 16 elements) on event ring
// 0, a DATA pair (14/15, 8 elements) on event ring 1, two software event
// rings of 32 elements on vectors 1 and 2, a command ring of 16 elements and
// a 500 ms timeout, so that an attack that makes the host wait ends soon.
func Config() wire.ControllerConfig {
	return wire.ControllerConfig{
		MaxChannels: 128,
		Timeout:     500 * time.Millisecond,
		Channels: []wire.ChannelConfig{
			{Num: LoopbackUL, Name: "LOOPBACK", Elements: 16, EventRing: 0, Dir: wire.Uplink, EE: wire.EEAMSS},
			{Num: LoopbackDL, Name: "LOOPBACK", Elements: 16, EventRing: 0, Dir: wire.Downlink, EE: wire.EEAMSS},
			{Num: DataUL, Name: "DATA", Elements: 8, EventRing: 1, Dir: wire.Uplink, EE: wire.EEAMSS},
			{Num: DataDL, Name: "DATA", Elements: 8, EventRing: 1, Dir: wire.Downlink, EE: wire.EEAMSS},
		},
		EventRings: []wire.EventRingConfig{
			{Elements: 32, Kind: wire.EventCtrl, Vector: 1, Channel: -1},
			{Elements: 32, Kind: wire.EventSWData, Vector: 2, Channel: -1},
		},
		CommandElements: 16,
	}
}
