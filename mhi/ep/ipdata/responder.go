package ipdata

import (
	"encoding/binary"
	"fmt"
)

// EchoPort is the UDP port the responder answers (the echo service).
const EchoPort = 7

// answer writes into dst the modem network's answer to an uplink packet, as
// ModeResponder does: an ICMP echo request (IPv4) or ICMPv6 echo request
// (IPv6) gets its echo reply, a UDP datagram to port EchoPort comes back
// with addresses and ports swapped; whatever the destination address. It
// returns the answer's length, or false for a packet it does not answer
// (malformed, another protocol, IPv6 extension headers).
func answer(dst, pkt []byte) (int, bool) {
	if len(pkt) < 1 {
		return 0, false
	}
	switch pkt[0] >> 4 {
	case 4:
		return answer4(dst, pkt)
	case 6:
		return answer6(dst, pkt)
	}
	return 0, false
}

var be = binary.BigEndian

func answer4(dst, pkt []byte) (int, bool) {
	if len(pkt) < 20 {
		return 0, false
	}
	ihl := int(pkt[0]&0x0F) * 4
	total := int(be.Uint16(pkt[2:]))
	if ihl < 20 || total < ihl+8 || total > len(pkt) || total > len(dst) ||
		be.Uint16(pkt[6:])&0x3FFF != 0 { // fragments are not answered
		return 0, false
	}
	copy(dst, pkt[:total])
	out := dst[:total]
	l4 := out[ihl:]
	switch out[9] {
	case 1: // ICMP
		if l4[0] != 8 || l4[1] != 0 {
			return 0, false
		}
		l4[0] = 0
		be.PutUint16(l4[2:], 0)
		be.PutUint16(l4[2:], checksum(0, l4))
	case 17: // UDP
		if be.Uint16(l4[2:]) != EchoPort || int(be.Uint16(l4[4:])) != len(l4) {
			return 0, false
		}
		swapPorts(l4)
		if be.Uint16(l4[6:]) != 0 { // zero means "no checksum" in IPv4
			be.PutUint16(l4[6:], 0)
			c := udpChecksum(pseudo4(out[12:16], out[16:20], 17, len(l4)), l4)
			be.PutUint16(l4[6:], c)
		}
	default:
		return 0, false
	}
	swap(out[12:16], out[16:20])
	out[8] = 64
	be.PutUint16(out[10:], 0)
	be.PutUint16(out[10:], checksum(0, out[:ihl]))
	return total, true
}

func answer6(dst, pkt []byte) (int, bool) {
	if len(pkt) < 48 {
		return 0, false
	}
	total := 40 + int(be.Uint16(pkt[4:]))
	if total < 48 || total > len(pkt) || total > len(dst) {
		return 0, false
	}
	copy(dst, pkt[:total])
	out := dst[:total]
	l4 := out[40:]
	next := out[6]
	switch next {
	case 58: // ICMPv6
		if l4[0] != 128 || l4[1] != 0 {
			return 0, false
		}
		l4[0] = 129
	case 17:
		if be.Uint16(l4[2:]) != EchoPort || int(be.Uint16(l4[4:])) != len(l4) {
			return 0, false
		}
		swapPorts(l4)
	default:
		return 0, false
	}
	swap(out[8:24], out[24:40])
	out[7] = 64
	sumOff := 2 // ICMPv6 checksum
	if next == 17 {
		sumOff = 6
	}
	be.PutUint16(l4[sumOff:], 0)
	c := checksum(pseudo6(out[8:24], out[24:40], next, len(l4)), l4)
	if next == 17 && c == 0 {
		c = 0xFFFF
	}
	be.PutUint16(l4[sumOff:], c)
	return total, true
}

func swap(a, b []byte) {
	for i := range a {
		a[i], b[i] = b[i], a[i]
	}
}

func swapPorts(udp []byte) {
	sp, dp := be.Uint16(udp[0:]), be.Uint16(udp[2:])
	be.PutUint16(udp[0:], dp)
	be.PutUint16(udp[2:], sp)
}

// sum16 adds b to a one's-complement running sum.
func sum16(sum uint32, b []byte) uint32 {
	for len(b) >= 2 {
		sum += uint32(be.Uint16(b))
		b = b[2:]
	}
	if len(b) == 1 {
		sum += uint32(b[0]) << 8
	}
	return sum
}

// checksum folds the running sum initial plus b into an Internet checksum.
func checksum(initial uint32, b []byte) uint16 {
	sum := sum16(initial, b)
	for sum>>16 != 0 {
		sum = sum&0xFFFF + sum>>16
	}
	return ^uint16(sum)
}

func udpChecksum(initial uint32, udp []byte) uint16 {
	c := checksum(initial, udp)
	if c == 0 {
		return 0xFFFF
	}
	return c
}

func pseudo4(src, dst []byte, proto byte, n int) uint32 {
	s := sum16(sum16(0, src), dst)
	return s + uint32(proto) + uint32(n)
}

func pseudo6(src, dst []byte, next byte, n int) uint32 {
	s := sum16(sum16(0, src), dst)
	return s + uint32(n>>16) + uint32(n&0xFFFF) + uint32(next)
}

// SetMode switches between ModeLoopback and ModeResponder (the generator
// has its own StartGenerator). It fails while the generator runs.
func (f *Function) SetMode(m Mode) error {
	if m != ModeLoopback && m != ModeResponder {
		return fmt.Errorf("ipdata: SetMode(%s): only loopback and responder can be set", m)
	}
	f.genMu.Lock()
	defer f.genMu.Unlock()
	if f.Mode() == ModeGenerator {
		return ErrGeneratorRunning
	}
	f.mode.Store(uint32(m))
	f.idleMode.Store(uint32(m))
	return nil
}
