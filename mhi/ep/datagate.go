package ep

// DataGate decides whether IP data may flow (a connected session, on a
// modem that requires one). IPData consults it for every packet; the
// modem's state (mhi/ep/modem) implements it.
type DataGate interface {
	DataAllowed() bool
}
