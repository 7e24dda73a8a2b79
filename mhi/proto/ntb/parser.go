package ntb

import "slices"

// Parser splits NTBs received from a device into datagrams. The zero value
// accepts NTB16 and NTB32 and checks that every datagram is IPv4 or IPv6.
//
// Accepted input follows Linux's mhi_wwan_mbim receive path: the NTB must
// hold an NTH and an NDP header, carry the NCMH (or, unless Only16, ncmh)
// signature, and its block length must not exceed the received length;
// each NDP in the wNextNdpIndex chain needs wLength ≥ 16 (NDP32: 32) and an
// IPS signature in its low 24 bits (other NDPs are skipped and counted),
// its byte 3 being the session id; an NDP of wLength L holds (L−8)/4 − 1
// (NDP32: (L−16)/8 − 1) entries read up to the first entry with a zero
// index or length; a datagram's first nibble decides IPv4 (4) or IPv6 (6).
//
// In addition, because the device is untrusted, a Parser checks that every
// NDP and datagram lies inside the block and that datagrams do not start
// inside the NTH, stops an NDP chain that loops or exceeds MaxNDPs, and
// stops once the NDPs and datagrams would claim more bytes than the block
// holds (see ErrOverlap). Datagram and NDP alignment are not
// checked.
type Parser struct {
	// Only16 rejects NTH32 blocks with ErrBadSignature, as mhi_wwan_mbim does.
	Only16 bool
	// AnyProtocol delivers datagrams whatever their first nibble instead of
	// counting those that are not IPv4 or IPv6 as ErrBadIPVersion.
	AnyProtocol bool
	// Stats accumulates over all Parse calls.
	Stats Stats

	lastSeq uint16
	seqSeen bool
}

// Parse walks one NTB in b and calls fn for every valid datagram, in NDP
// chain order and entry order. The datagram is a view into b (capacity
// clipped to its length) that is valid only while the caller keeps b
// unchanged; sid is the session id from the NDP signature. Parse never
// panics and does not allocate.
//
// Malformed parts are dropped and counted in p.Stats; valid datagrams before
// and after them are still delivered where the structure allows. Parse
// returns the number of datagrams delivered and the first problem found
// (one of the parse error sentinels, unwrapped), or nil.
func (p *Parser) Parse(b []byte, fn func(datagram []byte, sid uint8)) (int, error) {
	w := ntbWalk{p: p}
	if ndpIdx, ok := w.readNTH(b); ok {
		w.walkNDPs(ndpIdx, fn)
	}
	return w.delivered, w.first
}

// ntbLayout is what differs between NTB16 and NTB32: the sizes of the NTH,
// of an NDP's header and entries, the smallest NDP, the IPS signature.
type ntbLayout struct {
	nthLen, ndpHdr, entLen, ndpMin uint64
	ips                            uint32
}

var (
	layout16 = ntbLayout{nthLen: NTH16Len, ndpHdr: NDP16HeaderLen, entLen: NDP16EntryLen, ndpMin: NDP16MinLen, ips: SigIPS16}
	layout32 = ntbLayout{nthLen: NTH32Len, ndpHdr: NDP32HeaderLen, entLen: NDP32EntryLen, ndpMin: NDP32MinLen, ips: SigIPS32}
)

// ntbWalk is the state of one Parse call.
type ntbWalk struct {
	p     *Parser
	ntb32 bool // the block is an NTB32 (else an NTB16)
	ntbLayout
	blk      []byte // the block: the input up to the NTH's block length
	blockLen uint64
	// budget is the bytes that NDPs and datagrams overlapping neither
	// each other nor the NTH can still take; it bounds the entries
	// scanned and the bytes delivered.
	budget    uint64
	delivered int
	first     error // the first problem found
}

// fail counts a problem and keeps it if it is the first.
func (w *ntbWalk) fail(err error) {
	*w.p.Stats.counter(err)++
	if w.first == nil {
		w.first = err
	}
}

// readNTH checks the NTH at the start of b (signature, hence format; the
// NTH and an NDP header present; block length within b), counts the block
// and its sequence number, and returns the index of the first NDP. ok is
// false when the whole input is rejected.
func (w *ntbWalk) readNTH(b []byte) (ndpIdx uint64, ok bool) {
	if len(b) < 4 {
		w.fail(ErrShort)
		return 0, false
	}
	switch le.Uint32(b) {
	case SigNTH16:
		w.ntb32, w.ntbLayout = false, layout16
	case SigNTH32:
		if w.p.Only16 {
			w.fail(ErrBadSignature)
			return 0, false
		}
		w.ntb32, w.ntbLayout = true, layout32
	default:
		w.fail(ErrBadSignature)
		return 0, false
	}
	if uint64(len(b)) < w.nthLen+w.ndpHdr {
		w.fail(ErrShort)
		return 0, false
	}
	var blockLen uint64
	if !w.ntb32 {
		blockLen, ndpIdx = uint64(le.Uint16(b[8:])), uint64(le.Uint16(b[10:]))
	} else {
		blockLen, ndpIdx = uint64(le.Uint32(b[8:])), uint64(le.Uint32(b[12:]))
	}
	if blockLen > uint64(len(b)) || blockLen < w.nthLen+w.ndpHdr {
		w.fail(ErrBadBlockLength)
		return 0, false
	}
	w.blk, w.blockLen = b[:blockLen], blockLen
	w.budget = blockLen - w.nthLen
	w.p.Stats.NTBs++
	w.p.countSequence(le.Uint16(b[6:]))
	return ndpIdx, true
}

