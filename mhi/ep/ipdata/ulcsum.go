package ipdata

import "github.com/gomhi/gomhi/mhi/proto/qmap"

// ulChecksum returns an uplink QMAP packet as the modem passes it on:
// unchanged, unless its CsumV4 checksum header asks the modem to compute
// the transport checksum (rmnet's EGRESS_MAP_CKSUMV4 offload). Then it
// returns a copy with the checksum computed, in the uplink worker's
// scratch buffer (the transfer may be host memory a modem does not
// write), and computed true. A request the packet cannot satisfy is
// counted (ULCsumBad) and the packet passed on as it came.
func (f *Function) ulChecksum(pk qmap.Packet) (data []byte, computed bool) {
	if !pk.Csum.Valid || f.qmapP.Csum != qmap.CsumV4 {
		return pk.Data, false
	}
	if f.csumBuf == nil {
		f.csumBuf = make([]byte, qmap.MaxPayload)
	}
	n, ok := computeTransportChecksum(f.csumBuf, pk.Data, pk.Csum)
	if !ok {
		f.st.ulCsumBad.Add(1)
		return pk.Data, false
	}
	f.st.ulCsumComputed.Add(1)
	return f.csumBuf[:n], true
}

// computeTransportChecksum copies the IP packet pkt into dst and computes
// its TCP or UDP checksum there as the UL checksum header cs describes:
// the sum runs from cs.Start (the transport header, counted from the IP
// header) to the end of the IP packet, over a pseudo-header for protocol
// UDP (cs.UDP) or TCP, and lands at cs.Start+cs.Offset (an even offset);
// whatever the field held before is ignored. It returns the packet's
// length, or false when the header or the IP packet does not allow it.
func computeTransportChecksum(dst, pkt []byte, cs qmap.Csum) (int, bool) {
	proto := byte(6)
	if cs.UDP {
		proto = 17
	}
	start, field := int(cs.Start), int(cs.Start)+int(cs.Offset)
	var end int
	v6 := false
	switch {
	case len(pkt) >= 20 && pkt[0]>>4 == 4:
		end = int(be.Uint16(pkt[2:]))
		ihl := int(pkt[0]&0x0F) * 4
		if ihl < 20 || start < ihl || pkt[9] != proto || be.Uint16(pkt[6:])&0x3FFF != 0 {
			return 0, false // a bad header, not the transport header, another protocol, a fragment
		}
	case len(pkt) >= 40 && pkt[0]>>4 == 6:
		end, v6 = 40+int(be.Uint16(pkt[4:])), true
		if start < 40 {
			return 0, false
		}
	default:
		return 0, false
	}
	if end > len(pkt) || end > len(dst) || field+2 > end || cs.Offset%2 != 0 {
		return 0, false // an odd offset puts the field across two words of the sum
	}
	copy(dst, pkt[:end])
	l4 := dst[start:end]
	be.PutUint16(dst[field:], 0)
	ph := pseudo4(pkt[12:16], pkt[16:20], proto, len(l4))
	if v6 {
		ph = pseudo6(pkt[8:24], pkt[24:40], proto, len(l4))
	}
	c := checksum(ph, l4)
	if cs.UDP && c == 0 {
		c = 0xFFFF
	}
	be.PutUint16(dst[field:], c)
	return end, true
}
