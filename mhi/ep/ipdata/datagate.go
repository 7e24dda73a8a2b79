package ipdata

// Gate decides whether IP data may flow (a connected session, on a
// modem that requires one). Function consults it for every packet; the
// modem's state (mhi/ep/modem) implements it.
type Gate interface {
	DataAllowed() bool
}

// SessionGate is what a Gate that tells sessions apart implements too:
// when Config.Gate also implements it, every packet, uplink or generated, is gated on its own
// session number (refused packets are counted in Stats.DroppedGated and
// in their session's DroppedGated). The modem's state (mhi/ep/modem)
// implements it; SessionAllowed is called per packet and must not block.
type SessionGate interface {
	SessionAllowed(n uint8) bool
}
