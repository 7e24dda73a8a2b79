// Package gso performs generic segmentation offload (GSO) in software for
// the uplink of the MHI network device.
//
// A Linux TUN device opened with IFF_VNET_HDR and TCP/UDP segmentation
// offloads enabled (TUNSETOFFLOAD with TUN_F_TSO4, TUN_F_TSO6, TUN_F_USO4,
// TUN_F_USO6) hands the reader "super-packets": one IP packet of up to 64 KB
// whose TCP or UDP payload is meant to go on the wire as several packets of
// at most GSOSize payload bytes each. A virtio_net_hdr (VirtioNetHdr) in
// front of the packet says how. The modem cannot segment, so the model does
// it just before the ring: the per-packet cost of the stack above is paid
// once per super-packet, and only this last step runs per segment.
//
// Segment copies the IP and L4 headers in front of every slice of the
// payload and fixes up each copy: IPv4 total length, identification
// (incremented per segment) and header checksum; IPv6 payload length; TCP
// sequence number and flags (FIN and PSH only on the last segment, CWR only
// on the first); UDP length; and the full TCP/UDP checksum over the new
// pseudo header. For a packet that is not GSO but carries a partial checksum
// (FlagNeedsCsum) it finishes the checksum.
//
// Supported: GSOTCPv4, GSOTCPv6 (with or without GSOECN), GSOUDPL4 over IPv4
// or IPv6, and GSONone. IPv4 options are replicated. IPv6 extension headers
// are not supported (ErrUnsupported), nor are IPv6 jumbograms (payload length
// 0), UDP fragmentation offload (GSOUDP), or tunnel (encapsulated) GSO.
//
// Buffer ownership: Segment and Count only read the super-packet and never
// retain it or the output buffers. The caller owns the output buffers
// out[i] (each must be long enough for its segment; Count and the GSOSize
// tell how many and how long) and the sizes slice, into which Segment writes
// the length of each segment. Nothing is allocated on success, so a caller
// can reuse one set of buffers for every super-packet. Inputs are treated as
// untrusted: every length and offset is checked, and a malformed packet
// yields one of the sentinel errors (test with errors.Is), never a panic.
package gso

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Sentinel errors returned (possibly wrapped with detail) by Count and
// Segment.
var (
	// ErrShortPacket means the packet ends before a header or length it
	// declares.
	ErrShortPacket = errors.New("gso: packet too short")
	// ErrUnsupported means a valid packet or header uses a feature this
	// package does not segment (UFO, unknown GSO types, IPv6 extension
	// headers, jumbograms).
	ErrUnsupported = errors.New("gso: unsupported packet")
	// ErrBadHeader means the virtio_net_hdr or an IP/L4 header is
	// inconsistent (bad IHL, gso_size 0, hdr_len beyond the packet, wrong
	// protocol for the GSO type, ...).
	ErrBadHeader = errors.New("gso: bad header")
	// ErrTooManySegments means the packet needs more segments than the
	// caller gave output buffers (or sizes entries) for.
	ErrTooManySegments = errors.New("gso: too many segments")
	// ErrBufferTooSmall means an output buffer is shorter than the
	// segment that must go in it.
	ErrBufferTooSmall = errors.New("gso: output buffer too small")
)

const (
	protoTCP = 6
	protoUDP = 17

	tcpFlagFIN = 0x01
	tcpFlagPSH = 0x08
	tcpFlagCWR = 0x80

	ipv4MinHdr = 20
	ipv6Hdr    = 40
	tcpMinHdr  = 20
	udpHdr     = 8

	tcpCsumOff = 16
	udpCsumOff = 6
)

// layout is what parsing a super-packet learns about it.
type layout struct {
	gso    bool // false: GSONone, a single packet
	v6     bool
	tcp    bool
	l4     int // offset of the L4 header (IP header length)
	hdr    int // length of all headers (IP + L4), replicated per segment
	total  int // packet length per the IP header (trailing bytes ignored)
	mss    int
	segs   int
	length int // GSONone: bytes to copy
}

// segLen returns the length of segment i.
func (l *layout) segLen(i int) int {
	if !l.gso {
		return l.length
	}
	pay := l.total - l.hdr - i*l.mss
	if pay > l.mss {
		pay = l.mss
	}
	return l.hdr + pay
}

// isIPv6ExtHdr reports whether nh is an IPv6 extension header number.
func isIPv6ExtHdr(nh byte) bool {
	switch nh {
	case 0, 43, 44, 50, 51, 60, 135, 139, 140, 253, 254:
		return true
	}
	return false
}

