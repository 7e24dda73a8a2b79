package vfiouser

import (
	"encoding/binary"
	"sync"

	"github.com/gomhi/gomhi/pcigeneric/vfiouser/protocol"
)

// MSI-X table placement: BAR2 (a 64-bit BAR of msixBARSize bytes) holds
// the table at offset 0 and the pending-bit array at msixPBAOffset.
const (
	msixBAR       = 2
	msixBARSize   = 4096
	msixPBAOffset = 0x800
	// msixEntrySize is the size of one MSI-X table entry.
	msixEntrySize = 16
)

// pciClass is the PCI class code presented: 0xff0000 (unassigned), as the MHI
// modems in mhi_pci_generic's table report.
const pciClass = 0xff0000

// PCIConfig describes the identity and resources of the served function.
type PCIConfig struct {
	Vendor, Device, SubVendor, SubDevice uint16
	Revision                             uint8
	// BARSize is the size of BAR0, a power of two >= 4096.
	BARSize uint64
	// Vectors is the number of MSI vectors (power of two, 1..32); the
	// MSI-X capability offers as many.
	Vectors int
}

// configSpace is an emulated type-0 configuration header with a write mask
// per byte: a write changes only the bits its mask allows, which also
// implements BAR sizing (all-ones in, size mask out).
type configSpace struct {
	mu    sync.Mutex
	b     [protocol.ConfigSize]byte
	wmask [protocol.ConfigSize]byte
	mmc   uint16 // log2 of the vectors offered
	// pm counts power-state changes (pmcap.go); nil in a bare space.
	pm *pmCounters
}

func newConfigSpace(pc PCIConfig) *configSpace {
	c := &configSpace{}
	le := binary.LittleEndian
	le.PutUint16(c.b[protocol.CfgVendorID:], pc.Vendor)
	le.PutUint16(c.b[protocol.CfgDeviceID:], pc.Device)
	le.PutUint16(c.b[protocol.CfgStatus:], 0x0010) // capability list
	c.b[protocol.CfgRevision] = pc.Revision
	class := uint32(pciClass)
	c.b[protocol.CfgClassProg] = byte(class)
	c.b[protocol.CfgClassProg+1] = byte(class >> 8)
	c.b[protocol.CfgClassProg+2] = byte(class >> 16)
	le.PutUint32(c.b[protocol.CfgBAR0:], 0x4) // 64-bit non-prefetchable memory
	le.PutUint32(c.b[protocol.CfgBAR2:], 0x4) // MSI-X table and PBA, likewise
	le.PutUint16(c.b[protocol.CfgSubVendorID:], pc.SubVendor)
	le.PutUint16(c.b[protocol.CfgSubDeviceID:], pc.SubDevice)
	c.b[protocol.CfgCapPtr] = protocol.CfgMSI
	c.b[protocol.CfgIntPin] = 0 // no INTx
	for v := pc.Vectors; v > 1; v >>= 1 {
		c.mmc++
	}
	c.b[protocol.CfgMSI] = 0x05                            // MSI capability ID
	c.b[protocol.CfgMSI+1] = protocol.CfgMSIX              // next: MSI-X
	le.PutUint16(c.b[protocol.CfgMSI+2:], 0x0080|c.mmc<<1) // 64-bit, multiple message capable
	c.b[protocol.CfgMSIX] = 0x11                           // MSI-X capability ID
	c.b[protocol.CfgMSIX+1] = 0                            // last capability
	le.PutUint16(c.b[protocol.CfgMSIX+2:], uint16(pc.Vectors-1))
	le.PutUint32(c.b[protocol.CfgMSIX+4:], msixBAR)               // table at BAR2+0
	le.PutUint32(c.b[protocol.CfgMSIX+8:], msixPBAOffset|msixBAR) // PBA at BAR2+0x800

	mask := func(off int, v uint32, n int) {
		for i := range n {
			c.wmask[off+i] = byte(v >> (8 * i))
		}
	}
	mask(protocol.CfgCommand, 0x0547, 2)                           // IO, memory, bus master, parity, SERR, INTx disable
	mask(0x0c, 0xff, 1)                                            // cache line size
	mask(0x0d, 0xff, 1)                                            // latency timer
	mask(protocol.CfgBAR0, uint32(^(pc.BARSize-1))&0xffff_fff0, 4) // low address bits above the size
	mask(protocol.CfgBAR1, uint32(^(pc.BARSize-1)>>32), 4)         // high half
	mask(protocol.CfgBAR2, ^uint32(msixBARSize-1)&0xffff_fff0, 4)  // MSI-X BAR, low half
	mask(protocol.CfgBAR3, 0xffff_ffff, 4)                         // high half
	mask(protocol.CfgIntLine, 0xff, 1)                             // interrupt line
	mask(protocol.CfgMSI+2, 0x0071, 2)                             // enable, multiple message enable
	mask(protocol.CfgMSI+4, 0xffff_fffc, 4)                        // address low
	mask(protocol.CfgMSI+8, 0xffff_ffff, 4)                        // address high
	mask(protocol.CfgMSI+12, 0xffff, 2)                            // data
	mask(protocol.CfgMSIX+2, 0xc000, 2)                            // enable, function mask
	c.initPM()
	return c
}

