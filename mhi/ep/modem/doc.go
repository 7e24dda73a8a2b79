// Package modem is the cellular modem behind the mock modem's endpoint
// (mhi/ep): its state and the MBIM, QMI and AT answerers on its control
// channels.
//
// One Modem (identity, SIM, radio, registration, packet service, the data
// sessions and their addressing) is shared by every control function of a
// device, so that a session connected over MBIM is seen by QMI and AT as
// well, as on a real modem whose control ports all talk to one baseband.
// The answerers are ep.Functions on the device's control channel pairs:
// MBIM ("MBIM", channels 12/13), QMI ("QMI", 14/15) and AT ("DUN" and
// "DUN2"). The Modem carries up to Config.MaxSessions data sessions at
// once, by number (MBIM SessionId; a QMI WDS client's bound mux id minus
// Config.WireBase; AT sees session 0). It is also the gate of the device's
// IP data function: with Config.RequireConnect, IP data of session N flows
// only while session N is connected (SessionAllowed).
//
// The package stands on ep's Function and Pipe (the endpoint does not link
// it: pcigeneric/mock puts the functions on a device) and on the neutral
// codecs under mhi/proto. One package rather than one per protocol: the
// three answerers are views of the same state and share its types
// (Session, IPType, the event feed).
package modem
