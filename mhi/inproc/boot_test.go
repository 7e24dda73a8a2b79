package inproc_test

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhi"
	"github.com/gomhi/gomhi/mhi/ep"
	"github.com/gomhi/gomhi/mhi/loopback"
	"github.com/gomhi/gomhi/mhi/testenv/poll"
	"github.com/gomhi/gomhi/mhi/wire"
)

// testImage is a deterministic firmware image of n bytes.
func testImage(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*31) ^ seed ^ byte(i>>9)
	}
	return b
}

// images records the boot ROM's image reports.
type images struct {
	mu   sync.Mutex
	recs []ep.BootImage
}

func (im *images) add(r ep.BootImage) {
	im.mu.Lock()
	im.recs = append(im.recs, r)
	im.mu.Unlock()
}

func (im *images) all() []ep.BootImage {
	im.mu.Lock()
	defer im.mu.Unlock()
	return append([]ep.BootImage(nil), im.recs...)
}

// fwFor serves pbl for EE PBL and edl for EE EDL.
func fwFor(pbl, edl []byte) *mhi.Firmware {
	return &mhi.Firmware{Load: func(ee wire.ExecEnv) (string, []byte, error) {
		switch ee {
		case wire.EEPBL:
			return "qcom/sdx55m/sbl1.mbn", pbl, nil
		case wire.EEEDL:
			return "qcom/sdx55m/edl.mbn", edl, nil
		}
		return "", nil, errors.New("no image")
	}}
}

func TestBootFromPBL(t *testing.T) {
	img := testImage(300_000, 1)
	sum := sha256.Sum256(img)
	other := testImage(300_000, 2)
	cases := []struct {
		name    string
		image   []byte
		check   ep.ImageCheck
		wantErr bool
		code    uint32
	}{
		{"digest matches", img, ep.ImageCheck{SHA256: sum[:]}, false, 0},
		{"any image", other, ep.ImageCheck{}, false, 0},
		{"wrong digest", other, ep.ImageCheck{SHA256: sum[:]}, true, ep.BHIErrDigest},
		{"too large", img, ep.ImageCheck{MaxSize: 1000}, true, ep.BHIErrSize},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var got images
			r := newRigWith(t, sdx55(), func(c *ep.Config) {
				c.Boot = ep.BootConfig{Start: ep.BootPBL, SBL: tc.check, OnImage: got.add}
			}, mhi.Options{Name: "mhi0", PollInterval: 20 * time.Millisecond, Firmware: fwFor(tc.image, nil)})
			if bs := r.dev.BootStatus(); bs.EE != wire.EEPBL || !bs.AwaitImage {
				t.Fatalf("device before power-up: %+v, want PBL waiting for an image", bs)
			}
			err := r.ctrl.PowerUp()
			recs := got.all()
			wantSum := sha256.Sum256(tc.image)
			if tc.code == ep.BHIErrSize {
				wantSum = [32]byte{} // refused before it was read
			}
			if len(recs) != 1 || recs[0].Stage != "sbl" || recs[0].Bytes != len(tc.image) || recs[0].SHA256 != wantSum {
				t.Fatalf("boot ROM saw %+v, want one sbl image of %d bytes", recs, len(tc.image))
			}
			st := r.ctrl.Stats()
			if tc.wantErr {
				if !errors.Is(err, mhi.ErrFirmware) {
					t.Fatalf("PowerUp = %v, want ErrFirmware", err)
				}
				bs := r.dev.BootStatus()
				if bs.EE != wire.EEPBL || !bs.AwaitImage || bs.ErrCode != tc.code || r.dev.State() == wire.StateM0 {
					t.Fatalf("device after a refused image: %+v state %s, want PBL, error %d", bs, r.dev.State(), tc.code)
				}
				if st.FirmwareErrors != 1 || st.FirmwareImages != 0 || r.dev.Stats().ImagesRefused != 1 {
					t.Fatalf("counters: host %d images %d errors, device %d refused", st.FirmwareImages, st.FirmwareErrors, r.dev.Stats().ImagesRefused)
				}
				t.Logf("as expected: %v", err)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if s, ee := r.ctrl.State(); s != wire.StateM0 || ee != wire.EEAMSS {
				t.Fatalf("host sees %s/%s, want M0/AMSS", s, ee)
			}
			if st.FirmwareImages != 1 || r.dev.Stats().ImagesLoaded != 1 {
				t.Fatalf("images: host %d, device %d; want 1", st.FirmwareImages, r.dev.Stats().ImagesLoaded)
			}
			runLoopback(t, r.ctrl)
		})
	}
}

