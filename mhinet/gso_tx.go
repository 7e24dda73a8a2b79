package mhinet

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/gomhi/gomhi/mhinet/gso"
)

// GSOPacket is one packet for TransmitGSO: a packet as a TUN with
// IFF_VNET_HDR hands it over, and the virtio_net_hdr that describes it. A
// GSO super-packet (Hdr.GSOType not gso.GSONone) of up to 64 KiB is cut
// into packets of at most the MTU; a packet with gso.FlagNeedsCsum has its
// partial checksum finished; any other packet goes out as it is.
type GSOPacket struct {
	// Hdr describes Data (the zero header: a plain packet).
	Hdr gso.VirtioNetHdr
	// Data is the IP packet (without the virtio_net_hdr).
	Data []byte
}

// Bounds of the segmentation scratch.
const (
	// MaxGSOSegments is the most packets one super-packet may be cut into
	// (a 64 KiB TCP super-packet with an MSS of 64 bytes, or 128-segment
	// UDP_SEGMENT sends). Super-packets that need more are dropped and
	// counted in GSOStats.TooManySegments.
	MaxGSOSegments = 1024
	// maxHeaders bounds the IP + L4 headers replicated in every segment
	// (IPv4 with options and TCP with options: 60 + 60).
	maxHeaders = 120
	// maxSuper bounds one super-packet: an IPv6 header and a 64 KiB payload.
	maxSuper = 40 + 65535
	// gsoScratch holds the segments of at least one super-packet of any
	// shape: payload + one MSS of slack for the last segment + the
	// replicated headers.
	gsoScratch = 2*maxSuper + MaxGSOSegments*maxHeaders
)

// GSOStats counts the software segmentation of TransmitGSO. Every packet
// TransmitGSO takes is in SuperPackets or Plain, or in one error counter;
// every segment produced is transmitted (and counted by Transmit) or in
// DroppedSegments.
type GSOStats struct {
	// SuperPackets counts GSO super-packets segmented.
	SuperPackets uint64 `json:"super_packets"`
	// Segments counts the packets cut from them.
	Segments uint64 `json:"segments"`
	// Plain counts non-GSO packets passed through.
	Plain uint64 `json:"plain"`
	// Checksummed counts the Plain packets whose partial checksum
	// (gso.FlagNeedsCsum) was finished.
	Checksummed uint64 `json:"checksummed"`
	// DroppedSegments counts segments produced but never queued: dropped
	// with DropGSOPending (a busy uplink) or because the device failed.
	DroppedSegments uint64 `json:"dropped_segments"`
	// ErrShort counts packets dropped as shorter than a header or length
	// they declare (gso.ErrShortPacket).
	ErrShort uint64 `json:"err_short"`
	// ErrBadHeader counts packets dropped for an inconsistent
	// virtio_net_hdr or IP/L4 header (gso.ErrBadHeader).
	ErrBadHeader uint64 `json:"err_bad_header"`
	// ErrUnsupported counts packets dropped for using what is not
	// segmented (gso.ErrUnsupported: UFO, IPv6 extension headers, ...).
	ErrUnsupported uint64 `json:"err_unsupported"`
	// ErrTooManySegments counts super-packets that need more than
	// MaxGSOSegments segments.
	ErrTooManySegments uint64 `json:"err_too_many_segments"`
	// ErrSegmentTooLong counts super-packets whose segments would be
	// longer than the device MTU, and plain packets longer than it.
	ErrSegmentTooLong uint64 `json:"err_segment_too_long"`
}

// Errors sums the error counters.
func (s GSOStats) Errors() uint64 {
	return s.ErrShort + s.ErrBadHeader + s.ErrUnsupported + s.ErrTooManySegments + s.ErrSegmentTooLong
}

// gsoTx is the segmentation state of a device: preallocated scratch the
// segments are cut into, and the segments not yet taken by Transmit.
type gsoTx struct {
	// mu serialises TransmitGSO (and DropGSOPending) and guards the
	// fields below but the counters; Transmit (txPath.mu) runs under it.
	mu      sync.Mutex
	scratch []byte   // allocated on the first TransmitGSO
	used    int      // bytes of scratch holding pending segments
	pend    [][]byte // segments cut, not yet taken by Transmit (views into scratch)
	next    int      // pend[next:] are still to transmit
	session uint8    // the session pend's segments go on
	out     [][]byte // Segment's output buffers
	sizes   []int

	superPackets, segments, plain, checksummed, dropped atomic.Uint64
	errShort, errBad, errUnsupported, errTooMany        atomic.Uint64
	errTooLong                                          atomic.Uint64
}

func (g *gsoTx) stats() GSOStats {
	return GSOStats{
		SuperPackets:       g.superPackets.Load(),
		Segments:           g.segments.Load(),
		Plain:              g.plain.Load(),
		Checksummed:        g.checksummed.Load(),
		DroppedSegments:    g.dropped.Load(),
		ErrShort:           g.errShort.Load(),
		ErrBadHeader:       g.errBad.Load(),
		ErrUnsupported:     g.errUnsupported.Load(),
		ErrTooManySegments: g.errTooMany.Load(),
		ErrSegmentTooLong:  g.errTooLong.Load(),
	}
}

