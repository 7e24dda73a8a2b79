package vfiouser

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhi"
	"github.com/gomhi/gomhi/mhi/ep"
	"github.com/gomhi/gomhi/mhi/loopback"
	"github.com/gomhi/gomhi/mhi/testenv/poll"
	"github.com/gomhi/gomhi/mhi/wire"
	"github.com/gomhi/gomhi/pcigeneric/vfiouser/client"
)

// TestPMCapability: PMCSR takes D0 and D3hot and refuses D1 and D2 (not
// offered in PMC), PME_Status is write-1-to-clear, the changes between
// D0 and D3hot are counted, and BAR0 answers all ones in D3hot.
func TestPMCapability(t *testing.T) {
	var pm pmCounters
	c := newConfigSpace(PCIConfig{BARSize: 4096, Vectors: 1})
	c.pm = &pm
	pmcsr := func() uint16 {
		var b [2]byte
		c.read(cfgPM+4, b[:])
		return binary.LittleEndian.Uint16(b[:])
	}
	set := func(v uint16) {
		var b [2]byte
		binary.LittleEndian.PutUint16(b[:], v)
		c.write(cfgPM+4, b[:])
	}
	for _, tc := range []struct {
		write uint16
		state int
	}{{powerD3Hot, powerD3Hot}, {1, powerD3Hot}, {powerD0, powerD0}, {2, powerD0}, {powerD3Hot | pmcsrPMEEnable, powerD3Hot}, {powerD0, powerD0}} {
		set(tc.write)
		if got := c.powerState(); got != tc.state {
			t.Fatalf("PMCSR write 0x%x: power state %d, want %d (PMCSR 0x%x)", tc.write, got, tc.state, pmcsr())
		}
	}
	if pm.d3.Load() != 2 || pm.d0.Load() != 2 {
		t.Fatalf("counted %d D3hot entries and %d D0 returns, want 2 and 2", pm.d3.Load(), pm.d0.Load())
	}
	// PME_Status: the device sets it, a 1 written clears it, a 0 keeps it.
	c.mu.Lock()
	binary.LittleEndian.PutUint16(c.b[cfgPM+4:], binary.LittleEndian.Uint16(c.b[cfgPM+4:])|pmcsrPMEStatus)
	c.mu.Unlock()
	set(powerD0)
	if pmcsr()&pmcsrPMEStatus == 0 {
		t.Fatal("writing 0 to PME_Status cleared it")
	}
	set(pmcsrPMEStatus)
	if pmcsr()&pmcsrPMEStatus != 0 {
		t.Fatal("writing 1 to PME_Status did not clear it")
	}
	if pmcsr()&pmcsrNoSoftReset == 0 {
		t.Fatal("No_Soft_Reset lost")
	}
	set(powerD3Hot)
	if !c.inD3() || pm.blocked.Load() != 1 {
		t.Fatalf("inD3 in D3hot: blocked %d", pm.blocked.Load())
	}
}

// TestBootAndAutoSuspendOverVFIOUser: a served modem starting in PBL gets
// its boot loader from the client's firmware directory over BHI; then the
// client's auto-suspend puts the idle modem in M3 and LOOPBACK traffic
// wakes it, with the counts of both sides equal.
func TestBootAndAutoSuspendOverVFIOUser(t *testing.T) {
	img := make([]byte, 150_000)
	for i := range img {
		img[i] = byte(i * 13)
	}
	sum := sha256.Sum256(img)
	fw := t.TempDir()
	p := filepath.Join(fw, "qcom", "sdx55m", "sbl1.mbn")
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, img, 0o644); err != nil {
		t.Fatal(err)
	}
	var images []ep.BootImage
	dev, err := NewServerDevice(DeviceOptions{Model: "qcom-sdx55m", Device: func(c *ep.Config) {
		c.Boot = ep.BootConfig{Start: ep.BootPBL, SBL: ep.ImageCheck{SHA256: sum[:]},
			OnImage: func(im ep.BootImage) { images = append(images, im) }}
	}})
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "m.sock")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ListenAndServe(ctx, sock, dev) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	if !poll.Until(5*time.Second, func() bool { _, err := os.Stat(sock); return err == nil }) {
		t.Fatal("no socket")
	}
	r, err := client.Open(sock, client.OpenOptions{FirmwareDir: fw})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := r.Controller.PowerUp(); err != nil {
		t.Fatal(err)
	}
	if len(images) != 1 || images[0].Err != nil || images[0].SHA256 != sum || images[0].Bytes != len(img) {
		t.Fatalf("boot ROM saw %+v", images)
	}
	lb, err := loopback.Open(r.Controller, loopback.Options{Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer lb.Close()
	if err := r.Controller.SetAutoSuspend(100 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	m := dev.Modem()
	for round := 1; round <= 2; round++ {
		poll.Until(5*time.Second, func() bool { return m.State() == wire.StateM3 })
		if m.State() != wire.StateM3 {
			t.Fatalf("round %d: modem in %s after the idle time", round, m.State())
		}
		res, err := lb.Run(loopback.RunOptions{Count: 4, MinSize: 1, MaxSize: 1000})
		if err != nil || res.Received != 4 || res.Mismatched != 0 {
			t.Fatalf("round %d: loopback from M3: %+v %v", round, res, err)
		}
	}
	if err := r.Controller.SetAutoSuspend(0); err != nil {
		t.Fatal(err)
	}
	if r.Controller.PMState() == "M3" {
		if err := r.Controller.Resume(); err != nil {
			t.Fatal(err)
		}
	}
	// The host counts a resume when its Resume sees the M0 event, which
	// may be after the event's handler rang the held doorbells and the
	// loopback finished: wait for the counts to agree, bounded.
	var hs mhi.ControllerStatsSnapshot
	var ds ep.Stats
	poll.Until(5*time.Second, func() bool {
		hs, ds = r.Controller.Stats(), m.Stats()
		return hs.Resumes == ds.M3Exits
	})
	if hs.Suspends < 2 || hs.Suspends != ds.M3Entries || hs.Resumes != ds.M3Exits {
		t.Fatalf("host %d suspends, %d resumes; modem %d M3 entries, %d exits", hs.Suspends, hs.Resumes, ds.M3Entries, ds.M3Exits)
	}
}
