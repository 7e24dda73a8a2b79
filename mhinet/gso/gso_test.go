package gso

import (
	"encoding/binary"
	"errors"
	"testing"
)

// buffers returns n output buffers of size bytes each.
func buffers(n, size int) ([][]byte, []int) {
	out := make([][]byte, n)
	for i := range out {
		out[i] = make([]byte, size)
	}
	return out, make([]int, n)
}

func TestVirtioNetHdrObserved(t *testing.T) {
	// The header observed for a UDP_SEGMENT=1400 send of 56000 bytes
	// (go-ecosystem.md section 2), as little-endian wire bytes.
	wire := []byte{1, 5, 28, 0, 0x78, 0x05, 20, 0, 6, 0}
	var h VirtioNetHdr
	if err := h.Decode(wire); err != nil {
		t.Fatal(err)
	}
	want := VirtioNetHdr{Flags: FlagNeedsCsum, GSOType: GSOUDPL4, HdrLen: 28, GSOSize: 1400, CsumStart: 20, CsumOffset: 6}
	if h != want {
		t.Fatalf("decoded %v, want %v", h, want)
	}
	b := make([]byte, VirtioNetHdrLen)
	if err := h.Encode(b); err != nil {
		t.Fatal(err)
	}
	if string(b) != string(wire) {
		t.Fatalf("encoded % x, want % x", b, wire)
	}
	h.NumBuffers = 0x0102
	b12 := make([]byte, VirtioNetHdrMrgRxbufLen)
	if err := h.EncodeMrgRxbuf(b12); err != nil {
		t.Fatal(err)
	}
	if string(b12[:10]) != string(wire) || b12[10] != 2 || b12[11] != 1 {
		t.Fatalf("12-byte encoding % x", b12)
	}
	var h2 VirtioNetHdr
	if err := h2.DecodeMrgRxbuf(b12); err != nil || h2 != h {
		t.Fatalf("12-byte round trip %v %v", h2, err)
	}
	if err := h2.Decode(wire[:9]); !errors.Is(err, ErrShortPacket) {
		t.Fatalf("short decode: %v", err)
	}
	if err := h2.DecodeMrgRxbuf(wire); !errors.Is(err, ErrShortPacket) {
		t.Fatalf("short 12-byte decode: %v", err)
	}
	if err := h.Encode(b[:9]); !errors.Is(err, ErrBufferTooSmall) {
		t.Fatalf("short encode: %v", err)
	}
	if err := h.EncodeMrgRxbuf(b12[:11]); !errors.Is(err, ErrBufferTooSmall) {
		t.Fatalf("short 12-byte encode: %v", err)
	}
	if h.String() == "" {
		t.Fatal("empty String")
	}
}

func segmentCases() []spec {
	var cases []spec
	for _, v6 := range []bool{false, true} {
		for _, tcp := range []bool{false, true} {
			l4 := 8
			if tcp {
				l4 = 20
			}
			ip := 20
			if v6 {
				ip = 0 // IPv6 payload length excludes the fixed header
			}
			max := 65535 - ip - l4 // largest payload
			for _, mss := range []int{536, 1400, 1448} {
				cases = append(cases,
					spec{v6: v6, tcp: tcp, payload: max, mss: mss, flags: 0x18},
					spec{v6: v6, tcp: tcp, payload: mss * 10, mss: mss, flags: 0x10}, // exactly divisible
					spec{v6: v6, tcp: tcp, payload: mss*3 + 1, mss: mss, flags: 0x19},
					spec{v6: v6, tcp: tcp, payload: mss, mss: mss, flags: 0x18}, // one segment
					spec{v6: v6, tcp: tcp, payload: 7, mss: mss, flags: 0x18},   // shorter than mss
				)
			}
			cases = append(cases, spec{v6: v6, tcp: tcp, payload: 5000, mss: 1, flags: 0x98})
			if tcp {
				// timestamps-sized options, CWR|ECE|PSH|ACK|FIN
				cases = append(cases, spec{v6: v6, tcp: tcp, payload: 60000, mss: 1448 - 12, tcpOpts: 12, flags: 0xd9})
			}
			if !v6 {
				cases = append(cases, spec{v6: v6, tcp: tcp, payload: 30001, mss: 1400, ipOpts: 40, flags: 0x18})
			}
		}
	}
	return cases
}

