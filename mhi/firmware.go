package mhi

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/gomhi/gomhi/mhi/wire"
)

// ErrFirmware: a firmware download failed: no image for the device's EE,
// the device refused the image (its BHI error code is in the message), or
// it did not answer in time.
var ErrFirmware = errors.New("mhi: firmware download failed")

// Firmware tells the host which images to download to a device that boots
// in the primary boot loader (PBL) or in emergency download (EDL), as
// Linux's mhi_fw_load_handler does with a controller's fw_image and
// edl_image.
type Firmware struct {
	// Load returns the image for the EE the device waits in: wire.EEPBL, the
	// boot loader (Linux's fw_image, e.g. qcom/sdx55m/sbl1.mbn); wire.EEEDL, the
	// flash programmer (edl_image). name is used in messages.
	Load func(ee wire.ExecEnv) (name string, image []byte, err error)
	// FullImage is Linux's fbc_download: the first SBLSize bytes of the
	// PBL image go over BHI, the whole image over BHIe once the device
	// announces EE SBL.
	FullImage bool
	// SBLSize is the part of the image sent over BHI with FullImage (0:
	// the whole image; capped at the image's size).
	SBLSize int
	// SegmentSize is the size of a BHIe segment (0: DefaultSegmentSize).
	SegmentSize int
}

// DefaultSegmentSize is the BHIe segment size unless Firmware.SegmentSize
// or Options.RDDMSegmentSize says otherwise.
const DefaultSegmentSize = 512 << 10

// randomSeq returns a random non-zero 30-bit session or sequence id.
func randomSeq() uint32 {
	var b [4]byte
	for {
		_, _ = rand.Read(b[:])
		if v := binary.LittleEndian.Uint32(b[:]) & wire.BHITxDBSeqMask; v != 0 {
			return v
		}
	}
}

// loadBHI downloads the image for ee (PBL or EDL) over BHI: one DMA buffer
// holding the image, STATUS cleared, IMGADDR, IMGSIZE and a random session
// id written to IMGTXDB, then BHI_STATUS polled until the device reports
// success or error. A device that does not answer in time gets a
// function-level reset before the buffer is freed.
func (c *Controller) loadBHI(ee wire.ExecEnv) error {
	fw := c.fw
	if fw == nil || fw.Load == nil {
		return fmt.Errorf("%s: device in %s needs a firmware download and no firmware is configured: %w: %w", c.name, ee, ErrWrongState, ErrFirmware)
	}
	name, img, err := fw.Load(ee)
	if err != nil {
		return fmt.Errorf("%s: %s image: %w: %w", c.name, ee, ErrFirmware, err)
	}
	if len(img) == 0 || uint64(len(img)) > 0xFFFFFFFF {
		return fmt.Errorf("%s: %s image %s of %d bytes: %w", c.name, ee, name, len(img), ErrFirmware)
	}
	size := len(img)
	full := ee == wire.EEPBL && fw.FullImage
	if full && fw.SBLSize > 0 && fw.SBLSize < size {
		size = fw.SBLSize
	}
	buf, err := c.t.Alloc(size, 4096)
	if err != nil {
		return fmt.Errorf("%s: BHI buffer of %d bytes: %w", c.name, size, err)
	}
	copy(buf.Bytes, img[:size])
	bhi := c.bhiOff
	session := randomSeq()
	c.log.Info("downloading firmware over BHI", "image", name, "ee", ee, "bytes", size, "session", session)
	start := time.Now()
	err = c.bhiWrites([]regWrite{
		{bhi + wire.BHIStatus, 0},
		{bhi + wire.BHIImgAddrHigh, uint32(buf.IOVA >> 32)},
		{bhi + wire.BHIImgAddrLow, uint32(buf.IOVA)},
		{bhi + wire.BHIImgSize, uint32(size)},
		{bhi + wire.BHIImgTxDB, session},
	})
	var st uint32
	if err == nil {
		st, err = c.pollReg(bhi+wire.BHIStatus, c.Timeout(), true, func(v uint32) bool { return v&wire.BHIStatusMask != 0 })
	}
	if errors.Is(err, ErrTimeout) {
		// The device may still read the image: stop it before the buffer
		// goes back.
		if rerr := c.t.Reset(); rerr != nil {
			c.log.Warn("function-level reset after a BHI timeout", "err", rerr)
		}
		err = fmt.Errorf("%s: BHI download of %s (%d bytes): no answer within %v (BHI_STATUS=0x%x): %w: %w", c.name, name, size, c.Timeout(), st, ErrFirmware, err)
	}
	_ = c.t.Free(buf)
	if err != nil {
		c.stats.FirmwareErrors.Add(1)
		return err
	}
	switch (st & wire.BHIStatusMask) >> wire.BHIStatusShift {
	case wire.BHIStatusSuccess:
	case wire.BHIStatusError:
		c.stats.FirmwareErrors.Add(1)
		return fmt.Errorf("%s: BHI download of %s (%d bytes) refused: %s: %w", c.name, name, size, c.bhiErrors(), ErrFirmware)
	default:
		c.stats.FirmwareErrors.Add(1)
		c.stats.BadRegister.Add(1)
		return fmt.Errorf("%s: BHI download of %s: BHI_STATUS 0x%x is neither success nor error: %w: %w", c.name, name, st, ErrFirmware, ErrBadDevice)
	}
	c.stats.FirmwareImages.Add(1)
	c.log.Info("firmware downloaded over BHI", "image", name, "bytes", size, "took", time.Since(start).Round(time.Millisecond))
	if full {
		c.fbcImage, c.fbcName = img, name
	}
	return nil
}

