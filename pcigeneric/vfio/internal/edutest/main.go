// Command edutest drives QEMU's edu device through gomhi's VFIO transport
// (package pcigeneric/vfio) on a real Linux kernel. It is the guest half of
// TestVFIOInQEMU (pcigeneric/vfio/qemu_test.go): the test boots a kernel in
// QEMU with edu behind an emulated Intel IOMMU and runs this program,
// statically linked, from the initramfs's /init, as root.
//
// The program finds edu (vendor 0x1234, device 0x11e8) in sysfs, binds it to
// vfio-pci and then reaches it only through the VFIO package: config space,
// the BAR0 mapping (ident, liveness, 64-bit access, factorial polled and by
// MSI), DMA through the IOMMU (AllocDMA and MapDMAAt round trips through
// edu's DMA engine; DMAs to unmapped IOVAs, which must not land), teardown
// and reopening, and finally the mhi.Transport built by NewTransport. Each
// check prints one line
//
//	CHECK <name> PASS|FAIL <detail>
//
// and the run ends with "EDUTEST RESULT: PASS (N checks)" or
// "EDUTEST RESULT: FAIL (...)". The exit status is 0 only on PASS.
//
// With -break the program misuses the transport on purpose: it gives the
// device IOVAs 2 MiB away from where its buffers are mapped. The DMA round
// trips must then fail, which shows that the test can fail.
//
// The edu device is described in QEMU's docs/specs/edu.rst. Two limits of
// QEMU 7.2's model shape the checks: its DMA engine reaches only 28-bit
// addresses (so the VFIO device is opened with DMAWidth 28), and a transfer
// of the full 4096-byte edu buffer is refused by an off-by-one range check
// that aborts QEMU, so transfers here are 2048 bytes.
package main

import (
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gomhi/gomhi/mhi"
	"github.com/gomhi/gomhi/pcigeneric"
	"github.com/gomhi/gomhi/pcigeneric/vfio"
)

// PCI identity of QEMU's edu device.
const (
	eduVendor = 0x1234
	eduDevice = 0x11e8
)

// edu BAR0 registers (byte offsets). Below 0x80 edu accepts only 4-byte
// accesses; the DMA registers at 0x80 and up also take 8-byte ones.
const (
	regIdent     = 0x00 // reads 0x010000ed (version 1.0, "ed")
	regLiveness  = 0x04 // reads back the bitwise inverse of what was written
	regFactorial = 0x08 // write n, read n! once the status busy bit clears
	regStatus    = 0x20 // bit 0: computing; bit 7: raise an IRQ when done
	regIRQStatus = 0x24 // pending interrupt causes
	regIRQAck    = 0x64 // write cause bits to clear them
	regDMASrc    = 0x80
	regDMADst    = 0x88
	regDMACount  = 0x90
	regDMACmd    = 0x98
)

// Bits of the edu registers.
const (
	statusBusy    = 0x01
	statusIRQFact = 0x80
	irqFactorial  = 0x001 // IRQ status: factorial done
	irqDMA        = 0x100 // IRQ status: DMA done
	dmaStart      = 0x1   // DMA command: run
	dmaToRAM      = 0x2   // DMA command: direction edu buffer → RAM
	dmaIRQ        = 0x4   // DMA command: raise irqDMA when done
)

// PCI command register bits.
const (
	cmdMemory    = 0x2
	cmdBusMaster = 0x4
)

const (
	// eduBuffer is the device-side address of edu's 4 KiB DMA buffer.
	eduBuffer = 0x40000
	// dmaLen is the size of each transfer: well under the 4095 bytes that
	// QEMU 7.2's edu accepts (a rejected transfer aborts QEMU).
	dmaLen = 2048
	// dmaWidth is edu's DMA mask: it reaches IOVAs below 256 MiB only.
	dmaWidth = 28
	// dmaAllocSize is the size of the AllocDMA buffer: pattern out at the
	// start, pattern back at offset 2 pages.
	dmaAllocSize = 4 * pageSize
	// mapAtIOVA is where the MapDMAAt check maps memory of its own: high in
	// the 28-bit space, away from what AllocDMA hands out.
	mapAtIOVA = 0x0e000000
	// breakShift is how far -break moves the IOVAs given to the device.
	breakShift = 0x200000
	// irqTimeout bounds each wait for an interrupt; edu's DMA engine alone
	// takes 100 ms of guest time per transfer.
	irqTimeout = 5 * time.Second
	// faultTimeout bounds the wait for the kernel to log a DMAR fault.
	faultTimeout = 2 * time.Second
	pageSize     = 4096
)

// results counts checks and prints their lines.
type results struct {
	n      int
	failed []string
}

