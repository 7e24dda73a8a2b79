package gso

import (
	"bytes"
	"encoding/binary"
	"fmt"
)

// This file is the tests' independent view of the wire formats: a builder
// for super-packets and a decoder that re-verifies segments. It shares no
// code with the package (its checksum is the plain RFC 1071 loop).

// refCsum is the RFC 1071 Internet checksum of the concatenated parts,
// complemented, computed 16 bits at a time.
func refCsum(parts ...[]byte) uint16 {
	var all []byte
	for _, p := range parts {
		all = append(all, p...)
	}
	var s uint32
	for i := 0; i+1 < len(all); i += 2 {
		s += uint32(all[i])<<8 | uint32(all[i+1])
	}
	if len(all)%2 == 1 {
		s += uint32(all[len(all)-1]) << 8
	}
	for s > 0xffff {
		s = s&0xffff + s>>16
	}
	return ^uint16(s)
}

// pseudoHdr builds the TCP/UDP pseudo header for the IP header ip.
func pseudoHdr(ip []byte, proto byte, l4len int) []byte {
	if ip[0]>>4 == 4 {
		p := make([]byte, 12)
		copy(p, ip[12:20])
		p[9] = proto
		binary.BigEndian.PutUint16(p[10:], uint16(l4len))
		return p
	}
	p := make([]byte, 40)
	copy(p, ip[8:40])
	binary.BigEndian.PutUint32(p[32:], uint32(l4len))
	p[39] = proto
	return p
}

type spec struct {
	v6      bool
	tcp     bool
	payload int
	mss     int
	ipOpts  int // IPv4 option bytes (multiple of 4)
	tcpOpts int // TCP option bytes (multiple of 4)
	flags   byte
}

func (s spec) String() string {
	v, p := "v4", "udp"
	if s.v6 {
		v = "v6"
	}
	if s.tcp {
		p = "tcp"
	}
	return fmt.Sprintf("%s/%s/pay%d/mss%d/ipo%d/tcpo%d/f%#x", p, v, s.payload, s.mss, s.ipOpts, s.tcpOpts, s.flags)
}

// build returns a super-packet as the kernel would hand it over a TUN with
// IFF_VNET_HDR: the L4 checksum field holds the folded pseudo-header sum
// (partial checksum) and the header says NEEDS_CSUM.
func build(s spec) ([]byte, VirtioNetHdr) {
	var ip []byte
	proto := byte(17)
	if s.tcp {
		proto = 6
	}
	l4h := 8
	if s.tcp {
		l4h = 20 + s.tcpOpts
	}
	if s.v6 {
		ip = make([]byte, 40)
		ip[0] = 0x60 | 0x0b // version 6, traffic class high nibble
		ip[1] = 0xa1        // rest of traffic class, flow label
		ip[2], ip[3] = 0x23, 0x45
		binary.BigEndian.PutUint16(ip[4:], uint16(l4h+s.payload))
		ip[6] = proto
		ip[7] = 64
		copy(ip[8:], []byte{0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1})
		copy(ip[24:], []byte{0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xbe, 0xef})
	} else {
		ihl := 20 + s.ipOpts
		ip = make([]byte, ihl)
		ip[0] = 0x40 | byte(ihl/4)
		ip[1] = 0x02 // ECT(0)
		binary.BigEndian.PutUint16(ip[2:], uint16(ihl+l4h+s.payload))
		binary.BigEndian.PutUint16(ip[4:], 0xfffd) // ID, wraps during segmentation
		ip[6] = 0x40                               // DF
		ip[8] = 64
		ip[9] = proto
		copy(ip[12:], []byte{198, 18, 0, 1})
		copy(ip[16:], []byte{198, 19, 7, 9})
		for i := 20; i < ihl; i++ {
			ip[i] = 1 // NOP options
		}
		binary.BigEndian.PutUint16(ip[10:], refCsum(ip))
	}
	var l4 []byte
	if s.tcp {
		l4 = make([]byte, l4h)
		binary.BigEndian.PutUint16(l4[0:], 40000)
		binary.BigEndian.PutUint16(l4[2:], 443)
		binary.BigEndian.PutUint32(l4[4:], 0xffff0000) // seq, wraps
		binary.BigEndian.PutUint32(l4[8:], 0x01020304)
		l4[12] = byte(l4h/4) << 4
		l4[13] = s.flags
		binary.BigEndian.PutUint16(l4[14:], 502)
		binary.BigEndian.PutUint16(l4[18:], 0)
		for i := 20; i < l4h; i++ {
			l4[i] = byte(0x80 + i)
		}
	} else {
		l4 = make([]byte, 8)
		binary.BigEndian.PutUint16(l4[0:], 5353)
		binary.BigEndian.PutUint16(l4[2:], 9999)
		binary.BigEndian.PutUint16(l4[4:], uint16(l4h+s.payload))
	}
	pay := make([]byte, s.payload)
	for i := range pay {
		pay[i] = byte(i*7 + i>>8)
	}
	pkt := append(append(append([]byte{}, ip...), l4...), pay...)
	// partial checksum: the folded (uncomplemented) pseudo-header sum
	off := 6
	if s.tcp {
		off = 16
	}
	partial := ^refCsum(pseudoHdr(ip, proto, l4h+s.payload))
	binary.BigEndian.PutUint16(pkt[len(ip)+off:], partial)

	h := VirtioNetHdr{
		Flags:      FlagNeedsCsum,
		HdrLen:     uint16(len(ip) + l4h),
		GSOSize:    uint16(s.mss),
		CsumStart:  uint16(len(ip)),
		CsumOffset: uint16(off),
	}
	switch {
	case s.tcp && s.v6:
		h.GSOType = GSOTCPv6
	case s.tcp:
		h.GSOType = GSOTCPv4
	default:
		h.GSOType = GSOUDPL4
	}
	return pkt, h
}