func TestSegment(t *testing.T) {
	for _, c := range segmentCases() {
		t.Run(c.String(), func(t *testing.T) {
			pkt, h := build(c)
			if c.tcp && c.flags&0x80 != 0 {
				h.GSOType |= GSOECN
			}
			orig := append([]byte(nil), pkt...)
			n, err := Count(pkt, h)
			if err != nil {
				t.Fatal(err)
			}
			if want := (c.payload + c.mss - 1) / c.mss; n != want {
				t.Fatalf("Count %d, want %d", n, want)
			}
			out, sizes := buffers(n, int(h.HdrLen)+c.mss)
			got, err := Segment(pkt, h, out, sizes)
			if err != nil {
				t.Fatal(err)
			}
			if got != n {
				t.Fatalf("Segment %d, Count %d", got, n)
			}
			if string(pkt) != string(orig) {
				t.Fatal("Segment modified its input")
			}
			segs := make([][]byte, n)
			for i := range segs {
				segs[i] = out[i][:sizes[i]]
			}
			if err := verifySegments(pkt, h, segs); err != nil {
				t.Fatal(err)
			}
			// Too few buffers / too small buffers write nothing.
			if n > 1 {
				if _, err := Segment(pkt, h, out[:n-1], sizes); !errors.Is(err, ErrTooManySegments) {
					t.Fatalf("too few buffers: %v", err)
				}
				if _, err := Segment(pkt, h, out, sizes[:n-1]); !errors.Is(err, ErrTooManySegments) {
					t.Fatalf("too few sizes: %v", err)
				}
			}
			small, ssizes := buffers(n, int(h.HdrLen)+c.mss)
			small[0] = small[0][:sizes[0]-1]
			if _, err := Segment(pkt, h, small, ssizes); !errors.Is(err, ErrBufferTooSmall) {
				t.Fatalf("small buffer: %v", err)
			}
			for i := 1; i < n; i++ {
				if ssizes[i] != 0 || small[i][0] != 0 {
					t.Fatal("failed Segment wrote output")
				}
			}
		})
	}
}

// TestSegmentUDPZeroChecksum builds a UDP super-packet whose second segment
// sums to 0xffff, so its checksum must be sent as 0xffff, not 0.
func TestSegmentUDPZeroChecksum(t *testing.T) {
	pkt, h := build(spec{payload: 200, mss: 100})
	// Make segment 1's checksum zero by adjusting its first payload word.
	seg := make([]byte, 28+100)
	copy(seg, pkt[:28])
	copy(seg[28:], pkt[128:])
	binary.BigEndian.PutUint16(seg[2:], uint16(len(seg)))
	binary.BigEndian.PutUint16(seg[24:], 108)
	seg[26], seg[27], seg[28], seg[29] = 0, 0, 0, 0
	s := ^refCsum(pseudoHdr(seg[:20], 17, 108), seg[20:]) // folded sum with word 0
	binary.BigEndian.PutUint16(pkt[128:], 0xffff-s)
	out, sizes := buffers(2, 128)
	if _, err := Segment(pkt, h, out, sizes); err != nil {
		t.Fatal(err)
	}
	if c := binary.BigEndian.Uint16(out[1][26:]); c != 0xffff {
		t.Fatalf("segment checksum %#x, want 0xffff", c)
	}
	if err := verifySegments(pkt, h, [][]byte{out[0][:sizes[0]], out[1][:sizes[1]]}); err != nil {
		t.Fatal(err)
	}
}

