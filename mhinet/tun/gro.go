package tun

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/bits"
	"os"

	"github.com/gomhi/gomhi/mhinet"
	"github.com/gomhi/gomhi/mhinet/gso"
)

// maxSuperPacket is the largest packet a TUN with GSO offloads hands over
// or takes: an IPv6 header and a 64 KiB payload.
const maxSuperPacket = 40 + 65535

const (
	tcpFlagACK = 0x10
	tcpFlagPSH = 0x08
)

// coalescer turns a batch of downlink packets into TUN frames (a
// virtio_net_hdr, then the packet), merging runs of TCP segments, and of
// UDP datagrams where the TUN takes them, into super-packets. Its buffers
// grow to the largest batch seen and are then reused.
type coalescer struct {
	slab   []byte   // the frames, back to back
	frames [][]byte // views into slab
	npkts  []int    // device packets carried by each frame
	nbytes []int    // their IP bytes

	// udp4 and udp6 let build merge UDP datagrams (IPv4, IPv6): set when
	// the TUN accepted the USO offloads, the sign that its kernel takes
	// UDP_L4 frames (gro_udp.go).
	udp4, udp6 bool
}

// tcpSeg is what coalescing needs to know of a TCP segment.
type tcpSeg struct {
	v6    bool
	ihl   int // IP header length (the TCP header's offset)
	hdr   int // IP and TCP header length
	seq   uint32
	flags byte
	pay   int // payload bytes
}

// parseTCPSeg reports whether p is a TCP segment that may be merged: an
// IPv4 packet (no fragment) or an IPv6 one without extension headers whose
// length fields match len(p) (parseIP), carrying TCP with ACK and no flag
// but PSH, a payload, and valid IPv4 header and TCP checksums. The packet
// comes from the device, so every length is checked, and the checksums are
// verified here because the merged packet goes to the kernel with a
// partial checksum it will not verify again.
func parseTCPSeg(p []byte) (tcpSeg, bool) {
	var s tcpSeg
	var pseudo uint64
	var ok bool
	if s.v6, s.ihl, pseudo, ok = parseIP(p, 6); !ok || len(p) < s.ihl+20 {
		return s, false
	}
	t := p[s.ihl:]
	doff := int(t[12]>>4) * 4
	s.hdr = s.ihl + doff
	if doff < 20 || s.hdr >= len(p) {
		return s, false // no payload (or a bad offset)
	}
	s.flags = t[13]
	if s.flags&tcpFlagACK == 0 || s.flags&^(tcpFlagACK|tcpFlagPSH) != 0 {
		return s, false
	}
	if fold(csumAdd(t, pseudo)) != 0xffff {
		return s, false
	}
	s.seq = binary.BigEndian.Uint32(t[4:])
	s.pay = len(p) - s.hdr
	return s, true
}

// parseIP reports whether p is an IPv4 packet (not a fragment, its header
// checksum valid) or an IPv6 one without extension headers, whose length
// field matches len(p), carrying protocol proto; and gives its header
// length and the ones' complement sum of its pseudo-header for the L4
// checksum.
func parseIP(p []byte, proto byte) (v6 bool, ihl int, pseudo uint64, ok bool) {
	if len(p) < 1 {
		return false, 0, 0, false
	}
	switch p[0] >> 4 {
	case 4:
		ihl = int(p[0]&0x0f) * 4
		if ihl < 20 || len(p) < ihl || int(binary.BigEndian.Uint16(p[2:])) != len(p) ||
			binary.BigEndian.Uint16(p[6:])&0x3fff != 0 || p[9] != proto {
			return false, 0, 0, false
		}
		if fold(csumAdd(p[:ihl], 0)) != 0xffff {
			return false, 0, 0, false
		}
		return false, ihl, csumAdd(p[12:20], uint64(proto)+uint64(len(p)-ihl)), true
	case 6:
		if len(p) < 40 || 40+int(binary.BigEndian.Uint16(p[4:])) != len(p) || p[6] != proto {
			return false, 0, 0, false
		}
		return true, 40, csumAdd(p[8:40], uint64(proto)+uint64(len(p)-40)), true
	}
	return false, 0, 0, false
}

// sameFlow reports whether segment q may follow segment p in one
// super-packet as far as their headers go: the same IP header but for the
// length, id and checksum fields (ipIDFollows checks the id), the same
// ports, acknowledgement, header length, window and options, and the same
// flags but PSH.
func sameFlow(p []byte, ps tcpSeg, q []byte, qs tcpSeg) bool {
	if ps.v6 != qs.v6 || ps.hdr != qs.hdr || ps.ihl != qs.ihl || ps.flags&^tcpFlagPSH != qs.flags&^tcpFlagPSH {
		return false
	}
	if !sameIPHeader(p, q, ps.v6, ps.ihl) {
		return false
	}
	pt, qt := p[ps.ihl:ps.hdr], q[qs.ihl:qs.hdr]
	return bytes.Equal(pt[0:4], qt[0:4]) && // ports
		bytes.Equal(pt[8:13], qt[8:13]) && // ack, data offset
		bytes.Equal(pt[14:16], qt[14:16]) && // window
		bytes.Equal(pt[18:], qt[18:]) // urgent pointer, options
}

