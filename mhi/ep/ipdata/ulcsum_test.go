package ipdata

import (
	"bytes"
	"testing"

	"github.com/gomhi/gomhi/mhi/proto/framing"
	"github.com/gomhi/gomhi/mhi/proto/qmap"
)

// udp4Field builds an IPv4 UDP datagram from 192.0.2.1:5000 to 192.0.2.2:7
// with payload n bytes long and the checksum field set to field.
func udp4Field(n int, field uint16) []byte {
	p := make([]byte, 28+n)
	p[0], p[8], p[9] = 0x45, 64, 17
	be.PutUint16(p[2:], uint16(len(p)))
	copy(p[12:], []byte{192, 0, 2, 1, 192, 0, 2, 2})
	be.PutUint16(p[10:], checksum(0, p[:20]))
	be.PutUint16(p[20:], 5000)
	be.PutUint16(p[22:], EchoPort)
	be.PutUint16(p[24:], uint16(8+n))
	be.PutUint16(p[26:], field)
	for i := range n {
		p[28+i] = byte(i*7 + 1)
	}
	return p
}

// tcp6Field builds an IPv6 TCP segment (20-byte header, n bytes of payload)
// with the checksum field set to field.
func tcp6Field(n int, field uint16) []byte {
	p := make([]byte, 60+n)
	p[0], p[6], p[7] = 0x60, 6, 64
	be.PutUint16(p[4:], uint16(20+n))
	p[8], p[9], p[23] = 0x20, 0x01, 1
	p[24], p[25], p[39] = 0x20, 0x01, 2
	be.PutUint16(p[40:], 40000)
	be.PutUint16(p[42:], 80)
	p[52] = 5 << 4
	be.PutUint16(p[56:], field)
	for i := range n {
		p[60+i] = byte(i*3 + 5)
	}
	return p
}

// transportSumOK reports whether the packet's TCP or UDP checksum
// verifies (the sum over pseudo-header and segment is all ones).
func transportSumOK(p []byte, start int, udp bool) bool {
	proto := byte(6)
	if udp {
		proto = 17
	}
	l4 := p[start:]
	ph := pseudo4(p[12:16], p[16:20], proto, len(l4))
	if p[0]>>4 == 6 {
		ph = pseudo6(p[8:24], p[24:40], proto, len(l4))
	}
	return checksum(ph, l4) == 0
}

func TestComputeTransportChecksum(t *testing.T) {
	good4, good6 := udp4Field(33, 0xBEEF), tcp6Field(101, 0x1234)
	frag := udp4Field(8, 0)
	frag[6] = 0x20 // more fragments
	icmp := udp4Field(8, 0)
	icmp[9] = 1
	short := udp4Field(8, 0)
	be.PutUint16(short[2:], uint16(len(short)+1))
	cases := []struct {
		name string
		pkt  []byte
		cs   qmap.Csum
		ok   bool
	}{
		{"udp4", good4, qmap.Csum{Valid: true, Start: 20, Offset: 6, UDP: true}, true},
		{"tcp6", good6, qmap.Csum{Valid: true, Start: 40, Offset: 16}, true},
		{"field past the end", good4, qmap.Csum{Valid: true, Start: 20, Offset: uint16(len(good4) - 21), UDP: true}, false},
		{"start inside the IP header", good4, qmap.Csum{Valid: true, Start: 12, Offset: 6, UDP: true}, false},
		{"start inside the IPv6 header", good6, qmap.Csum{Valid: true, Start: 20, Offset: 16}, false},
		{"protocol not the header's", good4, qmap.Csum{Valid: true, Start: 20, Offset: 16}, false},
		{"odd offset", good4, qmap.Csum{Valid: true, Start: 20, Offset: 7, UDP: true}, false},
		{"ICMP", icmp, qmap.Csum{Valid: true, Start: 20, Offset: 2}, false},
		{"fragment", frag, qmap.Csum{Valid: true, Start: 20, Offset: 6, UDP: true}, false},
		{"total length past the data", short, qmap.Csum{Valid: true, Start: 20, Offset: 6, UDP: true}, false},
		{"not IP", []byte{0x10, 1, 2, 3}, qmap.Csum{Valid: true}, false},
	}
	dst := make([]byte, 2048)
	for _, c := range cases {
		before := bytes.Clone(c.pkt)
		n, ok := computeTransportChecksum(dst, c.pkt, c.cs)
		if ok != c.ok {
			t.Fatalf("%s: ok %v, want %v", c.name, ok, c.ok)
		}
		if !bytes.Equal(c.pkt, before) {
			t.Fatalf("%s: the packet itself was written", c.name)
		}
		if !ok {
			continue
		}
		out := dst[:n]
		if n != len(c.pkt) || !transportSumOK(out, int(c.cs.Start), c.cs.UDP) {
			t.Fatalf("%s: %d bytes, checksum does not verify: % x", c.name, n, out)
		}
		field := int(c.cs.Start + c.cs.Offset)
		if !bytes.Equal(out[:field], c.pkt[:field]) || !bytes.Equal(out[field+2:], c.pkt[field+2:]) {
			t.Fatalf("%s: bytes other than the checksum changed", c.name)
		}
	}
	// A UDP sum of zero is sent as all ones (zero means "no checksum").
	for field := range 0x10000 {
		p := udp4Field(2, 0)
		be.PutUint16(p[28:], uint16(field))
		n, ok := computeTransportChecksum(dst, p, qmap.Csum{Valid: true, Start: 20, Offset: 6, UDP: true})
		if !ok || n != len(p) {
			t.Fatal("udp4 refused")
		}
		if be.Uint16(dst[26:]) == 0 {
			t.Fatalf("payload %04x: UDP checksum 0 sent", field)
		}
	}
}

