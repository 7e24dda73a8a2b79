package ep

import (
	"crypto/sha256"
	"encoding/binary"
	"testing"

	"github.com/gomhi/gomhi/mhi/testenv/poll"
	"github.com/gomhi/gomhi/mhi/wire"
)

// The boot ROM against a host that lies: images and vector tables outside
// host memory, sizes out of bounds, tables of the wrong shape, transfers
// in an EE that takes none. Each gets its status error, its BHI error
// code and the INTVEC interrupt, and the device stays where it was.

// bootDevice starts a device with boot configuration bc on fake memory.
func bootDevice(t *testing.T, bc BootConfig) (*Device, *fakeMem, *fakeIRQ) {
	t.Helper()
	mem, irq := newFakeMem(), &fakeIRQ{}
	d, err := New(Config{MHI: testControllerConfig(), Boot: bc}, mem, irq)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d, mem, irq
}

// waitReg polls register off until done holds.
func waitReg(t *testing.T, d *Device, off uint32, done func(uint32) bool) uint32 {
	t.Helper()
	var v uint32
	if !poll.Until(waitTimeout, func() bool {
		v = d.ReadRegister(off)
		return done(v)
	}) {
		t.Fatalf("register 0x%x = 0x%x: condition not met in %v", off, v, waitTimeout)
	}
	return v
}

// offerImage writes an image doorbell as Linux does.
func offerImage(d *Device, addr uint64, size uint32) {
	d.WriteRegister(BHIOffset+wire.BHIStatus, 0)
	d.WriteRegister(BHIOffset+wire.BHIImgAddrHigh, uint32(addr>>32))
	d.WriteRegister(BHIOffset+wire.BHIImgAddrLow, uint32(addr))
	d.WriteRegister(BHIOffset+wire.BHIImgSize, size)
	d.WriteRegister(BHIOffset+wire.BHIImgTxDB, 0x1234)
}

func bhiDone(v uint32) bool { return v&wire.BHIStatusMask != 0 }

func TestBootROMRefusesBadBHI(t *testing.T) {
	good := make([]byte, 4096)
	cases := []struct {
		name  string
		start BootStart
		check ImageCheck
		addr  func(m *fakeMem) uint64
		size  uint32
		code  uint32
	}{
		{"image outside memory", BootPBL, ImageCheck{}, func(*fakeMem) uint64 { return 0x10 }, 4096, BHIErrDMA},
		{"image runs past memory", BootPBL, ImageCheck{}, func(m *fakeMem) uint64 { return m.base + testMemSize - 100 }, 4096, BHIErrDMA},
		{"image wraps the address space", BootPBL, ImageCheck{}, func(*fakeMem) uint64 { return ^uint64(0) - 10 }, 4096, BHIErrDMA},
		{"size zero", BootPBL, ImageCheck{}, func(m *fakeMem) uint64 { return m.base }, 0, BHIErrSize},
		{"size over the stage's bound", BootPBL, ImageCheck{MaxSize: 1024}, func(m *fakeMem) uint64 { return m.base }, 4096, BHIErrSize},
		{"size over the default bound", BootPBL, ImageCheck{}, func(m *fakeMem) uint64 { return m.base }, DefaultMaxImage + 1, BHIErrSize},
		{"digest", BootPBL, ImageCheck{SHA256: make([]byte, 32)}, func(m *fakeMem) uint64 { return m.base }, 4096, BHIErrDigest},
		{"image in AMSS", BootAMSS, ImageCheck{}, func(m *fakeMem) uint64 { return m.base }, 4096, BHIErrSequence},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var got []BootImage
			d, mem, irq := bootDevice(t, BootConfig{Start: tc.start, SBL: tc.check, OnImage: func(b BootImage) { got = append(got, b) }})
			if err := mem.WriteAt(good, mem.base); err != nil {
				t.Fatal(err)
			}
			before := len(irq.raised(0))
			offerImage(d, tc.addr(mem), tc.size)
			st := waitReg(t, d, BHIOffset+wire.BHIStatus, bhiDone)
			if st>>wire.BHIStatusShift != wire.BHIStatusError {
				t.Fatalf("BHI_STATUS 0x%x, want error", st)
			}
			if code := d.ReadRegister(BHIOffset + wire.BHIErrCode); code != tc.code {
				t.Fatalf("ERRCODE %d, want %d", code, tc.code)
			}
			if dbg3 := d.ReadRegister(BHIOffset + wire.BHIErrDbg3); dbg3 != tc.size {
				t.Fatalf("ERRDBG3 %d, want the size %d", dbg3, tc.size)
			}
			waitUntil(t, "boot ROM state", func() bool { return len(irq.raised(0)) > before })
			bs := d.BootStatus()
			if bs.EE != tc.start.ee() || (tc.start == BootPBL) != bs.AwaitImage {
				t.Fatalf("boot ROM moved on after a refused image: %+v", bs)
			}
			if s := d.Stats(); s.ImagesRefused != 1 || s.ImagesLoaded != 0 || len(got) != 1 || got[0].Err == nil {
				t.Fatalf("counted %d refused, %d loaded; reports %+v", s.ImagesRefused, s.ImagesLoaded, got)
			}
		})
	}
}

