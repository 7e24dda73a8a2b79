package gso

import (
	"encoding/binary"
	"math/bits"
)

// sum adds b, as a sequence of big-endian 16-bit words (an odd last byte
// padded with zero), to the one's-complement accumulator acc and returns the
// new, unfolded accumulator. b must start at an even offset of the
// checksummed data.
//
// The bulk is summed as little-endian 32-bit words (plain loads, no byte
// swapping) into four independent 64-bit accumulators, so the additions run
// in parallel. That is exact: 2^16 ≡ 1 modulo 0xffff, so summing 32-bit
// words folds to the same 16-bit sum as summing 16-bit words, and the
// one's-complement sum of byte-swapped words is the byte-swapped sum
// (RFC 1071, "byte order independence"), undone after folding. No
// accumulator can overflow for b shorter than 2^34 bytes.
func sum(b []byte, acc uint64) uint64 {
	var a0, a1, a2, a3 uint64
	for len(b) >= 32 {
		a0 += uint64(binary.LittleEndian.Uint32(b[0:])) + uint64(binary.LittleEndian.Uint32(b[16:]))
		a1 += uint64(binary.LittleEndian.Uint32(b[4:])) + uint64(binary.LittleEndian.Uint32(b[20:]))
		a2 += uint64(binary.LittleEndian.Uint32(b[8:])) + uint64(binary.LittleEndian.Uint32(b[24:]))
		a3 += uint64(binary.LittleEndian.Uint32(b[12:])) + uint64(binary.LittleEndian.Uint32(b[28:]))
		b = b[32:]
	}
	for len(b) >= 4 {
		a0 += uint64(binary.LittleEndian.Uint32(b))
		b = b[4:]
	}
	acc += uint64(bits.ReverseBytes16(fold(a0 + a1 + a2 + a3)))
	if len(b) >= 2 {
		acc += uint64(binary.BigEndian.Uint16(b))
		b = b[2:]
	}
	if len(b) == 1 {
		acc += uint64(b[0]) << 8
	}
	return acc
}

// fold reduces an accumulator from sum to the 16-bit one's-complement sum
// (not complemented).
func fold(acc uint64) uint16 {
	for acc > 0xffff {
		acc = acc>>16 + acc&0xffff
	}
	return uint16(acc)
}
