// Package ntb builds and parses MBIM / CDC-NCM NCM Transfer Blocks (NTBs),
// the aggregation format a modem uses on an IP_HW0_MBIM channel.
//
// # Wire format
//
// All fields are little-endian. An NTB starts with a transfer header (NTH)
// and carries one or more datagram pointer tables (NDPs) that index IP
// datagrams stored elsewhere in the block:
//
//	NTH16 (12 bytes)  "NCMH" | wHeaderLength=12 | wSequence | wBlockLength | wNdpIndex
//	NTH32 (16 bytes)  "ncmh" | wHeaderLength=16 | wSequence | dwBlockLength | dwNdpIndex
//	NDP16 (8+4k)      dwSignature | wLength | wNextNdpIndex | {wIndex, wLength}…
//	NDP32 (16+8k)     dwSignature | wLength | wReserved | dwNextNdpIndex | dwReserved | {dwIndex, dwLength}…
//
// The entry list of an NDP ends with an all-zero entry, which wLength counts.
// MBIM marks IP traffic with the NDP signature "IPS" (NDP16) or "ips" (NDP32)
// in the low three bytes and puts the session id, as a binary number, in
// byte 3 (session 0 is the byte 0x00, not the character '0').
//
// Linux's mhi_wwan_mbim sends one datagram per NTB on the uplink, with a
// fixed 28-byte header (NTH16, NDP16 at offset 12 with one entry and the
// terminator, datagram at 28); [PutTXHeader] and [EncodeTX] produce it.
//
// # Building
//
// A [Writer] writes an aggregate into a buffer the caller owns, without
// allocating in the steady state: [Writer.Reset] opens an aggregate,
// [Writer.Add] copies datagrams in until it reports framing.ErrFull or
// framing.ErrLimit (it is a framing.Writer, mhi/proto/framing), and
// [Writer.Finish] writes the headers and returns the length. [Size] and
// [Fit] compute the exact size of an aggregate beforehand, so a modem can plan
// how many packets go into a buffer.
//
// One aggregate can carry several MBIM sessions: [Writer.AddSession] and
// [Writer.AppendSession] put a datagram in the NDP of its session id, one
// NDP per distinct id (at most [MaxWriterNDPs]), chained by wNextNdpIndex
// in the order the sessions first appear; [SizeSessions], [FitSessions]
// and [Writer.FitsSession] count the NDP a new session needs. MaxDatagrams
// bounds the datagrams of all sessions together.
//
// # Parsing and ownership
//
// A [Parser] walks an aggregate received from an untrusted device. Every
// length, index and offset is bounds-checked; malformed parts are dropped,
// counted in [Stats] under a named reason (one of the Err… sentinels) and
// the rest is still delivered. The datagrams handed to the callback are
// views into the caller's buffer, not copies: they are valid only as long as
// the caller keeps that buffer unchanged, and must be copied if they are to
// outlive it. Each view has its capacity clipped to its length, so appending
// to it never overwrites the neighbouring bytes of the aggregate.
//
// Neither Writer nor Parser is safe for concurrent use; use one per
// goroutine.
package ntb