// putTable writes a vector table of entries at iova.
func putTable(t *testing.T, m *fakeMem, iova uint64, entries [][2]uint64) {
	t.Helper()
	b := make([]byte, 16*len(entries))
	for i, e := range entries {
		binary.LittleEndian.PutUint64(b[16*i:], e[0])
		binary.LittleEndian.PutUint64(b[16*i+8:], e[1])
	}
	if err := m.WriteAt(b, iova); err != nil {
		t.Fatal(err)
	}
}

// toSBL downloads a 1 KiB SBL image so that the device is in SBL.
func toSBL(t *testing.T, d *Device, m *fakeMem) {
	t.Helper()
	offerImage(d, m.alloc(t, 1024, 4096), 1024)
	if st := waitReg(t, d, BHIOffset+wire.BHIStatus, bhiDone); st>>wire.BHIStatusShift != wire.BHIStatusSuccess {
		t.Fatalf("SBL download: BHI_STATUS 0x%x", st)
	}
	if bs := d.BootStatus(); bs.EE != wire.EESBL {
		t.Fatalf("after the SBL image: %+v", bs)
	}
}

func TestBootROMRefusesBadBHIeTables(t *testing.T) {
	cases := []struct {
		name  string
		table func(t *testing.T, m *fakeMem) (uint64, uint32)
		code  uint32
	}{
		{"table outside memory", func(*testing.T, *fakeMem) (uint64, uint32) { return 0x20, 32 }, BHIErrDMA},
		{"table size not a multiple of 16", func(t *testing.T, m *fakeMem) (uint64, uint32) { return m.alloc(t, 64, 64), 17 }, BHIErrVecTable},
		{"empty table", func(t *testing.T, m *fakeMem) (uint64, uint32) { return m.alloc(t, 64, 64), 0 }, BHIErrVecTable},
		{"table too long", func(t *testing.T, m *fakeMem) (uint64, uint32) {
			return m.alloc(t, 64, 64), 16 * (MaxVectorEntries + 1)
		}, BHIErrVecTable},
		{"segment outside memory", func(t *testing.T, m *fakeMem) (uint64, uint32) {
			tb := m.alloc(t, 32, 64)
			putTable(t, m, tb, [][2]uint64{{m.alloc(t, 4096, 4096), 4096}, {0x30, 4096}})
			return tb, 32
		}, BHIErrDMA},
		{"segment size lies", func(t *testing.T, m *fakeMem) (uint64, uint32) {
			tb := m.alloc(t, 16, 64)
			putTable(t, m, tb, [][2]uint64{{m.alloc(t, 4096, 4096), 1 << 62}})
			return tb, 16
		}, BHIErrSize},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d, mem, irq := bootDevice(t, BootConfig{Start: BootPBL, FullImage: true})
			toSBL(t, d, mem)
			addr, size := tc.table(t, mem)
			before := len(irq.raised(0))
			d.WriteRegister(BHIEOffset+wire.BHIETxVecAddrHigh, uint32(addr>>32))
			d.WriteRegister(BHIEOffset+wire.BHIETxVecAddrLow, uint32(addr))
			d.WriteRegister(BHIEOffset+wire.BHIETxVecSize, size)
			d.WriteRegister(BHIEOffset+wire.BHIETxVecDB, 77)
			st := waitReg(t, d, BHIEOffset+wire.BHIETxVecStatus, bhiDone)
			if st>>wire.BHIStatusShift != wire.BHIStatusError || st&wire.BHITxDBSeqMask != 77 {
				t.Fatalf("TXVECSTATUS 0x%x, want error for sequence 77", st)
			}
			if code := d.ReadRegister(BHIOffset + wire.BHIErrCode); code != tc.code {
				t.Fatalf("ERRCODE %d, want %d", code, tc.code)
			}
			waitUntil(t, "boot ROM state", func() bool { return len(irq.raised(0)) > before })
			if bs := d.BootStatus(); bs.EE != wire.EESBL {
				t.Fatalf("SBL moved on after a refused image: %+v", bs)
			}
		})
	}
	// Without a full-image configuration the SBL takes no BHIe image.
	d, mem, _ := bootDevice(t, BootConfig{Start: BootPBL})
	toSBL(t, d, mem)
	d.WriteRegister(BHIEOffset+wire.BHIETxVecDB, 5)
	if st := waitReg(t, d, BHIEOffset+wire.BHIETxVecStatus, bhiDone); st>>wire.BHIStatusShift != wire.BHIStatusError ||
		d.ReadRegister(BHIOffset+wire.BHIErrCode) != BHIErrSequence {
		t.Fatalf("BHIe image without FullImage: TXVECSTATUS 0x%x, ERRCODE %d", st, d.ReadRegister(BHIOffset+wire.BHIErrCode))
	}
}

