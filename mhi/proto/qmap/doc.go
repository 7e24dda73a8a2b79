// Package qmap builds and parses QMAP aggregates: the Qualcomm MAP framing
// (as handled by Linux's rmnet driver) that a modem uses on an IP_HW0
// channel to multiplex and aggregate IP packets.
//
// # Wire format
//
// All multi-byte fields are big-endian. Every frame starts with a 4-byte
// MAP header:
//
//	byte 0  bit 7 CD (1 = command, 0 = data), bit 6 next header (MAPv5),
//	        bits 5:0 pad length
//	byte 1  mux id (the PDN / rmnet link)
//	bytes 2–3 payload length, including the padding, excluding this header
//
// A downlink aggregate is frames back to back in one buffer. The parts of a
// data frame depend on the checksum offload negotiated (rmnet's
// INGRESS_MAP_CKSUMV4 / V5 flags), chosen here with [CsumMode]:
//
//	CsumNone  MAP header | IP packet | pad
//	CsumV4    MAP header | IP packet | pad | DL checksum trailer (8)
//	CsumV5    MAP header | checksum header (4) | IP packet | pad
//
// The trailer and the MAPv5 header are not counted in the payload length,
// so a frame occupies 4 + length (+8 with CsumV4, +4 for a CsumV5 data
// frame) bytes; a zero payload length ends the aggregate. Padding makes
// every frame a multiple of 4 bytes by default. A command frame (CD set)
// carries a [Command] instead of an IP packet; it never has a MAPv5 header
// but, like rmnet, is assumed to carry the 8-byte trailer in CsumV4 mode.
// The trailer comes after the padding: Linux's rmnet (6.1,
// rmnet_handlers.c) looks for it at the packet's length plus the pad
// length, that is right after the payload length's bytes.
//
// The uplink (host to modem, [Config.Uplink], [Parser.Uplink]) differs
// with CsumV4 only: rmnet's EGRESS_MAP_CKSUMV4 puts a 4-byte checksum
// header between the MAP header and the IP packet of a data frame, not
// counted in the payload length, and no trailer anywhere:
//
//	CsumV4 uplink  MAP header | checksum header (4) | IP packet | pad
//
// The header's first 16 bits are the checksum start offset from the IP
// header, the next hold the computation-requested bit, the UDP bit and the
// 14-bit offset of the checksum field from the start (all zero when the
// host computed the checksum itself). Uplink command frames (flow-control
// acknowledgements) carry neither header nor trailer: rmnet trims the
// trailer off the command it answers.
//
// # Building
//
// A [Writer] writes an aggregate into a caller-owned buffer without
// allocating: [Writer.Reset], then [Writer.Add] until it reports
// framing.ErrFull or framing.ErrLimit (it is a framing.Writer,
// mhi/proto/framing), then [Writer.Finish]. [Size], [FrameLen] and [Fit]
// compute exact sizes beforehand.
//
// # Parsing and ownership
//
// A [Parser] walks an aggregate from an untrusted device, bounds-checking
// every length; malformed frames are dropped and counted in [Stats] under a
// named reason (an Err… sentinel) while the others are delivered. Delivered
// packets are views into the caller's buffer, valid only while the caller
// keeps that buffer unchanged; copy them to keep them longer. Their
// capacity is clipped to their length, so appending never overwrites the
// next frame.
//
// Neither Writer nor Parser is safe for concurrent use.
package qmap