func TestNeedsCsumNoGSO(t *testing.T) {
	for _, c := range []spec{
		{payload: 1000},
		{payload: 999, v6: true},
		{payload: 1, tcp: true},
		{payload: 1377, tcp: true, v6: true, tcpOpts: 12},
		{payload: 0, tcp: true}, // pure ACK
	} {
		t.Run(c.String(), func(t *testing.T) {
			pkt, h := build(c)
			h.GSOType, h.GSOSize = GSONone, 0
			out, sizes := buffers(1, len(pkt))
			n, err := Segment(pkt, h, out, sizes)
			if err != nil || n != 1 || sizes[0] != len(pkt) {
				t.Fatalf("n=%d size=%d err=%v", n, sizes[0], err)
			}
			if _, err := decode(out[0][:sizes[0]]); err != nil {
				t.Fatal(err)
			}
			// Without NEEDS_CSUM the packet is copied verbatim.
			h.Flags = 0
			if _, err := Segment(pkt, h, out, sizes); err != nil || string(out[0]) != string(pkt) {
				t.Fatalf("plain copy: %v", err)
			}
		})
	}
}

func TestMalformed(t *testing.T) {
	v4tcp, v4h := build(spec{tcp: true, payload: 3000, mss: 1448})
	v6udp, v6h := build(spec{v6: true, payload: 3000, mss: 1400})
	mut := func(p []byte, f func([]byte)) []byte {
		p = append([]byte(nil), p...)
		f(p)
		return p
	}
	hdr := func(h VirtioNetHdr, f func(*VirtioNetHdr)) VirtioNetHdr { f(&h); return h }
	cases := []struct {
		name string
		pkt  []byte
		h    VirtioNetHdr
		want error
	}{
		{"empty", nil, hdr(v4h, func(h *VirtioNetHdr) { h.HdrLen = 0 }), ErrShortPacket},
		{"empty none", nil, VirtioNetHdr{}, ErrShortPacket},
		{"truncated ipv4", v4tcp[:19], hdr(v4h, func(h *VirtioNetHdr) { h.HdrLen = 0 }), ErrShortPacket},
		{"truncated ipv4 total", v4tcp[:2000], v4h, ErrShortPacket},
		{"truncated ipv6", v6udp[:39], hdr(v6h, func(h *VirtioNetHdr) { h.HdrLen = 0 }), ErrShortPacket},
		{"truncated ipv6 payload", v6udp[:2000], v6h, ErrShortPacket},
		{"ihl 4", mut(v4tcp, func(p []byte) { p[0] = 0x44 }), v4h, ErrBadHeader},
		{"ihl 15 short", mut(v4tcp[:50], func(p []byte) { p[0] = 0x4f }), hdr(v4h, func(h *VirtioNetHdr) { h.HdrLen = 0 }), ErrShortPacket},
		{"total below ihl", mut(v4tcp, func(p []byte) { p[2], p[3] = 0, 10 }), v4h, ErrBadHeader},
		{"fragment", mut(v4tcp, func(p []byte) { p[6] = 0x20 }), v4h, ErrBadHeader},
		{"wrong proto", mut(v4tcp, func(p []byte) { p[9] = 17 }), v4h, ErrBadHeader},
		{"version 5", mut(v4tcp, func(p []byte) { p[0] = 0x55 }), v4h, ErrBadHeader},
		{"v4 as tcpv6", v4tcp, hdr(v4h, func(h *VirtioNetHdr) { h.GSOType = GSOTCPv6 }), ErrBadHeader},
		{"v6 as tcpv4", v6udp, hdr(v6h, func(h *VirtioNetHdr) { h.GSOType = GSOTCPv4 }), ErrBadHeader},
		{"hdr_len beyond", v4tcp[:100], hdr(v4h, func(h *VirtioNetHdr) { h.HdrLen = 101 }), ErrBadHeader},
		{"gso_size 0", v4tcp, hdr(v4h, func(h *VirtioNetHdr) { h.GSOSize = 0 }), ErrBadHeader},
		{"unknown gso_type", v4tcp, hdr(v4h, func(h *VirtioNetHdr) { h.GSOType = 9 }), ErrUnsupported},
		{"ufo", v6udp, hdr(v6h, func(h *VirtioNetHdr) { h.GSOType = GSOUDP }), ErrUnsupported},
		{"ecn on udp", v6udp, hdr(v6h, func(h *VirtioNetHdr) { h.GSOType |= GSOECN }), ErrBadHeader},
		{"ecn on none", v6udp, hdr(v6h, func(h *VirtioNetHdr) { h.GSOType = GSOECN }), ErrBadHeader},
		{"tcp doff 4", mut(v4tcp, func(p []byte) { p[32] = 0x40 }), v4h, ErrBadHeader},
		{"tcp doff beyond", mut(v4tcp[:60], func(p []byte) { p[2], p[3], p[32] = 0, 60, 0xf0 }), hdr(v4h, func(h *VirtioNetHdr) { h.HdrLen = 0 }), ErrShortPacket},
		{"tcp header cut", mut(v4tcp[:30], func(p []byte) { p[2], p[3] = 0, 30 }), hdr(v4h, func(h *VirtioNetHdr) { h.HdrLen = 0 }), ErrShortPacket},
		{"udp header cut", mut(v6udp[:44], func(p []byte) { p[4], p[5] = 0, 4 }), hdr(v6h, func(h *VirtioNetHdr) { h.HdrLen = 0 }), ErrShortPacket},
		{"no payload", mut(v4tcp[:40], func(p []byte) { p[2], p[3] = 0, 40 }), v4h, ErrBadHeader},
		{"v6 jumbogram", mut(v6udp, func(p []byte) { p[4], p[5] = 0, 0 }), v6h, ErrUnsupported},
		{"v6 hop-by-hop", mut(v6udp, func(p []byte) { p[6] = 0 }), v6h, ErrUnsupported},
		{"v6 fragment hdr", mut(v6udp, func(p []byte) { p[6] = 44 }), v6h, ErrUnsupported},
		{"v6 icmp", mut(v6udp, func(p []byte) { p[6] = 58 }), v6h, ErrBadHeader},
		{"csum_start wrong", v4tcp, hdr(v4h, func(h *VirtioNetHdr) { h.CsumStart = 21 }), ErrBadHeader},
		{"csum_off wrong", v6udp, hdr(v6h, func(h *VirtioNetHdr) { h.CsumOffset = 16 }), ErrBadHeader},
		{"none csum beyond", v4tcp[:100], VirtioNetHdr{Flags: FlagNeedsCsum, CsumStart: 90, CsumOffset: 9}, ErrBadHeader},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if _, err := Count(c.pkt, c.h); !errors.Is(err, c.want) {
				t.Fatalf("Count: %v, want %v", err, c.want)
			}
			out, sizes := buffers(64, 65536)
			if n, err := Segment(c.pkt, c.h, out, sizes); !errors.Is(err, c.want) || n != 0 {
				t.Fatalf("Segment: n=%d %v, want %v", n, err, c.want)
			}
		})
	}
}

