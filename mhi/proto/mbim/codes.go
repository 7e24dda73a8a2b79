package mbim

import (
	"errors"
	"fmt"
)

// Errors of the codec. Parse and decode errors wrap one of them.
var (
	// ErrShort: the bytes end before a header or a fixed field.
	ErrShort = errors.New("mbim: message too short")
	// ErrBadLength: a length field disagrees with the bytes present (the
	// MessageLength, an InformationBuffer length, an odd UTF-16 length, a
	// count larger than the buffer can hold).
	ErrBadLength = errors.New("mbim: bad length")
	// ErrBadOffset: an offset points outside its buffer.
	ErrBadOffset = errors.New("mbim: bad offset")
	// ErrBadFragment: fragment header with CurrentFragment ≥ TotalFragments
	// or TotalFragments 0.
	ErrBadFragment = errors.New("mbim: bad fragment header")
	// ErrFragmentOutOfSequence: a fragment that does not follow the one
	// before it (or a continuation without a first fragment).
	ErrFragmentOutOfSequence = errors.New("mbim: fragment out of sequence")
	// ErrFragmentTimeout: a fragmented message whose next fragment did not
	// arrive in time.
	ErrFragmentTimeout = errors.New("mbim: fragment timeout")
	// ErrTooLarge: a message or a reassembled message larger than allowed.
	ErrTooLarge = errors.New("mbim: message too large")
	// ErrUnknownType: a MessageType this package does not know.
	ErrUnknownType = errors.New("mbim: unknown message type")
	// ErrWrongMessage: a message of another type, service or CID than the
	// caller expected.
	ErrWrongMessage = errors.New("mbim: unexpected message")
)

// ProtocolErrorFor returns the protocol error code a receiver reports in
// FUNCTION_ERROR (device) or HOST_ERROR (host) for a parse or reassembly
// error of this package.
func ProtocolErrorFor(err error) ProtocolError {
	switch {
	case errors.Is(err, ErrFragmentOutOfSequence), errors.Is(err, ErrBadFragment):
		return ErrorFragmentOutOfSequence
	case errors.Is(err, ErrFragmentTimeout):
		return ErrorTimeoutFragment
	case errors.Is(err, ErrTooLarge):
		return ErrorMaxTransfer
	case errors.Is(err, ErrShort), errors.Is(err, ErrBadLength), errors.Is(err, ErrBadOffset):
		return ErrorLengthMismatch
	}
	return ErrorUnknown
}

// Status is the status of an OPEN_DONE, CLOSE_DONE or COMMAND_DONE
// (libmbim's MbimStatusError).
type Status uint32

// Status codes.
const (
	StatusSuccess                       Status = 0
	StatusBusy                          Status = 1
	StatusFailure                       Status = 2
	StatusSimNotInserted                Status = 3
	StatusBadSim                        Status = 4
	StatusPinRequired                   Status = 5
	StatusPinDisabled                   Status = 6
	StatusNotRegistered                 Status = 7
	StatusProvidersNotFound             Status = 8
	StatusNoDeviceSupport               Status = 9
	StatusProviderNotVisible            Status = 10
	StatusDataClassNotAvailable         Status = 11
	StatusPacketServiceDetached         Status = 12
	StatusMaxActivatedContexts          Status = 13
	StatusNotInitialized                Status = 14
	StatusVoiceCallInProgress           Status = 15
	StatusContextNotActivated           Status = 16
	StatusServiceNotActivated           Status = 17
	StatusInvalidAccessString           Status = 18
	StatusInvalidUserNamePwd            Status = 19
	StatusRadioPowerOff                 Status = 20
	StatusInvalidParameters             Status = 21
	StatusReadFailure                   Status = 22
	StatusWriteFailure                  Status = 23
	StatusNoPhonebook                   Status = 25
	StatusParameterTooLong              Status = 26
	StatusStkBusy                       Status = 27
	StatusOperationNotAllowed           Status = 28
	StatusMemoryFailure                 Status = 29
	StatusInvalidMemoryIndex            Status = 30
	StatusMemoryFull                    Status = 31
	StatusFilterNotSupported            Status = 32
	StatusDssInstanceLimit              Status = 33
	StatusInvalidDeviceServiceOperation Status = 34
	StatusAuthIncorrectAutn             Status = 35
	StatusAuthSyncFailure               Status = 36
	StatusAuthAmfNotSet                 Status = 37
	StatusContextNotSupported           Status = 38
)

