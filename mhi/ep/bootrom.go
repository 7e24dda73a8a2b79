package ep

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"strings"
	"time"

	"github.com/gomhi/gomhi/mhi/wire"
)

// This file is the mock modem's boot ROM: the primary boot loader (PBL)
// that receives the secondary boot loader over BHI, the SBL that boots the
// mission-mode firmware (AMSS) by itself or receives it over BHIe (a
// full-image download), the emergency download environment (EDL) that
// receives a flash programmer, and the RAM dump (RDDM) a crashed modem
// serves over BHIe's receive vector table.

// BootStart is the execution environment the mock modem starts in, after
// power-on and after every SoC or function-level reset.
type BootStart int

// Boot starts.
const (
	// BootAMSS starts in mission mode: READY at once (the default).
	BootAMSS BootStart = iota
	// BootSBL starts in the secondary boot loader: READY at once, EE SBL
	// announced at M0, then AMSS by itself (or over BHIe, see
	// BootConfig.FullImage).
	BootSBL
	// BootPBL starts in the primary boot loader: EXECENV reads PBL and the
	// device stays in RESET until the host downloads the SBL over BHI.
	BootPBL
)

var bootStartNames = []string{"amss", "sbl", "pbl"}

// String returns the start's name as --boot-ee takes it.
func (b BootStart) String() string {
	if int(b) >= 0 && int(b) < len(bootStartNames) {
		return bootStartNames[b]
	}
	return fmt.Sprintf("BootStart(%d)", int(b))
}

// ParseBootStart parses "pbl", "sbl" or "amss" (any case).
func ParseBootStart(s string) (BootStart, error) {
	for i, n := range bootStartNames {
		if strings.EqualFold(s, n) {
			return BootStart(i), nil
		}
	}
	return 0, fmt.Errorf("ep: %w: boot EE %q: want pbl, sbl or amss", wire.ErrConfig, s)
}

// ee returns the execution environment the start stands for.
func (b BootStart) ee() wire.ExecEnv {
	switch b {
	case BootPBL:
		return wire.EEPBL
	case BootSBL:
		return wire.EESBL
	}
	return wire.EEAMSS
}

// Defaults of BootConfig.
const (
	// DefaultMaxImage is the largest image a boot stage accepts unless
	// ImageCheck.MaxSize says otherwise.
	DefaultMaxImage = 64 << 20
	// DefaultSBLTime is how long the SBL takes to boot AMSS by itself.
	DefaultSBLTime = 20 * time.Millisecond
	// DefaultDumpSize is the size of the generated RAM dump.
	DefaultDumpSize = 192 << 10
	// MaxVectorEntries bounds a BHIe vector table (16 bytes an entry).
	MaxVectorEntries = 4096
)

// BHI error codes the mock modem reports in BHI_ERRCODE (and BHIe errors
// in ERRCODE too). Real modems' values are not documented; these are
// gomhi's. ERRDBG1/2/3 hold the image's address (low, high) and size.
const (
	BHIErrNone      = 0
	BHIErrSize      = 1 // image size 0 or outside the stage's bounds
	BHIErrDMA       = 2 // image or vector table outside host memory
	BHIErrDigest    = 3 // image digest differs from the expected one
	BHIErrSequence  = 4 // a transfer the current EE does not take
	BHIErrVecTable  = 5 // vector table size not a multiple of 16, empty or too long
	BHIErrDumpSpace = 6 // the host's dump segments are smaller than the dump
)

// ImageCheck says which images a boot stage accepts.
type ImageCheck struct {
	// MinSize and MaxSize bound the image's size in bytes (zero: 1 and
	// DefaultMaxImage).
	MinSize, MaxSize int
	// SHA256 is the digest the image must have; nil accepts any image of
	// an allowed size.
	SHA256 []byte
}

// BootImage reports one image transfer the boot ROM received (or refused).
type BootImage struct {
	// Stage is "sbl" (PBL's BHI download), "amss" (SBL's BHIe download)
	// or "edl" (the EDL programmer over BHI).
	Stage string
	// Bytes is the image's size as the host announced it; SHA256 the
	// digest of the bytes received (zero when not all could be read).
	Bytes  int
	SHA256 [32]byte
	// Err is nil for an accepted image.
	Err error
}