// maxFuzzSegs bounds the output buffers the fuzz target hands out.
const maxFuzzSegs = 128

func FuzzSegment(f *testing.F) {
	for _, c := range []spec{
		{tcp: true, payload: 3000, mss: 1448, flags: 0x99},
		{tcp: true, v6: true, payload: 1000, mss: 536, tcpOpts: 12, flags: 0x18},
		{payload: 2801, mss: 1400},
		{v6: true, payload: 100, mss: 7},
		{v6: true, tcp: true, payload: 0},
		{ipOpts: 8, tcp: true, payload: 999, mss: 100},
	} {
		pkt, h := build(c)
		if c.payload == 0 {
			h.GSOType = GSONone
		}
		f.Add(pkt, h.Flags, h.GSOType, h.HdrLen, h.GSOSize, h.CsumStart, h.CsumOffset)
	}
	f.Add([]byte{0x45}, uint8(0), uint8(1), uint16(0), uint16(1), uint16(0), uint16(0))
	f.Add([]byte{0x60, 0, 0, 0}, uint8(1), uint8(5), uint16(3), uint16(0), uint16(0), uint16(0))
	f.Fuzz(func(t *testing.T, pkt []byte, flags, typ uint8, hdrLen, gsoSize, csumStart, csumOff uint16) {
		h := VirtioNetHdr{Flags: flags, GSOType: typ, HdrLen: hdrLen, GSOSize: gsoSize, CsumStart: csumStart, CsumOffset: csumOff}
		orig := string(pkt)
		n, cerr := Count(pkt, h)
		nb := n
		if nb > maxFuzzSegs || cerr != nil {
			nb = maxFuzzSegs
		}
		backing := make([]byte, nb*len(pkt))
		out := make([][]byte, nb)
		for i := range out {
			out[i] = backing[i*len(pkt) : (i+1)*len(pkt)]
		}
		sizes := make([]int, nb)
		got, err := Segment(pkt, h, out, sizes)
		if string(pkt) != orig {
			t.Fatal("input modified")
		}
		if cerr != nil {
			if err == nil || got != 0 {
				t.Fatalf("Count failed (%v) but Segment gave n=%d err=%v", cerr, got, err)
			}
			return
		}
		if n > maxFuzzSegs {
			if !errors.Is(err, ErrTooManySegments) {
				t.Fatalf("%d segments into %d buffers: %v", n, maxFuzzSegs, err)
			}
			return
		}
		if err != nil || got != n {
			t.Fatalf("Count %d, Segment %d %v", n, got, err)
		}
		segs := make([][]byte, n)
		for i := range segs {
			if sizes[i] > len(pkt) {
				t.Fatalf("segment %d of %d bytes from a %d-byte packet", i, sizes[i], len(pkt))
			}
			segs[i] = out[i][:sizes[i]]
		}
		if typ&^GSOECN == GSONone {
			if n != 1 || sizes[0] != len(pkt) {
				t.Fatalf("non-GSO gave %d segments, size %d", n, sizes[0])
			}
			return
		}
		// Accepted GSO input: verify every segment (size <= headers+MSS
		// included) and reassembly with the independent decoder.
		if err := verifySegments(pkt, h, segs); err != nil {
			t.Fatal(err)
		}
	})
}

