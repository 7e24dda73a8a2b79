package mbim

import (
	"encoding/binary"
	"fmt"
)

var le = binary.LittleEndian

// MessageType is the first field of every message.
type MessageType uint32

// Message types. Host to device: Open, Close, Command, HostError; device to
// host: the rest.
const (
	TypeOpen           MessageType = 0x00000001
	TypeClose          MessageType = 0x00000002
	TypeCommand        MessageType = 0x00000003
	TypeHostError      MessageType = 0x00000004
	TypeOpenDone       MessageType = 0x80000001
	TypeCloseDone      MessageType = 0x80000002
	TypeCommandDone    MessageType = 0x80000003
	TypeFunctionError  MessageType = 0x80000004
	TypeIndicateStatus MessageType = 0x80000007
)

// String returns the type's name as the specification spells it.
func (t MessageType) String() string {
	switch t {
	case TypeOpen:
		return "OPEN"
	case TypeClose:
		return "CLOSE"
	case TypeCommand:
		return "COMMAND"
	case TypeHostError:
		return "HOST_ERROR"
	case TypeOpenDone:
		return "OPEN_DONE"
	case TypeCloseDone:
		return "CLOSE_DONE"
	case TypeCommandDone:
		return "COMMAND_DONE"
	case TypeFunctionError:
		return "FUNCTION_ERROR"
	case TypeIndicateStatus:
		return "INDICATE_STATUS"
	}
	return fmt.Sprintf("MessageType(%#x)", uint32(t))
}

// Known reports whether t is one of the nine message types.
func (t MessageType) Known() bool {
	switch t {
	case TypeOpen, TypeClose, TypeCommand, TypeHostError, TypeOpenDone, TypeCloseDone,
		TypeCommandDone, TypeFunctionError, TypeIndicateStatus:
		return true
	}
	return false
}

// Fragmentable reports whether messages of type t carry a fragment header
// (COMMAND, COMMAND_DONE, INDICATE_STATUS).
func (t MessageType) Fragmentable() bool {
	return t == TypeCommand || t == TypeCommandDone || t == TypeIndicateStatus
}

// FromHost reports whether t is sent by hosts (OPEN, CLOSE, COMMAND,
// HOST_ERROR).
func (t MessageType) FromHost() bool { return t >= TypeOpen && t <= TypeHostError }

// CommandType says whether a COMMAND queries or sets.
type CommandType uint32

// Command types.
const (
	CommandQuery CommandType = 0
	CommandSet   CommandType = 1
)

// String returns "query", "set" or the number.
func (c CommandType) String() string {
	switch c {
	case CommandQuery:
		return "query"
	case CommandSet:
		return "set"
	}
	return fmt.Sprintf("CommandType(%d)", uint32(c))
}

// Sizes of the headers.
const (
	HeaderLen         = 12 // MessageType, MessageLength, TransactionId
	FragmentHeaderLen = 8  // TotalFragments, CurrentFragment
	// FragmentPrefixLen is what every fragment starts with: the header and
	// the fragment header.
	FragmentPrefixLen = HeaderLen + FragmentHeaderLen
	// CommandHeaderLen is the size of a COMMAND or COMMAND_DONE before its
	// InformationBuffer.
	CommandHeaderLen = FragmentPrefixLen + 16 + 4 + 4 + 4
	// IndicateStatusHeaderLen is the size of an INDICATE_STATUS before its
	// InformationBuffer.
	IndicateStatusHeaderLen = FragmentPrefixLen + 16 + 4 + 4
	// SimpleMessageLen is the size of OPEN, OPEN_DONE, CLOSE_DONE,
	// HOST_ERROR and FUNCTION_ERROR; CLOSE is HeaderLen.
	SimpleMessageLen = HeaderLen + 4
)

// MinControlTransfer is the smallest MaxControlTransfer the specification
// allows a host to announce.
const MinControlTransfer = 64

// Message is a parsed message: a view of the caller's bytes (Raw, Info and
// Payload alias them).
type Message struct {
	Type MessageType
	// Length is the header's MessageLength.
	Length uint32
	TID    uint32
	// Raw is the whole message.
	Raw []byte

	// Value is the one u32 after the header of the short messages: OPEN's
	// MaxControlTransfer, OPEN_DONE's and CLOSE_DONE's Status, HOST_ERROR's
	// and FUNCTION_ERROR's ErrorStatusCode. See the typed accessors.
	Value uint32

	// TotalFragments and CurrentFragment, for COMMAND, COMMAND_DONE and
	// INDICATE_STATUS.
	TotalFragments, CurrentFragment uint32

	// The fields below are set for COMMAND, COMMAND_DONE and
	// INDICATE_STATUS messages that are not continuation fragments.
	Service UUID
	CID     uint32
	// Command is a COMMAND's type (query or set).
	Command CommandType
	// Status is a COMMAND_DONE's status.
	Status Status
	// InfoLen is the InformationBufferLength field.
	InfoLen uint32
	// Info is the InformationBuffer. In the first fragment of a fragmented
	// message it holds only the part that fragment carries.
	Info Info

	// Payload is what a fragment carries after its 20-byte prefix (for any
	// fragment, first or not): the piece of the message's remainder the
	// reassembler concatenates.
	Payload []byte
}