// BootConfig configures the mock modem's boot ROM (Config.Boot).
type BootConfig struct {
	// Start is where the device boots (default BootAMSS).
	Start BootStart
	// SBL checks the image the PBL receives over BHI (Linux's fw image,
	// e.g. qcom/sdx55m/sbl1.mbn).
	SBL ImageCheck
	// FullImage makes the SBL wait for the AMSS image over BHIe (Linux's
	// fbc_download) instead of booting AMSS by itself; AMSS checks it.
	FullImage bool
	AMSS      ImageCheck
	// EDL checks the flash programmer received over BHI in EE EDL.
	EDL ImageCheck
	// SBLTime is how long the SBL takes to boot AMSS by itself (zero:
	// DefaultSBLTime).
	SBLTime time.Duration
	// RDDM makes a crash (InjectSysErr, or the host requesting SYS_ERR)
	// enter EE RDDM and serve Dump over BHIe's receive vector table.
	RDDM bool
	// Dump is the RAM dump (nil: DumpPattern(DefaultDumpSize)).
	Dump []byte
	// OnImage is called (from the device's control goroutine) for every
	// image transfer; it must not block.
	OnImage func(BootImage)
}

// DumpPattern returns size bytes of the mock modem's default RAM dump:
// a header "GOMHI-RDDM" and its size, then bytes that encode their offset,
// so that a dump cut short, shifted or reordered is seen as such.
func DumpPattern(size int) []byte {
	b := make([]byte, size)
	for i := range b {
		b[i] = byte(i) ^ byte(i>>8) ^ byte(i>>16)*3
	}
	hdr := fmt.Appendf(nil, "GOMHI-RDDM %d\n", size)
	copy(b, hdr)
	return b
}

// edlCookie is the value a host writes to channel doorbell 91 before a SoC
// reset to make the modem's PBL enter EDL (Linux's edl_trigger).
const (
	edlCookie       = wire.EDLCookie
	edlDoorbellSlot = wire.EDLDoorbellSlot
)

// bootState is the boot ROM's state. Guarded by Device.regMu.
type bootState struct {
	awaitImage bool // PBL or EDL waiting for a BHI image: no READY
	edlArmed   bool // the EDL cookie was written: the next SoC reset enters EDL
	edlLoaded  bool // the EDL programmer was received: FP at M0
	amssDue    bool // SBL boots AMSS at amssAt
	amssAt     time.Time
	errCode    uint32
	errDbg     [3]uint32
	txStatus   uint32 // BHIe TXVECSTATUS
	rxStatus   uint32 // BHIe RXVECSTATUS
	rxArmed    bool   // the host rang RXVECDB: a dump goes there
	dumped     bool   // the dump of this crash was written
}

// startEE puts the device in its boot start's EE (power-on, SoC reset).
// regMu must be held.
func (d *Device) startEELocked() {
	b := &d.boot
	ee := d.cfg.Boot.Start.ee()
	if b.edlArmed {
		ee, b.edlArmed = wire.EEEDL, false
	}
	d.setEELocked(ee)
	b.awaitImage = ee == wire.EEPBL || ee == wire.EEEDL
	b.edlLoaded, b.amssDue, b.dumped = false, false, false
	b.errCode, b.errDbg = 0, [3]uint32{}
	b.txStatus, b.rxStatus, b.rxArmed = 0, 0, false
}

// bhiOwnedLocked reads a boot-ROM owned BHI register; ok is false when rel
// is not one.
func (d *Device) bhiOwnedLocked(rel uint32) (uint32, bool) {
	switch rel {
	case wire.BHIErrCode:
		return d.boot.errCode, true
	case wire.BHIErrDbg1, wire.BHIErrDbg2, wire.BHIErrDbg3:
		return d.boot.errDbg[(rel-wire.BHIErrDbg1)/4], true
	}
	return 0, false
}

