// Package lend is the layout of gomhi's zero-copy lending protocol between
// a host's network device (mhinet) and the mock modem's IP data function
// (mhi/ep): which host buffers are lent and the ring through which the
// device hands them back. It is not part of the MHI specification.
package lend

// Region describes a host's zero-copy transmit slots and the release
// ring through which a device hands them back. It is gomhi's model of the
// control message a real host would send its modem (mhinet writes it,
// the mock modem reads it; not part of the MHI specification). All
// addresses are IOVAs, all words little-endian.
//
// Slot i is [DataIOVA+i*SlotSize, +SlotSize); its packet starts Headroom
// bytes in. The host writes the 16-bit tag of each lending into the word
// at TagIOVA+4*i before queuing the slot. The device, when done with a
// slot, writes the entry slot | tag<<16 at RingIOVA+4*(prod mod
// RingEntries) and then prod+1 to the word at ProdIOVA; the host writes
// how far it has read to ConsIOVA.
type Region struct {
	DataIOVA    uint64 `json:"data_iova"`
	SlotSize    int    `json:"slot_size"`
	Slots       int    `json:"slots"`
	Headroom    int    `json:"headroom"`
	TagIOVA     uint64 `json:"tag_iova"`
	ProdIOVA    uint64 `json:"prod_iova"`
	ConsIOVA    uint64 `json:"cons_iova"`
	RingIOVA    uint64 `json:"ring_iova"`
	RingEntries int    `json:"ring_entries"`
}