var statusNames = map[Status]string{
	StatusSuccess: "Success", StatusBusy: "Busy", StatusFailure: "Failure",
	StatusSimNotInserted: "SimNotInserted", StatusBadSim: "BadSim",
	StatusPinRequired: "PinRequired", StatusPinDisabled: "PinDisabled",
	StatusNotRegistered: "NotRegistered", StatusProvidersNotFound: "ProvidersNotFound",
	StatusNoDeviceSupport: "NoDeviceSupport", StatusProviderNotVisible: "ProviderNotVisible",
	StatusDataClassNotAvailable: "DataClassNotAvailable", StatusPacketServiceDetached: "PacketServiceDetached",
	StatusMaxActivatedContexts: "MaxActivatedContexts", StatusNotInitialized: "NotInitialized",
	StatusVoiceCallInProgress: "VoiceCallInProgress", StatusContextNotActivated: "ContextNotActivated",
	StatusServiceNotActivated: "ServiceNotActivated", StatusInvalidAccessString: "InvalidAccessString",
	StatusInvalidUserNamePwd: "InvalidUserNamePwd", StatusRadioPowerOff: "RadioPowerOff",
	StatusInvalidParameters: "InvalidParameters", StatusReadFailure: "ReadFailure",
	StatusWriteFailure: "WriteFailure", StatusNoPhonebook: "NoPhonebook",
	StatusParameterTooLong: "ParameterTooLong", StatusStkBusy: "StkBusy",
	StatusOperationNotAllowed: "OperationNotAllowed", StatusMemoryFailure: "MemoryFailure",
	StatusInvalidMemoryIndex: "InvalidMemoryIndex", StatusMemoryFull: "MemoryFull",
	StatusFilterNotSupported: "FilterNotSupported", StatusDssInstanceLimit: "DssInstanceLimit",
	StatusInvalidDeviceServiceOperation: "InvalidDeviceServiceOperation",
	StatusAuthIncorrectAutn:             "AuthIncorrectAutn", StatusAuthSyncFailure: "AuthSyncFailure",
	StatusAuthAmfNotSet: "AuthAmfNotSet", StatusContextNotSupported: "ContextNotSupported",
}

// String returns the status's name, e.g. "NoDeviceSupport".
func (s Status) String() string {
	if n, ok := statusNames[s]; ok {
		return n
	}
	return fmt.Sprintf("Status(%d)", uint32(s))
}

// ProtocolError is the ErrorStatusCode of a FUNCTION_ERROR or HOST_ERROR
// (libmbim's MbimProtocolError).
type ProtocolError uint32

// Protocol error codes.
const (
	ErrorTimeoutFragment       ProtocolError = 1
	ErrorFragmentOutOfSequence ProtocolError = 2
	ErrorLengthMismatch        ProtocolError = 3
	ErrorDuplicatedTID         ProtocolError = 4
	ErrorNotOpened             ProtocolError = 5
	ErrorUnknown               ProtocolError = 6
	ErrorCancel                ProtocolError = 7
	ErrorMaxTransfer           ProtocolError = 8
)

var protocolErrorNames = [...]string{"", "TimeoutFragment", "FragmentOutOfSequence",
	"LengthMismatch", "DuplicatedTid", "NotOpened", "Unknown", "Cancel", "MaxTransfer"}

// String returns the error's name, e.g. "NotOpened".
func (e ProtocolError) String() string {
	if e >= 1 && int(e) < len(protocolErrorNames) {
		return protocolErrorNames[e]
	}
	return fmt.Sprintf("ProtocolError(%d)", uint32(e))
}
