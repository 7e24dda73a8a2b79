package tun

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/gomhi/gomhi/mhinet"
	"github.com/gomhi/gomhi/mhinet/gso"
)

// superTCP returns a TCP super-packet (IPv4, or IPv6 with v6) from port
// sport carrying payload from seq, with its TSO header: the kernel's view
// of a large send. Its segments (gso.Segment) are what the modem delivers.
func superTCP(v6 bool, sport uint16, seq uint32, payload []byte, mss int) ([]byte, gso.VirtioNetHdr) {
	p, ip, pseudo := ipPacket(v6, 6, 32+len(payload)) // TCP with a 12-byte timestamp option
	t := p[ip:]
	binary.BigEndian.PutUint16(t[0:], sport)
	binary.BigEndian.PutUint16(t[2:], 5001)
	binary.BigEndian.PutUint32(t[4:], seq)
	binary.BigEndian.PutUint32(t[8:], 99)
	t[12], t[13] = 8<<4, tcpFlagACK|tcpFlagPSH
	binary.BigEndian.PutUint16(t[14:], 1000)
	copy(t[20:], []byte{1, 1, 8, 10, 0, 0, 0, 7, 0, 0, 0, 9}) // NOP NOP TS
	copy(t[32:], payload)
	binary.BigEndian.PutUint16(t[16:], fold(pseudo))
	typ := gso.GSOTCPv4
	if v6 {
		typ = gso.GSOTCPv6
	}
	return p, gso.VirtioNetHdr{Flags: gso.FlagNeedsCsum, GSOType: typ, HdrLen: uint16(ip + 32), GSOSize: uint16(mss), CsumStart: uint16(ip), CsumOffset: 16}
}

// ipPacket returns an IPv4 packet with DF and id 0x1234 from 198.18.0.1 to
// 198.18.0.2 (or, with v6, an IPv6 one from 2001:db8::1 to 2001:db8::2)
// carrying l4 bytes of protocol proto, all zero, its header complete; the
// L4 header's offset; and the L4 pseudo-header sum.
func ipPacket(v6 bool, proto byte, l4 int) (p []byte, ip int, pseudo uint64) {
	if v6 {
		p = make([]byte, 40+l4)
		p[0] = 0x60
		binary.BigEndian.PutUint16(p[4:], uint16(l4))
		p[6], p[7] = proto, 64
		p[8], p[23], p[24], p[39] = 0x20, 1, 0x20, 2
		return p, 40, csumAdd(p[8:40], uint64(proto)+uint64(l4))
	}
	p = make([]byte, 20+l4)
	p[0] = 0x45
	binary.BigEndian.PutUint16(p[2:], uint16(len(p)))
	binary.BigEndian.PutUint16(p[4:], 0x1234)
	p[6], p[8], p[9] = 0x40, 64, proto
	copy(p[12:], []byte{198, 18, 0, 1, 198, 18, 0, 2})
	binary.BigEndian.PutUint16(p[10:], ^fold(csumAdd(p[:20], 0)))
	return p, 20, csumAdd(p[12:20], uint64(proto)+uint64(l4))
}

// segments cuts a super-packet as the uplink does.
func segments(t *testing.T, p []byte, h gso.VirtioNetHdr) [][]byte {
	t.Helper()
	n, err := gso.Count(p, h)
	if err != nil {
		t.Fatal(err)
	}
	out := make([][]byte, n)
	for i := range out {
		out[i] = make([]byte, len(p))
	}
	sizes := make([]int, n)
	if _, err := gso.Segment(p, h, out, sizes); err != nil {
		t.Fatal(err)
	}
	for i := range out {
		out[i] = out[i][:sizes[i]]
	}
	return out
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7)
	}
	return b
}

func packets(segs ...[]byte) []mhinet.Packet {
	out := make([]mhinet.Packet, len(segs))
	for i, s := range segs {
		out[i] = mhinet.Packet{Data: s}
	}
	return out
}

// frameShape describes the frames build made: the packets in each, 0 for
// a plain (zero-header) frame.
func frameShape(t *testing.T, c *coalescer) []int {
	t.Helper()
	var shape []int
	for i, f := range c.frames {
		var h gso.VirtioNetHdr
		if err := h.Decode(f); err != nil {
			t.Fatal(err)
		}
		if h.GSOType == gso.GSONone {
			if h != (gso.VirtioNetHdr{}) || c.npkts[i] != 1 {
				t.Fatalf("frame %d: plain frame with header %v for %d packets", i, h, c.npkts[i])
			}
			shape = append(shape, 0)
			continue
		}
		shape = append(shape, c.npkts[i])
	}
	return shape
}