// check runs one check and prints its CHECK line. fn returns the detail
// printed on success. A failed check marked fatal ends the run, because
// the checks after it depend on it.
func (r *results) check(name string, fatal bool, fn func() (string, error)) bool {
	r.n++
	detail, err := fn()
	if err != nil {
		r.failed = append(r.failed, name)
		fmt.Printf("CHECK %s FAIL %v\n", name, err)
		if fatal {
			r.finish("stopped after " + name)
		}
		return false
	}
	fmt.Printf("CHECK %s PASS %s\n", name, detail)
	return true
}

// finish prints the verdict line and exits: 0 on PASS, 1 on FAIL.
func (r *results) finish(note string) {
	if len(r.failed) == 0 {
		fmt.Printf("EDUTEST RESULT: PASS (%d checks)\n", r.n)
		os.Exit(0)
	}
	if note != "" {
		note = "; " + note
	}
	fmt.Printf("EDUTEST RESULT: FAIL (%d of %d checks failed: %s%s)\n",
		len(r.failed), r.n, strings.Join(r.failed, ", "), note)
	os.Exit(1)
}

func main() {
	breakIt := flag.Bool("break", false, "misuse the transport on purpose (DMA at IOVAs other than the mapped ones); the run must FAIL")
	sysfs := flag.String("sysfs", vfio.DefaultSysfsRoot, "sysfs mount point")
	flag.Parse()
	if *breakIt {
		fmt.Println("EDUTEST mode: -break (the device is given wrong IOVAs; FAIL expected)")
	}
	t := &tester{sysfs: *sysfs, broken: *breakIt}
	t.run()
}

// tester holds the state shared by the checks.
type tester struct {
	sysfs  string
	broken bool
	r      results

	addr  string // PCI address of edu
	group string // IOMMU group number, from sysfs
	dev   *vfio.Device
	bar   *vfio.BAR
	vec   *vfio.Vector
	buf   mhi.DMABuffer // from AllocDMA
}

func (t *tester) run() {
	r := &t.r
	r.check("find", true, t.find)
	r.check("bind-guard", false, t.bindGuard)
	r.check("bind", true, t.bind)
	r.check("open", true, t.open)
	r.check("open-busy", false, t.openBusy)
	r.check("config-id", false, t.configID)
	r.check("config-command", false, t.configCommand)
	r.check("region-bar0", false, t.regionBAR0)
	r.check("bar-map", true, t.mapBAR)
	r.check("bar-ident", false, t.barIdent)
	r.check("bar-liveness", false, t.barLiveness)
	r.check("bar-64bit", false, t.bar64)
	r.check("factorial-poll", false, t.factorialPoll)
	r.check("irq-enable", true, t.irqEnable)
	r.check("irq-quiet", false, t.irqQuiet)
	r.check("factorial-msi", false, t.factorialMSI)
	r.check("dma-alloc", true, t.dmaAlloc)
	r.check("dma-ram-to-dev", false, t.dmaToDevice)
	r.check("dma-dev-to-ram", false, t.dmaFromDevice)
	r.check("dma-map-at", false, t.dmaMapAt)
	r.check("dma-unmapped-blocked", false, t.dmaUnmapped)
	r.check("dma-free", false, t.dmaFree)
	r.check("bar-no-bad-access", false, t.barNoBadAccess)
	r.check("irq-disable", false, t.irqDisable)
	r.check("close", false, t.close)
	r.check("group-reopen", false, t.groupReopen)
	r.check("transport", false, t.transport)
	r.finish("")
}

// find locates edu in sysfs.
func (t *tester) find() (string, error) {
	dir := filepath.Join(t.sysfs, "bus", "pci", "devices")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return "", err
	}
	for _, e := range ents {
		v, err1 := readHex(filepath.Join(dir, e.Name(), "vendor"))
		d, err2 := readHex(filepath.Join(dir, e.Name(), "device"))
		if err1 == nil && err2 == nil && v == eduVendor && d == eduDevice {
			t.addr = e.Name()
			return "edu at " + t.addr, nil
		}
	}
	return "", fmt.Errorf("no device %04x:%04x among %d in %s", eduVendor, eduDevice, len(ents), dir)
}

// bindGuard checks that pcigeneric.Bind, which hands only known modems to
// vfio-pci, refuses edu and leaves it alone.
func (t *tester) bindGuard() (string, error) {
	before := t.driver()
	_, err := pcigeneric.Bind(t.sysfs, t.addr)
	if !errors.Is(err, pcigeneric.ErrNotModem) {
		return "", fmt.Errorf("pcigeneric.Bind(%s) = %v, want ErrNotModem", t.addr, err)
	}
	if after := t.driver(); after != before {
		return "", fmt.Errorf("driver changed from %q to %q", before, after)
	}
	return fmt.Sprintf("pcigeneric.Bind refuses a non-modem (%v); driver still %q", err, before), nil
}