// bootFail records a boot error in ERRCODE/ERRDBG. regMu must be held.
func (d *Device) bootFailLocked(code uint32, addr uint64, size uint32) {
	d.boot.errCode = code
	d.boot.errDbg = [3]uint32{uint32(addr), uint32(addr >> 32), size}
}

// failTransferLocked records a refused image or transfer in ERRCODE and
// ERRDBG and returns it as an imageError (an error of another kind is
// reported as a DMA error). regMu must be held.
func (d *Device) failTransferLocked(err error, addr uint64, size uint32) *imageError {
	var ie *imageError
	if !errors.As(err, &ie) {
		ie = &imageError{BHIErrDMA, err.Error()}
	}
	d.bootFailLocked(ie.code, addr, size)
	return ie
}

// transferStatus is the BHI/BHIe status word of a finished transfer: the
// status field (success, or error when failed) with the host's sequence.
func transferStatus(failed bool, seq uint32) uint32 {
	if failed {
		return uint32(wire.BHIStatusError)<<wire.BHIStatusShift | seq
	}
	return uint32(wire.BHIStatusSuccess)<<wire.BHIStatusShift | seq
}

// imageError is a refused image with its BHI error code.
type imageError struct {
	code uint32
	msg  string
}

func (e *imageError) Error() string { return e.msg }

// ErrBootImage is wrapped by the errors BootImage.Err carries.
var ErrBootImage = errors.New("ep: boot image refused")

// checkSize applies an ImageCheck's size bounds.
func (c ImageCheck) checkSize(n uint64) error {
	lo, hi := uint64(max(c.MinSize, 1)), uint64(DefaultMaxImage)
	if c.MaxSize > 0 {
		hi = uint64(c.MaxSize)
	}
	if n < lo || n > hi {
		return &imageError{BHIErrSize, fmt.Sprintf("image of %d bytes, want %d..%d", n, lo, hi)}
	}
	return nil
}

// checkDigest compares a received image's digest with the expected one.
func (c ImageCheck) checkDigest(sum [32]byte) error {
	if c.SHA256 != nil && string(c.SHA256) != string(sum[:]) {
		return &imageError{BHIErrDigest, fmt.Sprintf("image sha256 %x, want %x", sum, c.SHA256)}
	}
	return nil
}

// hashHost reads n bytes of host memory at iova into h, in chunks.
func (d *Device) hashHost(h hash.Hash, iova, n uint64, buf []byte) error {
	for n > 0 {
		k := min(n, uint64(len(buf)))
		if iova+k < iova {
			return &imageError{BHIErrDMA, fmt.Sprintf("image at 0x%x wraps the address space", iova)}
		}
		if err := d.mem.ReadAt(buf[:k], iova); err != nil {
			return &imageError{BHIErrDMA, fmt.Sprintf("image bytes at 0x%x not readable: %v", iova, err)}
		}
		h.Write(buf[:k])
		iova += k
		n -= k
	}
	return nil
}

// bhiTransfer runs the BHI download the host started by writing IMGTXDB:
// the image is read from host memory, checked and, when accepted, the
// device moves on (PBL → SBL, EDL → programmer running). BHI_STATUS says
// how it went and the INTVEC vector is raised. Called by the control
// goroutine.
func (d *Device) bhiTransfer() {
	d.regMu.Lock()
	addr := uint64(d.regs.bhi[wire.BHIImgAddrHigh/4])<<32 | uint64(d.regs.bhi[wire.BHIImgAddrLow/4])
	size := d.regs.bhi[wire.BHIImgSize/4]
	ee, await := d.ee, d.boot.awaitImage
	d.regMu.Unlock()

	stage, check := "sbl", d.cfg.Boot.SBL
	if ee == wire.EEEDL {
		stage, check = "edl", d.cfg.Boot.EDL
	}
	rec := BootImage{Stage: stage, Bytes: int(size)}
	var err error
	switch {
	case !await:
		err = &imageError{BHIErrSequence, fmt.Sprintf("BHI image offered in EE %s, which takes none", ee)}
	default:
		err = check.checkSize(uint64(size))
	}
	if err == nil {
		h := sha256.New()
		if err = d.hashHost(h, addr, uint64(size), make([]byte, 64<<10)); err == nil {
			copy(rec.SHA256[:], h.Sum(nil))
			err = check.checkDigest(rec.SHA256)
		}
	}
	d.regMu.Lock()
	status := transferStatus(err != nil, 0)
	if err != nil {
		ie := d.failTransferLocked(err, addr, size)
		rec.Err = fmt.Errorf("%w: %s (BHI error %d)", ErrBootImage, ie.msg, ie.code)
	} else {
		d.boot.awaitImage = false
		if ee == wire.EEEDL {
			d.boot.edlLoaded = true
		} else {
			d.setEELocked(wire.EESBL)
		}
		d.readyPending = true
		d.readyAt = time.Now().Add(d.cfg.ReadyDelay)
	}
	d.regs.bhi[wire.BHIStatus/4] = status
	vector := int(d.regs.bhi[wire.BHIIntVec/4])
	d.regMu.Unlock()
	d.imageDone(rec, addr)
	d.raise(vector)
}