// checkRoundTrip: cutting a merged frame again with gso.Segment gives back
// exactly the segments it was merged from (headers, flags, checksums and
// all) — the merge is what the kernel would have sent as one TSO packet.
func checkRoundTrip(t *testing.T, frame []byte, want [][]byte) {
	t.Helper()
	var h gso.VirtioNetHdr
	if err := h.Decode(frame); err != nil {
		t.Fatal(err)
	}
	checkPartialChecksum(t, frame[gso.VirtioNetHdrLen:], h)
	got := segments(t, frame[gso.VirtioNetHdrLen:], h)
	if len(got) != len(want) {
		t.Fatalf("merged frame (%v) cuts into %d segments, want %d", h, len(got), len(want))
	}
	for i := range got {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("segment %d differs after merge and re-cut:\n got % x\nwant % x", i, got[i][:60], want[i][:60])
		}
	}
}

// checkPartialChecksum completes the partial checksum of a merged packet
// as a device does (the ones' complement sum from csum_start to the end,
// with the field holding the pseudo-header sum, complemented into the
// field) and checks that the packet then carries a valid L4 checksum:
// re-cutting with gso.Segment recomputes every checksum and would not see
// a wrong partial value, which the kernel uses as it is.
func checkPartialChecksum(t *testing.T, p []byte, h gso.VirtioNetHdr) {
	t.Helper()
	if h.Flags&gso.FlagNeedsCsum == 0 {
		t.Fatalf("merged packet without NEEDS_CSUM: %+v", h)
	}
	q := append([]byte(nil), p...)
	start, field := int(h.CsumStart), int(h.CsumStart)+int(h.CsumOffset)
	binary.BigEndian.PutUint16(q[field:], ^fold(csumAdd(q[start:], 0)))
	var pseudo uint64
	if q[0]>>4 == 6 {
		pseudo = csumAdd(q[8:40], uint64(q[6])+uint64(len(q)-start))
	} else {
		pseudo = csumAdd(q[12:20], uint64(q[9])+uint64(len(q)-start))
	}
	if fold(csumAdd(q[start:], pseudo)) != 0xffff {
		t.Fatalf("the partial checksum %#04x, completed, does not verify", binary.BigEndian.Uint16(p[field:]))
	}
}

func TestCoalesce(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		t.Run(fmt.Sprintf("v6=%v", v6), func(t *testing.T) {
			p, h := superTCP(v6, 40000, 1000, pattern(5*1000+300, 1), 1000)
			segs := segments(t, p, h) // 6 segments, the last 300 bytes with PSH
			other, oh := superTCP(v6, 40001, 1000, pattern(2000, 2), 1000)
			osegs := segments(t, other, oh)
			var c coalescer

			c.build(packets(segs...), 10, true)
			if s := frameShape(t, &c); fmt.Sprint(s) != "[6]" {
				t.Fatalf("in-order run: frames %v", s)
			}
			checkRoundTrip(t, c.frames[0], segs)
			if c.nbytes[0] != len(p)+5*(len(segs[0])-1000) {
				t.Fatalf("bytes %d", c.nbytes[0])
			}

			c.build(packets(segs...), 10, false)
			if s := frameShape(t, &c); fmt.Sprint(s) != "[0 0 0 0 0 0]" {
				t.Fatalf("gro off: frames %v", s)
			}
			for i, f := range c.frames {
				if !bytes.Equal(f[10:], segs[i]) {
					t.Fatalf("plain frame %d differs", i)
				}
			}

			// A segment with a bad checksum is never merged: it goes out
			// alone for the kernel to check (and drop).
			bad := append([]byte(nil), segs[2]...)
			bad[len(bad)-1] ^= 0xff
			c.build(packets(segs[0], segs[1], bad, segs[3], segs[4], segs[5]), 10, true)
			if s := frameShape(t, &c); fmt.Sprint(s) != "[2 0 3]" {
				t.Fatalf("bad checksum: frames %v", s)
			}
			checkRoundTrip(t, c.frames[0], segs[:2])
			checkRoundTrip(t, c.frames[2], segs[3:])

			// Out of order, another flow in between, a short segment in
			// the middle: each ends the run.
			c.build(packets(segs[0], segs[2], segs[1], segs[3]), 10, true)
			if s := frameShape(t, &c); fmt.Sprint(s) != "[0 0 0 0]" {
				t.Fatalf("reordered: frames %v", s)
			}
			c.build(packets(segs[0], osegs[0], segs[1], osegs[1]), 10, true)
			if s := frameShape(t, &c); fmt.Sprint(s) != "[0 0 0 0]" {
				t.Fatalf("interleaved flows: frames %v", s)
			}
			c.build(packets(segs[0], segs[1], osegs[0], osegs[1]), 10, true)
			if s := frameShape(t, &c); fmt.Sprint(s) != "[2 2]" {
				t.Fatalf("two flows: frames %v", s)
			}
			checkRoundTrip(t, c.frames[1], osegs)

			// A different ack (or window) is another kind of segment.
			ack := append([]byte(nil), segs[1]...)
			ip := 20
			if v6 {
				ip = 40
			}
			binary.BigEndian.PutUint32(ack[ip+8:], 100)
			fixTCPChecksum(ack, ip)
			c.build(packets(segs[0], ack), 10, true)
			if s := frameShape(t, &c); fmt.Sprint(s) != "[0 0]" {
				t.Fatalf("different ack: frames %v", s)
			}
		})
	}
}