// decoded is one packet as the reference decoder sees it.
type decoded struct {
	v6      bool
	ip      []byte // IP header
	l4      []byte // L4 header
	payload []byte
	proto   byte
}

// decode parses and verifies one IP packet: lengths consistent with the
// buffer, IPv4 header checksum, L4 checksum over the pseudo header.
func decode(p []byte) (d decoded, err error) {
	if len(p) < 1 {
		return d, fmt.Errorf("empty")
	}
	var l4 []byte
	switch p[0] >> 4 {
	case 4:
		if len(p) < 20 {
			return d, fmt.Errorf("short v4")
		}
		ihl := int(p[0]&15) * 4
		if ihl < 20 || ihl > len(p) {
			return d, fmt.Errorf("ihl %d", ihl)
		}
		if tl := int(binary.BigEndian.Uint16(p[2:])); tl != len(p) {
			return d, fmt.Errorf("v4 total length %d, packet %d", tl, len(p))
		}
		if c := refCsum(p[:ihl]); c != 0 {
			return d, fmt.Errorf("v4 header checksum residue %#x", c)
		}
		d.ip, d.proto, l4 = p[:ihl], p[9], p[ihl:]
	case 6:
		if len(p) < 40 {
			return d, fmt.Errorf("short v6")
		}
		if pl := int(binary.BigEndian.Uint16(p[4:])); pl+40 != len(p) {
			return d, fmt.Errorf("v6 payload length %d, packet %d", pl, len(p))
		}
		d.v6, d.ip, d.proto, l4 = true, p[:40], p[6], p[40:]
	default:
		return d, fmt.Errorf("version %d", p[0]>>4)
	}
	switch d.proto {
	case 6:
		if len(l4) < 20 || int(l4[12]>>4)*4 > len(l4) || l4[12]>>4 < 5 {
			return d, fmt.Errorf("bad tcp header")
		}
		hl := int(l4[12]>>4) * 4
		d.l4, d.payload = l4[:hl], l4[hl:]
	case 17:
		if len(l4) < 8 {
			return d, fmt.Errorf("short udp")
		}
		if ul := int(binary.BigEndian.Uint16(l4[4:])); ul != len(l4) {
			return d, fmt.Errorf("udp length %d, have %d", ul, len(l4))
		}
		if binary.BigEndian.Uint16(l4[6:]) == 0 {
			return d, fmt.Errorf("udp checksum 0 (absent)")
		}
		d.l4, d.payload = l4[:8], l4[8:]
	default:
		return d, fmt.Errorf("protocol %d", d.proto)
	}
	if c := refCsum(pseudoHdr(d.ip, d.proto, len(l4)), l4); c != 0 {
		return d, fmt.Errorf("L4 checksum residue %#x", c)
	}
	return d, nil
}

