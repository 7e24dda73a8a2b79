package tun

import (
	"bytes"
	"encoding/binary"

	"github.com/gomhi/gomhi/mhinet"
	"github.com/gomhi/gomhi/mhinet/gso"
)

// UDP merging: runs of datagrams of one UDP flow become one super-packet
// behind a UDP_L4 virtio_net_hdr, which the kernel cuts back into the same
// datagrams (USO) wherever it has to — at a socket without UDP_GRO, at an
// interface without USO — and keeps whole where it may (a socket with
// UDP_GRO, as QUIC stacks set it; forwarding to a USO-capable device). A
// TUN takes such a frame only from Linux 6.2, the version that also
// accepts the USO offloads; so the Bridge merges UDP only when the TUN
// accepted them (OffloadUSO4, OffloadUSO6).

// maxUDPSegs bounds the datagrams of one UDP super-packet: Linux's
// UDP_MAX_SEGMENTS was 64 before 6.11 (128 since), and a larger frame is
// refused by the kernels before.
const maxUDPSegs = 64

// udpHdrLen is the length of a UDP header.
const udpHdrLen = 8

// udpSeg is what merging needs to know of a UDP datagram.
type udpSeg struct {
	v6  bool
	ihl int // IP header length (the UDP header's offset)
	pay int // payload bytes
}

// parseUDPSeg reports whether p is a UDP datagram that may be merged: an
// IPv4 packet (not a fragment) or an IPv6 one without extension headers
// (parseIP), whose IP and UDP length fields match len(p), carrying a
// payload and a checksum (not zero), valid as are the IPv4 header's. As with TCP, every
// length comes from the device and is checked, and the checksums are
// verified here because the merged packet goes to the kernel with a
// partial checksum it will not verify again.
func parseUDPSeg(p []byte) (udpSeg, bool) {
	var s udpSeg
	var pseudo uint64
	var ok bool
	if s.v6, s.ihl, pseudo, ok = parseIP(p, 17); !ok || len(p) <= s.ihl+udpHdrLen {
		return s, false // not UDP as we merge it, or no payload
	}
	u := p[s.ihl:]
	if int(binary.BigEndian.Uint16(u[4:])) != len(u) || binary.BigEndian.Uint16(u[6:]) == 0 {
		return s, false
	}
	if fold(csumAdd(u, pseudo)) != 0xffff {
		return s, false
	}
	s.pay = len(u) - udpHdrLen
	return s, true
}

// sameUDPFlow reports whether datagram q may follow datagram p in one
// super-packet as far as their headers go: the same IP header but for
// the length, id and checksum fields (ipIDFollows checks the id), and the
// same ports.
func sameUDPFlow(p []byte, ps udpSeg, q []byte, qs udpSeg) bool {
	if ps.v6 != qs.v6 || ps.ihl != qs.ihl {
		return false
	}
	return sameIPHeader(p, q, ps.v6, ps.ihl) && bytes.Equal(p[ps.ihl:ps.ihl+4], q[qs.ihl:qs.ihl+4])
}

// udpRun returns how many packets from pkts[0] (a datagram parsed as fs)
// form one UDP super-packet, and their payload bytes: consecutive
// datagrams of one flow, all of the first one's payload size but the
// last, which may be shorter; IPv4 ids as ipIDFollows wants; at most
// maxUDPSegs datagrams and 64 KiB.
func udpRun(pkts []mhinet.Packet, fs udpSeg) (run, payload int) {
	first := pkts[0].Data
	limit := 65535 - fs.ihl // IPv4 total length
	if fs.v6 {
		limit = 65535 // the UDP length field
	}
	limit -= udpHdrLen
	run, payload = 1, fs.pay
	prev := fs
	idMode := idIncrementing
	for run < len(pkts) && run < maxUDPSegs && prev.pay == fs.pay {
		q := pkts[run].Data
		qs, ok := parseUDPSeg(q)
		if !ok || qs.pay > fs.pay || payload+qs.pay > limit || !sameUDPFlow(first, fs, q, qs) {
			break
		}
		if !fs.v6 {
			if idMode, ok = ipIDFollows(first, q, run, idMode); !ok {
				break
			}
		}
		payload += qs.pay
		prev = qs
		run++
	}
	return run, payload
}

// mergeUDP writes the super-packet of a run of datagrams (checked by
// udpRun) into frame, behind its virtio_net_hdr.
func mergeUDP(frame []byte, vnet int, run []mhinet.Packet, fs udpSeg) {
	first := run[0].Data
	p := frame[vnet:]
	hdr := fs.ihl + udpHdrLen
	copy(p, first[:hdr])
	off := hdr
	for _, s := range run {
		off += copy(p[off:], s.Data[hdr:])
	}
	l4 := len(p) - fs.ihl
	var pseudo uint64
	if fs.v6 {
		binary.BigEndian.PutUint16(p[4:], uint16(l4))
		pseudo = csumAdd(p[8:40], 17+uint64(l4))
	} else {
		binary.BigEndian.PutUint16(p[2:], uint16(len(p)))
		p[10], p[11] = 0, 0
		binary.BigEndian.PutUint16(p[10:], ^fold(csumAdd(p[:fs.ihl], 0)))
		pseudo = csumAdd(p[12:20], 17+uint64(l4))
	}
	u := p[fs.ihl:]
	binary.BigEndian.PutUint16(u[4:], uint16(l4))
	// A partial checksum, as for TCP: the pseudo-header sum, which the
	// kernel completes for every datagram it cuts.
	binary.BigEndian.PutUint16(u[6:], fold(pseudo))
	h := gso.VirtioNetHdr{
		Flags:      gso.FlagNeedsCsum,
		GSOType:    gso.GSOUDPL4,
		HdrLen:     uint16(hdr),
		GSOSize:    uint16(fs.pay),
		CsumStart:  uint16(fs.ihl),
		CsumOffset: 6,
	}
	_ = h.Encode(frame)
}