// TestCoalesceHeaderDiffs: a segment whose headers differ from the run's
// in a field the merge keeps from the first segment ends the run, and so
// does an IPv4 id a re-cut would not give back (not the first one's + k
// without DF; with DF, neither that nor the first one's for the whole run).
func TestCoalesceHeaderDiffs(t *testing.T) {
	setID := func(p []byte, id uint16) { binary.BigEndian.PutUint16(p[4:], id) }
	id0 := uint16(0x1234) // superTCP's
	for _, tc := range []struct {
		name string
		v6   bool
		noDF bool // clear DF in every segment
		// edit changes the segments (copies, checksums fixed after).
		edit  func(segs [][]byte, ip int)
		shape string
		// exact: merged frames re-cut give back the segments byte for
		// byte; otherwise but for the ids (DF set).
		exact bool
	}{
		{name: "v4 DF incrementing ids", edit: func([][]byte, int) {}, shape: "[4]", exact: true},
		{name: "v4 no DF incrementing ids", noDF: true, edit: func([][]byte, int) {}, shape: "[4]", exact: true},
		{name: "v4 no DF id not incrementing", noDF: true, edit: func(s [][]byte, _ int) { setID(s[1], id0+2) }, shape: "[0 0 2]", exact: true},
		{name: "v4 no DF fixed id", noDF: true, edit: func(s [][]byte, _ int) {
			for _, p := range s {
				setID(p, id0)
			}
		}, shape: "[0 0 0 0]"},
		{name: "v4 no DF id decreasing", noDF: true, edit: func(s [][]byte, _ int) { setID(s[2], id0) }, shape: "[2 0 0]", exact: true},
		{name: "v4 DF fixed id", edit: func(s [][]byte, _ int) {
			for _, p := range s {
				setID(p, id0)
			}
		}, shape: "[4]"},
		{name: "v4 DF id fixed then incrementing", edit: func(s [][]byte, _ int) { setID(s[1], id0) }, shape: "[2 2]"},
		{name: "v4 DF id incrementing then fixed", edit: func(s [][]byte, _ int) { setID(s[2], id0) }, shape: "[2 0 0]"},
		{name: "v4 DF id random", edit: func(s [][]byte, _ int) { setID(s[1], 0x9999) }, shape: "[0 0 2]"},
		{name: "v4 TTL", edit: func(s [][]byte, _ int) { s[1][8]-- }, shape: "[0 0 2]"},
		{name: "v4 TOS", edit: func(s [][]byte, _ int) { s[1][1] = 0x10 }, shape: "[0 0 2]"},
		{name: "v4 DF", edit: func(s [][]byte, _ int) { s[1][6] = 0 }, shape: "[0 0 2]"},
		{name: "v6 flow label", v6: true, edit: func(s [][]byte, _ int) { s[1][3] ^= 1 }, shape: "[0 0 2]"},
		{name: "v6 traffic class", v6: true, edit: func(s [][]byte, _ int) { s[1][1] ^= 0x10 }, shape: "[0 0 2]"},
		{name: "v6 hop limit", v6: true, edit: func(s [][]byte, _ int) { s[1][7]-- }, shape: "[0 0 2]"},
		{name: "v4 window", edit: func(s [][]byte, ip int) { s[1][ip+15]++ }, shape: "[0 0 2]"},
		{name: "v6 window", v6: true, edit: func(s [][]byte, ip int) { s[1][ip+15]++ }, shape: "[0 0 2]"},
		{name: "v4 TCP option", edit: func(s [][]byte, ip int) { s[1][ip+27]++ }, shape: "[0 0 2]"},           // TSval
		{name: "v6 TCP option", v6: true, edit: func(s [][]byte, ip int) { s[1][ip+31]++ }, shape: "[0 0 2]"}, // TSecr
		{name: "v4 PSH mid-run", edit: func(s [][]byte, ip int) { s[1][ip+13] |= tcpFlagPSH }, shape: "[2 2]", exact: true},
		{name: "v6 PSH mid-run", v6: true, edit: func(s [][]byte, ip int) { s[1][ip+13] |= tcpFlagPSH }, shape: "[2 2]", exact: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, h := superTCP(tc.v6, 40000, 1000, pattern(4*1000, 1), 1000)
			ip := 20
			if tc.v6 {
				ip = 40
			}
			if tc.noDF {
				p[6] = 0
				fixChecksums(p, false)
			}
			segs := segments(t, p, h) // 4 full segments, PSH on the last
			last := segs[len(segs)-1]
			last[ip+13] &^= tcpFlagPSH // the stream goes on: no PSH anywhere
			tc.edit(segs, ip)
			for _, s := range segs {
				fixChecksums(s, false)
			}
			var c coalescer
			c.build(packets(segs...), 10, true)
			if s := fmt.Sprint(frameShape(t, &c)); s != tc.shape {
				t.Fatalf("frames %s, want %s", s, tc.shape)
			}
			k := 0
			for i, n := range c.npkts {
				if n > 1 {
					if tc.exact {
						checkRoundTrip(t, c.frames[i], segs[k:k+n])
					} else {
						var h gso.VirtioNetHdr
						_ = h.Decode(c.frames[i])
						for j, g := range segments(t, c.frames[i][10:], h) {
							if !sameSegment(g, segs[k+j]) {
								t.Fatalf("frame %d segment %d differs after merge and re-cut", i, j)
							}
						}
					}
				}
				k += n
			}
		})
	}
}