// MaxControlTransfer returns an OPEN's MaxControlTransfer.
func (m *Message) MaxControlTransfer() uint32 { return m.Value }

// DoneStatus returns an OPEN_DONE's or CLOSE_DONE's status.
func (m *Message) DoneStatus() Status { return Status(m.Value) }

// ErrorCode returns a HOST_ERROR's or FUNCTION_ERROR's error code.
func (m *Message) ErrorCode() ProtocolError { return ProtocolError(m.Value) }

// Fragmented reports whether m is one fragment of a larger message.
func (m *Message) Fragmented() bool { return m.TotalFragments > 1 }

// ParseMessage parses one whole message (or one fragment of a fragmented
// message). len(b) must equal the header's MessageLength. On error the
// returned Message still has Type, Length and TID set when b holds a
// header, so that a receiver can answer the transaction.
func ParseMessage(b []byte) (Message, error) {
	var m Message
	if len(b) < HeaderLen {
		return m, fmt.Errorf("%w: %d bytes, a header needs %d", ErrShort, len(b), HeaderLen)
	}
	m.Type = MessageType(le.Uint32(b[0:]))
	m.Length = le.Uint32(b[4:])
	m.TID = le.Uint32(b[8:])
	m.Raw = b
	if uint64(m.Length) != uint64(len(b)) {
		return m, fmt.Errorf("%w: %s TID %d: MessageLength %d, %d bytes", ErrBadLength, m.Type, m.TID, m.Length, len(b))
	}
	switch m.Type {
	case TypeClose:
		return m, nil
	case TypeOpen, TypeOpenDone, TypeCloseDone, TypeHostError, TypeFunctionError:
		if len(b) < SimpleMessageLen {
			return m, fmt.Errorf("%w: %s TID %d of %d bytes, want %d", ErrShort, m.Type, m.TID, len(b), SimpleMessageLen)
		}
		m.Value = le.Uint32(b[HeaderLen:])
		return m, nil
	case TypeCommand, TypeCommandDone, TypeIndicateStatus:
	default:
		return m, fmt.Errorf("%w: %#x (TID %d)", ErrUnknownType, uint32(m.Type), m.TID)
	}
	if len(b) < FragmentPrefixLen {
		return m, fmt.Errorf("%w: %s TID %d of %d bytes, a fragment header needs %d", ErrShort, m.Type, m.TID, len(b), FragmentPrefixLen)
	}
	m.TotalFragments = le.Uint32(b[12:])
	m.CurrentFragment = le.Uint32(b[16:])
	m.Payload = b[FragmentPrefixLen:]
	if m.TotalFragments == 0 || m.CurrentFragment >= m.TotalFragments {
		return m, fmt.Errorf("%w: %s TID %d fragment %d of %d", ErrBadFragment, m.Type, m.TID, m.CurrentFragment, m.TotalFragments)
	}
	if m.CurrentFragment > 0 {
		return m, nil
	}
	hl := CommandHeaderLen
	if m.Type == TypeIndicateStatus {
		hl = IndicateStatusHeaderLen
	}
	if len(b) < hl {
		return m, fmt.Errorf("%w: %s TID %d of %d bytes, its header needs %d", ErrShort, m.Type, m.TID, len(b), hl)
	}
	copy(m.Service[:], b[20:36])
	m.CID = le.Uint32(b[36:])
	switch m.Type {
	case TypeCommand:
		m.Command = CommandType(le.Uint32(b[40:]))
	case TypeCommandDone:
		m.Status = Status(le.Uint32(b[40:]))
	}
	m.InfoLen = le.Uint32(b[hl-4:])
	rest := b[hl:]
	if m.TotalFragments == 1 {
		if uint64(m.InfoLen) > uint64(len(rest)) {
			return m, fmt.Errorf("%w: %s TID %d: InformationBufferLength %d, %d bytes follow", ErrBadLength, m.Type, m.TID, m.InfoLen, len(rest))
		}
		m.Info = Info(rest[:m.InfoLen])
	} else {
		m.Info = Info(rest[:min(uint64(m.InfoLen), uint64(len(rest)))])
	}
	return m, nil
}

// PeekHeader reads the 12-byte header at the start of b without checking
// anything else.
func PeekHeader(b []byte) (t MessageType, length, tid uint32, err error) {
	if len(b) < HeaderLen {
		return 0, 0, 0, fmt.Errorf("%w: %d bytes, a header needs %d", ErrShort, len(b), HeaderLen)
	}
	return MessageType(le.Uint32(b)), le.Uint32(b[4:]), le.Uint32(b[8:]), nil
}

func appendHeader(dst []byte, t MessageType, length, tid uint32) []byte {
	dst = le.AppendUint32(dst, uint32(t))
	dst = le.AppendUint32(dst, length)
	return le.AppendUint32(dst, tid)
}