// imageDone counts and logs an image transfer and reports it.
func (d *Device) imageDone(rec BootImage, addr uint64) {
	if rec.Err != nil {
		d.stats.imagesRefused.Add(1)
		d.log.Warn("mhi-ep: boot image refused", "stage", rec.Stage, "bytes", rec.Bytes,
			"addr", fmt.Sprintf("0x%x", addr), "err", rec.Err)
	} else {
		d.stats.imagesLoaded.Add(1)
		d.log.Info("mhi-ep: boot image accepted", "stage", rec.Stage, "bytes", rec.Bytes,
			"sha256", fmt.Sprintf("%x", rec.SHA256))
	}
	if f := d.cfg.Boot.OnImage; f != nil {
		f(rec)
	}
}

// vecEntry is one BHIe vector-table entry.
type vecEntry struct{ addr, size uint64 }

// readVectorTable reads and checks a BHIe vector table: its size a
// multiple of 16, 1..MaxVectorEntries entries, all in host memory.
func (d *Device) readVectorTable(addr uint64, size uint32) ([]vecEntry, error) {
	const n = wire.VectorEntrySize
	if size == 0 || size%n != 0 || size/n > MaxVectorEntries {
		return nil, &imageError{BHIErrVecTable, fmt.Sprintf("vector table of %d bytes: want a multiple of %d up to %d entries", size, n, MaxVectorEntries)}
	}
	raw := make([]byte, size)
	if err := d.mem.ReadAt(raw, addr); err != nil {
		return nil, &imageError{BHIErrDMA, fmt.Sprintf("vector table at 0x%x (%d bytes) not readable: %v", addr, size, err)}
	}
	out := make([]vecEntry, size/n)
	for i := range out {
		out[i] = vecEntry{binary.LittleEndian.Uint64(raw[n*i:]), binary.LittleEndian.Uint64(raw[n*i+8:])}
	}
	return out, nil
}