// sameIPHeader reports whether the IP headers of p and q (both of version
// v6 and header length ihl) are the same but for the length, id and
// checksum fields: version, TOS/traffic class and flow label, DF and
// fragment fields, TTL/hop limit, protocol, addresses and IPv4 options.
func sameIPHeader(p, q []byte, v6 bool, ihl int) bool {
	if v6 {
		return bytes.Equal(p[:4], q[:4]) && p[6] == q[6] && p[7] == q[7] && bytes.Equal(p[8:40], q[8:40])
	}
	return p[0] == q[0] && p[1] == q[1] && p[6] == q[6] && p[8] == q[8] && p[9] == q[9] && bytes.Equal(p[12:ihl], q[12:ihl])
}

// IPv4 id modes of a run, as Linux's GRO (inet_gro_flush) has them.
const (
	idIncrementing = iota // segment k has the first one's id + k
	idFixed               // every segment has the first one's id (DF set)
)

// ipIDFollows reports whether the IPv4 segment q may be the k-th (k >= 1)
// of a run that starts with first, and the run's id mode after it. The
// kernel cuts a TSO packet with incrementing ids (the first one's + k), so
// a merge may only join segments whose ids a re-cut would give back:
// without DF they must increment. With DF set (an atomic datagram, RFC
// 6864, whose id means nothing) Linux's GRO also accepts a fixed id, the
// mode being set by the second segment and kept for the run; so do we.
// The super-packet keeps the first segment's id either way (TUN's
// virtio_net_hdr cannot ask for a fixed id on a re-cut, which is harmless
// with DF set).
func ipIDFollows(first, q []byte, k int, mode int) (int, bool) {
	fid, id := binary.BigEndian.Uint16(first[4:]), binary.BigEndian.Uint16(q[4:])
	df := first[6]&0x40 != 0 // equal in q: sameFlow compares byte 6
	if id == fid+uint16(k) && (k == 1 || mode == idIncrementing) {
		return idIncrementing, true
	}
	if df && id == fid && (k == 1 || mode == idFixed) {
		return idFixed, true
	}
	return mode, false
}

// build fills c.frames with the frames for pkts: runs of consecutive
// in-order segments of one TCP flow (tcpRun) and, where the coalescer's
// udp4/udp6 allow, of one UDP flow (udpRun) become one super-packet behind
// a TCPV4/TCPV6 or UDP_L4 header with a partial checksum; every other
// packet goes out as it is behind a zero header. With gro false nothing
// is merged.
func (c *coalescer) build(pkts []mhinet.Packet, vnet int, gro bool) {
	need := 0
	for _, p := range pkts {
		need += vnet + len(p.Data)
	}
	if cap(c.slab) < need {
		c.slab = make([]byte, need)
	}
	slab := c.slab[:need]
	c.frames, c.npkts, c.nbytes = c.frames[:0], c.npkts[:0], c.nbytes[:0]
	off := 0
	for i := 0; i < len(pkts); {
		first := pkts[i].Data
		run, size := 1, len(first)
		var (
			ts      tcpSeg
			us      udpSeg
			tcp, ok bool
		)
		if gro {
			if ts, tcp = parseTCPSeg(first); tcp {
				var payload int
				run, payload = tcpRun(pkts[i:], ts)
				size = ts.hdr + payload
			} else if us, ok = parseUDPSeg(first); ok && (us.v6 && c.udp6 || !us.v6 && c.udp4) {
				var payload int
				run, payload = udpRun(pkts[i:], us)
				size = us.ihl + udpHdrLen + payload
			}
		}
		frame := slab[off : off+vnet+size]
		clear(frame[:vnet])
		bytes := 0
		switch {
		case run == 1:
			copy(frame[vnet:], first)
			bytes = len(first)
		case tcp:
			c.merge(frame, vnet, pkts[i:i+run], ts)
		default:
			mergeUDP(frame, vnet, pkts[i:i+run], us)
		}
		if run > 1 {
			for _, p := range pkts[i : i+run] {
				bytes += len(p.Data)
			}
		}
		c.frames = append(c.frames, frame)
		c.npkts = append(c.npkts, run)
		c.nbytes = append(c.nbytes, bytes)
		off += len(frame)
		i += run
	}
}