// verifySegments checks segs against the super-packet orig: every header
// field, every checksum, and that the payloads reassemble to the original.
func verifySegments(orig []byte, h VirtioNetHdr, segs [][]byte) error {
	// Decode the original without checksum checks (its L4 sum is partial).
	var o decoded
	switch orig[0] >> 4 {
	case 4:
		ihl := int(orig[0]&15) * 4
		tl := int(binary.BigEndian.Uint16(orig[2:]))
		o.ip, o.proto = orig[:ihl], orig[9]
		orig = orig[:tl]
	case 6:
		o.v6, o.ip, o.proto = true, orig[:40], orig[6]
		orig = orig[:40+int(binary.BigEndian.Uint16(orig[4:]))]
	}
	l4 := orig[len(o.ip):]
	if o.proto == 6 {
		o.l4 = l4[:int(l4[12]>>4)*4]
	} else {
		o.l4 = l4[:8]
	}
	o.payload = l4[len(o.l4):]
	mss := int(h.GSOSize)
	want := (len(o.payload) + mss - 1) / mss
	if len(segs) != want {
		return fmt.Errorf("%d segments, want %d", len(segs), want)
	}
	var re []byte
	for i, s := range segs {
		d, err := decode(s)
		if err != nil {
			return fmt.Errorf("segment %d: %v", i, err)
		}
		last := i == len(segs)-1
		if len(d.payload) > mss || (!last && len(d.payload) != mss) || len(d.payload) == 0 {
			return fmt.Errorf("segment %d: payload %d with mss %d", i, len(d.payload), mss)
		}
		if len(s) > len(o.ip)+len(o.l4)+mss {
			return fmt.Errorf("segment %d: %d bytes exceeds headers+mss", i, len(s))
		}
		if d.v6 != o.v6 || len(d.ip) != len(o.ip) || len(d.l4) != len(o.l4) || d.proto != o.proto {
			return fmt.Errorf("segment %d: header shape changed", i)
		}
		if d.v6 {
			if !bytes.Equal(d.ip[:4], o.ip[:4]) || !bytes.Equal(d.ip[6:], o.ip[6:]) {
				return fmt.Errorf("segment %d: IPv6 header fields changed", i)
			}
		} else {
			if d.ip[0] != o.ip[0] || d.ip[1] != o.ip[1] || !bytes.Equal(d.ip[6:10], o.ip[6:10]) || !bytes.Equal(d.ip[12:], o.ip[12:]) {
				return fmt.Errorf("segment %d: IPv4 header fields changed", i)
			}
			if id, oid := binary.BigEndian.Uint16(d.ip[4:]), binary.BigEndian.Uint16(o.ip[4:]); id != oid+uint16(i) {
				return fmt.Errorf("segment %d: IPv4 id %#x, want %#x", i, id, oid+uint16(i))
			}
		}
		if d.proto == 6 {
			seq, oseq := binary.BigEndian.Uint32(d.l4[4:]), binary.BigEndian.Uint32(o.l4[4:])
			if seq != oseq+uint32(len(re)) {
				return fmt.Errorf("segment %d: seq %#x, want %#x", i, seq, oseq+uint32(len(re)))
			}
			wf := o.l4[13]
			if !last {
				wf &^= 0x01 | 0x08
			}
			if i > 0 {
				wf &^= 0x80
			}
			if d.l4[13] != wf {
				return fmt.Errorf("segment %d: tcp flags %#x, want %#x", i, d.l4[13], wf)
			}
			if !bytes.Equal(d.l4[:4], o.l4[:4]) || !bytes.Equal(d.l4[8:13], o.l4[8:13]) ||
				!bytes.Equal(d.l4[14:16], o.l4[14:16]) || !bytes.Equal(d.l4[18:], o.l4[18:]) {
				return fmt.Errorf("segment %d: tcp header fields changed", i)
			}
		} else if !bytes.Equal(d.l4[:4], o.l4[:4]) {
			return fmt.Errorf("segment %d: udp ports changed", i)
		}
		re = append(re, d.payload...)
	}
	if !bytes.Equal(re, o.payload) {
		return fmt.Errorf("reassembled payload differs (%d vs %d bytes)", len(re), len(o.payload))
	}
	return nil
}
