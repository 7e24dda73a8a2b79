package ep

import (
	"fmt"

	"github.com/gomhi/gomhi/mhi"
)

// RegisterName names the register at byte offset off of the mock modem's
// register space, for access logs: an MHI control register
// ("MHICTRL"), a BHI or BHIe register ("BHI_EXECENV"), a doorbell half
// ("CHDB[100].lo", "ERDB[1].hi", "CRDB_LOWER"), or "reserved+0x…".
func RegisterName(off uint32) string {
	for _, r := range mhi.MHIRegisters {
		if r.Offset == off {
			return r.Name
		}
	}
	half := func(o uint32) string {
		if o%mhi.DoorbellStride == 0 {
			return "lo"
		}
		return "hi"
	}
	switch {
	case off >= ChannelDoorbellOffset && off < ChannelDoorbellOffset+mhi.MaxDoorbellChannels*mhi.DoorbellStride:
		rel := off - ChannelDoorbellOffset
		return fmt.Sprintf("CHDB[%d].%s", rel/mhi.DoorbellStride, half(rel))
	case off >= EventDoorbellOffset && off < EventDoorbellOffset+mhi.MaxDoorbellChannels*mhi.DoorbellStride:
		rel := off - EventDoorbellOffset
		return fmt.Sprintf("ERDB[%d].%s", rel/mhi.DoorbellStride, half(rel))
	case off >= BHIOffset && off < BHIOffset+mhi.BHISize:
		rel := off - BHIOffset
		for _, r := range mhi.BHIRegisters {
			if r.Offset == rel {
				return r.Name
			}
		}
		switch {
		case rel >= mhi.BHIMSMHWID0 && rel < mhi.BHIMSMHWID0+4*mhi.BHIMSMHWIDCount:
			return fmt.Sprintf("BHI_MSMHWID[%d]", (rel-mhi.BHIMSMHWID0)/4)
		case rel >= mhi.BHIOEMPKHash0 && rel < mhi.BHIOEMPKHash0+4*mhi.BHIOEMPKHashRegs:
			return fmt.Sprintf("BHI_OEMPKHASH[%d]", (rel-mhi.BHIOEMPKHash0)/4)
		}
		return fmt.Sprintf("BHI+0x%x", rel)
	case off >= BHIEOffset && off < BHIEOffset+mhi.BHIESize:
		return fmt.Sprintf("BHIE+0x%x", off-BHIEOffset)
	case off >= DebugOffset && off < DebugOffset+DebugSize:
		return fmt.Sprintf("DEBUG+0x%x", off-DebugOffset)
	}
	return fmt.Sprintf("reserved+0x%x", off)
}