// bhieTransfer runs the full-image download the host started by writing
// TXVECDB: every segment the vector table names is read and hashed; an
// accepted image moves the SBL on to AMSS. TXVECSTATUS carries the
// sequence and the result; the INTVEC vector is raised.
func (d *Device) bhieTransfer() {
	d.regMu.Lock()
	r := &d.regs.bhie
	addr := uint64(r[wire.BHIETxVecAddrHigh/4])<<32 | uint64(r[wire.BHIETxVecAddrLow/4])
	size := r[wire.BHIETxVecSize/4]
	seq := r[wire.BHIETxVecDB/4] & wire.BHITxDBSeqMask
	ee := d.ee
	d.regMu.Unlock()

	rec := BootImage{Stage: "amss"}
	var err error
	if ee != wire.EESBL || !d.cfg.Boot.FullImage {
		err = &imageError{BHIErrSequence, fmt.Sprintf("BHIe image offered in EE %s, which takes none", ee)}
	}
	var table []vecEntry
	if err == nil {
		table, err = d.readVectorTable(addr, size)
	}
	if err == nil {
		var total uint64
		for _, e := range table {
			total += e.size
			if e.size > DefaultMaxImage || total > DefaultMaxImage {
				err = &imageError{BHIErrSize, fmt.Sprintf("segment of %d bytes makes the image larger than %d", e.size, DefaultMaxImage)}
				break
			}
		}
		rec.Bytes = int(total)
		if err == nil {
			err = d.cfg.Boot.AMSS.checkSize(total)
		}
	}
	if err == nil {
		h := sha256.New()
		buf := make([]byte, 64<<10)
		for _, e := range table {
			if err = d.hashHost(h, e.addr, e.size, buf); err != nil {
				break
			}
		}
		if err == nil {
			copy(rec.SHA256[:], h.Sum(nil))
			err = d.cfg.Boot.AMSS.checkDigest(rec.SHA256)
		}
	}
	d.regMu.Lock()
	status := transferStatus(err != nil, seq)
	if err != nil {
		ie := d.failTransferLocked(err, addr, size)
		rec.Err = fmt.Errorf("%w: %s (BHIe error %d)", ErrBootImage, ie.msg, ie.code)
	} else {
		d.boot.amssDue, d.boot.amssAt = true, time.Now()
	}
	d.boot.txStatus = status
	vector := int(d.regs.bhi[wire.BHIIntVec/4])
	d.regMu.Unlock()
	d.imageDone(rec, addr)
	d.raise(vector)
}

// bootEEAtM0 is called when the host brings the device to M0 from READY:
// it returns the EE to announce and schedules the SBL's move to AMSS.
// regMu must be held.
func (d *Device) bootEEAtM0Locked() wire.ExecEnv {
	b := &d.boot
	switch {
	case d.ee == wire.EESBL && !d.cfg.Boot.FullImage:
		b.amssDue = true
		b.amssAt = time.Now().Add(d.sblTime())
	case d.ee == wire.EEEDL && b.edlLoaded:
		d.setEELocked(wire.EEFP)
	}
	return d.ee
}

func (d *Device) sblTime() time.Duration {
	if d.cfg.Boot.SBLTime > 0 {
		return d.cfg.Boot.SBLTime
	}
	return DefaultSBLTime
}

// advanceBoot moves the SBL on to AMSS when it is due and announces it. It
// returns the wait until the next boot step, or -1.
func (d *Device) advanceBoot() time.Duration {
	d.regMu.Lock()
	b := &d.boot
	if !b.amssDue || d.ee != wire.EESBL {
		b.amssDue = false
		d.regMu.Unlock()
		return -1
	}
	if wait := time.Until(b.amssAt); wait > 0 {
		d.regMu.Unlock()
		return wait
	}
	b.amssDue = false
	d.setEELocked(wire.EEAMSS)
	s := d.sess
	d.regMu.Unlock()
	d.log.Debug("mhi-ep: SBL -> AMSS")
	if s != nil {
		d.postControlEvent(s, wire.EEEvent(wire.EEAMSS))
	}
	return -1
}

// enterRDDMLocked turns a crash into RDDM when the boot ROM has it
// enabled. regMu must be held.
func (d *Device) enterRDDMLocked() bool {
	if !d.cfg.Boot.RDDM {
		return false
	}
	d.setEELocked(wire.EERDDM)
	d.boot.dumped = false
	return true
}

// dump returns the RAM dump image.
func (d *Device) dump() []byte {
	if d.cfg.Boot.Dump != nil {
		return d.cfg.Boot.Dump
	}
	d.dumpOnce.Do(func() { d.defaultDump = DumpPattern(DefaultDumpSize) })
	return d.defaultDump
}