// bind hands edu to vfio-pci the way pcigeneric.Bind does for modems:
// driver_override, unbind, drivers_probe.
func (t *tester) bind() (string, error) {
	dev := filepath.Join(t.sysfs, "bus", "pci", "devices", t.addr)
	prev := t.driver()
	if prev != "vfio-pci" {
		if err := writeAttr(filepath.Join(dev, "driver_override"), "vfio-pci"); err != nil {
			return "", err
		}
		if prev != "" {
			if err := writeAttr(filepath.Join(dev, "driver", "unbind"), t.addr); err != nil {
				return "", err
			}
		}
		if err := writeAttr(filepath.Join(t.sysfs, "bus", "pci", "drivers_probe"), t.addr); err != nil {
			return "", err
		}
	}
	if d := t.driver(); d != "vfio-pci" {
		return "", fmt.Errorf("driver is %q after probing, want vfio-pci", d)
	}
	link, err := os.Readlink(filepath.Join(dev, "iommu_group"))
	if err != nil {
		return "", fmt.Errorf("no iommu_group (is the guest booted with intel_iommu=on?): %w", err)
	}
	t.group = filepath.Base(link)
	node := filepath.Join(vfio.DefaultDevDir, t.group)
	if _, err := os.Stat(node); err != nil {
		return "", err
	}
	if prev == "" {
		prev = "none"
	}
	return fmt.Sprintf("driver %s -> vfio-pci, iommu group %s (%s)", prev, t.group, node), nil
}

// driver returns the name of the driver bound to edu, "" if none.
func (t *tester) driver() string {
	link, err := os.Readlink(filepath.Join(t.sysfs, "bus", "pci", "devices", t.addr, "driver"))
	if err != nil {
		return ""
	}
	return filepath.Base(link)
}

func (t *tester) options() vfio.Options {
	return vfio.Options{SysfsRoot: t.sysfs, DMAWidth: dmaWidth}
}

func (t *tester) open() (string, error) {
	d, err := vfio.Open(t.addr, t.options())
	if err != nil {
		return "", err
	}
	t.dev = d
	info := d.Info()
	switch {
	case d.Group() != t.group:
		return "", fmt.Errorf("Group() = %q, sysfs says %q", d.Group(), t.group)
	case d.NoIOMMU():
		return "", errors.New("opened in no-IOMMU mode; this test needs the IOMMU (type1)")
	case info.Flags&vfio.DeviceFlagPCI == 0 || info.NumRegions < vfio.RegionConfig+1:
		return "", fmt.Errorf("device info %+v: not a vfio-pci device", info)
	}
	return fmt.Sprintf("vfio.Open(%s, DMAWidth %d): group %s, %+v, IOMMU page %d", t.addr, dmaWidth, d.Group(), info, d.PageSize()), nil
}

// openBusy checks that the group is held while the device is open: a
// second Open fails with ErrDeviceBusy. This is what makes group-reopen
// after Close meaningful.
func (t *tester) openBusy() (string, error) {
	d, err := vfio.Open(t.addr, t.options())
	if err == nil {
		d.Close()
		return "", errors.New("a second Open succeeded while the device is open")
	}
	if !errors.Is(err, vfio.ErrDeviceBusy) {
		return "", fmt.Errorf("second Open: %w, want ErrDeviceBusy", err)
	}
	return fmt.Sprintf("second Open refused: %v", err), nil
}

func (t *tester) configID() (string, error) {
	b := make([]byte, 4)
	if err := t.dev.ReadConfig(0, b); err != nil {
		return "", err
	}
	v, d := binary.LittleEndian.Uint16(b), binary.LittleEndian.Uint16(b[2:])
	if v != eduVendor || d != eduDevice {
		return "", fmt.Errorf("config space id %04x:%04x, want %04x:%04x", v, d, eduVendor, eduDevice)
	}
	return fmt.Sprintf("vendor %04x device %04x", v, d), nil
}

