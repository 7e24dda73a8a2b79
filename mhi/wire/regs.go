package wire

// MHI control register offsets in the MHI BAR, as seen by the host.
const (
	RegMHIREGLEN          = 0x00
	RegMHIVER             = 0x08
	RegMHICFG             = 0x10
	RegCHDBOFF            = 0x18
	RegERDBOFF            = 0x20
	RegBHIOFF             = 0x28
	RegBHIEOFF            = 0x2C
	RegDEBUGOFF           = 0x30
	RegMHICTRL            = 0x38
	RegMHISTATUS          = 0x48
	RegCCABAPLower        = 0x58
	RegCCABAPHigher       = 0x5C
	RegECABAPLower        = 0x60
	RegECABAPHigher       = 0x64
	RegCRCBAPLower        = 0x68
	RegCRCBAPHigher       = 0x6C
	RegCRDBLower          = 0x70
	RegCRDBHigher         = 0x74
	RegMHICTRLBASELower   = 0x80
	RegMHICTRLBASEHigher  = 0x84
	RegMHICTRLLIMITLower  = 0x88
	RegMHICTRLLIMITHigher = 0x8C
	RegMHIDATABASELower   = 0x98
	RegMHIDATABASEHigher  = 0x9C
	RegMHIDATALIMITLower  = 0xA0
	RegMHIDATALIMITHigher = 0xA4
	RegSOCRESETREQ        = 0xB0
	RegSOCHWVERSION       = 0x224
)

// Field layout of MHICFG.
const (
	MHICFGNCHMask    = 0x000000FF
	MHICFGNHWCHMask  = 0x0000FF00
	MHICFGNHWCHShift = 8
	MHICFGNERMask    = 0x00FF0000
	MHICFGNERShift   = 16
	MHICFGNHWERMask  = 0xFF000000
	MHICFGNHWERShift = 24
)

// Field layout of MHICTRL and MHISTATUS.
const (
	MHICTRLStateMask  = 0xFF00
	MHICTRLStateShift = 8
	MHICTRLReset      = 1 << 1

	MHISTATUSStateMask  = 0xFF00
	MHISTATUSStateShift = 8
	MHISTATUSSysErr     = 1 << 2
	MHISTATUSReady      = 1 << 0
)

// SOCResetReqBit requests a SoC reset when written to MHI_SOC_RESET_REQ.
const SOCResetReqBit = 1

// MHIVersion1 is the MHIVER value of an MHI 1.0 device.
const MHIVersion1 = 0x01000000

// DoorbellStride is the distance in bytes between two doorbells of an array.
const DoorbellStride = 8

// MaxDoorbellChannels is the number of channel doorbell slots the host
// requires room for (slot 127 is the device-wake doorbell).
const MaxDoorbellChannels = 128

// WakeDoorbellChannel is the channel-doorbell slot used for device wake.
const WakeDoorbellChannel = 127

// Register describes one named register for dumps.
type Register struct {
	Name   string
	Offset uint32
	Block  string // "mhi", "bhi" or "bhie"
}

// MHIRegisters lists the MHI control registers in address order.
var MHIRegisters = []Register{
	{"MHIREGLEN", RegMHIREGLEN, "mhi"},
	{"MHIVER", RegMHIVER, "mhi"},
	{"MHICFG", RegMHICFG, "mhi"},
	{"CHDBOFF", RegCHDBOFF, "mhi"},
	{"ERDBOFF", RegERDBOFF, "mhi"},
	{"BHIOFF", RegBHIOFF, "mhi"},
	{"BHIEOFF", RegBHIEOFF, "mhi"},
	{"DEBUGOFF", RegDEBUGOFF, "mhi"},
	{"MHICTRL", RegMHICTRL, "mhi"},
	{"MHISTATUS", RegMHISTATUS, "mhi"},
	{"CCABAP_LOWER", RegCCABAPLower, "mhi"},
	{"CCABAP_HIGHER", RegCCABAPHigher, "mhi"},
	{"ECABAP_LOWER", RegECABAPLower, "mhi"},
	{"ECABAP_HIGHER", RegECABAPHigher, "mhi"},
	{"CRCBAP_LOWER", RegCRCBAPLower, "mhi"},
	{"CRCBAP_HIGHER", RegCRCBAPHigher, "mhi"},
	{"CRDB_LOWER", RegCRDBLower, "mhi"},
	{"CRDB_HIGHER", RegCRDBHigher, "mhi"},
	{"MHICTRLBASE_LOWER", RegMHICTRLBASELower, "mhi"},
	{"MHICTRLBASE_HIGHER", RegMHICTRLBASEHigher, "mhi"},
	{"MHICTRLLIMIT_LOWER", RegMHICTRLLIMITLower, "mhi"},
	{"MHICTRLLIMIT_HIGHER", RegMHICTRLLIMITHigher, "mhi"},
	{"MHIDATABASE_LOWER", RegMHIDATABASELower, "mhi"},
	{"MHIDATABASE_HIGHER", RegMHIDATABASEHigher, "mhi"},
	{"MHIDATALIMIT_LOWER", RegMHIDATALIMITLower, "mhi"},
	{"MHIDATALIMIT_HIGHER", RegMHIDATALIMITHigher, "mhi"},
	{"MHI_SOC_RESET_REQ", RegSOCRESETREQ, "mhi"},
	{"SOC_HW_VERSION", RegSOCHWVERSION, "mhi"},
}