func parse(pkt []byte, h VirtioNetHdr) (layout, error) {
	var l layout
	if int(h.HdrLen) > len(pkt) {
		return l, fmt.Errorf("%w: hdr_len %d beyond packet of %d bytes", ErrBadHeader, h.HdrLen, len(pkt))
	}
	typ := h.GSOType &^ GSOECN
	if typ == GSONone {
		return parseNonGSO(pkt, h)
	}
	if err := parseGSOType(&l, h); err != nil {
		return l, err
	}
	if len(pkt) == 0 {
		return l, fmt.Errorf("%w: empty packet", ErrShortPacket)
	}
	want := byte(protoUDP)
	if l.tcp {
		want = protoTCP
	}
	var err error
	switch pkt[0] >> 4 {
	case 4:
		err = parseIPv4(&l, pkt, h, want)
	case 6:
		err = parseIPv6(&l, pkt, h, want)
	default:
		err = fmt.Errorf("%w: IP version %d", ErrBadHeader, pkt[0]>>4)
	}
	if err != nil {
		return l, err
	}
	if err := parseL4(&l, pkt, h); err != nil {
		return l, err
	}
	pay := l.total - l.hdr
	if pay == 0 {
		return l, fmt.Errorf("%w: GSO packet without payload", ErrBadHeader)
	}
	l.segs = (pay + l.mss - 1) / l.mss
	return l, nil
}

// parseNonGSO checks a GSONone packet: one packet, copied whole, whose
// partial checksum (if any) must lie inside it.
func parseNonGSO(pkt []byte, h VirtioNetHdr) (layout, error) {
	var l layout
	if h.GSOType&GSOECN != 0 {
		return l, fmt.Errorf("%w: ECN bit without a GSO type", ErrBadHeader)
	}
	if len(pkt) == 0 {
		return l, fmt.Errorf("%w: empty packet", ErrShortPacket)
	}
	if h.Flags&FlagNeedsCsum != 0 && int(h.CsumStart)+int(h.CsumOffset)+2 > len(pkt) {
		return l, fmt.Errorf("%w: csum_start %d + csum_off %d beyond packet of %d bytes",
			ErrBadHeader, h.CsumStart, h.CsumOffset, len(pkt))
	}
	l.segs, l.length = 1, len(pkt)
	return l, nil
}

// parseGSOType checks the virtio_net_hdr GSO type and size of a GSO packet
// and records the L4 protocol and MSS in l.
func parseGSOType(l *layout, h VirtioNetHdr) error {
	ecn := h.GSOType&GSOECN != 0
	switch h.GSOType &^ GSOECN {
	case GSOTCPv4, GSOTCPv6:
		l.tcp = true
	case GSOUDPL4:
		if ecn {
			return fmt.Errorf("%w: ECN bit on UDP GSO", ErrBadHeader)
		}
	case GSOUDP:
		return fmt.Errorf("%w: UDP fragmentation offload (gso_type 3)", ErrUnsupported)
	default:
		return fmt.Errorf("%w: gso_type %#x", ErrUnsupported, h.GSOType)
	}
	l.gso = true
	if h.GSOSize == 0 {
		return fmt.Errorf("%w: gso_size 0", ErrBadHeader)
	}
	l.mss = int(h.GSOSize)
	return nil
}

// parseIPv4 checks the IPv4 header of a GSO packet (version already
// known) carrying L4 protocol want, and records the L4 offset and the
// packet's total length in l.
func parseIPv4(l *layout, pkt []byte, h VirtioNetHdr, want byte) error {
	if h.GSOType&^GSOECN == GSOTCPv6 {
		return fmt.Errorf("%w: IPv4 packet with gso_type TCPV6", ErrBadHeader)
	}
	if len(pkt) < ipv4MinHdr {
		return fmt.Errorf("%w: IPv4 header needs %d bytes, have %d", ErrShortPacket, ipv4MinHdr, len(pkt))
	}
	ihl := int(pkt[0]&0x0f) * 4
	if ihl < ipv4MinHdr {
		return fmt.Errorf("%w: IPv4 IHL %d", ErrBadHeader, ihl/4)
	}
	if ihl > len(pkt) {
		return fmt.Errorf("%w: IPv4 IHL %d beyond packet of %d bytes", ErrShortPacket, ihl/4, len(pkt))
	}
	tot := int(binary.BigEndian.Uint16(pkt[2:]))
	if tot < ihl {
		return fmt.Errorf("%w: IPv4 total length %d below header length %d", ErrBadHeader, tot, ihl)
	}
	if tot > len(pkt) {
		return fmt.Errorf("%w: IPv4 total length %d beyond packet of %d bytes", ErrShortPacket, tot, len(pkt))
	}
	if binary.BigEndian.Uint16(pkt[6:])&0x3fff != 0 {
		return fmt.Errorf("%w: IPv4 fragment", ErrBadHeader)
	}
	if pkt[9] != want {
		return fmt.Errorf("%w: IPv4 protocol %d for gso_type %#x", ErrBadHeader, pkt[9], h.GSOType)
	}
	l.l4, l.total = ihl, tot
	return nil
}