// benchPacket is the benchmark's 64 KB TCP/IPv4 super-packet.
func benchPacket() ([]byte, VirtioNetHdr) {
	return build(spec{tcp: true, payload: 65535 - 40, mss: 1448, flags: 0x18})
}

func BenchmarkSegment(b *testing.B) {
	pkt, h := benchPacket()
	n, err := Count(pkt, h)
	if err != nil {
		b.Fatal(err)
	}
	out, sizes := buffers(n, int(h.HdrLen)+int(h.GSOSize))
	b.Run("segment", func(b *testing.B) {
		b.SetBytes(int64(len(pkt)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := Segment(pkt, h, out, sizes); err != nil {
				b.Fatal(err)
			}
		}
	})
	// Reference: the same slicing as plain copies (headers + payload per
	// segment), without any header fix-up or checksum.
	b.Run("copy", func(b *testing.B) {
		b.SetBytes(int64(len(pkt)))
		b.ReportAllocs()
		hl := int(h.HdrLen)
		mss := int(h.GSOSize)
		for b.Loop() {
			for i, off := 0, hl; off < len(pkt); i, off = i+1, off+mss {
				end := min(off+mss, len(pkt))
				copy(out[i], pkt[:hl])
				copy(out[i][hl:], pkt[off:end])
			}
		}
	})
}
