// Package mbim encodes and decodes MBIM control messages (USB-IF "Mobile
// Broadband Interface Model" 1.0, errata 1, the control-message chapters):
// the messages a host and a modem exchange on the MBIM control channel —
// over MHI the channel pair "MBIM" (12/13), one message per transfer.
//
// It is a leaf package with no state; the mock modem (mhi/ep) and the host
// side (mhi/ctrlport, mhictl) both use it. Where the specification and
// libmbim (the library behind mbimcli, mbim-proxy and ModemManager) differ,
// libmbim's observed behaviour is the referee.
//
// # Layout
//
// Every message starts with a 12-byte header: MessageType, MessageLength
// (the whole message) and TransactionId, all little-endian u32. OPEN, CLOSE,
// OPEN_DONE, CLOSE_DONE, HOST_ERROR and FUNCTION_ERROR carry at most one
// more u32. COMMAND, COMMAND_DONE and INDICATE_STATUS carry a fragment
// header (TotalFragments, CurrentFragment), then the service UUID (16 raw
// bytes), the CID, the command type (COMMAND) or status (COMMAND_DONE), the
// InformationBuffer length and the InformationBuffer. A message longer than
// the receiver's MaxControlTransfer (announced by the host in OPEN) is sent
// as several fragments: every fragment repeats the 20 bytes of header and
// fragment header, and the bytes after them are consecutive pieces of the
// original message's remainder (see Reassembler and AppendFragment).
//
// The InformationBuffer has a fixed part (u32 and u64 fields, inline
// UUIDs and structs, 8-byte offset/length "OL" pairs, 4-byte offsets) and a
// variable part the offsets point into. Strings are UTF-16LE without a
// terminator, padded to 4 bytes; the OL length counts the string's bytes
// without padding; an empty string is 0/0. Offsets are relative to the
// start of the InformationBuffer for top-level fields and to the start of
// the enclosing struct inside referenced structs. Info reads such a buffer
// in place (bounds-checked, never panicking on any input); Builder appends
// one to a caller-owned slice. The typed payloads of the BASIC_CONNECT
// service (DeviceCaps, RegistrationState, ConnectInfo, IPConfiguration…)
// encode with AppendTo and decode with their Parse functions.
//
// All integers are little-endian; UUIDs and IP addresses are raw bytes in
// network (string) order.
package mbim