// parseIPv6 checks the IPv6 header of a GSO packet (version already
// known) carrying L4 protocol want with no extension headers, and records
// the L4 offset and the packet's total length in l.
func parseIPv6(l *layout, pkt []byte, h VirtioNetHdr, want byte) error {
	l.v6 = true
	if h.GSOType&^GSOECN == GSOTCPv4 {
		return fmt.Errorf("%w: IPv6 packet with gso_type TCPV4", ErrBadHeader)
	}
	if len(pkt) < ipv6Hdr {
		return fmt.Errorf("%w: IPv6 header needs %d bytes, have %d", ErrShortPacket, ipv6Hdr, len(pkt))
	}
	plen := int(binary.BigEndian.Uint16(pkt[4:]))
	if plen == 0 {
		return fmt.Errorf("%w: IPv6 payload length 0 (jumbogram)", ErrUnsupported)
	}
	if ipv6Hdr+plen > len(pkt) {
		return fmt.Errorf("%w: IPv6 payload length %d beyond packet of %d bytes", ErrShortPacket, plen, len(pkt))
	}
	if nh := pkt[6]; nh != want {
		if isIPv6ExtHdr(nh) {
			return fmt.Errorf("%w: IPv6 extension header %d", ErrUnsupported, nh)
		}
		return fmt.Errorf("%w: IPv6 next header %d for gso_type %#x", ErrBadHeader, nh, h.GSOType)
	}
	l.l4, l.total = ipv6Hdr, ipv6Hdr+plen
	return nil
}

// parseL4 checks the TCP or UDP header at l.l4 (which must fit in
// l.total) and the virtio_net_hdr checksum position, and records the
// length of all headers in l.
func parseL4(l *layout, pkt []byte, h VirtioNetHdr) error {
	if l.tcp {
		if l.total-l.l4 < tcpMinHdr {
			return fmt.Errorf("%w: TCP header needs %d bytes, have %d", ErrShortPacket, tcpMinHdr, l.total-l.l4)
		}
		doff := int(pkt[l.l4+12]>>4) * 4
		if doff < tcpMinHdr {
			return fmt.Errorf("%w: TCP data offset %d", ErrBadHeader, doff/4)
		}
		if l.l4+doff > l.total {
			return fmt.Errorf("%w: TCP data offset %d beyond packet", ErrShortPacket, doff/4)
		}
		l.hdr = l.l4 + doff
	} else {
		if l.total-l.l4 < udpHdr {
			return fmt.Errorf("%w: UDP header needs %d bytes, have %d", ErrShortPacket, udpHdr, l.total-l.l4)
		}
		l.hdr = l.l4 + udpHdr
	}
	if h.Flags&FlagNeedsCsum != 0 {
		off := udpCsumOff
		if l.tcp {
			off = tcpCsumOff
		}
		if int(h.CsumStart) != l.l4 || int(h.CsumOffset) != off {
			return fmt.Errorf("%w: csum_start %d csum_off %d, L4 header at %d wants offset %d",
				ErrBadHeader, h.CsumStart, h.CsumOffset, l.l4, off)
		}
	}
	return nil
}

// Count returns how many packets Segment will produce for pkt described by
// h (1 for a non-GSO packet), or the error Segment would return for a
// malformed packet. Every segment but the last is at most the header length
// plus h.GSOSize bytes long, and none is longer than pkt.
func Count(pkt []byte, h VirtioNetHdr) (segments int, err error) {
	l, err := parse(pkt, h)
	if err != nil {
		return 0, err
	}
	return l.segs, nil
}

// Segment splits the super-packet pkt, described by h, into packets written
// to the caller's buffers out[0:n], storing each packet's length in
// sizes[0:n]. A non-GSO packet (GSONone) is copied to out[0] whole, its
// partial checksum finished if h has FlagNeedsCsum. pkt is not modified.
// If len(out) or len(sizes) is below the segment count it returns
// ErrTooManySegments, and if any out[i] is shorter than its segment it
// returns ErrBufferTooSmall; in both cases, as for a malformed packet,
// nothing is written. Segment does not allocate on success.
func Segment(pkt []byte, h VirtioNetHdr, out [][]byte, sizes []int) (n int, err error) {
	l, err := parse(pkt, h)
	if err != nil {
		return 0, err
	}
	if err := checkOutputs(&l, out, sizes); err != nil {
		return 0, err
	}
	if !l.gso {
		copyNonGSO(&l, pkt, h, out[0])
		sizes[0] = l.length
		return 1, nil
	}
	c := newSegmentCommon(&l, pkt)
	off := l.hdr
	for i := 0; i < l.segs; i++ {
		size := l.segLen(i)
		writeSegment(&l, &c, pkt, out[i][:size], i, off)
		sizes[i] = size
		off += size - l.hdr
	}
	return l.segs, nil
}

