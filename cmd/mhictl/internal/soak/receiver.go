package soak

import (
	"encoding/binary"
	"sync"

	"github.com/gomhi/gomhi/mhi/ep/ipdata"
	"github.com/gomhi/gomhi/mhinet"
)

// Every data packet is an IPv4/UDP datagram in the mock generator's format
// (ipdata.GeneratedSeq checks it: header checksum, lengths, and a payload
// pattern derived from the sequence number), so that generated and looped
// packets are checked alike. The UDP source port carries the phase's tag:
// a packet of another phase is late, not merely lost.
const (
	srcPortOff = 20
	seqOff     = 28
	// tagBase is the first phase tag: tags run tagBase..0xFFFF, then wrap.
	tagBase = 0x8000
)

// phaseTag returns the UDP source port of the packets of phase n.
func phaseTag(n int) uint16 { return uint16(tagBase + n%(0x10000-tagBase)) }

// putPacket writes a packet of len(b) bytes with sequence number seq and
// the phase tag, in the format the mock's generator uses.
func putPacket(b []byte, seq uint64, tag uint16) {
	be := binary.BigEndian
	n := len(b)
	clear(b[:20])
	b[0] = 0x45
	be.PutUint16(b[2:], uint16(n))
	be.PutUint16(b[4:], uint16(seq))
	be.PutUint16(b[6:], 0x4000)
	b[8], b[9] = 64, 17
	copy(b[12:16], []byte{10, 0, 0, 1})
	copy(b[16:20], []byte{10, 0, 0, 2})
	be.PutUint16(b[10:], ipChecksum(b[:20]))
	be.PutUint16(b[20:], tag)
	be.PutUint16(b[22:], 5001)
	be.PutUint16(b[24:], uint16(n-20))
	be.PutUint16(b[26:], 0)
	be.PutUint64(b[seqOff:], seq)
	fill := byte(seq)
	for i := ipdata.GenMinPacket; i < n; i++ {
		b[i] = fill + byte(i)
	}
}

func ipChecksum(h []byte) uint16 {
	var sum uint32
	for i := 0; i+1 < len(h); i += 2 {
		sum += uint32(h[i])<<8 | uint32(h[i+1])
	}
	for sum>>16 != 0 {
		sum = sum&0xFFFF + sum>>16
	}
	return ^uint16(sum)
}

// receiver is the data device's Receiver: it checks every packet (format,
// payload pattern, phase, sequence number) and records which sequence
// numbers of the current phase arrived.
type receiver struct {
	mu   sync.Mutex
	tag  uint16
	size uint64   // sequence numbers of the phase: 0..size-1
	seen []uint64 // bitmap of the phase's sequence numbers
	// The previous phase: a late packet of it is told apart from a
	// second copy of one it already had.
	prevTag  uint16
	prevSize uint64
	prevSeen []uint64
	c        ReceiverCounts // this phase
	total    ReceiverCounts // closed phases
	skipN    uint64         // sabotage: lose every n-th packet uncounted
	skipped  uint64
}

// ReceiverCounts counts what the soak's receiver was handed. Every
// packet but Unique is a violation.
type ReceiverCounts struct {
	Handed     uint64 `json:"handed"`     // packets handed over (all kinds)
	Unique     uint64 `json:"unique"`     // good packets of the phase, first arrival
	Bytes      uint64 `json:"bytes"`      // their bytes
	Duplicates uint64 `json:"duplicates"` // good packets of the phase seen before
	Corrupt    uint64 `json:"corrupt"`    // not in the format, or the pattern broken
	Late       uint64 `json:"late"`       // good packets of another phase, first arrival as far as known
	// LateDuplicates are packets of the previous phase that it had
	// already received: delivered twice.
	LateDuplicates uint64 `json:"late_duplicates"`
	OutOfRange     uint64 `json:"out_of_range"`
}

func (c *ReceiverCounts) add(o ReceiverCounts) {
	c.Handed += o.Handed
	c.Unique += o.Unique
	c.Bytes += o.Bytes
	c.Duplicates += o.Duplicates
	c.Corrupt += o.Corrupt
	c.Late += o.Late
	c.LateDuplicates += o.LateDuplicates
	c.OutOfRange += o.OutOfRange
}

// bad returns the packets that must never arrive.
func (c ReceiverCounts) bad() uint64 {
	return c.Duplicates + c.Corrupt + c.Late + c.LateDuplicates + c.OutOfRange
}

// startPhase closes the current phase and opens one for size packets
// tagged tag.
func (r *receiver) startPhase(tag uint16, size uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.total.add(r.c)
	r.c = ReceiverCounts{}
	r.prevTag, r.prevSize = r.tag, r.size
	r.seen, r.prevSeen = r.prevSeen, r.seen
	r.tag, r.size = tag, size
	words := int((size + 63) / 64)
	if cap(r.seen) < words {
		r.seen = make([]uint64, words)
	}
	r.seen = r.seen[:words]
	clear(r.seen)
}

// counts returns the current phase's counts.
func (r *receiver) counts() ReceiverCounts {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.c
}

// totals returns the counts of every phase so far.
func (r *receiver) totals() ReceiverCounts {
	r.mu.Lock()
	defer r.mu.Unlock()
	t := r.total
	t.add(r.c)
	return t
}

// missing returns the sequence numbers below n of the current phase that
// have not arrived, at most max of them.
func (r *receiver) missing(n uint64, max int) []uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []uint64
	for s := uint64(0); s < n && s < r.size && len(out) < max; s++ {
		if r.seen[s/64]&(1<<(s%64)) == 0 {
			out = append(out, s)
		}
	}
	return out
}

// Receive implements mhinet.Receiver.
func (r *receiver) Receive(pkts []mhinet.Packet) {
	r.mu.Lock()
	for _, p := range pkts {
		if r.skipN > 0 {
			r.skipped++
			if r.skipped%r.skipN == 0 {
				p.Release() // sabotage: gone without a trace
				continue
			}
		}
		r.c.Handed++
		seq, ok := ipdata.GeneratedSeq(p.Data)
		switch {
		case !ok:
			r.c.Corrupt++
		case binary.BigEndian.Uint16(p.Data[srcPortOff:]) != r.tag:
			if binary.BigEndian.Uint16(p.Data[srcPortOff:]) == r.prevTag && seq < r.prevSize &&
				r.prevSeen[seq/64]&(1<<(seq%64)) != 0 {
				r.c.LateDuplicates++
			} else {
				r.c.Late++
			}
		case seq >= r.size:
			r.c.OutOfRange++
		case r.seen[seq/64]&(1<<(seq%64)) != 0:
			r.c.Duplicates++
		default:
			r.seen[seq/64] |= 1 << (seq % 64)
			r.c.Unique++
			r.c.Bytes += uint64(len(p.Data))
		}
		p.Release()
	}
	r.mu.Unlock()
}
