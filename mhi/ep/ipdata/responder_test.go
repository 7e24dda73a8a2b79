package ipdata

import (
	"bytes"
	"testing"
)

func icmp4(typ byte, payload string) []byte {
	p := make([]byte, 28+len(payload))
	p[0], p[8], p[9] = 0x45, 64, 1
	be.PutUint16(p[2:], uint16(len(p)))
	copy(p[12:], []byte{198, 18, 0, 1})
	copy(p[16:], []byte{198, 18, 0, 2})
	be.PutUint16(p[10:], checksum(0, p[:20]))
	p[20] = typ
	be.PutUint16(p[24:], 0x1234) // id
	be.PutUint16(p[26:], 7)      // seq
	copy(p[28:], payload)
	be.PutUint16(p[22:], checksum(0, p[20:]))
	return p
}

func udp4(dport uint16, payload string) []byte {
	p := make([]byte, 28+len(payload))
	p[0], p[8], p[9] = 0x45, 64, 17
	be.PutUint16(p[2:], uint16(len(p)))
	copy(p[12:], []byte{198, 18, 0, 1})
	copy(p[16:], []byte{198, 18, 0, 2})
	be.PutUint16(p[10:], checksum(0, p[:20]))
	be.PutUint16(p[20:], 40000)
	be.PutUint16(p[22:], dport)
	be.PutUint16(p[24:], uint16(8+len(payload)))
	copy(p[28:], payload)
	be.PutUint16(p[26:], udpChecksum(pseudo4(p[12:16], p[16:20], 17, 8+len(payload)), p[20:]))
	return p
}

func ip6(next byte, l4 []byte) []byte {
	p := make([]byte, 40+len(l4))
	p[0], p[6], p[7] = 0x60, next, 64
	be.PutUint16(p[4:], uint16(len(l4)))
	p[8], p[9], p[23] = 0x20, 0x01, 1 // 2001::1
	p[24], p[25], p[39] = 0x20, 0x01, 2
	copy(p[40:], l4)
	off := 2
	if next == 17 {
		off = 6
	}
	be.PutUint16(p[40+off:], checksum(pseudo6(p[8:24], p[24:40], next, len(l4)), p[40:]))
	return p
}

func TestResponderAnswers(t *testing.T) {
	icmpv6 := []byte{128, 0, 0, 0, 0x12, 0x34, 0, 9, 'h', 'i'}
	udp6 := []byte{0x9c, 0x40, 0, 7, 0, 11, 0, 0, 'a', 'b', 'c'}
	cases := []struct {
		name string
		in   []byte
		ok   bool
	}{
		{"icmp echo", icmp4(8, "ping"), true},
		{"icmp echo reply", icmp4(0, "pong"), false},
		{"udp echo port", udp4(EchoPort, "hello"), true},
		{"udp other port", udp4(53, "dns"), false},
		{"icmpv6 echo", ip6(58, icmpv6), true},
		{"udp6 echo port", ip6(17, udp6), true},
		{"truncated", icmp4(8, "x")[:10], false},
		{"not ip", []byte{0x10, 0, 0}, false},
		{"empty", nil, false},
	}
	for _, tc := range cases {
		dst := make([]byte, 2048)
		n, ok := answer(dst, tc.in)
		if ok != tc.ok {
			t.Errorf("%s: answered %v, want %v", tc.name, ok, tc.ok)
			continue
		}
		if !ok {
			continue
		}
		out := dst[:n]
		if n != len(tc.in) {
			t.Errorf("%s: %d bytes, want %d", tc.name, n, len(tc.in))
		}
		switch out[0] >> 4 {
		case 4:
			if !bytes.Equal(out[12:16], tc.in[16:20]) || !bytes.Equal(out[16:20], tc.in[12:16]) {
				t.Errorf("%s: addresses not swapped", tc.name)
			}
			if checksum(0, out[:20]) != 0 {
				t.Errorf("%s: bad IPv4 header checksum", tc.name)
			}
			if out[9] == 1 && (out[20] != 0 || checksum(0, out[20:]) != 0) {
				t.Errorf("%s: bad echo reply % x", tc.name, out[20:])
			}
			if out[9] == 17 && (be.Uint16(out[20:]) != EchoPort || checksum(pseudo4(out[12:16], out[16:20], 17, n-20), out[20:]) != 0) {
				t.Errorf("%s: bad UDP reply % x", tc.name, out[20:])
			}
			if !bytes.Equal(out[28:], tc.in[28:]) {
				t.Errorf("%s: payload changed", tc.name)
			}
		case 6:
			if !bytes.Equal(out[8:24], tc.in[24:40]) {
				t.Errorf("%s: addresses not swapped", tc.name)
			}
			if out[6] == 58 && out[40] != 129 {
				t.Errorf("%s: type %d, want 129", tc.name, out[40])
			}
			if checksum(pseudo6(out[8:24], out[24:40], out[6], n-40), out[40:]) != 0 {
				t.Errorf("%s: bad checksum", tc.name)
			}
		}
	}
}

func FuzzAnswer(f *testing.F) {
	f.Add(icmp4(8, "ping"))
	f.Add(udp4(EchoPort, "x"))
	f.Add(ip6(58, []byte{128, 0, 0, 0, 1, 2, 3, 4}))
	f.Fuzz(func(t *testing.T, in []byte) {
		dst := make([]byte, 1500)
		n, ok := answer(dst, in)
		if ok && (n > len(in) || n > len(dst)) {
			t.Fatalf("answer of %d bytes to %d", n, len(in))
		}
	})
}