// rddmTransfer writes the RAM dump into the segments of the receive vector
// table the host programmed (RXVECADDR/RXVECSIZE, armed by RXVECDB), once
// per crash, when the device is in RDDM. Each entry's size field is
// rewritten to the bytes the device put in its segment (gomhi's way of
// telling the host the dump's length). RXVECSTATUS carries the sequence and
// the result; the INTVEC vector is raised.
func (d *Device) rddmTransfer() {
	d.regMu.Lock()
	r := &d.regs.bhie
	addr := uint64(r[wire.BHIERxVecAddrHigh/4])<<32 | uint64(r[wire.BHIERxVecAddrLow/4])
	size := r[wire.BHIERxVecSize/4]
	seq := r[wire.BHIERxVecDB/4] & wire.BHITxDBSeqMask
	ready := d.ee == wire.EERDDM && d.boot.rxArmed && !d.boot.dumped
	if ready {
		d.boot.dumped = true
	}
	d.regMu.Unlock()
	if !ready {
		return
	}
	img := d.dump()
	table, err := d.readVectorTable(addr, size)
	if err == nil {
		err = d.writeDump(table, addr, img)
	}
	d.regMu.Lock()
	status := transferStatus(err != nil, seq)
	if err != nil {
		d.failTransferLocked(err, addr, size)
	}
	d.boot.rxStatus = status
	vector := int(d.regs.bhi[wire.BHIIntVec/4])
	d.regMu.Unlock()
	if err != nil {
		d.stats.dumpsFailed.Add(1)
		d.log.Warn("mhi-ep: RAM dump not delivered", "table", fmt.Sprintf("0x%x", addr), "err", err)
	} else {
		d.stats.dumpsWritten.Add(1)
		sum := sha256.Sum256(img)
		d.log.Info("mhi-ep: RAM dump delivered", "bytes", len(img), "segments", len(table), "sha256", fmt.Sprintf("%x", sum))
	}
	d.raise(vector)
}

// writeDump copies img into the table's segments in order and records in
// each entry the bytes written there.
func (d *Device) writeDump(table []vecEntry, tableAddr uint64, img []byte) error {
	var space uint64
	for _, e := range table {
		space += e.size
		if space < e.size {
			return &imageError{BHIErrVecTable, "dump segments overflow"}
		}
	}
	if space < uint64(len(img)) {
		return &imageError{BHIErrDumpSpace, fmt.Sprintf("dump of %d bytes, the host's segments hold %d", len(img), space)}
	}
	rest := img
	var used [8]byte
	for i, e := range table {
		k := min(uint64(len(rest)), e.size)
		if k > 0 {
			if e.addr+k < e.addr {
				return &imageError{BHIErrDMA, fmt.Sprintf("dump segment %d at 0x%x wraps", i, e.addr)}
			}
			if err := d.mem.WriteAt(rest[:k], e.addr); err != nil {
				return &imageError{BHIErrDMA, fmt.Sprintf("dump segment %d at 0x%x (%d bytes) not writable: %v", i, e.addr, k, err)}
			}
		}
		binary.LittleEndian.PutUint64(used[:], k)
		if err := d.mem.WriteAt(used[:], tableAddr+uint64(wire.VectorEntrySize*i)+8); err != nil {
			return &imageError{BHIErrDMA, fmt.Sprintf("vector table entry %d not writable: %v", i, err)}
		}
		rest = rest[k:]
	}
	return nil
}

// EnterEDL reboots the device into the emergency download EE, as the
// host's EDL trigger (the cookie in channel doorbell 91, then a SoC reset)
// does.
func (d *Device) EnterEDL() {
	d.regMu.Lock()
	d.boot.edlArmed = true
	d.abortSessionLocked()
	d.pending.reset = true
	d.pending.functionReset = true
	d.regMu.Unlock()
	d.kickControl()
}

// BootStatus is the boot ROM's view for status displays and tests.
type BootStatus struct {
	EE          wire.ExecEnv
	AwaitImage  bool   // in PBL or EDL, waiting for an image over BHI
	ErrCode     uint32 // BHI_ERRCODE
	TxVecStatus uint32 // BHIe TXVECSTATUS
	RxVecStatus uint32 // BHIe RXVECSTATUS
}

// BootStatus returns the boot ROM's state.
func (d *Device) BootStatus() BootStatus {
	d.regMu.Lock()
	defer d.regMu.Unlock()
	return BootStatus{EE: d.ee, AwaitImage: d.boot.awaitImage, ErrCode: d.boot.errCode,
		TxVecStatus: d.boot.txStatus, RxVecStatus: d.boot.rxStatus}
}