// configCommand sets bus master with EnableBusMaster, clears it with a
// plain WriteConfig and sets it again, reading the command register back
// each time: memory decode and bus master must follow.
func (t *tester) configCommand() (string, error) {
	read := func() (uint16, error) {
		b := make([]byte, 2)
		err := t.dev.ReadConfig(4, b)
		return binary.LittleEndian.Uint16(b), err
	}
	enable := func() (uint16, error) {
		if err := t.dev.EnableBusMaster(); err != nil {
			return 0, err
		}
		v, err := read()
		if err == nil && v&(cmdMemory|cmdBusMaster) != cmdMemory|cmdBusMaster {
			err = fmt.Errorf("command %#04x after EnableBusMaster, want memory and bus master set", v)
		}
		return v, err
	}
	before, err := read()
	if err != nil {
		return "", err
	}
	on, err := enable()
	if err != nil {
		return "", err
	}
	if err := t.dev.WriteConfig(4, binary.LittleEndian.AppendUint16(nil, on&^cmdBusMaster)); err != nil {
		return "", err
	}
	off, err := read()
	if err != nil {
		return "", err
	}
	if off&cmdBusMaster != 0 || off&cmdMemory == 0 {
		return "", fmt.Errorf("command %#04x after writing %#04x", off, on&^cmdBusMaster)
	}
	again, err := enable()
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("command %#04x -> %#04x (EnableBusMaster) -> %#04x (WriteConfig) -> %#04x (EnableBusMaster)", before, on, off, again), nil
}

func (t *tester) regionBAR0() (string, error) {
	ri, err := t.dev.Region(vfio.RegionBAR0)
	if err != nil {
		return "", err
	}
	if ri.Size != 1<<20 || ri.Flags&vfio.RegionFlagMmap == 0 {
		return "", fmt.Errorf("BAR0 region %+v, want 1 MiB and mmap-able", ri)
	}
	return fmt.Sprintf("%+v", ri), nil
}

func (t *tester) mapBAR() (string, error) {
	b, err := t.dev.MapBAR(vfio.RegionBAR0)
	if err != nil {
		return "", err
	}
	t.bar = b
	if b.Size() != 1<<20 {
		return "", fmt.Errorf("BAR0 mapping of %d bytes, want 1 MiB", b.Size())
	}
	return fmt.Sprintf("BAR0 mapped, %d bytes", b.Size()), nil
}

func (t *tester) barIdent() (string, error) {
	v := t.bar.Read32(regIdent)
	if v != 0x010000ed {
		return "", fmt.Errorf("ident %#08x, want 0x010000ed", v)
	}
	p, err := t.dev.ReadBAR32(vfio.RegionBAR0, regIdent)
	if err != nil {
		return "", err
	}
	if p != v {
		return "", fmt.Errorf("ident through pread %#08x, through the mapping %#08x", p, v)
	}
	return fmt.Sprintf("ident %#08x (mmap and pread agree)", v), nil
}

func (t *tester) barLiveness() (string, error) {
	for _, x := range []uint32{0x12345678, 0, 0xffffffff, 0xdeadbeef} {
		t.bar.Write32(regLiveness, x)
		if got := t.bar.Read32(regLiveness); got != ^x {
			return "", fmt.Errorf("liveness: wrote %#08x, read %#08x, want %#08x", x, got, ^x)
		}
	}
	return "4 values read back inverted", nil
}

// bar64 checks single 64-bit accesses on the DMA source register through
// the mapping. edu decodes 4-byte reads at 0x80 but not at 0x84, so a
// 64-bit access split in two halves would read the high half as all ones.
// (That is what ReadBAR64's pread gets from Linux 6.1, whose vfio-pci
// splits 8-byte preads into 4-byte accesses; so it is not checked here.)
func (t *tester) bar64() (string, error) {
	v := uint64(0x0123456789abcdef)
	t.bar.Write64(regDMASrc, v)
	if got := t.bar.Read64(regDMASrc); got != v {
		return "", fmt.Errorf("DMA source register: wrote %#x, read %#x", v, got)
	}
	if lo := t.bar.Read32(regDMASrc); lo != uint32(v) {
		return "", fmt.Errorf("low half %#08x, want %#08x", lo, uint32(v))
	}
	return fmt.Sprintf("Write64/Read64 %#x at 0x80, low half agrees", v), nil
}

func (t *tester) factorialPoll() (string, error) {
	t.bar.Write32(regStatus, 0)
	t.bar.Write32(regFactorial, 5)
	deadline := time.Now().Add(irqTimeout)
	polls := 0
	for {
		polls++
		if t.bar.Read32(regStatus)&statusBusy == 0 {
			break
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("still computing after %v", irqTimeout)
		}
		time.Sleep(time.Millisecond)
	}
	if v := t.bar.Read32(regFactorial); v != 120 {
		return "", fmt.Errorf("5! = %d, want 120", v)
	}
	return fmt.Sprintf("5! = 120 after %d status polls", polls), nil
}

func (t *tester) irqEnable() (string, error) {
	info, err := t.dev.IRQInfo(vfio.IRQIndexMSI)
	if err != nil {
		return "", err
	}
	vecs, err := t.dev.EnableIRQs(vfio.IRQIndexMSI, 1)
	if err != nil {
		return "", err
	}
	if len(vecs) != 1 {
		return "", fmt.Errorf("%d vectors, want 1", len(vecs))
	}
	t.vec = vecs[0]
	return fmt.Sprintf("MSI vector %d on eventfd %d (%+v)", t.vec.Number(), t.vec.FD(), info), nil
}

