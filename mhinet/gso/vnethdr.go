package gso

import (
	"encoding/binary"
	"fmt"
)

// Sizes of the two virtio_net_hdr layouts a TUN device with IFF_VNET_HDR can
// use (chosen with TUNSETVNETHDRSZ).
const (
	// VirtioNetHdrLen is the size of the basic virtio_net_hdr.
	VirtioNetHdrLen = 10
	// VirtioNetHdrMrgRxbufLen is the size of virtio_net_hdr_mrg_rxbuf: the
	// basic header followed by num_buffers.
	VirtioNetHdrMrgRxbufLen = 12
)

// Values of VirtioNetHdr.Flags.
const (
	// FlagNeedsCsum (VIRTIO_NET_HDR_F_NEEDS_CSUM) means the L4 checksum is
	// partial: the field at CsumStart+CsumOffset holds the folded
	// pseudo-header sum, and the sum over the bytes from CsumStart on must
	// still be added and complemented.
	FlagNeedsCsum uint8 = 1
	// FlagDataValid (VIRTIO_NET_HDR_F_DATA_VALID) means the checksum was
	// already verified; it appears on packets handed to the guest/reader.
	FlagDataValid uint8 = 2
)

// Values of VirtioNetHdr.GSOType. The low bits select the type; GSOECN is a
// modifier bit that may be or-ed onto a TCP type.
const (
	// GSONone (VIRTIO_NET_HDR_GSO_NONE): not a GSO packet.
	GSONone uint8 = 0
	// GSOTCPv4 (VIRTIO_NET_HDR_GSO_TCPV4): TCP over IPv4, segment at GSOSize.
	GSOTCPv4 uint8 = 1
	// GSOUDP (VIRTIO_NET_HDR_GSO_UDP): UDP fragmentation offload (UFO,
	// IP fragments). Not supported by Segment.
	GSOUDP uint8 = 3
	// GSOTCPv6 (VIRTIO_NET_HDR_GSO_TCPV6): TCP over IPv6.
	GSOTCPv6 uint8 = 4
	// GSOUDPL4 (VIRTIO_NET_HDR_GSO_UDP_L4): UDP segmentation (UDP_SEGMENT),
	// one datagram of GSOSize payload per segment, IPv4 or IPv6.
	GSOUDPL4 uint8 = 5
	// GSOECN (VIRTIO_NET_HDR_GSO_ECN): the TCP super-packet carries CWR,
	// which must appear on the first segment only.
	GSOECN uint8 = 0x80
)

// VirtioNetHdr is the virtio_net_hdr that precedes every packet on a TUN
// device opened with IFF_VNET_HDR. All 16-bit fields are little-endian on the
// wire (virtio 1.0 byte order, and the native order of the little-endian hosts
// this model runs on): the header observed for a UDP_SEGMENT send of 1400
// reads gso_size bytes 0x78 0x05.
type VirtioNetHdr struct {
	// Flags is a set of Flag* bits.
	Flags uint8
	// GSOType is one of the GSO* types, possibly or-ed with GSOECN.
	GSOType uint8
	// HdrLen is the sender's idea of the length of the headers (IP + L4)
	// to replicate in every segment. Segment parses the headers itself and
	// uses this only as a bound.
	HdrLen uint16
	// GSOSize is the payload size of every segment but the last (the MSS
	// for TCP, the datagram payload size for UDP_L4).
	GSOSize uint16
	// CsumStart is the offset of the L4 header, from which the checksum is
	// computed (meaningful with FlagNeedsCsum).
	CsumStart uint16
	// CsumOffset is the offset of the checksum field from CsumStart (16
	// for TCP, 6 for UDP).
	CsumOffset uint16
	// NumBuffers is the num_buffers field of the 12-byte layout; it is
	// ignored by the 10-byte Decode/Encode.
	NumBuffers uint16
}

// Decode reads the 10-byte header from the start of b. NumBuffers is left
// unchanged.
func (h *VirtioNetHdr) Decode(b []byte) error {
	if len(b) < VirtioNetHdrLen {
		return fmt.Errorf("%w: virtio_net_hdr needs %d bytes, have %d", ErrShortPacket, VirtioNetHdrLen, len(b))
	}
	h.Flags = b[0]
	h.GSOType = b[1]
	h.HdrLen = binary.LittleEndian.Uint16(b[2:])
	h.GSOSize = binary.LittleEndian.Uint16(b[4:])
	h.CsumStart = binary.LittleEndian.Uint16(b[6:])
	h.CsumOffset = binary.LittleEndian.Uint16(b[8:])
	return nil
}

// Encode writes the 10-byte header to the start of b.
func (h VirtioNetHdr) Encode(b []byte) error {
	if len(b) < VirtioNetHdrLen {
		return fmt.Errorf("%w: virtio_net_hdr needs %d bytes, have %d", ErrBufferTooSmall, VirtioNetHdrLen, len(b))
	}
	b[0] = h.Flags
	b[1] = h.GSOType
	binary.LittleEndian.PutUint16(b[2:], h.HdrLen)
	binary.LittleEndian.PutUint16(b[4:], h.GSOSize)
	binary.LittleEndian.PutUint16(b[6:], h.CsumStart)
	binary.LittleEndian.PutUint16(b[8:], h.CsumOffset)
	return nil
}

// DecodeMrgRxbuf reads the 12-byte header (with num_buffers) from b.
func (h *VirtioNetHdr) DecodeMrgRxbuf(b []byte) error {
	if len(b) < VirtioNetHdrMrgRxbufLen {
		return fmt.Errorf("%w: virtio_net_hdr_mrg_rxbuf needs %d bytes, have %d", ErrShortPacket, VirtioNetHdrMrgRxbufLen, len(b))
	}
	_ = h.Decode(b)
	h.NumBuffers = binary.LittleEndian.Uint16(b[10:])
	return nil
}

// EncodeMrgRxbuf writes the 12-byte header (with num_buffers) to b.
func (h VirtioNetHdr) EncodeMrgRxbuf(b []byte) error {
	if len(b) < VirtioNetHdrMrgRxbufLen {
		return fmt.Errorf("%w: virtio_net_hdr_mrg_rxbuf needs %d bytes, have %d", ErrBufferTooSmall, VirtioNetHdrMrgRxbufLen, len(b))
	}
	_ = h.Encode(b)
	binary.LittleEndian.PutUint16(b[10:], h.NumBuffers)
	return nil
}

// String formats the header like the kernel's field names, for logs.
func (h VirtioNetHdr) String() string {
	return fmt.Sprintf("flags=%#x gso_type=%#x hdr_len=%d gso_size=%d csum_start=%d csum_off=%d",
		h.Flags, h.GSOType, h.HdrLen, h.GSOSize, h.CsumStart, h.CsumOffset)
}
