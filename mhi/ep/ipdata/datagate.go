package ipdata

// Gate decides whether IP data may flow (a connected session, on a
// modem that requires one). Function consults it for every packet; the
// modem's state (mhi/ep/modem) implements it.
type Gate interface {
	DataAllowed() bool
}
