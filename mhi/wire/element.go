package wire

import (
	"encoding/binary"
	"fmt"
)

// ElementSize is the size in bytes of every ring element.
const ElementSize = 16

// PacketType is the type of a ring element, in dword1 bits [23:16].
type PacketType uint8

// Ring element types.
const (
	PktInvalid          PacketType = 0x00
	PktNoopCmd          PacketType = 0x01
	PktTransfer         PacketType = 0x02
	PktCoalescing       PacketType = 0x08
	PktResetChanCmd     PacketType = 0x10
	PktStopChanCmd      PacketType = 0x11
	PktStartChanCmd     PacketType = 0x12
	PktStateChangeEvent PacketType = 0x20
	PktCmdCompletion    PacketType = 0x21
	PktTxEvent          PacketType = 0x22
	PktRSCTxEvent       PacketType = 0x28
	PktEEEvent          PacketType = 0x40
	PktTsyncEvent       PacketType = 0x48
	PktBWReqEvent       PacketType = 0x50
	PktStaleEvent       PacketType = 0x51
)

var pktNames = map[PacketType]string{
	PktInvalid: "INVALID", PktNoopCmd: "NOOP_CMD", PktTransfer: "TRANSFER",
	PktCoalescing: "COALESCING", PktResetChanCmd: "RESET_CHAN_CMD",
	PktStopChanCmd: "STOP_CHAN_CMD", PktStartChanCmd: "START_CHAN_CMD",
	PktStateChangeEvent: "STATE_CHANGE_EVENT", PktCmdCompletion: "CMD_COMPLETION_EVENT",
	PktTxEvent: "TX_EVENT", PktRSCTxEvent: "RSC_TX_EVENT", PktEEEvent: "EE_EVENT",
	PktTsyncEvent: "TSYNC_EVENT", PktBWReqEvent: "BW_REQ_EVENT", PktStaleEvent: "STALE_EVENT",
}

// String returns the element type's name.
func (t PacketType) String() string {
	if n, ok := pktNames[t]; ok {
		return n
	}
	return fmt.Sprintf("PKT(0x%02x)", uint8(t))
}

// CompletionCode is the code of a transfer or command completion event,
// in dword0 bits [31:24].
type CompletionCode uint8

// Completion codes.
const (
	CCInvalid      CompletionCode = 0x00
	CCSuccess      CompletionCode = 0x01
	CCEOT          CompletionCode = 0x02
	CCOverflow     CompletionCode = 0x03
	CCEOB          CompletionCode = 0x04
	CCOOB          CompletionCode = 0x05
	CCDBMode       CompletionCode = 0x06
	CCUndefinedErr CompletionCode = 0x10
	CCBadTRE       CompletionCode = 0x11
)

var ccNames = map[CompletionCode]string{
	CCInvalid: "INVALID", CCSuccess: "SUCCESS", CCEOT: "EOT", CCOverflow: "OVERFLOW",
	CCEOB: "EOB", CCOOB: "OOB", CCDBMode: "DB_MODE", CCUndefinedErr: "UNDEFINED_ERR",
	CCBadTRE: "BAD_TRE",
}

// String returns the completion code's name.
func (c CompletionCode) String() string {
	if n, ok := ccNames[c]; ok {
		return n
	}
	return fmt.Sprintf("CC(0x%02x)", uint8(c))
}

// Transfer element (TRE) flags in dword1.
const (
	TREChain = 1 << 0
	TREIEOB  = 1 << 8
	TREIEOT  = 1 << 9
	TREBEI   = 1 << 10
)

// MaxTRELength is the largest buffer one transfer element can describe.
const MaxTRELength = 0xFFFF

// Element is one 16-byte ring element in its wire form (little-endian).
type Element struct {
	Ptr    uint64
	Dword0 uint32
	Dword1 uint32
}

// Type returns the element's packet type.
func (e Element) Type() PacketType { return PacketType(e.Dword1 >> 16) }

// Code returns the completion code of an event element.
func (e Element) Code() CompletionCode { return CompletionCode(e.Dword0 >> 24) }

// Length returns dword0 bits [15:0]: a TRE's buffer length or an event's byte count.
func (e Element) Length() uint32 { return e.Dword0 & 0xFFFF }

// Channel returns dword1 bits [31:24]: the channel id of commands and transfer events.
func (e Element) Channel() uint8 { return uint8(e.Dword1 >> 24) }

// EventState returns the MHI state carried by a state-change event.
func (e Element) EventState() State { return State(e.Dword0 >> 24) }

// EventEE returns the execution environment carried by an EE event.
func (e Element) EventEE() ExecEnv { return ExecEnv(e.Dword0 >> 24) }

// Flags returns the TRE flag bits (CHAIN, IEOB, IEOT, BEI) of a transfer element.
func (e Element) Flags() uint32 { return e.Dword1 & (TREChain | TREIEOB | TREIEOT | TREBEI) }

// Put writes e into b (at least 16 bytes) in wire order.
func (e Element) Put(b []byte) {
	_ = b[15]
	binary.LittleEndian.PutUint64(b[0:], e.Ptr)
	binary.LittleEndian.PutUint32(b[8:], e.Dword0)
	binary.LittleEndian.PutUint32(b[12:], e.Dword1)
}

// ParseElement reads an element from b (at least 16 bytes).
func ParseElement(b []byte) Element {
	_ = b[15]
	return Element{
		Ptr:    binary.LittleEndian.Uint64(b[0:]),
		Dword0: binary.LittleEndian.Uint32(b[8:]),
		Dword1: binary.LittleEndian.Uint32(b[12:]),
	}
}

func typeBits(t PacketType) uint32 { return uint32(t) << 16 }

// TransferTRE builds a transfer element for a buffer at iova of length n.
func TransferTRE(iova uint64, n uint32, flags uint32) Element {
	return Element{Ptr: iova, Dword0: n & 0xFFFF, Dword1: typeBits(PktTransfer) | flags}
}

// CommandElement builds a channel command (start, stop, reset) for channel ch.
func CommandElement(t PacketType, ch uint8) Element {
	return Element{Dword1: uint32(ch)<<24 | typeBits(t)}
}

// TransferEvent builds a transfer completion event for the TRE at treIOVA.
func TransferEvent(treIOVA uint64, code CompletionCode, n uint32, ch uint8) Element {
	return Element{Ptr: treIOVA, Dword0: uint32(code)<<24 | n&0xFFFF, Dword1: uint32(ch)<<24 | typeBits(PktTxEvent)}
}

// CommandCompletionEvent builds a command completion for the command at cmdIOVA.
func CommandCompletionEvent(cmdIOVA uint64, code CompletionCode) Element {
	return Element{Ptr: cmdIOVA, Dword0: uint32(code) << 24, Dword1: typeBits(PktCmdCompletion)}
}

// StateChangeEvent builds a state-change event announcing s.
func StateChangeEvent(s State) Element {
	return Element{Dword0: uint32(s) << 24, Dword1: typeBits(PktStateChangeEvent)}
}

// EEEvent builds an execution-environment event announcing ee.
func EEEvent(ee ExecEnv) Element {
	return Element{Dword0: uint32(ee) << 24, Dword1: typeBits(PktEEEvent)}
}

// String renders the element for logs.
func (e Element) String() string {
	return fmt.Sprintf("%s{ptr=0x%x d0=0x%08x d1=0x%08x}", e.Type(), e.Ptr, e.Dword0, e.Dword1)
}