// fixTCPChecksum recomputes the TCP checksum of a packet whose TCP header
// is at ip.
func fixTCPChecksum(p []byte, ip int) {
	var pseudo uint64
	if ip == 40 {
		pseudo = csumAdd(p[8:40], 6+uint64(len(p)-40))
	} else {
		pseudo = csumAdd(p[12:20], 6+uint64(len(p)-20))
	}
	p[ip+16], p[ip+17] = 0, 0
	binary.BigEndian.PutUint16(p[ip+16:], ^fold(csumAdd(p[ip:], pseudo)))
}

// A run longer than 64 KiB is split where the IP length field would
// overflow; UDP and other packets pass unmerged.
func TestCoalesceLimits(t *testing.T) {
	p1, h1 := superTCP(false, 40000, 1, pattern(40*1400, 3), 1400)
	p2, h2 := superTCP(false, 40000, 1+40*1400, pattern(40*1400, 4), 1400)
	s1, s2 := segments(t, p1, h1), segments(t, p2, h2)
	for _, s := range s1[:len(s1)-1] {
		if s[33]&tcpFlagPSH != 0 {
			t.Fatal("PSH before the last segment")
		}
	}
	// Clear the PSH of the first super-packet's last segment so the two
	// form one stream of 80 full segments.
	last := s1[len(s1)-1]
	last[33] &^= tcpFlagPSH
	fixTCPChecksum(last, 20)
	for i, s := range s2 { // IP ids continuing the first's, as one sender's
		binary.BigEndian.PutUint16(s[4:], 0x1234+uint16(len(s1)+i))
		s[10], s[11] = 0, 0
		binary.BigEndian.PutUint16(s[10:], ^fold(csumAdd(s[:20], 0)))
	}
	all := append(append([][]byte{}, s1...), s2...)
	var c coalescer
	c.build(packets(all...), 10, true)
	shape := frameShape(t, &c)
	total := 0
	for i, n := range shape {
		total += n
		if f := c.frames[i]; len(f)-10 > 65535 {
			t.Fatalf("frame %d of %d bytes", i, len(f)-10)
		}
	}
	// (65535 - 52) / 1400 = 46 segments fit one IPv4 packet.
	if fmt.Sprint(shape) != "[46 34]" || total != 80 {
		t.Fatalf("frames %v", shape)
	}
	checkRoundTrip(t, c.frames[0], all[:46])

	udp := make([]byte, 28+100)
	udp[0] = 0x45
	binary.BigEndian.PutUint16(udp[2:], uint16(len(udp)))
	udp[9] = 17
	c.build(packets(udp, udp, []byte{}, []byte{0x60}), 10, true)
	if s := frameShape(t, &c); fmt.Sprint(s) != "[0 0 0 0]" {
		t.Fatalf("non-TCP: frames %v", s)
	}
}

