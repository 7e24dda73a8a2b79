package gso

import (
	"math/rand/v2"
	"testing"
)

// TestSumMatchesReference compares the 64-bit-word checksum against the
// plain 16-bit RFC 1071 loop for every length up to 300, with random and
// all-0xff data (the carry-heavy case), and with a large initial value.
func TestSumMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for n := 0; n <= 300; n++ {
		for _, fill := range []string{"rand", "ff"} {
			b := make([]byte, n)
			for i := range b {
				if fill == "rand" {
					b[i] = byte(r.Uint32())
				} else {
					b[i] = 0xff
				}
			}
			if got, want := ^fold(sum(b, 0)), refCsum(b); got != want && !(got == 0xffff && want == 0) && !(got == 0 && want == 0xffff) {
				t.Fatalf("len %d %s: %#x, want %#x", n, fill, got, want)
			}
			init := uint64(0x1fffeffff)
			if got, want := ^fold(sum(b, init)), refCsum(b, []byte{0, 1, 0xff, 0xfe, 0xff, 0xff}); got != want && !(got == 0xffff && want == 0) && !(got == 0 && want == 0xffff) {
				t.Fatalf("len %d %s with initial: %#x, want %#x", n, fill, got, want)
			}
		}
	}
}
