package protocol

// ConfigSize is the size of the served PCI configuration space: 256 bytes,
// so QEMU treats the function as conventional PCI.
const ConfigSize = 256

// Configuration-space offsets of the function the server presents: the
// type-0 header's fields, and where the server places its capabilities,
// which the client programs without walking the capability list.
const (
	CfgVendorID    = 0x00
	CfgDeviceID    = 0x02
	CfgCommand     = 0x04
	CfgStatus      = 0x06
	CfgRevision    = 0x08
	CfgClassProg   = 0x09
	CfgBAR0        = 0x10
	CfgBAR1        = 0x14
	CfgBAR2        = 0x18
	CfgBAR3        = 0x1c
	CfgSubVendorID = 0x2c
	CfgSubDeviceID = 0x2e
	CfgCapPtr      = 0x34
	CfgIntLine     = 0x3c
	CfgIntPin      = 0x3d
	// CfgMSI is the offset of the MSI capability (64-bit, no per-vector
	// masking): control at +2, address at +4/+8, data at +12.
	CfgMSI = 0x40
	// CfgMSIX is the offset of the MSI-X capability: control at +2 (table
	// size, function mask, enable), table offset/BIR at +4, PBA
	// offset/BIR at +8. The table and the PBA live in BAR2.
	CfgMSIX = 0x50
)