// countSequence counts a gap in the NTH sequence numbers.
func (p *Parser) countSequence(seq uint16) {
	if p.seqSeen && seq != p.lastSeq+1 {
		p.Stats.SequenceGaps++
	}
	p.lastSeq, p.seqSeen = seq, true
}

// walkNDPs follows the NDP chain from ndpIdx: every NDP header must lie in
// the block after the NTH; the chain ends at a zero wNextNdpIndex, a loop,
// MaxNDPs NDPs or an NDP that overlaps what came before.
func (w *ntbWalk) walkNDPs(ndpIdx uint64, fn func(datagram []byte, sid uint8)) {
	var visited [MaxNDPs]uint64
	nVisited := 0
	for {
		if ndpIdx < w.nthLen || ndpIdx+w.ndpHdr > w.blockLen {
			w.fail(ErrBadNDPIndex)
			return
		}
		if slices.Contains(visited[:nVisited], ndpIdx) {
			w.fail(ErrNDPLoop)
			return
		}
		if nVisited == MaxNDPs {
			w.fail(ErrTooManyNDPs)
			return
		}
		visited[nVisited] = ndpIdx
		nVisited++
		w.p.Stats.NDPs++
		next, stop := w.walkNDP(ndpIdx, fn)
		if stop || next == 0 {
			return
		}
		ndpIdx = next
	}
}

// walkNDP checks the NDP whose header is at ndpIdx and delivers the
// datagrams of an IPS NDP. It returns the NDP's wNextNdpIndex, and stop
// when the NDP overlaps what came before (the walk ends there).
func (w *ntbWalk) walkNDP(ndpIdx uint64, fn func(datagram []byte, sid uint8)) (next uint64, stop bool) {
	ndp := w.blk[ndpIdx:]
	sig := le.Uint32(ndp)
	ndpLen := uint64(le.Uint16(ndp[4:]))
	if !w.ntb32 {
		next = uint64(le.Uint16(ndp[6:]))
	} else {
		next = uint64(le.Uint32(ndp[8:]))
	}
	switch {
	case ndpLen < w.ndpMin || ndpLen > w.blockLen-ndpIdx:
		w.fail(ErrBadNDPLength)
	case ndpLen > w.budget:
		w.fail(ErrOverlap)
		return next, true
	case sig&sigLowMask != w.ips:
		w.budget -= ndpLen
		w.p.Stats.SkippedNDPs++
	default:
		w.budget -= ndpLen
		count := (ndpLen-w.ndpHdr)/w.entLen - 1
		w.walkEntries(ndp[w.ndpHdr:ndpLen], count, uint8(sig>>24), fn)
	}
	return next, false
}

// walkEntries reads up to count datagram entries from ent, up to the first
// with a zero index or length, and delivers the datagrams that lie in the
// block after the NTH.
func (w *ntbWalk) walkEntries(ent []byte, count uint64, sid uint8, fn func(datagram []byte, sid uint8)) {
	for k := uint64(0); k < count; k++ {
		e := ent[k*w.entLen:]
		var idx, n uint64
		if !w.ntb32 {
			idx, n = uint64(le.Uint16(e)), uint64(le.Uint16(e[2:]))
		} else {
			idx, n = uint64(le.Uint32(e)), uint64(le.Uint32(e[4:]))
		}
		switch {
		case idx == 0 && n == 0:
			return
		case idx == 0 || n == 0:
			w.fail(ErrZeroLength)
			return
		case idx < w.nthLen || idx > w.blockLen || n > w.blockLen-idx:
			w.fail(ErrDatagramOutOfBounds)
			continue
		}
		w.deliver(w.blk[idx:idx+n:idx+n], sid, fn)
	}
}

// deliver hands datagram d (not empty, in the block) of session sid to fn
// if it is IPv4 or IPv6 (unless AnyProtocol) and fits in the budget.
func (w *ntbWalk) deliver(d []byte, sid uint8, fn func(datagram []byte, sid uint8)) {
	if !w.p.AnyProtocol {
		if v := d[0] >> 4; v != 4 && v != 6 {
			w.fail(ErrBadIPVersion)
			return
		}
	}
	n := uint64(len(d))
	if n > w.budget {
		w.fail(ErrOverlap)
		return
	}
	w.budget -= n
	w.delivered++
	w.p.Stats.Datagrams++
	w.p.Stats.Bytes += n
	fn(d, sid)
}