// regWrite is one register write of a sequence.
type regWrite struct{ off, v uint32 }

// bhiWrites performs writes in order.
func (c *Controller) bhiWrites(ws []regWrite) error {
	for _, w := range ws {
		if err := c.write(w.off, w.v); err != nil {
			return err
		}
	}
	return nil
}

// bhiErrors reads ERRCODE and ERRDBG1-3 for a message, as Linux logs them.
func (c *Controller) bhiErrors() string {
	var v [4]uint32
	for i, off := range []uint32{wire.BHIErrCode, wire.BHIErrDbg1, wire.BHIErrDbg2, wire.BHIErrDbg3} {
		v[i], _ = c.read(c.bhiOff + off)
	}
	return fmt.Sprintf("ERRCODE 0x%x ERRDBG1 0x%x ERRDBG2 0x%x ERRDBG3 0x%x", v[0], v[1], v[2], v[3])
}

// bhieBlock reads and checks BHIEOFF: BHIe is used only for a full-image
// download and RDDM, and the block must then lie in the register space.
func (c *Controller) bhieBlock() (uint32, error) {
	off, err := c.read(wire.RegBHIEOFF)
	if err != nil {
		return 0, err
	}
	if err := c.checkBlock("BHIEOFF", off, wire.BHIESize, c.regLen, c.barSize()); err != nil {
		return 0, err
	}
	return off, nil
}

// vectorTable is a BHIe image in DMA memory: its segments and the table
// naming them (the last allocation).
type vectorTable struct {
	segs  []DMABuffer
	table DMABuffer
}

// newVectorTable allocates segments of segSize bytes holding size bytes
// and the table naming each with its full size.
func (c *Controller) newVectorTable(size, segSize int) (*vectorTable, error) {
	if segSize <= 0 {
		segSize = DefaultSegmentSize
	}
	n := (size + segSize - 1) / segSize
	vt := &vectorTable{}
	fail := func(err error) (*vectorTable, error) {
		c.freeVectorTable(vt)
		return nil, fmt.Errorf("%s: BHIe vector table of %d segments: %w", c.name, n, err)
	}
	for i := 0; i < n; i++ {
		l := min(segSize, size-i*segSize)
		b, err := c.t.Alloc(l, 4096)
		if err != nil {
			return fail(err)
		}
		vt.segs = append(vt.segs, b)
	}
	t, err := c.t.Alloc(n*wire.VectorEntrySize, 64)
	if err != nil {
		return fail(err)
	}
	vt.table = t
	for i, s := range vt.segs {
		binary.LittleEndian.PutUint64(t.Bytes[i*wire.VectorEntrySize:], s.IOVA)
		binary.LittleEndian.PutUint64(t.Bytes[i*wire.VectorEntrySize+8:], uint64(len(s.Bytes)))
	}
	return vt, nil
}

