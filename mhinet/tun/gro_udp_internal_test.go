package tun

import (
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/gomhi/gomhi/mhinet/gso"
)

// superUDP returns a UDP super-packet (IPv4 with DF, or IPv6 with v6) from
// port sport carrying payload, with its USO header: the kernel's view of
// a UDP_SEGMENT send. Its datagrams (gso.Segment) are what the modem
// delivers.
func superUDP(v6 bool, sport uint16, payload []byte, size int) ([]byte, gso.VirtioNetHdr) {
	p, ip, pseudo := ipPacket(v6, 17, udpHdrLen+len(payload))
	u := p[ip:]
	binary.BigEndian.PutUint16(u[0:], sport)
	binary.BigEndian.PutUint16(u[2:], 9)
	binary.BigEndian.PutUint16(u[4:], uint16(len(u)))
	copy(u[8:], payload)
	binary.BigEndian.PutUint16(u[6:], fold(pseudo))
	return p, gso.VirtioNetHdr{Flags: gso.FlagNeedsCsum, GSOType: gso.GSOUDPL4, HdrLen: uint16(ip + udpHdrLen), GSOSize: uint16(size), CsumStart: uint16(ip), CsumOffset: 6}
}

// fixUDPChecksum recomputes the UDP checksum of a packet whose UDP header
// is at ip.
func fixUDPChecksum(p []byte, ip int) {
	var pseudo uint64
	if ip == 40 {
		pseudo = csumAdd(p[8:40], 17+uint64(len(p)-40))
	} else {
		pseudo = csumAdd(p[12:20], 17+uint64(len(p)-20))
	}
	p[ip+6], p[ip+7] = 0, 0
	c := ^fold(csumAdd(p[ip:], pseudo))
	if c == 0 {
		c = 0xffff
	}
	binary.BigEndian.PutUint16(p[ip+6:], c)
}

// fixIPv4Checksum recomputes the IPv4 header checksum of p (20 bytes).
func fixIPv4Checksum(p []byte) {
	p[10], p[11] = 0, 0
	binary.BigEndian.PutUint16(p[10:], ^fold(csumAdd(p[:20], 0)))
}