func TestBootROMDumpTables(t *testing.T) {
	dump := DumpPattern(10_000)
	cases := []struct {
		name  string
		table func(t *testing.T, m *fakeMem) (uint64, uint32)
		code  uint32 // 0: success
	}{
		{"two segments", func(t *testing.T, m *fakeMem) (uint64, uint32) {
			tb := m.alloc(t, 32, 64)
			putTable(t, m, tb, [][2]uint64{{m.alloc(t, 8192, 4096), 8192}, {m.alloc(t, 8192, 4096), 8192}})
			return tb, 32
		}, 0},
		{"table outside memory", func(*testing.T, *fakeMem) (uint64, uint32) { return 0x40, 32 }, BHIErrDMA},
		{"too little space", func(t *testing.T, m *fakeMem) (uint64, uint32) {
			tb := m.alloc(t, 16, 64)
			putTable(t, m, tb, [][2]uint64{{m.alloc(t, 4096, 4096), 4096}})
			return tb, 16
		}, BHIErrDumpSpace},
		{"segment outside memory", func(t *testing.T, m *fakeMem) (uint64, uint32) {
			tb := m.alloc(t, 16, 64)
			putTable(t, m, tb, [][2]uint64{{0x50, 1 << 20}})
			return tb, 16
		}, BHIErrDMA},
		{"sizes overflow", func(t *testing.T, m *fakeMem) (uint64, uint32) {
			tb := m.alloc(t, 32, 64)
			putTable(t, m, tb, [][2]uint64{{m.alloc(t, 64, 64), 1 << 63}, {m.alloc(t, 64, 64), 1 << 63}})
			return tb, 32
		}, BHIErrVecTable},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d, mem, _ := bootDevice(t, BootConfig{RDDM: true, Dump: dump})
			addr, size := tc.table(t, mem)
			d.WriteRegister(BHIEOffset+wire.BHIERxVecAddrHigh, uint32(addr>>32))
			d.WriteRegister(BHIEOffset+wire.BHIERxVecAddrLow, uint32(addr))
			d.WriteRegister(BHIEOffset+wire.BHIERxVecSize, size)
			d.WriteRegister(BHIEOffset+wire.BHIERxVecDB, 9)
			d.InjectSysErr()
			st := waitReg(t, d, BHIEOffset+wire.BHIERxVecStatus, bhiDone)
			if bs := d.BootStatus(); bs.EE != wire.EERDDM {
				t.Fatalf("EE %s after the crash, want RDDM", bs.EE)
			}
			if tc.code != 0 {
				if st>>wire.BHIStatusShift != wire.BHIStatusError || d.ReadRegister(BHIOffset+wire.BHIErrCode) != tc.code {
					t.Fatalf("RXVECSTATUS 0x%x ERRCODE %d, want error %d", st, d.ReadRegister(BHIOffset+wire.BHIErrCode), tc.code)
				}
				if d.Stats().DumpsFailed != 1 {
					t.Fatalf("failed dump not counted")
				}
				return
			}
			if st != wire.BHIStatusSuccess<<wire.BHIStatusShift|9 {
				t.Fatalf("RXVECSTATUS 0x%x", st)
			}
			// The segments hold the dump; the entries say how much.
			raw := make([]byte, 32)
			if err := mem.ReadAt(raw, addr); err != nil {
				t.Fatal(err)
			}
			var got []byte
			for i := range 2 {
				seg, n := binary.LittleEndian.Uint64(raw[16*i:]), binary.LittleEndian.Uint64(raw[16*i+8:])
				b := make([]byte, n)
				if err := mem.ReadAt(b, seg); err != nil {
					t.Fatal(err)
				}
				got = append(got, b...)
			}
			if sha256.Sum256(got) != sha256.Sum256(dump) {
				t.Fatalf("host memory holds %d bytes, not the %d-byte dump", len(got), len(dump))
			}
			// An MHI reset reboots the crashed modem into its boot start.
			d.WriteRegister(wire.RegMHICTRL, wire.MHICTRLReset)
			waitUntil(t, "boot ROM state", func() bool { return d.BootStatus().EE == wire.EEAMSS && d.State() == wire.StateReady })
		})
	}
}

func TestEDLCookie(t *testing.T) {
	d, _, _ := bootDevice(t, BootConfig{})
	d.WriteRegister(ChannelDoorbellOffset+edlDoorbellSlot*wire.DoorbellStride+4, 0)
	d.WriteRegister(ChannelDoorbellOffset+edlDoorbellSlot*wire.DoorbellStride, edlCookie)
	d.WriteRegister(wire.RegSOCRESETREQ, wire.SOCResetReqBit)
	waitUntil(t, "boot ROM state", func() bool { return d.BootStatus().EE == wire.EEEDL })
	if bs := d.BootStatus(); !bs.AwaitImage || d.State() == wire.StateReady {
		t.Fatalf("EDL after the cookie and a SoC reset: %+v, state %s", bs, d.State())
	}
	// The next SoC reset boots normally again.
	d.WriteRegister(wire.RegSOCRESETREQ, wire.SOCResetReqBit)
	waitUntil(t, "boot ROM state", func() bool { return d.BootStatus().EE == wire.EEAMSS })
}
