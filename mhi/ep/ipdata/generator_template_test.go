package ipdata

import (
	"bytes"
	"testing"
)

// TestGenPacketTemplate: a packet written from the generator's header
// template is byte for byte the packet putGenPacket builds from scratch
// (checksum included, whatever the identification's carries), for every
// size change and sequence number, and the host's check accepts it.
func TestGenPacketTemplate(t *testing.T) {
	cfg := &GeneratorConfig{Src: [4]byte{10, 255, 255, 1}, Dst: [4]byte{192, 168, 200, 254}, SrcPort: 0xFFFE, DstPort: 5001}
	g := genPacket{cfg: cfg}
	seqs := []uint64{0, 1, 0xFF, 0x100, 0x7FFF, 0xFFFE, 0xFFFF, 0x10000, 1<<40 + 0xABCD}
	for _, n := range []int{GenMinPacket, 50, 1248, 1249, 1500, GenMinPacket, 9000, GenMaxPacket} {
		for _, seq := range seqs {
			got, want := make([]byte, n), make([]byte, n)
			g.seq = seq
			g.put(got)
			putGenPacket(want, seq, cfg)
			if !bytes.Equal(got, want) {
				t.Fatalf("size %d seq %#x: template gives % x…, want % x…", n, seq, got[:GenMinPacket], want[:GenMinPacket])
			}
			if s, ok := GeneratedSeq(got); !ok || s != seq {
				t.Fatalf("size %d seq %#x: GeneratedSeq = %#x, %v", n, seq, s, ok)
			}
		}
	}
	// Every identification: the checksum's carries.
	for id := range 1 << 16 {
		b := make([]byte, GenMinPacket)
		g.seq = uint64(id)
		g.put(b)
		if ipv4Checksum(b[:20]) != 0 {
			t.Fatalf("id %#x: bad header checksum", id)
		}
	}
}

// BenchmarkGenPacket: writing one generated 64-byte-frame packet.
func BenchmarkGenPacket(b *testing.B) {
	g := genPacket{cfg: &GeneratorConfig{Src: [4]byte{10, 0, 0, 1}, Dst: [4]byte{10, 0, 0, 2}, SrcPort: 5000, DstPort: 5001}}
	buf := make([]byte, 50)
	for b.Loop() {
		g.seq++
		g.put(buf)
	}
}