// irqQuiet checks that Wait times out when the device raised nothing, so
// that the interrupt checks below cannot pass on a vector that always fires.
func (t *tester) irqQuiet() (string, error) {
	start := time.Now()
	n, err := t.vec.Wait(100 * time.Millisecond)
	if !errors.Is(err, vfio.ErrTimeout) {
		return "", fmt.Errorf("Wait with nothing raised: %d interrupts, %v; want ErrTimeout", n, err)
	}
	return fmt.Sprintf("Wait(100ms) with nothing raised: ErrTimeout after %v", time.Since(start).Round(time.Millisecond)), nil
}

// waitIRQ waits for one MSI, checks the device's interrupt status holds
// want and acknowledges it.
func (t *tester) waitIRQ(want uint32) (time.Duration, error) {
	start := time.Now()
	n, err := t.vec.Wait(irqTimeout)
	took := time.Since(start)
	if err != nil {
		return took, fmt.Errorf("no MSI: %w", err)
	}
	if n != 1 {
		return took, fmt.Errorf("eventfd counted %d interrupts, want 1", n)
	}
	st := t.bar.Read32(regIRQStatus)
	if st&want == 0 {
		return took, fmt.Errorf("MSI arrived but IRQ status is %#x, want bit %#x", st, want)
	}
	t.bar.Write32(regIRQAck, st)
	if st := t.bar.Read32(regIRQStatus); st != 0 {
		return took, fmt.Errorf("IRQ status %#x after ack", st)
	}
	return took, nil
}

func (t *tester) factorialMSI() (string, error) {
	t.bar.Write32(regStatus, statusIRQFact)
	t.bar.Write32(regFactorial, 10)
	took, err := t.waitIRQ(irqFactorial)
	t.bar.Write32(regStatus, 0)
	if err != nil {
		return "", err
	}
	if v := t.bar.Read32(regFactorial); v != 3628800 {
		return "", fmt.Errorf("10! = %d, want 3628800", v)
	}
	return fmt.Sprintf("10! = 3628800, one MSI after %v, acked", took.Round(time.Microsecond)), nil
}

func (t *tester) dmaAlloc() (string, error) {
	buf, err := t.dev.AllocDMA(dmaAllocSize, pageSize)
	if err != nil {
		return "", err
	}
	t.buf = buf
	switch {
	case len(buf.Bytes) != dmaAllocSize:
		return "", fmt.Errorf("%d bytes, want %d", len(buf.Bytes), dmaAllocSize)
	case buf.IOVA%pageSize != 0 || buf.IOVA+dmaAllocSize > 1<<dmaWidth:
		return "", fmt.Errorf("IOVA %#x: not page aligned or beyond the %d-bit DMA width", buf.IOVA, dmaWidth)
	}
	if i := firstNot(buf.Bytes, 0); i >= 0 {
		return "", fmt.Errorf("buffer not zeroed at byte %d", i)
	}
	return fmt.Sprintf("%d bytes at IOVA %#x, zeroed", len(buf.Bytes), buf.IOVA), nil
}

// pattern returns n bytes with a seed of their own, so that each transfer
// is told apart from the others.
func pattern(n int, seed byte) []byte {
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(i*7+i>>8) ^ seed
	}
	return p
}

// dma runs one edu transfer of dmaLen bytes and waits for its completion
// MSI. toRAM selects the direction edu buffer → RAM.
func (t *tester) dma(src, dst uint64, toRAM bool) (time.Duration, error) {
	cmd := uint64(dmaStart | dmaIRQ)
	if toRAM {
		cmd |= dmaToRAM
	}
	t.bar.Write64(regDMASrc, src)
	t.bar.Write64(regDMADst, dst)
	t.bar.Write64(regDMACount, dmaLen)
	t.bar.Write64(regDMACmd, cmd)
	took, err := t.waitIRQ(irqDMA)
	if err != nil {
		return took, err
	}
	if c := t.bar.Read64(regDMACmd); c&dmaStart != 0 {
		return took, fmt.Errorf("DMA still running after its interrupt (cmd %#x)", c)
	}
	return took, nil
}

// deviceIOVA is the IOVA given to the device for memory mapped at iova:
// the same, unless -break moves it.
func (t *tester) deviceIOVA(iova uint64) uint64 {
	if t.broken {
		return iova + breakShift
	}
	return iova
}

func (t *tester) dmaToDevice() (string, error) {
	copy(t.buf.Bytes, pattern(dmaLen, 0x5a))
	took, err := t.dma(t.deviceIOVA(t.buf.IOVA), eduBuffer, false)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%d bytes IOVA %#x -> edu, completion MSI after %v", dmaLen, t.buf.IOVA, took.Round(time.Millisecond)), nil
}