// tcpRun returns how many packets from pkts[0] (a segment parsed as fs)
// form one TCP super-packet, and their payload bytes: consecutive
// in-order segments of one flow, of equal payload sizes but the last, no
// PSH but on the last, IPv4 ids as ipIDFollows wants, at most 64 KiB.
func tcpRun(pkts []mhinet.Packet, fs tcpSeg) (run, payload int) {
	first := pkts[0].Data
	limit := 65535 // IPv4 total length; IPv6 payload length + 40
	if fs.v6 {
		limit = maxSuperPacket
	}
	run, payload = 1, fs.pay
	prev := fs
	idMode := idIncrementing
	for run < len(pkts) && prev.pay == fs.pay && prev.flags&tcpFlagPSH == 0 {
		q := pkts[run].Data
		qs, ok := parseTCPSeg(q)
		if !ok || qs.pay > fs.pay || qs.seq != fs.seq+uint32(payload) ||
			fs.hdr+payload+qs.pay > limit || !sameFlow(first, fs, q, qs) {
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

// merge writes the super-packet of a run of segments (checked by build)
// into frame, behind its virtio_net_hdr.
func (c *coalescer) merge(frame []byte, vnet int, run []mhinet.Packet, fs tcpSeg) {
	first := run[0].Data
	p := frame[vnet:]
	copy(p, first[:fs.hdr])
	off := fs.hdr
	for _, s := range run {
		off += copy(p[off:], s.Data[fs.hdr:])
	}
	last := run[len(run)-1].Data
	t := p[fs.ihl:]
	t[13] |= last[fs.ihl+13] & tcpFlagPSH
	l4 := len(p) - fs.ihl
	var pseudo uint64
	typ := gso.GSOTCPv4
	if fs.v6 {
		typ = gso.GSOTCPv6
		binary.BigEndian.PutUint16(p[4:], uint16(len(p)-40))
		pseudo = csumAdd(p[8:40], 6+uint64(l4))
	} else {
		binary.BigEndian.PutUint16(p[2:], uint16(len(p)))
		p[10], p[11] = 0, 0
		binary.BigEndian.PutUint16(p[10:], ^fold(csumAdd(p[:fs.ihl], 0)))
		pseudo = csumAdd(p[12:20], 6+uint64(l4))
	}
	// A partial checksum: the field holds the pseudo-header sum; the
	// kernel trusts it (CHECKSUM_PARTIAL), which is why every segment's
	// checksum was verified before merging.
	binary.BigEndian.PutUint16(t[16:], fold(pseudo))
	h := gso.VirtioNetHdr{
		Flags:      gso.FlagNeedsCsum,
		GSOType:    typ,
		HdrLen:     uint16(fs.hdr),
		GSOSize:    uint16(fs.pay),
		CsumStart:  uint16(fs.ihl),
		CsumOffset: 16,
	}
	_ = h.Encode(frame)
}

// csumAdd adds the bytes of b, as big-endian 16-bit words (an odd last
// byte padded with zero), to the ones' complement sum acc.
func csumAdd(b []byte, acc uint64) uint64 {
	var carry uint64
	for len(b) >= 8 {
		acc, carry = bits.Add64(acc, binary.BigEndian.Uint64(b), 0)
		acc += carry
		b = b[8:]
	}
	if len(b) >= 4 {
		acc, carry = bits.Add64(acc, uint64(binary.BigEndian.Uint32(b)), 0)
		acc += carry
		b = b[4:]
	}
	if len(b) >= 2 {
		acc, carry = bits.Add64(acc, uint64(binary.BigEndian.Uint16(b)), 0)
		acc += carry
		b = b[2:]
	}
	if len(b) == 1 {
		acc, carry = bits.Add64(acc, uint64(b[0])<<8, 0)
		acc += carry
	}
	return acc
}

// fold folds a ones' complement sum to 16 bits.
func fold(acc uint64) uint16 {
	acc = acc>>32 + acc&0xffffffff
	acc = acc>>32 + acc&0xffffffff
	acc = acc>>16 + acc&0xffff
	acc = acc>>16 + acc&0xffff
	return uint16(acc)
}

// receiveVnet writes a downlink batch to a TUN with virtio_net_hdr:
// frames built (and TCP segments merged) in the coalescer's buffers, the
// device's packets released at once since they were copied.
func (b *Bridge) receiveVnet(pkts []mhinet.Packet) {
	b.rxMu.Lock()
	defer b.rxMu.Unlock()
	c := &b.gro
	c.build(pkts, b.vnet, !b.cfg.NoGRO)
	for _, p := range pkts {
		p.Release()
	}
	frames := c.frames
	for i := 0; i < len(frames); {
		n, err := b.tun.Write(frames[i:])
		for k := i; k < i+n; k++ {
			b.c.downPackets.Add(uint64(c.npkts[k]))
			b.c.downBytes.Add(uint64(c.nbytes[k]))
			if c.npkts[k] > 1 {
				b.c.downSuper.Add(1)
				b.c.downCoalesced.Add(uint64(c.npkts[k]))
			}
		}
		b.c.downFrames.Add(uint64(n))
		i += n
		if err == nil {
			break
		}
		if errors.Is(err, ErrClosed) || errors.Is(err, os.ErrClosed) {
			for k := i; k < len(frames); k++ {
				b.c.writeErrors.Add(uint64(c.npkts[k]))
			}
			break
		}
		b.c.writeErrors.Add(uint64(c.npkts[i]))
		b.log.Debug("TUN write failed", "err", err)
		i++
	}
	clear(c.frames) // keep no views past the batch (the slab stays)
}
