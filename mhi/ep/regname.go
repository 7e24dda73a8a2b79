package ep

import (
	"fmt"

	"github.com/gomhi/gomhi/mhi/wire"
)

// RegisterName names the register at byte offset off of the mock modem's
// register space, for access logs: an MHI control register
// ("MHICTRL"), a BHI or BHIe register ("BHI_EXECENV"), a doorbell half
// ("CHDB[100].lo", "ERDB[1].hi", "CRDB_LOWER"), or "reserved+0x…".
func RegisterName(off uint32) string {
	for _, r := range wire.MHIRegisters {
		if r.Offset == off {
			return r.Name
		}
	}
	half := func(o uint32) string {
		if o%wire.DoorbellStride == 0 {
			return "lo"
		}
		return "hi"
	}
	switch {
	case off >= ChannelDoorbellOffset && off < ChannelDoorbellOffset+wire.MaxDoorbellChannels*wire.DoorbellStride:
		rel := off - ChannelDoorbellOffset
		return fmt.Sprintf("CHDB[%d].%s", rel/wire.DoorbellStride, half(rel))
	case off >= EventDoorbellOffset && off < EventDoorbellOffset+wire.MaxDoorbellChannels*wire.DoorbellStride:
		rel := off - EventDoorbellOffset
		return fmt.Sprintf("ERDB[%d].%s", rel/wire.DoorbellStride, half(rel))
	case off >= BHIOffset && off < BHIOffset+wire.BHISize:
		rel := off - BHIOffset
		for _, r := range wire.BHIRegisters {
			if r.Offset == rel {
				return r.Name
			}
		}
		switch {
		case rel >= wire.BHIMSMHWID0 && rel < wire.BHIMSMHWID0+4*wire.BHIMSMHWIDCount:
			return fmt.Sprintf("BHI_MSMHWID[%d]", (rel-wire.BHIMSMHWID0)/4)
		case rel >= wire.BHIOEMPKHash0 && rel < wire.BHIOEMPKHash0+4*wire.BHIOEMPKHashRegs:
			return fmt.Sprintf("BHI_OEMPKHASH[%d]", (rel-wire.BHIOEMPKHash0)/4)
		}
		return fmt.Sprintf("BHI+0x%x", rel)
	case off >= BHIEOffset && off < BHIEOffset+wire.BHIESize:
		return fmt.Sprintf("BHIE+0x%x", off-BHIEOffset)
	case off >= DebugOffset && off < DebugOffset+DebugSize:
		return fmt.Sprintf("DEBUG+0x%x", off-DebugOffset)
	}
	return fmt.Sprintf("reserved+0x%x", off)
}