func (t *tester) dmaFromDevice() (string, error) {
	const off = 2 * pageSize
	took, err := t.dma(eduBuffer, t.deviceIOVA(t.buf.IOVA+off), true)
	if err != nil {
		return "", err
	}
	if err := compare(t.buf.Bytes[off:off+dmaLen], pattern(dmaLen, 0x5a)); err != nil {
		return "", fmt.Errorf("round trip: %w", err)
	}
	return fmt.Sprintf("edu -> %d bytes at IOVA %#x, completion MSI after %v, round trip matches", dmaLen, t.buf.IOVA+off, took.Round(time.Millisecond)), nil
}

// dmaMapAt maps memory of its own with MapDMAAt at a chosen IOVA, moves a
// new pattern RAM -> edu -> RAM through it and compares; then unmaps it
// with UnmapDMA and checks that a DMA to the stale IOVA no longer lands.
func (t *tester) dmaMapAt() (string, error) {
	mem, err := lockedPages(2)
	if err != nil {
		return "", err
	}
	defer unix.Munmap(mem)
	if err := t.dev.MapDMAAt(mem, mapAtIOVA); err != nil {
		return "", err
	}
	p := pattern(dmaLen, 0xc3)
	copy(mem, p)
	if _, err := t.dma(t.deviceIOVA(mapAtIOVA), eduBuffer, false); err != nil {
		return "", err
	}
	if _, err := t.dma(eduBuffer, t.deviceIOVA(mapAtIOVA+pageSize), true); err != nil {
		return "", err
	}
	if err := compare(mem[pageSize:pageSize+dmaLen], p); err != nil {
		return "", fmt.Errorf("round trip through IOVA %#x: %w", uint64(mapAtIOVA), err)
	}
	// The same IOVA after UnmapDMA must be dead.
	if err := t.dev.UnmapDMA(mapAtIOVA, uint64(len(mem))); err != nil {
		return "", err
	}
	fill(mem, 0xa5)
	if err := t.dmaMustNotLand(mapAtIOVA+pageSize, mem); err != nil {
		return "", fmt.Errorf("after UnmapDMA: %w", err)
	}
	return fmt.Sprintf("%d bytes round trip through own memory at IOVA %#x; after UnmapDMA a DMA there is blocked (DMAR fault)", dmaLen, uint64(mapAtIOVA)), nil
}

// dmaUnmapped asks edu to write to an IOVA that nothing is mapped at: the
// guest-physical address of a page of ours, so that a transport that let
// DMA bypass the IOMMU would land in that page.
func (t *tester) dmaUnmapped() (string, error) {
	target, err := lockedPages(16)
	if err != nil {
		return "", err
	}
	defer unix.Munmap(target)
	fill(target, 0xa5)
	mapped := [2]uint64{t.buf.IOVA, t.buf.IOVA + dmaAllocSize}
	iova, how := uint64(0x0f000000), "a fixed IOVA: no page of ours below 256 MiB"
	for i := 0; i < len(target)/pageSize; i++ {
		pa, err := physAddr(target[i*pageSize:])
		if err != nil {
			how = fmt.Sprintf("a fixed IOVA (pagemap: %v)", err)
			break
		}
		if pa != 0 && pa+pageSize <= 1<<dmaWidth && (pa+pageSize <= mapped[0] || pa >= mapped[1]) {
			iova, how = pa, "the guest-physical address of our page"
			break
		}
	}
	if err := t.dmaMustNotLand(iova, target); err != nil {
		return "", err
	}
	return fmt.Sprintf("edu -> IOVA %#x (%s): not landed, DMAR fault logged", iova, how), nil
}

// dmaMustNotLand runs an edu → RAM transfer to iova, which must be
// unmapped: watch (filled with 0xa5) must stay unchanged and the kernel
// must log a DMAR fault for iova.
func (t *tester) dmaMustNotLand(iova uint64, watch []byte) error {
	msg := fmt.Sprintf("fault addr 0x%x", iova)
	before := kernelLogCount(msg)
	if _, err := t.dma(eduBuffer, iova, true); err != nil {
		return fmt.Errorf("DMA to unmapped IOVA %#x: %w", iova, err)
	}
	if i := firstNot(watch, 0xa5); i >= 0 {
		return fmt.Errorf("DMA to unmapped IOVA %#x changed our memory at byte %d", iova, i)
	}
	// The fault is reported by the DMAR interrupt; give it a moment.
	for deadline := time.Now().Add(faultTimeout); kernelLogCount(msg) == before; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			return fmt.Errorf("memory unchanged, but no DMAR fault logged for IOVA %#x: did the DMA run?", iova)
		}
	}
	return nil
}