func (c *Controller) freeVectorTable(vt *vectorTable) {
	if vt == nil {
		return
	}
	for _, s := range vt.segs {
		_ = c.t.Free(s)
	}
	if vt.table.Bytes != nil {
		_ = c.t.Free(vt.table)
	}
	vt.segs, vt.table = nil, DMABuffer{}
}

// vecStatus polls a BHIe status register (TXVECSTATUS, RXVECSTATUS) until
// its status field is non-zero for sequence seq, and returns the status.
// A status for another sequence is a stale one and is waited past.
func (c *Controller) vecStatus(off, seq uint32, timeout time.Duration) (uint32, error) {
	v, err := c.pollReg(off, timeout, true, func(v uint32) bool {
		return v&wire.BHIStatusMask != 0 && v&wire.BHITxDBSeqMask == seq
	})
	if err != nil {
		return v, err
	}
	return (v & wire.BHIStatusMask) >> wire.BHIStatusShift, nil
}

// loadBHIe downloads the full image over BHIe (the device announced EE
// SBL after a FullImage BHI download): the image in segments, the vector
// table's address and size, a random sequence in TXVECDB, then
// TXVECSTATUS polled for that sequence.
func (c *Controller) loadBHIe() error {
	img, name := c.fbcImage, c.fbcName
	c.fbcImage = nil
	if img == nil {
		return fmt.Errorf("%s: device in SBL asks for the full image, none was loaded: %w", c.name, ErrFirmware)
	}
	bhie, err := c.bhieBlock()
	if err != nil {
		return err
	}
	vt, err := c.newVectorTable(len(img), c.fw.SegmentSize)
	if err != nil {
		return err
	}
	rest := img
	for _, s := range vt.segs {
		rest = rest[copy(s.Bytes, rest):]
	}
	seq := randomSeq()
	c.log.Info("downloading firmware over BHIe", "image", name, "bytes", len(img), "segments", len(vt.segs), "sequence", seq)
	err = c.bhiWrites([]regWrite{
		{bhie + wire.BHIETxVecAddrHigh, uint32(vt.table.IOVA >> 32)},
		{bhie + wire.BHIETxVecAddrLow, uint32(vt.table.IOVA)},
		{bhie + wire.BHIETxVecSize, uint32(len(vt.table.Bytes))},
		{bhie + wire.BHIETxVecDB, seq},
	})
	var st uint32
	if err == nil {
		st, err = c.vecStatus(bhie+wire.BHIETxVecStatus, seq, c.Timeout())
	}
	if errors.Is(err, ErrTimeout) {
		if rerr := c.t.Reset(); rerr != nil {
			c.log.Warn("function-level reset after a BHIe timeout", "err", rerr)
		}
		err = fmt.Errorf("%s: BHIe download of %s: no status for sequence %d within %v: %w: %w", c.name, name, seq, c.Timeout(), ErrFirmware, err)
	}
	c.freeVectorTable(vt)
	if err != nil {
		c.stats.FirmwareErrors.Add(1)
		return err
	}
	if st != wire.BHIStatusSuccess {
		c.stats.FirmwareErrors.Add(1)
		return fmt.Errorf("%s: BHIe download of %s (%d bytes) refused (status %d): %s: %w", c.name, name, len(img), st, c.bhiErrors(), ErrFirmware)
	}
	c.stats.FirmwareImages.Add(1)
	c.log.Info("firmware downloaded over BHIe", "image", name, "bytes", len(img))
	return nil
}

// EnterEDL asks the device to reboot into emergency download (EE EDL): it
// writes the EDL cookie into channel doorbell 91 and requests a SoC reset.
// The recovery that follows downloads the EDL image (Firmware.Load for
// wire.EEEDL, Linux's edl image) and waits for the programmer's EE (FP), whose
// channels (FIREHOSE) are then usable. The controller must be in M0.
func (c *Controller) EnterEDL() error {
	c.mu.Lock()
	pm := c.pm
	c.mu.Unlock()
	if pm != pmM0 {
		return fmt.Errorf("%s: EDL in state %s: %w", c.name, pm, ErrWrongState)
	}
	c.gate.RLock()
	err := c.doorbell(c.chdb(wire.EDLDoorbellSlot), wire.EDLCookie)
	c.gate.RUnlock()
	if err != nil {
		return fmt.Errorf("%s: EDL cookie: %w", c.name, err)
	}
	return c.SoCReset()
}