// The uplink as rmnet sends it with EGRESS_MAP_CKSUMV4: unpadded frames,
// each with the 4-byte checksum header. A frame asking for the checksum
// is passed on with it computed, one that computed its own (header zero)
// unchanged, an impossible request unchanged and counted.
func TestIPDataUplinkChecksumOffload(t *testing.T) {
	r := newIPRig(t, ipRigConfig{ip: Config{Format: framing.QMAP, QMAPCsum: qmap.CsumV4}})
	offload := udp4Field(61, 0x5A5A) // rmnet leaves the complemented pseudo-header sum here
	own := udp4Field(40, 0)
	be.PutUint16(own[26:], udpChecksum(pseudo4(own[12:16], own[16:20], 17, len(own)-20), own[20:]))
	bad := tcp6Field(10, 0x7777)
	seg6 := tcp6Field(200, 0xFFFF)

	buf := make([]byte, r.ulSize)
	var w qmap.Writer
	if err := w.Reset(buf, qmap.Config{Csum: qmap.CsumV4, Uplink: true, Align: 1}); err != nil {
		t.Fatal(err)
	}
	for _, f := range []struct {
		pkt []byte
		cs  qmap.Csum
	}{
		{offload, qmap.Csum{Valid: true, Start: 20, Offset: 6, UDP: true}},
		{own, qmap.Csum{}},
		{bad, qmap.Csum{Valid: true, Start: 40, Offset: 200}},
		{seg6, qmap.Csum{Valid: true, Start: 40, Offset: 16}},
	} {
		if err := w.AddPacket(f.pkt, 0, f.cs); err != nil {
			t.Fatal(err)
		}
	}
	r.sendUL(buf[:w.Finish()])
	s := r.waitAggregates(4)
	checkConservation(t, s)
	if s.ULCsumComputed != 2 || s.ULCsumBad != 1 || s.ULPackets != 4 || s.ULMalformed != 0 {
		t.Fatalf("stats %+v", s)
	}
	got, _ := decodeDL(t, r.ipd.Config(), r.transfers)
	if len(got) != 4 {
		t.Fatalf("%d packets back", len(got))
	}
	if !transportSumOK(got[0], 20, true) || !bytes.Equal(got[0][28:], offload[28:]) {
		t.Errorf("offloaded UDP: checksum %04x does not verify", be.Uint16(got[0][26:]))
	}
	if !bytes.Equal(got[1], own) || !transportSumOK(got[1], 20, true) {
		t.Errorf("UDP with its own checksum changed")
	}
	if !bytes.Equal(got[2], bad) {
		t.Errorf("impossible request: packet changed")
	}
	if !transportSumOK(got[3], 40, false) || !bytes.Equal(got[3][60:], seg6[60:]) {
		t.Errorf("offloaded TCP/IPv6: checksum %04x does not verify", be.Uint16(got[3][56:]))
	}
}

// FuzzComputeTransportChecksum: any packet and header, from a host the
// modem does not trust: no panic, nothing written past the packet, and
// a computed checksum always verifies.
func FuzzComputeTransportChecksum(f *testing.F) {
	f.Add(udp4Field(33, 0xBEEF), uint16(20), uint16(6), true)
	f.Add(tcp6Field(101, 0x1234), uint16(40), uint16(16), false)
	f.Add([]byte{0x45, 0, 0, 20}, uint16(20), uint16(0), false)
	f.Add(tcp6Field(0, 0), uint16(60), uint16(0xFFFF), false)
	f.Fuzz(func(t *testing.T, pkt []byte, start, offset uint16, udp bool) {
		dst := make([]byte, 256)
		cs := qmap.Csum{Valid: true, Start: start, Offset: offset & qmap.ULCsumOffsetMask, UDP: udp}
		n, ok := computeTransportChecksum(dst, pkt, cs)
		if !ok {
			return
		}
		if n > len(pkt) || int(start) > n || int(start)+int(cs.Offset)+2 > n {
			t.Fatalf("%d bytes from a %d-byte packet, start %d offset %d", n, len(pkt), start, cs.Offset)
		}
		if !transportSumOK(dst[:n], int(start), udp) {
			t.Fatalf("computed checksum does not verify: % x", dst[:n])
		}
	})
}
