package wire

// BHI register offsets, relative to BHIOFF.
const (
	BHIVersionMinor = 0x00
	BHIVersionMajor = 0x04
	BHIImgAddrLow   = 0x08
	BHIImgAddrHigh  = 0x0C
	BHIImgSize      = 0x10
	BHIImgTxDB      = 0x18
	BHIIntVec       = 0x20
	BHIExecEnv      = 0x28
	BHIStatus       = 0x2C
	BHIErrCode      = 0x30
	BHIErrDbg1      = 0x34
	BHIErrDbg2      = 0x38
	BHIErrDbg3      = 0x3C
	BHISerialNum    = 0x40
	BHISBLAntiRollV = 0x44
	BHINumSeg       = 0x48
	BHIMSMHWID0     = 0x4C // six registers, 4 bytes apart
	BHIOEMPKHash0   = 0x64 // sixteen registers, 4 bytes apart
	BHISize         = 0xC8 // bytes the BHI block spans

	BHIMSMHWIDCount  = 6
	BHIOEMPKHashRegs = 16

	BHIStatusMask    = 0xC0000000
	BHIStatusShift   = 30
	BHIStatusReset   = 0
	BHIStatusSuccess = 2
	BHIStatusError   = 3
	BHITxDBSeqMask   = 0x3FFFFFFF
)

// BHIe register offsets, relative to BHIEOFF.
const (
	BHIEMSMSOCID      = 0x00
	BHIETxVecAddrLow  = 0x2C
	BHIETxVecAddrHigh = 0x30
	BHIETxVecSize     = 0x34
	BHIETxVecDB       = 0x3C
	BHIETxVecStatus   = 0x44
	BHIERxVecAddrLow  = 0x60
	BHIERxVecAddrHigh = 0x64
	BHIERxVecSize     = 0x68
	BHIERxVecDB       = 0x70
	BHIERxVecStatus   = 0x78
	BHIESize          = 0x80
)

// VectorEntrySize is the size of a BHIe vector-table entry: the segment's
// IOVA and its size, both 64-bit little-endian.
const VectorEntrySize = 16

// EDL trigger: the cookie a host writes to channel doorbell 91 (high half,
// then low half) before a SoC reset to make the modem's PBL enter
// emergency download, as Linux's mhi_pci_generic_edl_trigger does.
const (
	EDLCookie       = 0xEDEDEDED
	EDLDoorbellSlot = 91
)

// BHIRegisters lists the BHI registers (offsets relative to BHIOFF).
var BHIRegisters = []Register{
	{"BHI_BHIVERSION_MINOR", BHIVersionMinor, "bhi"},
	{"BHI_BHIVERSION_MAJOR", BHIVersionMajor, "bhi"},
	{"BHI_IMGADDR_LOW", BHIImgAddrLow, "bhi"},
	{"BHI_IMGADDR_HIGH", BHIImgAddrHigh, "bhi"},
	{"BHI_IMGSIZE", BHIImgSize, "bhi"},
	{"BHI_IMGTXDB", BHIImgTxDB, "bhi"},
	{"BHI_INTVEC", BHIIntVec, "bhi"},
	{"BHI_EXECENV", BHIExecEnv, "bhi"},
	{"BHI_STATUS", BHIStatus, "bhi"},
	{"BHI_ERRCODE", BHIErrCode, "bhi"},
	{"BHI_ERRDBG1", BHIErrDbg1, "bhi"},
	{"BHI_ERRDBG2", BHIErrDbg2, "bhi"},
	{"BHI_ERRDBG3", BHIErrDbg3, "bhi"},
	{"BHI_SERIALNU", BHISerialNum, "bhi"},
	{"BHI_SBLANTIROLLVER", BHISBLAntiRollV, "bhi"},
	{"BHI_NUMSEG", BHINumSeg, "bhi"},
}