// AppendSimple appends a 16-byte message of type t (OPEN, OPEN_DONE,
// CLOSE_DONE, HOST_ERROR or FUNCTION_ERROR) whose one field is v.
func AppendSimple(dst []byte, t MessageType, tid, v uint32) []byte {
	dst = appendHeader(dst, t, SimpleMessageLen, tid)
	return le.AppendUint32(dst, v)
}

// AppendOpen appends an OPEN.
func AppendOpen(dst []byte, tid, maxControlTransfer uint32) []byte {
	return AppendSimple(dst, TypeOpen, tid, maxControlTransfer)
}

// AppendClose appends a CLOSE.
func AppendClose(dst []byte, tid uint32) []byte {
	return appendHeader(dst, TypeClose, HeaderLen, tid)
}

// AppendOpenDone appends an OPEN_DONE.
func AppendOpenDone(dst []byte, tid uint32, s Status) []byte {
	return AppendSimple(dst, TypeOpenDone, tid, uint32(s))
}

// AppendCloseDone appends a CLOSE_DONE.
func AppendCloseDone(dst []byte, tid uint32, s Status) []byte {
	return AppendSimple(dst, TypeCloseDone, tid, uint32(s))
}

// AppendFunctionError appends a FUNCTION_ERROR.
func AppendFunctionError(dst []byte, tid uint32, e ProtocolError) []byte {
	return AppendSimple(dst, TypeFunctionError, tid, uint32(e))
}

// AppendHostError appends a HOST_ERROR.
func AppendHostError(dst []byte, tid uint32, e ProtocolError) []byte {
	return AppendSimple(dst, TypeHostError, tid, uint32(e))
}

// StartCommand appends the header of a COMMAND (a single fragment) whose
// InformationBuffer the caller appends next; Finish then sets the lengths.
func StartCommand(dst []byte, tid uint32, svc UUID, cid uint32, ct CommandType) []byte {
	return startFragmentable(dst, TypeCommand, tid, svc, cid, uint32(ct))
}

// StartCommandDone is StartCommand for a COMMAND_DONE.
func StartCommandDone(dst []byte, tid uint32, svc UUID, cid uint32, s Status) []byte {
	return startFragmentable(dst, TypeCommandDone, tid, svc, cid, uint32(s))
}

// StartIndicateStatus is StartCommand for an INDICATE_STATUS.
func StartIndicateStatus(dst []byte, tid uint32, svc UUID, cid uint32) []byte {
	dst = appendHeader(dst, TypeIndicateStatus, 0, tid)
	dst = le.AppendUint32(dst, 1)
	dst = le.AppendUint32(dst, 0)
	dst = append(dst, svc[:]...)
	dst = le.AppendUint32(dst, cid)
	return le.AppendUint32(dst, 0)
}

func startFragmentable(dst []byte, t MessageType, tid uint32, svc UUID, cid, v uint32) []byte {
	dst = appendHeader(dst, t, 0, tid)
	dst = le.AppendUint32(dst, 1)
	dst = le.AppendUint32(dst, 0)
	dst = append(dst, svc[:]...)
	dst = le.AppendUint32(dst, cid)
	dst = le.AppendUint32(dst, v)
	return le.AppendUint32(dst, 0)
}

// Finish sets the MessageLength of msg (a message started with one of the
// Start functions, and everything appended after it) and, for COMMAND,
// COMMAND_DONE and INDICATE_STATUS, its InformationBufferLength.
func Finish(msg []byte) error {
	t, _, _, err := PeekHeader(msg)
	if err != nil {
		return err
	}
	le.PutUint32(msg[4:], uint32(len(msg)))
	hl := 0
	switch t {
	case TypeCommand, TypeCommandDone:
		hl = CommandHeaderLen
	case TypeIndicateStatus:
		hl = IndicateStatusHeaderLen
	}
	if hl > 0 {
		if len(msg) < hl {
			return fmt.Errorf("%w: %s of %d bytes, its header needs %d", ErrShort, t, len(msg), hl)
		}
		le.PutUint32(msg[hl-4:], uint32(len(msg)-hl))
	}
	return nil
}

// AppendCommand appends a whole COMMAND carrying info.
func AppendCommand(dst []byte, tid uint32, svc UUID, cid uint32, ct CommandType, info []byte) []byte {
	start := len(dst)
	dst = append(StartCommand(dst, tid, svc, cid, ct), info...)
	_ = Finish(dst[start:])
	return dst
}

// AppendCommandDone appends a whole COMMAND_DONE carrying info.
func AppendCommandDone(dst []byte, tid uint32, svc UUID, cid uint32, s Status, info []byte) []byte {
	start := len(dst)
	dst = append(StartCommandDone(dst, tid, svc, cid, s), info...)
	_ = Finish(dst[start:])
	return dst
}

// AppendIndicateStatus appends a whole INDICATE_STATUS carrying info.
func AppendIndicateStatus(dst []byte, tid uint32, svc UUID, cid uint32, info []byte) []byte {
	start := len(dst)
	dst = append(StartIndicateStatus(dst, tid, svc, cid), info...)
	_ = Finish(dst[start:])
	return dst
}
