package mhi

import "github.com/gomhi/gomhi/mhi/wire"

// BHIInfo is what the host reads from the BHI block before using a device.
type BHIInfo struct {
	ExecEnv      wire.ExecEnv `json:"ee"`
	SerialNumber uint32       `json:"serial_number"`
	OEMPKHash    [16]uint32   `json:"oem_pk_hash"`
	Version      [2]uint32    `json:"version"` // major, minor
}

// ReadBHI reads the execution environment, serial number and OEM public-key
// hash from the BHI block. It works in any state.
func (c *Controller) ReadBHI() (BHIInfo, error) {
	var info BHIInfo
	bhi, err := c.bhiBlock()
	if err != nil {
		return info, err
	}
	v, err := c.read(bhi + wire.BHIExecEnv)
	if err != nil {
		return info, err
	}
	info.ExecEnv = wire.ExecEnv(v)
	if info.SerialNumber, err = c.read(bhi + wire.BHISerialNum); err != nil {
		return info, err
	}
	for i := range info.OEMPKHash {
		if info.OEMPKHash[i], err = c.read(bhi + wire.BHIOEMPKHash0 + uint32(4*i)); err != nil {
			return info, err
		}
	}
	if info.Version[0], err = c.read(bhi + wire.BHIVersionMajor); err != nil {
		return info, err
	}
	if info.Version[1], err = c.read(bhi + wire.BHIVersionMinor); err != nil {
		return info, err
	}
	return info, nil
}

// RegValue is one register of a register dump.
type RegValue struct {
	Name   string `json:"name"`
	Block  string `json:"block"`
	Offset uint32 `json:"offset"` // from the start of the BAR
	Value  uint32 `json:"value"`
}

// RegDump reads every named MHI and BHI register, as the kernel's debugfs
// regdump does. It works in any state. The BHI block is read only when
// BHIOFF passes the checks of power-up; otherwise the MHI registers are
// returned with an error wrapping ErrBadDevice.
func (c *Controller) RegDump() ([]RegValue, error) {
	out := make([]RegValue, 0, len(wire.MHIRegisters)+len(wire.BHIRegisters))
	for _, r := range wire.MHIRegisters {
		v, err := c.read(r.Offset)
		if err != nil {
			return out, err
		}
		out = append(out, RegValue{Name: r.Name, Block: r.Block, Offset: r.Offset, Value: v})
	}
	bhi, err := c.bhiBlock()
	if err != nil {
		return out, err
	}
	for _, r := range wire.BHIRegisters {
		v, err := c.read(bhi + r.Offset)
		if err != nil {
			return out, err
		}
		out = append(out, RegValue{Name: r.Name, Block: r.Block, Offset: bhi + r.Offset, Value: v})
	}
	return out, nil
}

// bhiBlock reads MHIREGLEN and BHIOFF now and returns BHIOFF once the whole
// BHI block is known to lie inside the register space (see checkBlock).
func (c *Controller) bhiBlock() (uint32, error) {
	regLen, err := c.read(wire.RegMHIREGLEN)
	if err != nil {
		return 0, err
	}
	bar := c.barSize()
	if err := c.checkRegLen(regLen, bar); err != nil {
		return 0, err
	}
	bhi, err := c.read(wire.RegBHIOFF)
	if err != nil {
		return 0, err
	}
	if err := c.checkBlock("BHIOFF", bhi, wire.BHISize, regLen, bar); err != nil {
		return 0, err
	}
	return bhi, nil
}