func (t *tester) dmaFree() (string, error) {
	n := t.dev.DMAMappings()
	if err := t.dev.FreeDMA(t.buf); err != nil {
		return "", err
	}
	if m := t.dev.DMAMappings(); m != n-1 || m != 0 {
		return "", fmt.Errorf("%d DMA mappings after FreeDMA, had %d; want 0", m, n)
	}
	return fmt.Sprintf("FreeDMA: %d -> 0 DMA mappings", n), nil
}

// barNoBadAccess checks that no BAR access above was out of range or
// misaligned (those are absorbed, not reported, by Read32 and friends).
func (t *tester) barNoBadAccess() (string, error) {
	if n := t.bar.BadAccesses(); n != 0 {
		return "", fmt.Errorf("%d bad BAR accesses", n)
	}
	return "0 bad BAR accesses", nil
}

func (t *tester) irqDisable() (string, error) {
	if err := t.dev.DisableIRQs(vfio.IRQIndexMSI); err != nil {
		return "", err
	}
	if _, err := t.vec.Wait(0); !errors.Is(err, vfio.ErrClosed) {
		return "", fmt.Errorf("Wait after DisableIRQs: %v, want ErrClosed", err)
	}
	return "MSI disabled, vector closed", nil
}

func (t *tester) close() (string, error) {
	if err := t.dev.Close(); err != nil {
		return "", err
	}
	if err := t.dev.Close(); err != nil {
		return "", fmt.Errorf("second Close: %w", err)
	}
	return "device closed (twice)", nil
}

// groupReopen checks that Close released the group: its node opens again,
// and so does the device through the package.
func (t *tester) groupReopen() (string, error) {
	node := filepath.Join(vfio.DefaultDevDir, t.group)
	f, err := os.OpenFile(node, os.O_RDWR, 0)
	if err != nil {
		return "", fmt.Errorf("group not released by Close: %w", err)
	}
	f.Close()
	d, err := vfio.Open(t.addr, t.options())
	if err != nil {
		return "", fmt.Errorf("reopening through vfio.Open: %w", err)
	}
	defer d.Close()
	b, err := d.MapBAR(vfio.RegionBAR0)
	if err != nil {
		return "", err
	}
	if v := b.Read32(regIdent); v != 0x010000ed {
		return "", fmt.Errorf("ident %#08x after reopening", v)
	}
	if err := d.Close(); err != nil {
		return "", err
	}
	return node + " opens again; vfio.Open, ident, Close again", nil
}

// transport drives edu once more through vfio.NewTransport, the
// mhi.Transport the host stack uses: 32-bit registers, the interrupt
// handler, Alloc/Free and a DMA round trip; then Close must release the
// group.
func (t *tester) transport() (string, error) {
	d, err := vfio.Open(t.addr, t.options())
	if err != nil {
		return "", err
	}
	tr, err := vfio.NewTransport(d, vfio.RegionBAR0, 1)
	if err != nil {
		d.Close()
		return "", err
	}
	var mt mhi.Transport = tr
	detail, err := t.useTransport(mt)
	mt.SetInterruptHandler(nil)
	if cerr := mt.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("Close: %w", cerr)
	}
	if err != nil {
		return "", err
	}
	f, err := os.OpenFile(filepath.Join(vfio.DefaultDevDir, t.group), os.O_RDWR, 0)
	if err != nil {
		return "", fmt.Errorf("group not released by Transport.Close: %w", err)
	}
	f.Close()
	return detail + "; Close released the group", nil
}