// TransmitGSO transmits packets read from a TUN with IFF_VNET_HDR: each
// super-packet is cut into MTU-sized packets (gso.Segment: headers
// replicated and fixed up, checksums computed) in scratch memory the
// device owns, partial checksums are finished, and the results go to
// Transmit in batches (one doorbell per batch), several super-packets per
// batch. It returns how many entries of pkts it took: their segments were
// queued, are pending in the device's scratch, or the packet was malformed
// and is counted in GSOStats. The caller may reuse the taken packets'
// memory at once.
//
// ErrBusy means the uplink is full and segments are still pending (the
// packets taken may be all of pkts): call TransmitGSO again after
// completions with the packets not taken, or none, until it returns nil;
// or give up with DropGSOPending. Any other error (ErrDown) drops the
// pending segments, counted in GSOStats.DroppedSegments.
//
// Calls are serialised; no allocation happens after the first call.
// TransmitGSO sends on session 0; TransmitGSOSession on another.
func (d *Device) TransmitGSO(pkts []GSOPacket) (int, error) {
	return d.TransmitGSOSession(0, pkts)
}

// TransmitGSOSession is TransmitGSO on session number session (see
// TransmitSession).
// The device has one segment scratch: segments another session's call
// left pending (after ErrBusy) go first, on their own session, and this
// call takes nothing (ErrBusy) until they are queued; DropGSOPending
// drops them whichever session they are.
func (d *Device) TransmitGSOSession(session uint8, pkts []GSOPacket) (int, error) {
	if _, ok := d.framer.wire(session); !ok {
		return 0, fmt.Errorf("mhinet: transmit on session %d (base %d, %v): %w", session, d.framer.base(), d.cfg.Format, ErrSession)
	}
	g := &d.gsoTx
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.scratch == nil {
		g.scratch = make([]byte, gsoScratch)
		g.pend = make([][]byte, 0, MaxGSOSegments)
		g.out = make([][]byte, MaxGSOSegments)
		g.sizes = make([]int, MaxGSOSegments)
	}
	if err := d.flushGSO(); err != nil {
		return 0, err
	}
	g.session = session
	mtu := d.MTU()
	taken := 0
	for taken < len(pkts) {
		p := &pkts[taken]
		segs, stride, err := gsoLayout(p)
		if err != nil {
			g.countErr(err)
			taken++
			continue
		}
		need := segs * stride
		if need > len(g.scratch) {
			// Only a plain packet far over any MTU gets here.
			g.errTooLong.Add(1)
			taken++
			continue
		}
		if need > len(g.scratch)-g.used || segs > cap(g.pend)-len(g.pend) {
			// Full: send what is cut so far, then start over.
			if err := d.flushGSO(); err != nil {
				return taken, err
			}
		}
		base := g.scratch[g.used : g.used+need]
		for i := range segs {
			g.out[i] = base[i*stride : (i+1)*stride : (i+1)*stride]
		}
		n, err := gso.Segment(p.Data, p.Hdr, g.out[:segs], g.sizes[:segs])
		if err != nil {
			g.countErr(err)
			taken++
			continue
		}
		if g.sizes[0] > mtu {
			g.errTooLong.Add(1)
			taken++
			continue
		}
		for i := range n {
			g.pend = append(g.pend, g.out[i][:g.sizes[i]])
		}
		g.used += need
		switch {
		case p.Hdr.GSOType != gso.GSONone:
			g.superPackets.Add(1)
			g.segments.Add(uint64(n))
		case p.Hdr.Flags&gso.FlagNeedsCsum != 0:
			g.plain.Add(1)
			g.checksummed.Add(1)
		default:
			g.plain.Add(1)
		}
		taken++
	}
	return taken, d.flushGSO()
}

// gsoLayout returns how many segments p becomes and the scratch each
// needs: its largest segment (headers plus gso_size), or the packet for a
// single one.
func gsoLayout(p *GSOPacket) (segs, stride int, err error) {
	segs, err = gso.Count(p.Data, p.Hdr)
	if err != nil {
		return 0, 0, err
	}
	if segs > MaxGSOSegments {
		return 0, 0, gso.ErrTooManySegments
	}
	if segs == 1 {
		return 1, len(p.Data), nil
	}
	// Count validated the headers these lengths come from.
	hdr := 40
	if p.Data[0]>>4 == 4 {
		hdr = int(p.Data[0]&0x0f) * 4
	}
	switch p.Hdr.GSOType &^ gso.GSOECN {
	case gso.GSOTCPv4, gso.GSOTCPv6:
		hdr += int(p.Data[hdr+12]>>4) * 4
	default:
		hdr += 8
	}
	return segs, hdr + int(p.Hdr.GSOSize), nil
}

// flushGSO hands the pending segments to Transmit; called with g.mu held.
// Once all are taken the scratch is free again.
func (d *Device) flushGSO() error {
	g := &d.gsoTx
	for g.next < len(g.pend) {
		n, err := d.TransmitSession(g.session, g.pend[g.next:])
		g.next += n
		if err == nil {
			continue
		}
		if !errors.Is(err, ErrBusy) {
			g.dropPending()
		}
		return err
	}
	g.resetPending()
	return nil
}

func (g *gsoTx) dropPending() {
	g.dropped.Add(uint64(len(g.pend) - g.next))
	g.resetPending()
}

func (g *gsoTx) resetPending() {
	clear(g.pend)
	g.pend, g.next, g.used = g.pend[:0], 0, 0
}

// DropGSOPending drops the segments TransmitGSO cut but could not queue
// (after ErrBusy), counting them in GSOStats.DroppedSegments, and returns
// how many there were.
func (d *Device) DropGSOPending() int {
	g := &d.gsoTx
	g.mu.Lock()
	defer g.mu.Unlock()
	n := len(g.pend) - g.next
	g.dropPending()
	return n
}

// countErr counts a packet Count or Segment refused, by reason.
func (g *gsoTx) countErr(err error) {
	switch {
	case errors.Is(err, gso.ErrTooManySegments):
		g.errTooMany.Add(1)
	case errors.Is(err, gso.ErrShortPacket):
		g.errShort.Add(1)
	case errors.Is(err, gso.ErrUnsupported):
		g.errUnsupported.Add(1)
	default:
		g.errBad.Add(1)
	}
}