// TestCoalesceUDP: runs of datagrams of one flow merge into UDP_L4
// super-packets that cut back into exactly those datagrams; anything a
// re-cut would not give back ends a run; nothing merges unless the TUN
// takes UDP_L4 frames for that family.
func TestCoalesceUDP(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		t.Run(fmt.Sprintf("v6=%v", v6), func(t *testing.T) {
			ip := 20
			if v6 {
				ip = 40
			}
			p, h := superUDP(v6, 40000, pattern(5*1000+300, 1), 1000)
			segs := segments(t, p, h) // 6 datagrams, the last of 300 bytes
			other, oh := superUDP(v6, 40001, pattern(2000, 2), 1000)
			osegs := segments(t, other, oh)
			c := coalescer{udp4: true, udp6: true}

			c.build(packets(segs...), 10, true)
			if s := frameShape(t, &c); fmt.Sprint(s) != "[6]" {
				t.Fatalf("run: frames %v", s)
			}
			checkRoundTrip(t, c.frames[0], segs)
			var hd gso.VirtioNetHdr
			_ = hd.Decode(c.frames[0])
			if hd.GSOType != gso.GSOUDPL4 || hd.GSOSize != 1000 || c.nbytes[0] != len(p)+5*(ip+udpHdrLen) {
				t.Fatalf("header %+v, bytes %d", hd, c.nbytes[0])
			}

			// Off: gro false, or the TUN does not take UDP_L4 for the family.
			c.build(packets(segs...), 10, false)
			if s := frameShape(t, &c); fmt.Sprint(s) != "[0 0 0 0 0 0]" {
				t.Fatalf("gro off: frames %v", s)
			}
			off := coalescer{udp4: v6, udp6: !v6}
			off.build(packets(segs...), 10, true)
			if s := frameShape(t, &off); fmt.Sprint(s) != "[0 0 0 0 0 0]" {
				t.Fatalf("no USO for the family: frames %v", s)
			}

			// A bad checksum is never merged.
			bad := append([]byte(nil), segs[2]...)
			bad[len(bad)-1] ^= 0xff
			c.build(packets(segs[0], segs[1], bad, segs[3], segs[4], segs[5]), 10, true)
			if s := frameShape(t, &c); fmt.Sprint(s) != "[2 0 3]" {
				t.Fatalf("bad checksum: frames %v", s)
			}
			checkRoundTrip(t, c.frames[2], segs[3:])

			// A shorter datagram ends its run; a larger one starts a new
			// one. (The short one takes the IPv4 id that follows.)
			short := append([]byte(nil), segs[5]...)
			if !v6 {
				binary.BigEndian.PutUint16(short[4:], 0x1234+2)
				fixIPv4Checksum(short)
			}
			c.build(packets(segs[0], segs[1], short, segs[2], segs[3]), 10, true)
			if s := frameShape(t, &c); fmt.Sprint(s) != "[3 2]" {
				t.Fatalf("short datagram mid-stream: frames %v", s)
			}
			checkRoundTrip(t, c.frames[0], [][]byte{segs[0], segs[1], short})

			// Another flow in between ends the run; two flows one after
			// the other make two super-packets.
			c.build(packets(segs[0], osegs[0], segs[1], osegs[1]), 10, true)
			if s := frameShape(t, &c); fmt.Sprint(s) != "[0 0 0 0]" {
				t.Fatalf("interleaved flows: frames %v", s)
			}
			c.build(packets(segs[0], segs[1], osegs[0], osegs[1]), 10, true)
			if s := frameShape(t, &c); fmt.Sprint(s) != "[2 2]" {
				t.Fatalf("two flows: frames %v", s)
			}
			checkRoundTrip(t, c.frames[1], osegs)

			// A different destination port is another flow.
			port := append([]byte(nil), segs[1]...)
			binary.BigEndian.PutUint16(port[ip+2:], 10)
			fixUDPChecksum(port, ip)
			c.build(packets(segs[0], port), 10, true)
			if s := frameShape(t, &c); fmt.Sprint(s) != "[0 0]" {
				t.Fatalf("different port: frames %v", s)
			}
		})
	}
}

