package ntb

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
	var first error
	fail := func(err error) {
		*p.Stats.counter(err)++
		if first == nil {
			first = err
		}
	}
	if len(b) < 4 {
		fail(ErrShort)
		return 0, first
	}
	var f Format
	switch le.Uint32(b) {
	case SigNTH16:
		f = NTB16
	case SigNTH32:
		if p.Only16 {
			fail(ErrBadSignature)
			return 0, first
		}
		f = NTB32
	default:
		fail(ErrBadSignature)
		return 0, first
	}

	var nthLen, ndpHdr, entLen, ndpMin uint64
	var blockLen, ndpIdx uint64
	ips := SigIPS16
	if f == NTB16 {
		nthLen, ndpHdr, entLen, ndpMin = NTH16Len, NDP16HeaderLen, NDP16EntryLen, NDP16MinLen
	} else {
		nthLen, ndpHdr, entLen, ndpMin = NTH32Len, NDP32HeaderLen, NDP32EntryLen, NDP32MinLen
		ips = SigIPS32
	}
	if uint64(len(b)) < nthLen+ndpHdr {
		fail(ErrShort)
		return 0, first
	}
	if f == NTB16 {
		blockLen, ndpIdx = uint64(le.Uint16(b[8:])), uint64(le.Uint16(b[10:]))
	} else {
		blockLen, ndpIdx = uint64(le.Uint32(b[8:])), uint64(le.Uint32(b[12:]))
	}
	if blockLen > uint64(len(b)) || blockLen < nthLen+ndpHdr {
		fail(ErrBadBlockLength)
		return 0, first
	}
	blk := b[:blockLen]
	p.Stats.NTBs++
	seq := le.Uint16(b[6:])
	if p.seqSeen && seq != p.lastSeq+1 {
		p.Stats.SequenceGaps++
	}
	p.lastSeq, p.seqSeen = seq, true

	// NDPs and datagrams that overlap neither each other nor the NTH fit in
	// this many bytes; it bounds the entries scanned and the bytes delivered.
	budget := blockLen - nthLen
	delivered := 0
	var visited [MaxNDPs]uint64
	nVisited := 0

walk:
	for {
		if ndpIdx < nthLen || ndpIdx+ndpHdr > blockLen {
			fail(ErrBadNDPIndex)
			break
		}
		for _, v := range visited[:nVisited] {
			if v == ndpIdx {
				fail(ErrNDPLoop)
				break walk
			}
		}
		if nVisited == MaxNDPs {
			fail(ErrTooManyNDPs)
			break
		}
		visited[nVisited] = ndpIdx
		nVisited++
		p.Stats.NDPs++

		ndp := blk[ndpIdx:]
		sig := le.Uint32(ndp)
		ndpLen := uint64(le.Uint16(ndp[4:]))
		var next uint64
		if f == NTB16 {
			next = uint64(le.Uint16(ndp[6:]))
		} else {
			next = uint64(le.Uint32(ndp[8:]))
		}
		switch {
		case ndpLen < ndpMin || ndpLen > blockLen-ndpIdx:
			fail(ErrBadNDPLength)
		case ndpLen > budget:
			fail(ErrOverlap)
			break walk
		case sig&sigLowMask != ips:
			budget -= ndpLen
			p.Stats.SkippedNDPs++
		default:
			budget -= ndpLen
			sid := uint8(sig >> 24)
			count := (ndpLen-ndpHdr)/entLen - 1
			ent := ndp[ndpHdr:ndpLen]
		entries:
			for k := uint64(0); k < count; k++ {
				e := ent[k*entLen:]
				var idx, n uint64
				if f == NTB16 {
					idx, n = uint64(le.Uint16(e)), uint64(le.Uint16(e[2:]))
				} else {
					idx, n = uint64(le.Uint32(e)), uint64(le.Uint32(e[4:]))
				}
				switch {
				case idx == 0 && n == 0:
					break entries
				case idx == 0 || n == 0:
					fail(ErrZeroLength)
					break entries
				case idx < nthLen || idx > blockLen || n > blockLen-idx:
					fail(ErrDatagramOutOfBounds)
					continue
				}
				d := blk[idx : idx+n : idx+n]
				if !p.AnyProtocol {
					if v := d[0] >> 4; v != 4 && v != 6 {
						fail(ErrBadIPVersion)
						continue
					}
				}
				if n > budget {
					fail(ErrOverlap)
					continue
				}
				budget -= n
				delivered++
				p.Stats.Datagrams++
				p.Stats.Bytes += n
				fn(d, sid)
			}
		}
		if next == 0 {
			break
		}
		ndpIdx = next
	}
	return delivered, first
}