// runLoopback checks that the device works after booting.
func runLoopback(t *testing.T, ctrl *mhi.Controller) {
	t.Helper()
	lb, err := loopback.Open(ctrl, loopback.Options{Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer lb.Close()
	res, err := lb.Run(loopback.RunOptions{Count: 20, MinSize: 1, MaxSize: 4096})
	if err != nil || res.Received != 20 || res.Mismatched != 0 {
		t.Fatalf("loopback after boot: %+v, %v", res, err)
	}
}

func TestBootFullImageOverBHIe(t *testing.T) {
	img := testImage(1_300_000, 7)
	sum := sha256.Sum256(img)
	var got images
	fw := fwFor(img, nil)
	fw.FullImage, fw.SBLSize, fw.SegmentSize = true, 64<<10, 256<<10
	sbl := sha256.Sum256(img[:64<<10])
	r := newRigWith(t, sdx55(), func(c *ep.Config) {
		c.Boot = ep.BootConfig{Start: ep.BootPBL, FullImage: true, SBL: ep.ImageCheck{SHA256: sbl[:]},
			AMSS: ep.ImageCheck{SHA256: sum[:]}, OnImage: got.add}
	}, mhi.Options{Name: "mhi0", PollInterval: 20 * time.Millisecond, Firmware: fw})
	if err := r.ctrl.PowerUp(); err != nil {
		t.Fatalf("PowerUp: %v (images %+v)", err, got.all())
	}
	recs := got.all()
	if len(recs) != 2 || recs[0].Stage != "sbl" || recs[0].Bytes != 64<<10 || recs[1].Stage != "amss" ||
		recs[1].Bytes != len(img) || recs[1].SHA256 != sum || recs[1].Err != nil {
		t.Fatalf("images %+v, want the SBL's 64 KiB then the whole image over BHIe", recs)
	}
	if bs := r.dev.BootStatus(); bs.EE != wire.EEAMSS || bs.TxVecStatus>>30 != wire.BHIStatusSuccess {
		t.Fatalf("device %+v", bs)
	}
	runLoopback(t, r.ctrl)
}

func TestRDDMCollectedAndRecovered(t *testing.T) {
	r := newRigWith(t, sdx55(), func(c *ep.Config) { c.Boot = ep.BootConfig{RDDM: true} },
		mhi.Options{Name: "mhi0", PollInterval: 20 * time.Millisecond, RDDMSize: 1 << 20, RDDMSegmentSize: 64 << 10})
	if err := r.ctrl.PowerUp(); err != nil {
		t.Fatal(err)
	}
	dump, err := r.ctrl.CollectDump(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	want := ep.DumpPattern(ep.DefaultDumpSize)
	if !bytes.Equal(dump, want) {
		t.Fatalf("dump of %d bytes (sha256 %x), want %d bytes (sha256 %x)", len(dump), sha256.Sum256(dump), len(want), sha256.Sum256(want))
	}
	// The recovery that collected it brings the device back.
	poll.Until(5*time.Second, func() bool { return r.ctrl.PMState() == "M0" })
	if st, ee := r.ctrl.State(); st != wire.StateM0 || ee != wire.EEAMSS {
		t.Fatalf("after the dump: %s/%s (pm %s)", st, ee, r.ctrl.PMState())
	}
	if s := r.ctrl.Stats(); s.Dumps != 1 || r.dev.Stats().DumpsWritten != 1 {
		t.Fatalf("dumps: host %d, device %d", s.Dumps, r.dev.Stats().DumpsWritten)
	}
	runLoopback(t, r.ctrl)
	// A crash without RDDM on the device: no dump, a clear error.
	r2 := newRigWith(t, sdx55(), nil, mhi.Options{Name: "mhi1", PollInterval: 20 * time.Millisecond, RDDMSize: 1 << 20})
	if err := r2.ctrl.PowerUp(); err != nil {
		t.Fatal(err)
	}
	if _, err := r2.ctrl.CollectDump(5 * time.Second); !errors.Is(err, mhi.ErrNoDump) {
		t.Fatalf("CollectDump without RDDM = %v, want ErrNoDump", err)
	}
}

func TestAutoSuspendAndWake(t *testing.T) {
	r := newRig(t, sdx55(), nil)
	if err := r.ctrl.PowerUp(); err != nil {
		t.Fatal(err)
	}
	lb, err := loopback.Open(r.ctrl, loopback.Options{Timeout: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer lb.Close()
	if err := r.ctrl.SetAutoSuspend(50 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	for round := 1; round <= 3; round++ {
		poll.Until(3*time.Second, func() bool { return r.dev.State() == wire.StateM3 })
		if r.dev.State() != wire.StateM3 || r.ctrl.PMState() != "M3" {
			t.Fatalf("round %d: device %s host %s after the idle time, want M3", round, r.dev.State(), r.ctrl.PMState())
		}
		// Traffic queued in M3 wakes the device and gets through.
		res, err := lb.Run(loopback.RunOptions{Count: 5, MinSize: 1, MaxSize: 512})
		if err != nil || res.Received != 5 || res.Mismatched != 0 {
			t.Fatalf("round %d: loopback from M3: %+v, %v", round, res, err)
		}
	}
	if err := r.ctrl.SetAutoSuspend(0); err != nil {
		t.Fatal(err)
	}
	if r.ctrl.PMState() == "M3" {
		if err := r.ctrl.Resume(); err != nil {
			t.Fatal(err)
		}
	}
	hs, ds := r.ctrl.Stats(), r.dev.Stats()
	t.Logf("host: %d suspends (%d automatic), %d resumes; device: %d M3 entries, %d exits", hs.Suspends, hs.AutoSuspends, hs.Resumes, ds.M3Entries, ds.M3Exits)
	if hs.Suspends < 3 || hs.Suspends != ds.M3Entries || hs.Resumes != ds.M3Exits || hs.AutoSuspends != hs.Suspends {
		t.Fatalf("host %d suspends / %d resumes, device %d / %d", hs.Suspends, hs.Resumes, ds.M3Entries, ds.M3Exits)
	}
}

func TestEDLProgrammer(t *testing.T) {
	prog := testImage(40_000, 9)
	sum := sha256.Sum256(prog)
	var got images
	r := newRigWith(t, sdx55(), func(c *ep.Config) {
		c.Boot = ep.BootConfig{EDL: ep.ImageCheck{SHA256: sum[:]}, OnImage: got.add}
	}, mhi.Options{Name: "mhi0", PollInterval: 20 * time.Millisecond, Firmware: fwFor(nil, prog)})
	r.dev.EnterEDL()
	poll.Until(2*time.Second, func() bool { return r.dev.BootStatus().EE == wire.EEEDL })
	if err := r.ctrl.PowerUp(); err != nil {
		t.Fatal(err)
	}
	if _, ee := r.ctrl.State(); ee != wire.EEFP {
		t.Fatalf("after the EDL programmer: EE %s, want FP", ee)
	}
	if recs := got.all(); len(recs) != 1 || recs[0].Stage != "edl" || recs[0].Err != nil {
		t.Fatalf("images %+v", recs)
	}
}

// TestEnterEDL: the host's EDL trigger (cookie in doorbell 91, SoC reset)
// reboots a running modem into EDL; the recovery downloads the EDL image
// and the modem runs its programmer (EE FP).
func TestEnterEDL(t *testing.T) {
	prog := testImage(30_000, 3)
	var got images
	r := newRigWith(t, sdx55(), func(c *ep.Config) { c.Boot = ep.BootConfig{OnImage: got.add} },
		mhi.Options{Name: "mhi0", PollInterval: 20 * time.Millisecond, Firmware: fwFor(nil, prog)})
	if err := r.ctrl.PowerUp(); err != nil {
		t.Fatal(err)
	}
	if err := r.ctrl.EnterEDL(); err != nil {
		t.Fatal(err)
	}
	poll.Until(5*time.Second, func() bool {
		_, ee := r.ctrl.State()
		return ee == wire.EEFP && r.ctrl.PMState() == "M0"
	})
	if _, ee := r.ctrl.State(); ee != wire.EEFP || r.ctrl.PMState() != "M0" {
		t.Fatalf("after EnterEDL: EE %s, host %s", ee, r.ctrl.PMState())
	}
	if recs := got.all(); len(recs) != 1 || recs[0].Stage != "edl" || recs[0].Bytes != len(prog) || recs[0].Err != nil {
		t.Fatalf("images %+v", recs)
	}
}