// TestCoalesceUDPHeaders: a datagram the merge cannot keep whole — no
// checksum, a length field that lies, a header field that differs from
// the run's, an IPv4 id a re-cut would not give back — is never merged
// or ends the run.
func TestCoalesceUDPHeaders(t *testing.T) {
	setID := func(p []byte, id uint16) { binary.BigEndian.PutUint16(p[4:], id) }
	for _, tc := range []struct {
		name  string
		v6    bool
		edit  func(s [][]byte, ip int)
		shape string
	}{
		{name: "v4 as sent", edit: func([][]byte, int) {}, shape: "[4]"},
		{name: "v6 as sent", v6: true, edit: func([][]byte, int) {}, shape: "[4]"},
		{name: "v4 no checksum", edit: func(s [][]byte, ip int) { s[1][ip+6], s[1][ip+7] = 0, 0 }, shape: "[0 0 2]"},
		{name: "v4 UDP length short", edit: func(s [][]byte, ip int) { binary.BigEndian.PutUint16(s[1][ip+4:], 100) }, shape: "[0 0 2]"},
		{name: "v6 UDP length long", v6: true, edit: func(s [][]byte, ip int) { binary.BigEndian.PutUint16(s[1][ip+4:], 2000) }, shape: "[0 0 2]"},
		{name: "v4 fragment", edit: func(s [][]byte, _ int) { s[1][6] |= 0x20 }, shape: "[0 0 2]"},
		{name: "v4 TTL", edit: func(s [][]byte, _ int) { s[1][8]-- }, shape: "[0 0 2]"},
		{name: "v4 TOS", edit: func(s [][]byte, _ int) { s[1][1] = 0x10 }, shape: "[0 0 2]"},
		{name: "v4 DF", edit: func(s [][]byte, _ int) { s[1][6] = 0 }, shape: "[0 0 2]"},
		{name: "v4 DF id random", edit: func(s [][]byte, _ int) { setID(s[1], 0x9999) }, shape: "[0 0 2]"},
		{name: "v4 source", edit: func(s [][]byte, _ int) { s[1][15]++ }, shape: "[0 0 2]"},
		{name: "v4 source port", edit: func(s [][]byte, ip int) { s[1][ip+1]++ }, shape: "[0 0 2]"},
		{name: "v6 flow label", v6: true, edit: func(s [][]byte, _ int) { s[1][3] ^= 1 }, shape: "[0 0 2]"},
		{name: "v6 hop limit", v6: true, edit: func(s [][]byte, _ int) { s[1][7]-- }, shape: "[0 0 2]"},
		{name: "v6 destination", v6: true, edit: func(s [][]byte, _ int) { s[1][39]++ }, shape: "[0 0 2]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, h := superUDP(tc.v6, 40000, pattern(4*1000, 1), 1000)
			ip := 20
			if tc.v6 {
				ip = 40
			}
			segs := segments(t, p, h)
			tc.edit(segs, ip)
			for _, s := range segs {
				if !tc.v6 {
					fixIPv4Checksum(s)
				}
				if binary.BigEndian.Uint16(s[ip+6:]) != 0 {
					fixUDPChecksum(s, ip)
				}
			}
			c := coalescer{udp4: true, udp6: true}
			c.build(packets(segs...), 10, true)
			if s := fmt.Sprint(frameShape(t, &c)); s != tc.shape {
				t.Fatalf("frames %s, want %s", s, tc.shape)
			}
			k := 0
			for i, n := range c.npkts {
				if n > 1 {
					checkRoundTrip(t, c.frames[i], segs[k:k+n])
				}
				k += n
			}
		})
	}
}

// A run stops at 64 datagrams (the oldest kernels' UDP_MAX_SEGMENTS) and
// where the IP length field would overflow.
func TestCoalesceUDPLimits(t *testing.T) {
	p, h := superUDP(false, 40000, pattern(70*100, 3), 100)
	segs := segments(t, p, h)
	c := coalescer{udp4: true, udp6: true}
	c.build(packets(segs...), 10, true)
	if s := fmt.Sprint(frameShape(t, &c)); s != "[64 6]" {
		t.Fatalf("70 small datagrams: frames %s", s)
	}
	checkRoundTrip(t, c.frames[0], segs[:64])
	checkRoundTrip(t, c.frames[1], segs[64:])

	// Two sends of 25 full datagrams, ids running on: one flow of 50.
	p1, h1 := superUDP(false, 40000, pattern(25*1400, 4), 1400)
	p2, h2 := superUDP(false, 40000, pattern(25*1400, 5), 1400)
	segs = append(segments(t, p1, h1), segments(t, p2, h2)...)
	for i, s := range segs[25:] {
		binary.BigEndian.PutUint16(s[4:], 0x1234+25+uint16(i))
		fixIPv4Checksum(s)
	}
	c.build(packets(segs...), 10, true)
	// (65535 - 28) / 1400 = 46 datagrams fit one IPv4 packet.
	if s := fmt.Sprint(frameShape(t, &c)); s != "[46 4]" {
		t.Fatalf("50 full datagrams: frames %s", s)
	}
	for _, f := range c.frames {
		if len(f)-10 > 65535 {
			t.Fatalf("frame of %d bytes", len(f)-10)
		}
	}
	checkRoundTrip(t, c.frames[0], segs[:46])
}