func (t *tester) useTransport(mt mhi.Transport) (string, error) {
	if n := mt.Vectors(); n != 1 {
		return "", fmt.Errorf("%d vectors, want 1", n)
	}
	if v, err := mt.Read32(regIdent); err != nil || v != 0x010000ed {
		return "", fmt.Errorf("ident %#08x, %v", v, err)
	}
	irqs := make(chan int, 16)
	mt.SetInterruptHandler(func(vector int) { irqs <- vector })
	// wait waits for the handler, then checks and acks the IRQ status.
	wait := func(want uint32) error {
		select {
		case v := <-irqs:
			if v != 0 {
				return fmt.Errorf("interrupt on vector %d, want 0", v)
			}
		case <-time.After(irqTimeout):
			return fmt.Errorf("no interrupt handler call within %v", irqTimeout)
		}
		st, err := mt.Read32(regIRQStatus)
		if err != nil || st&want == 0 {
			return fmt.Errorf("IRQ status %#x (%v), want bit %#x", st, err, want)
		}
		return mt.Write32(regIRQAck, st)
	}
	write := func(regs ...uint32) error {
		for i := 0; i < len(regs); i += 2 {
			if err := mt.Write32(regs[i], regs[i+1]); err != nil {
				return err
			}
		}
		return nil
	}
	if err := write(regStatus, statusIRQFact, regFactorial, 6); err != nil {
		return "", err
	}
	if err := wait(irqFactorial); err != nil {
		return "", fmt.Errorf("factorial: %w", err)
	}
	if v, err := mt.Read32(regFactorial); err != nil || v != 720 {
		return "", fmt.Errorf("6! = %d (%v), want 720", v, err)
	}
	if err := write(regStatus, 0); err != nil {
		return "", err
	}
	buf, err := mt.Alloc(2*pageSize, pageSize)
	if err != nil {
		return "", err
	}
	// (On an error below, Close frees buf.)
	// Through 32-bit registers: edu takes a 4-byte write at 0x80/0x88 as
	// the whole (zero-extended) address, and the IOVA is below 4 GiB.
	p := pattern(dmaLen, 0x3c)
	copy(buf.Bytes, p)
	src, dst := uint32(t.deviceIOVA(buf.IOVA)), uint32(t.deviceIOVA(buf.IOVA+pageSize))
	if err := write(regDMASrc, src, regDMADst, eduBuffer, regDMACount, dmaLen, regDMACmd, dmaStart|dmaIRQ); err != nil {
		return "", err
	}
	if err := wait(irqDMA); err != nil {
		return "", fmt.Errorf("DMA to edu: %w", err)
	}
	if err := write(regDMASrc, eduBuffer, regDMADst, dst, regDMACount, dmaLen, regDMACmd, dmaStart|dmaToRAM|dmaIRQ); err != nil {
		return "", err
	}
	if err := wait(irqDMA); err != nil {
		return "", fmt.Errorf("DMA from edu: %w", err)
	}
	if err := compare(buf.Bytes[pageSize:pageSize+dmaLen], p); err != nil {
		return "", fmt.Errorf("round trip: %w", err)
	}
	if err := mt.Free(buf); err != nil {
		return "", fmt.Errorf("Free: %w", err)
	}
	return fmt.Sprintf("mhi.Transport: ident, 6! = 720 by interrupt handler, %d-byte DMA round trip at IOVA %#x", dmaLen, buf.IOVA), nil
}

// compare reports the first byte where got differs from want.
func compare(got, want []byte) error {
	if bytes.Equal(got, want) {
		return nil
	}
	i := 0
	for i < len(got) && i < len(want) && got[i] == want[i] {
		i++
	}
	diff := 0
	for j := range min(len(got), len(want)) {
		if got[j] != want[j] {
			diff++
		}
	}
	return fmt.Errorf("%d of %d bytes differ, first at %d (got %#02x, want %#02x)", diff, len(want), i, got[i], want[i])
}

// fill sets every byte of b to v.
func fill(b []byte, v byte) {
	for i := range b {
		b[i] = v
	}
}

// firstNot returns the index of the first byte of b that is not v, or -1.
func firstNot(b []byte, v byte) int {
	for i, x := range b {
		if x != v {
			return i
		}
	}
	return -1
}

// lockedPages returns n anonymous pages that are populated and locked, so
// that their physical addresses stay put.
func lockedPages(n int) ([]byte, error) {
	return unix.Mmap(-1, 0, n*pageSize, unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE|unix.MAP_LOCKED)
}

// physAddr returns the guest-physical address of the page holding b[0],
// from /proc/self/pagemap (root only).
func physAddr(b []byte) (uint64, error) {
	f, err := os.Open("/proc/self/pagemap")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	va := uint64(uintptr(unsafe.Pointer(&b[0])))
	var e [8]byte
	if _, err := f.ReadAt(e[:], int64(va/pageSize*8)); err != nil {
		return 0, err
	}
	v := binary.LittleEndian.Uint64(e[:])
	if v&(1<<63) == 0 {
		return 0, errors.New("page not present")
	}
	pfn := v & (1<<55 - 1)
	if pfn == 0 {
		return 0, errors.New("PFN hidden")
	}
	return pfn*pageSize + va%pageSize, nil
}

// kernelLogCount counts the kernel log lines containing s.
func kernelLogCount(s string) int {
	buf := make([]byte, 1<<20)
	n, err := unix.Klogctl(unix.SYSLOG_ACTION_READ_ALL, buf)
	if err != nil {
		return 0
	}
	return strings.Count(string(buf[:n]), s)
}

func readHex(path string) (uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(strings.TrimPrefix(strings.TrimSpace(string(b)), "0x"), 16, 32)
}

// writeAttr writes value to an existing sysfs attribute.
func writeAttr(path, value string) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, werr := f.WriteString(value)
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return fmt.Errorf("writing %q to %s: %w", value, path, werr)
	}
	return nil
}
