package vfiouser

import (
	"encoding/binary"
	"sync/atomic"

	"github.com/gomhi/gomhi/pcigeneric/vfiouser/protocol"
)

// The PCI power-management capability (PCI PM 1.2) of the served function:
// the modem supports D0 and D3hot and signals PME from both, which is what
// Linux's mhi_pci_generic asks (pci_pme_capable(pdev, PCI_D3hot)) before
// it enables runtime PM with autosuspend. PowerState in PMCSR is honoured:
// in D3hot the function answers only in configuration space, BAR0 reads
// return all ones and writes are dropped (each counted), as a PCI function
// in D3hot does.
const (
	// cfgPM is the offset of the PM capability: PMC at +2, PMCSR at +4.
	cfgPM = 0x60
	// pmCapability is PMC: version 3 (PCI PM 1.2), PME from D0 and D3hot.
	pmCapability = 0x0003 | 1<<11 | 1<<14
	// PMCSR fields.
	pmcsrStateMask   = 0x0003
	pmcsrNoSoftReset = 1 << 3
	pmcsrPMEEnable   = 1 << 8
	pmcsrPMEStatus   = 1 << 15
	// Power states of PMCSR.PowerState.
	powerD0    = 0
	powerD3Hot = 3
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
	c.b[protocol.CfgMSIX+1] = cfgPM // MSI-X → PM
	c.b[cfgPM] = 0x01               // PM capability ID
	c.b[cfgPM+1] = 0                // last capability
	binary.LittleEndian.PutUint16(c.b[cfgPM+2:], pmCapability)
	binary.LittleEndian.PutUint16(c.b[cfgPM+4:], pmcsrNoSoftReset) // D0
	// PowerState and PME_En are writable; PME_Status is write-1-to-clear
	// (pmWrite).
	binary.LittleEndian.PutUint16(c.wmask[cfgPM+4:], pmcsrStateMask|pmcsrPMEEnable)
}

// pmWrite finishes a configuration write that may have touched PMCSR: a
// PowerState the function does not support (D1, D2) leaves the old one,
// PME_Status clears where a 1 was written, and a change between D0 and
// D3hot is counted. old is PMCSR before the write; c.mu is held.
func (c *configSpace) pmWrite(off int, p []byte, old uint16) {
	if off > cfgPM+5 || off+len(p) <= cfgPM+4 {
		return
	}
	cur := binary.LittleEndian.Uint16(c.b[cfgPM+4:])
	if st := cur & pmcsrStateMask; st != powerD0 && st != powerD3Hot {
		cur = cur&^pmcsrStateMask | old&pmcsrStateMask
	}
	// The written bytes of PMCSR's high half: a 1 in PME_Status clears it.
	if i := cfgPM + 5 - off; i >= 0 && i < len(p) && p[i]&(pmcsrPMEStatus>>8) != 0 {
		cur &^= pmcsrPMEStatus
	}
	binary.LittleEndian.PutUint16(c.b[cfgPM+4:], cur)
	if c.pm == nil {
		return
	}
	switch was, now := old&pmcsrStateMask, cur&pmcsrStateMask; {
	case was == powerD0 && now == powerD3Hot:
		c.pm.d3.Add(1)
	case was == powerD3Hot && now == powerD0:
		c.pm.d0.Add(1)
	}
}

// powerState returns PMCSR.PowerState.
func (c *configSpace) powerState() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return int(binary.LittleEndian.Uint16(c.b[cfgPM+4:]) & pmcsrStateMask)
}

// inD3 reports, and counts, a BAR0 access in D3hot.
func (c *configSpace) inD3() bool {
	if c.powerState() != powerD3Hot {
		return false
	}
	if c.pm != nil {
		c.pm.blocked.Add(1)
	}
	return true
}