// Building frames (TCP and UDP merges) allocates nothing once the buffers
// have grown.
func TestCoalesceAllocs(t *testing.T) {
	p, h := superTCP(false, 40000, 1000, pattern(32*1400, 1), 1400)
	pk := packets(segments(t, p, h)...)
	u, uh := superUDP(false, 40000, pattern(32*1400, 2), 1400)
	pk = append(pk, packets(segments(t, u, uh)...)...)
	c := coalescer{udp4: true, udp6: true}
	c.build(pk, 10, true)
	if s := fmt.Sprint(frameShape(t, &c)); s != "[32 32]" {
		t.Fatalf("frames %s", s)
	}
	if a := testing.AllocsPerRun(100, func() { c.build(pk, 10, true) }); a != 0 {
		t.Fatalf("%v allocations per batch", a)
	}
}

func BenchmarkCoalesce(b *testing.B) {
	p, h := superTCP(false, 40000, 1000, pattern(32*1448, 1), 1448)
	n, _ := gso.Count(p, h)
	out := make([][]byte, n)
	for i := range out {
		out[i] = make([]byte, 1600)
	}
	sizes := make([]int, n)
	if _, err := gso.Segment(p, h, out, sizes); err != nil {
		b.Fatal(err)
	}
	segs := make([][]byte, n)
	for i := range segs {
		segs[i] = out[i][:sizes[i]]
	}
	pk := packets(segs...)
	var c coalescer
	b.SetBytes(int64(len(p)))
	b.ReportAllocs()
	for range b.N {
		c.build(pk, 10, true)
	}
}

// fixChecksums recomputes the IPv4 header checksum and the TCP checksum
// of p where its headers are long enough to have them, and with lengths
// first its IP length field, so that a fuzzed packet reaches the merge
// checks past the checksums.
func fixChecksums(p []byte, lengths bool) {
	if len(p) < 1 {
		return
	}
	ip := 0
	var proto byte
	switch p[0] >> 4 {
	case 4:
		ip = int(p[0]&0x0f) * 4
		if ip < 20 || len(p) < ip {
			return
		}
		if lengths && len(p) <= 0xffff {
			binary.BigEndian.PutUint16(p[2:], uint16(len(p)))
		}
		p[10], p[11] = 0, 0
		binary.BigEndian.PutUint16(p[10:], ^fold(csumAdd(p[:ip], 0)))
		proto = p[9]
	case 6:
		ip = 40
		if len(p) < 40 {
			return
		}
		if lengths && len(p)-40 <= 0xffff {
			binary.BigEndian.PutUint16(p[4:], uint16(len(p)-40))
		}
		proto = p[6]
	default:
		return
	}
	switch {
	case proto == 6 && len(p) >= ip+18:
		fixTCPChecksum(p, ip)
	case proto == 17 && len(p) >= ip+8:
		if lengths && len(p)-ip <= 0xffff {
			binary.BigEndian.PutUint16(p[ip+4:], uint16(len(p)-ip))
		}
		fixUDPChecksum(p, ip)
	}
}

// sameSegment reports whether a re-cut segment equals the original but
// for the IPv4 and TCP checksums (both valid: the original's were
// verified, and either form of zero may be in it; a UDP checksum must be
// equal, zero being refused) and, with DF set, the IPv4 id (the
// merge keeps the first one's, the re-cut increments it: Linux's GRO
// accepts a fixed id then).
func sameSegment(got, want []byte) bool {
	if len(got) != len(want) || len(got) < 1 {
		return false
	}
	ip := 40
	df := false
	tcp := len(got) > 6 && got[6] == 6
	if got[0]>>4 == 4 {
		ip = int(got[0]&0x0f) * 4
		df = want[6]&0x40 != 0
		tcp = len(got) > 9 && got[9] == 6
	}
	for i := range got {
		switch {
		case got[0]>>4 == 4 && (i == 10 || i == 11):
			continue // IPv4 header checksum
		case df && (i == 4 || i == 5):
			continue // IPv4 id with DF set
		case tcp && (i == ip+16 || i == ip+17):
			continue // TCP checksum
		}
		if got[i] != want[i] {
			return false
		}
	}
	return true
}