// checkOutputs checks that the caller gave enough output buffers and size
// entries for l's segments, each buffer long enough for its segment.
func checkOutputs(l *layout, out [][]byte, sizes []int) error {
	if l.segs > len(out) || l.segs > len(sizes) {
		return fmt.Errorf("%w: need %d, have %d buffers and %d sizes", ErrTooManySegments, l.segs, len(out), len(sizes))
	}
	for i := 0; i < l.segs; i++ {
		if need := l.segLen(i); len(out[i]) < need {
			return fmt.Errorf("%w: segment %d needs %d bytes, buffer has %d", ErrBufferTooSmall, i, need, len(out[i]))
		}
	}
	return nil
}

// copyNonGSO copies the non-GSO packet pkt to dst (long enough, checked)
// and finishes its partial checksum if h asks for it.
func copyNonGSO(l *layout, pkt []byte, h VirtioNetHdr, dst []byte) {
	b := dst[:l.length]
	copy(b, pkt)
	if h.Flags&FlagNeedsCsum != 0 {
		cs := int(h.CsumStart)
		at := cs + int(h.CsumOffset)
		// The field holds the pseudo-header sum; add the rest.
		c := ^fold(sum(b[cs:], 0))
		if c == 0 {
			c = 0xffff
		}
		binary.BigEndian.PutUint16(b[at:], c)
	}
}

// segmentCommon holds what every segment of one super-packet derives its
// headers from.
type segmentCommon struct {
	// pseudo is the pseudo-header sum of the addresses and protocol; the
	// L4 length is added per segment.
	pseudo uint64
	id     uint16 // IPv4 identification of the first segment
	seq    uint32 // TCP sequence number of the first segment
	tflags byte   // TCP flags of the super-packet
}

// newSegmentCommon reads the per-super-packet header fields of pkt, whose
// headers parse has checked.
func newSegmentCommon(l *layout, pkt []byte) segmentCommon {
	var c segmentCommon
	var proto uint64 = protoUDP
	if l.tcp {
		proto = protoTCP
	}
	if l.v6 {
		c.pseudo = sum(pkt[8:40], proto)
	} else {
		c.pseudo = sum(pkt[12:20], proto)
		c.id = binary.BigEndian.Uint16(pkt[4:])
	}
	if l.tcp {
		c.seq = binary.BigEndian.Uint32(pkt[l.l4+4:])
		c.tflags = pkt[l.l4+13]
	}
	return c
}

// writeSegment fills seg (exactly segment i's length) with the headers of
// pkt followed by the payload starting at off, and fixes up the IP and L4
// headers for segment i.
func writeSegment(l *layout, c *segmentCommon, pkt, seg []byte, i, off int) {
	size := len(seg)
	pay := size - l.hdr
	copy(seg, pkt[:l.hdr])
	copy(seg[l.hdr:], pkt[off:off+pay])

	if l.v6 {
		binary.BigEndian.PutUint16(seg[4:], uint16(size-ipv6Hdr))
	} else {
		binary.BigEndian.PutUint16(seg[2:], uint16(size))
		binary.BigEndian.PutUint16(seg[4:], c.id+uint16(i))
		seg[10], seg[11] = 0, 0
		binary.BigEndian.PutUint16(seg[10:], ^fold(sum(seg[:l.l4], 0)))
	}

	l4 := seg[l.l4:]
	l4len := uint64(len(l4))
	if l.tcp {
		binary.BigEndian.PutUint32(l4[4:], c.seq+uint32(off-l.hdr))
		f := c.tflags
		if i != l.segs-1 {
			f &^= tcpFlagFIN | tcpFlagPSH
		}
		if i != 0 {
			f &^= tcpFlagCWR
		}
		l4[13] = f
		l4[16], l4[17] = 0, 0
		binary.BigEndian.PutUint16(l4[16:], ^fold(sum(l4, c.pseudo+l4len)))
	} else {
		binary.BigEndian.PutUint16(l4[4:], uint16(l4len))
		l4[6], l4[7] = 0, 0
		csum := ^fold(sum(l4, c.pseudo+l4len))
		if csum == 0 {
			csum = 0xffff // 0 means "no checksum" in UDP
		}
		binary.BigEndian.PutUint16(l4[6:], csum)
	}
}
