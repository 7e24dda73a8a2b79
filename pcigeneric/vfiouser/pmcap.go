package vfiouser

import (
	"encoding/binary"
	"sync/atomic"
)

// The PCI power-management capability (PCI PM 1.2) of the served function:
// the modem supports D0 and D3hot and signals PME from both, which is what
// Linux's mhi_pci_generic asks (pci_pme_capable(pdev, PCI_D3hot)) before
// it enables runtime PM with autosuspend. PowerState in PMCSR is honoured:
// in D3hot the function answers only in configuration space, BAR0 reads
// return all ones and writes are dropped (each counted), as a PCI function
// in D3hot does.
const (
	// CfgPM is the offset of the PM capability: PMC at +2, PMCSR at +4.
	CfgPM = 0x60
	// PMCapability is PMC: version 3 (PCI PM 1.2), PME from D0 and D3hot.
	PMCapability = 0x0003 | 1<<11 | 1<<14
	// PMCSR fields.
	PMCSRStateMask   = 0x0003
	PMCSRNoSoftReset = 1 << 3
	PMCSRPMEEnable   = 1 << 8
	PMCSRPMEStatus   = 1 << 15
	// Power states of PMCSR.PowerState.
	PowerD0    = 0
	PowerD3Hot = 3
)

// PowerStats counts the function's power-state changes and the BAR0
// accesses refused in D3hot, across sessions.
type PowerStats struct {
	D3HotEntries uint64 `json:"d3hot_entries"`
	D0Entries    uint64 `json:"d0_entries"` // returns to D0 from D3hot
	// D3Accesses counts BAR0 reads and writes that arrived in D3hot.
	D3Accesses uint64 `json:"d3_accesses"`
}

// pmCounters are the PowerStats counters.
type pmCounters struct {
	d3, d0, blocked atomic.Uint64
}

// PowerStats returns the power-management counters.
func (d *ServerDevice) PowerStats() PowerStats {
	return PowerStats{D3HotEntries: d.pm.d3.Load(), D0Entries: d.pm.d0.Load(), D3Accesses: d.pm.blocked.Load()}
}

// initPM lays out the PM capability after MSI-X. c.mu is not needed: the
// space is being built.
func (c *configSpace) initPM() {
	c.b[CfgMSIX+1] = CfgPM // MSI-X → PM
	c.b[CfgPM] = 0x01      // PM capability ID
	c.b[CfgPM+1] = 0       // last capability
	binary.LittleEndian.PutUint16(c.b[CfgPM+2:], PMCapability)
	binary.LittleEndian.PutUint16(c.b[CfgPM+4:], PMCSRNoSoftReset) // D0
	// PowerState and PME_En are writable; PME_Status is write-1-to-clear
	// (pmWrite).
	binary.LittleEndian.PutUint16(c.wmask[CfgPM+4:], PMCSRStateMask|PMCSRPMEEnable)
}

// pmWrite finishes a configuration write that may have touched PMCSR: a
// PowerState the function does not support (D1, D2) leaves the old one,
// PME_Status clears where a 1 was written, and a change between D0 and
// D3hot is counted. old is PMCSR before the write; c.mu is held.
func (c *configSpace) pmWrite(off int, p []byte, old uint16) {
	if off > CfgPM+5 || off+len(p) <= CfgPM+4 {
		return
	}
	cur := binary.LittleEndian.Uint16(c.b[CfgPM+4:])
	if st := cur & PMCSRStateMask; st != PowerD0 && st != PowerD3Hot {
		cur = cur&^PMCSRStateMask | old&PMCSRStateMask
	}
	// The written bytes of PMCSR's high half: a 1 in PME_Status clears it.
	if i := CfgPM + 5 - off; i >= 0 && i < len(p) && p[i]&(PMCSRPMEStatus>>8) != 0 {
		cur &^= PMCSRPMEStatus
	}
	binary.LittleEndian.PutUint16(c.b[CfgPM+4:], cur)
	if c.pm == nil {
		return
	}
	switch was, now := old&PMCSRStateMask, cur&PMCSRStateMask; {
	case was == PowerD0 && now == PowerD3Hot:
		c.pm.d3.Add(1)
	case was == PowerD3Hot && now == PowerD0:
		c.pm.d0.Add(1)
	}
}

// powerState returns PMCSR.PowerState.
func (c *configSpace) powerState() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return int(binary.LittleEndian.Uint16(c.b[CfgPM+4:]) & PMCSRStateMask)
}

// inD3 reports, and counts, a BAR0 access in D3hot.
func (c *configSpace) inD3() bool {
	if c.powerState() != PowerD3Hot {
		return false
	}
	if c.pm != nil {
		c.pm.blocked.Add(1)
	}
	return true
}