// read copies configuration space at off into p; the caller checks bounds.
func (c *configSpace) read(off int, p []byte) {
	c.mu.Lock()
	copy(p, c.b[off:])
	c.mu.Unlock()
}

// write applies p at off through the write mask; the caller checks bounds.
func (c *configSpace) write(off int, p []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	oldPMCSR := binary.LittleEndian.Uint16(c.b[cfgPM+4:])
	defer c.pmWrite(off, p, oldPMCSR)
	for i, v := range p {
		m := c.wmask[off+i]
		c.b[off+i] = c.b[off+i]&^m | v&m
	}
	// Multiple Message Enable never exceeds what the function offers.
	ctl := binary.LittleEndian.Uint16(c.b[protocol.CfgMSI+2:])
	if mme := ctl >> 4 & 7; mme > c.mmc {
		ctl = ctl&^0x70 | c.mmc<<4
		binary.LittleEndian.PutUint16(c.b[protocol.CfgMSI+2:], ctl)
	}
}

// msix returns the MSI-X enable and function-mask bits.
func (c *configSpace) msix() (enabled, masked bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ctl := binary.LittleEndian.Uint16(c.b[protocol.CfgMSIX+2:])
	return ctl&0x8000 != 0, ctl&0x4000 != 0
}

// msi returns the MSI enable bit and the number of enabled vectors.
func (c *configSpace) msi() (enabled bool, vectors int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ctl := binary.LittleEndian.Uint16(c.b[protocol.CfgMSI+2:])
	return ctl&1 != 0, 1 << (ctl >> 4 & 7)
}

// msixTable is BAR2: the MSI-X table the client programs (QEMU emulates
// the table itself and may never touch it) and the pending-bit array,
// which shows the vectors raised while masked through SET_IRQS
// (ACTION_MASK) and not yet delivered.
type msixTable struct {
	mu sync.Mutex
	b  [msixPBAOffset]byte
}

// read copies BAR2 at off into p, the PBA from pending (bit n: vector n);
// the caller checks bounds.
func (t *msixTable) read(off int, p []byte, pending uint32) {
	t.mu.Lock()
	defer t.mu.Unlock()
	clear(p)
	if off < len(t.b) {
		copy(p, t.b[off:])
	}
	var pba [4]byte
	binary.LittleEndian.PutUint32(pba[:], pending)
	for i := range p {
		if k := off + i - msixPBAOffset; k >= 0 && k < len(pba) {
			p[i] = pba[k]
		}
	}
}

// write stores p at off, ignoring the bytes that fall in the read-only
// pending-bit array; the caller checks bounds.
func (t *msixTable) write(off int, p []byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if off < len(t.b) {
		copy(t.b[off:], p)
	}
}