// FuzzCoalesce: whatever the device delivers, build does not panic, every
// plain frame is a packet as delivered, and every merged frame cut again
// by gso.Segment gives back, byte for byte, the packets it was merged from
// (but for the IPv4 and TCP checksums, and the IPv4 id with DF set) — TCP
// segments and UDP datagrams alike. The first
// byte of the input picks what is repaired after mutation: bit 0 the
// checksums, bit 1 the IP length fields too; so merges happen on mutated
// inputs, not only on the seeds, and the checks before them are fuzzed
// as well.
func FuzzCoalesce(f *testing.F) {
	type seed struct {
		p []byte
		h gso.VirtioNetHdr
	}
	p, h := superTCP(false, 40000, 7, pattern(3*500+100, 5), 500)
	p6, h6 := superTCP(true, 40000, 7, pattern(3*500+100, 6), 500)
	noDF := append([]byte(nil), p...)
	noDF[6] = 0
	fixChecksums(noDF, false)
	u, uh := superUDP(false, 40000, pattern(3*500+100, 7), 500)
	u6, uh6 := superUDP(true, 40000, pattern(3*500+100, 8), 500)
	for _, sp := range []seed{{p, h}, {p6, h6}, {noDF, h}, {u, uh}, {u6, uh6}} {
		n, _ := gso.Count(sp.p, sp.h)
		out := make([][]byte, n)
		for i := range out {
			out[i] = make([]byte, len(sp.p))
		}
		sizes := make([]int, n)
		if _, err := gso.Segment(sp.p, sp.h, out, sizes); err != nil {
			f.Fatal(err)
		}
		for _, fixedID := range []bool{false, true} {
			if fixedID && sp.p[0]>>4 != 4 {
				continue
			}
			joined := []byte{1}
			for i := range out {
				seg := out[i][:sizes[i]]
				if fixedID {
					seg = append([]byte(nil), seg...)
					binary.BigEndian.PutUint16(seg[4:], binary.BigEndian.Uint16(sp.p[4:]))
					fixChecksums(seg, false)
				}
				joined = binary.BigEndian.AppendUint16(joined, uint16(len(seg)))
				joined = append(joined, seg...)
			}
			f.Add(joined)
		}
	}
	c := coalescer{udp4: true, udp6: true}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 1 {
			return
		}
		fix := data[0]
		data = append([]byte(nil), data[1:]...) // repaired below: the input is not ours
		// data is a series of (2-byte length, packet).
		var in []mhinet.Packet
		for len(data) >= 2 {
			n := int(binary.BigEndian.Uint16(data))
			data = data[2:]
			n = min(n, len(data))
			pkt := data[:n:n]
			if fix&1 != 0 {
				fixChecksums(pkt, fix&2 != 0)
			}
			in = append(in, mhinet.Packet{Data: pkt})
			data = data[n:]
		}
		c.build(in, 10, true)
		k := 0
		for i, fr := range c.frames {
			var hd gso.VirtioNetHdr
			if err := hd.Decode(fr); err != nil {
				t.Fatal(err)
			}
			run := in[k : k+c.npkts[i]]
			k += c.npkts[i]
			if hd.GSOType == gso.GSONone {
				if len(run) != 1 || !bytes.Equal(fr[10:], run[0].Data) {
					t.Fatalf("plain frame %d differs from its packet", i)
				}
				continue
			}
			if len(run) < 2 {
				t.Fatalf("frame %d: a super-packet of %d packets", i, len(run))
			}
			segs := segments(t, fr[10:], hd)
			if len(segs) != len(run) {
				t.Fatalf("frame %d: %d segments from %d packets", i, len(segs), len(run))
			}
			for j, s := range segs {
				if !sameSegment(s, run[j].Data) {
					t.Fatalf("frame %d segment %d differs after merge and re-cut:\n got % x\nwant % x", i, j, s[:min(len(s), 80)], run[j].Data[:min(len(run[j].Data), 80)])
				}
			}
		}
		if k != len(in) {
			t.Fatalf("frames carry %d of %d packets", k, len(in))
		}
	})
}
