package vfiouser_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/gomhi/gomhi/internal/labvm"
	"github.com/gomhi/gomhi/mhi/ep"
	"github.com/gomhi/gomhi/mhi/ep/ipdata"
	"github.com/gomhi/gomhi/mhi/proto/framing"
	"github.com/gomhi/gomhi/mhi/testenv/logbuf"
	"github.com/gomhi/gomhi/mhi/wire"
	"github.com/gomhi/gomhi/pcigeneric/internal/qemuguest"
	"github.com/gomhi/gomhi/pcigeneric/vfiouser"
)

// The Linux-driver tests of the boot path and runtime power management:
// the mock modem starts in the primary boot loader (PBL) and Linux's
// mhi_pci_generic must download the SDX55's boot loader image
// (qcom/sdx55m/sbl1.mbn, from the guest's /lib/firmware) over BHI before
// the modem goes on to mission mode; then runtime PM must put the idle
// modem in M3 (and the function in D3hot) and a ping must wake it.

// sdx55Firmware is the guest path of the image Linux's table names for
// the qcom-sdx55m entry (its fw; the edl image is used only in EDL).
const sdx55Firmware = "lib/firmware/qcom/sdx55m/sbl1.mbn"

// bootInit is the guest's /init for the boot tests (gomhi.profile=boot or
// badimage). The rpm tracepoints count runtime suspends and resumes.
const bootInit = `#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null
profile=$(sed -n 's/.*gomhi\.profile=\([^ ]*\).*/\1/p' /proc/cmdline)
check() { if [ "$2" = 0 ]; then echo "CHECK $1 PASS $3"; else echo "CHECK $1 FAIL $3"; fi; }
waitfor() { i=0; while [ ! -e "$1" ]; do i=$((i+1)); [ $i -ge $(($2*20)) ] && return 1; sleep 0.05; done; return 0; }
pingcheck() { out=$(ping -c $2 -W 2 $3 2>&1); echo "$out" | grep -q " $2 packets received"; check $1 $? "$(echo "$out" | grep -E 'transmitted|bad|unreach')"; }
mark() { sleep 0.2; echo "MARK $1"; sleep 0.3; }
finish() { echo "--- kernel log ---"; dmesg | grep -iE 'mhi|firmware|wwan|BHI|Reg:' | grep -vE 'insmod|Loading'; echo "GUEST DONE"; poweroff -f; }
# rpmstatus: the PCI function's runtime PM status; waitrpm STATUS SECONDS.
rpmstatus() { cat $pci/power/runtime_status; }
waitrpm() { i=0; while [ "$(rpmstatus)" != "$1" ]; do i=$((i+1)); [ $i -ge $(($2*20)) ] && return 1; sleep 0.05; done; return 0; }
# rpmcount: the MHI core's M3 entries and exits as Linux counts them: calls
# of mhi_pm_suspend and mhi_pm_resume that returned 0 (kretprobes).
rpmcount() {
	t=/sys/kernel/tracing/trace
	s=$(grep -c "gomhi_susp:.* ret=0x0$" $t); r=$(grep -c "gomhi_resume:.* ret=0x0$" $t)
	echo "RPM suspends=$s resumes=$r"
	echo "INFO calls: $(grep -c gomhi_susp: $t) mhi_pm_suspend, $(grep -c gomhi_resume: $t) mhi_pm_resume"
}
echo "INFO firmware $(wc -c < /` + sdx55Firmware + `) bytes, $(sha256sum /` + sdx55Firmware + `)"
for m in %s; do insmod /lib/modules/$m || echo "CHECK insmod-$m FAIL"; done
K=/sys/kernel/tracing
echo 'r:gomhi_susp mhi_pm_suspend ret=$retval' >> $K/kprobe_events && echo 'r:gomhi_resume mhi_pm_resume ret=$retval' >> $K/kprobe_events &&
	echo 1 > $K/events/kprobes/gomhi_susp/enable && echo 1 > $K/events/kprobes/gomhi_resume/enable
check pm-probes $? "kretprobes on mhi_pm_suspend and mhi_pm_resume"
case $profile in
boot)
	waitfor /sys/class/net/mhi_hwip0 30; rc=$?; check netdev $rc "mhi_hwip0 after the firmware download"
	[ $rc = 0 ] || finish
	echo "INFO $(cat /sys/bus/mhi/devices/mhi0/serial_number 2>&1)"
	ip link set mhi_hwip0 up
	ip addr add 192.0.2.1 peer 192.0.2.2 dev mhi_hwip0
	pingcheck ping4 5 192.0.2.2
	pci=$(ls -d /sys/bus/pci/drivers/mhi-pci-generic/0000:* | head -1); dev=${pci##*/}
	echo "INFO $dev: control $(cat $pci/power/control), autosuspend_delay_ms $(cat $pci/power/autosuspend_delay_ms), status $(rpmstatus)"
	echo auto > $pci/power/control
	waitrpm suspended 10; check rpm-suspend $? "runtime_status $(rpmstatus) with power/control auto, idle"
	mark m3
	pingcheck ping4-wake 3 192.0.2.2
	echo "INFO after the pings: runtime_status $(rpmstatus)"
	waitrpm suspended 10; check rpm-suspend-again $? "runtime_status $(rpmstatus) idle again"
	echo on > $pci/power/control
	waitrpm active 10; check rpm-on $? "runtime_status $(rpmstatus) with power/control on"
	rpmcount
	mark pmcount
	;;
badimage)
	i=0; while ! dmesg | grep -q "failed to power up MHI controller" && [ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done
	dmesg | grep -q "failed to power up MHI controller"; check power-up-refused $? "mhi_pci_generic gave up"
	dmesg | grep -q "Image transfer failed"; check bhi-error $? "Linux saw BHI_STATUS error"
	[ ! -e /sys/class/net/mhi_hwip0 ]; check no-netdev $? "no mhi_hwip0"
	mark refused
	;;
esac
finish
`

// bootEnv builds the boot tests' initramfs with firmware (the bytes of
// the guest's sbl1.mbn), for the oldest kernel of the matrix (bookworm's
// 6.1).
func bootEnv(t *testing.T, firmware []byte) *linuxKernel {
	t.Helper()
	ks := labvm.Kernels()
	if len(ks) == 0 {
		t.Fatal("no guest kernel in the matrix")
	}
	k := ks[0]
	env := qemuguest.Find(t, labvm.Options{VFIOUser: true, Modules: linuxModules, KernelDir: k.Dir})
	fw := filepath.Join(t.TempDir(), "sbl1.mbn")
	if err := os.WriteFile(fw, firmware, 0o644); err != nil {
		t.Fatal(err)
	}
	names := make([]string, len(linuxModules))
	for i, m := range linuxModules {
		names[i] = filepath.Base(m)
	}
	initrd := env.Build(t, t.TempDir(), labvm.Initramfs{
		Init:    fmt.Sprintf(bootInit, strings.Join(names, " ")),
		Modules: linuxModules,
		Files:   map[string]string{sdx55Firmware: fw},
	})
	return &linuxKernel{Kernel: k, env: env, initrd: initrd}
}

// bootImage is a made-up boot loader image: 327 680 bytes (an SBL's
// size) with an ELF-like header, its bytes following from its offset.
func bootImage() []byte {
	b := make([]byte, 320<<10)
	for i := range b {
		b[i] = byte(i*131) ^ byte(i>>11)
	}
	copy(b, "\x7fELF gomhi test SBL image\n")
	return b
}

// bhiEvent is one "bhi_image" record of the modem's JSON event log.
type bhiEvent struct {
	Msg      string `json:"msg"`
	Stage    string `json:"stage"`
	Bytes    int    `json:"bytes"`
	SHA256   string `json:"sha256"`
	Accepted bool   `json:"accepted"`
	Error    string `json:"error"`
}

func bhiEvents(t *testing.T, log string) []bhiEvent {
	t.Helper()
	var out []bhiEvent
	for _, l := range strings.Split(strings.TrimSpace(log), "\n") {
		var e bhiEvent
		if l == "" {
			continue
		}
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatalf("event log line %q: %v", l, err)
		}
		if e.Msg == "bhi_image" {
			out = append(out, e)
		}
	}
	return out
}

// TestLinuxDriverBootsFromPBL: the modem starts in PBL; Linux's driver
// reads BHI (serial number, OEM key hash), downloads sbl1.mbn over BHI,
// the modem checks it against the file's SHA-256, moves to SBL and on to
// AMSS, and mhi_net's mhi_hwip0 passes 5 pings. Then runtime PM: with
// power/control "auto" the idle modem is suspended (M3, the function in
// D3hot), a ping wakes it (D0, M0) and is answered, it is suspended again
// once idle; the guest's count of runtime suspends and resumes equals the
// modem's count of M3 entries and exits.
func TestLinuxDriverBootsFromPBL(t *testing.T) {
	img := bootImage()
	sum := sha256.Sum256(img)
	lk := bootEnv(t, img)
	var events logbuf.Buffer
	r := &guestRun{model: "qcom-sdx55m", profile: "boot",
		ipdata: ipdata.Config{Format: framing.RawIP, Responder: true},
		device: func(c *ep.Config) {
			c.Boot = ep.BootConfig{Start: ep.BootPBL, SBL: ep.ImageCheck{SHA256: sum[:]},
				OnImage: vfiouser.BootImageLogger(slog.New(slog.NewJSONHandler(&events, nil)))}
		},
	}
	r.run(t, lk, os.Getenv("GOMHI_LINUX_APPEND"))
	requireChecks(t, r, "pm-probes", "netdev", "ping4", "rpm-suspend", "ping4-wake", "rpm-suspend-again", "rpm-on")

	// The modem's log: one image, the file's size and digest.
	evs := bhiEvents(t, events.String())
	t.Logf("modem event log: %s", strings.TrimSpace(events.String()))
	if len(evs) != 1 || evs[0].Stage != "sbl" || !evs[0].Accepted || evs[0].Bytes != len(img) || evs[0].SHA256 != hex.EncodeToString(sum[:]) {
		t.Fatalf("bhi_image events %+v, want one accepted sbl image of %d bytes, sha256 %x", evs, len(img), sum)
	}
	// The guest's own view of the file agrees (sha256sum in the guest).
	if !strings.Contains(r.serial, hex.EncodeToString(sum[:])) {
		t.Errorf("the guest's sha256sum of %s is not %x", sdx55Firmware, sum)
	}
	if !strings.Contains(r.serial, "Wait for device to enter SBL or Mission mode") {
		t.Errorf("kernel log lacks mhi_fw_load_handler's success line")
	}
	// On its way through PBL Linux reads BHI_SERIALNU (0 when the modem
	// starts in AMSS: docs/LINUX-DRIVER.md).
	if !strings.Contains(r.serial, "INFO Serial Number: ") || strings.Contains(r.serial, "INFO Serial Number: 0\n") {
		t.Errorf("serial number not read through BHI")
	}
	r.logRegisters(t)

	// Runtime PM, from both sides.
	m3, count := r.mark(t, "m3"), r.mark(t, "pmcount")
	if m3.status.State != wire.StateM3 {
		t.Errorf("modem in %v while the guest reports the function suspended, want M3", m3.status.State)
	}
	if count.status.State != wire.StateM0 || count.status.EE != wire.EEAMSS {
		t.Errorf("modem in %v/%v after power/control on, want M0/AMSS", count.status.State, count.status.EE)
	}
	m := regexp.MustCompile(`(?m)^RPM suspends=(\d+) resumes=(\d+)`).FindStringSubmatch(r.serial)
	if m == nil {
		t.Fatalf("no RPM line in the serial log")
	}
	gs, _ := strconv.ParseUint(m[1], 10, 64)
	gr, _ := strconv.ParseUint(m[2], 10, 64)
	ms := count.modem
	ps := r.dev.PowerStats()
	t.Logf("runtime PM: guest %d suspends, %d resumes; modem %d M3 entries, %d M3 exits; function %d D3hot entries, %d D0 returns, %d BAR accesses in D3hot",
		gs, gr, ms.M3Entries, ms.M3Exits, ps.D3HotEntries, ps.D0Entries, ps.D3Accesses)
	if gs < 2 || gs != ms.M3Entries || gr != ms.M3Exits {
		t.Errorf("guest: %d M3 entries, %d exits (mhi_pm_suspend/resume returning 0); modem: %d M3 entries, %d exits (want equal, at least 2)", gs, gr, ms.M3Entries, ms.M3Exits)
	}
	// The PCI side: D3hot after each suspend and once more at the guest's
	// shutdown (mhi_pci_shutdown), D0 before each resume.
	if ps.D3HotEntries != gs+1 || ps.D0Entries != gr {
		t.Errorf("function: %d D3hot entries, %d D0 returns; guest: %d suspends (+1 at shutdown), %d resumes", ps.D3HotEntries, ps.D0Entries, gs, gr)
	}
}

// TestLinuxDriverRefusedImage: the modem expects another image than the
// guest's sbl1.mbn; it refuses the download (BHI_STATUS error, ERRCODE
// digest), Linux's driver reports the failure and gives up, and the modem
// stays in PBL, never READY, never in AMSS.
func TestLinuxDriverRefusedImage(t *testing.T) {
	img := bootImage()
	want := sha256.Sum256(append([]byte("another image"), img...))
	lk := bootEnv(t, img)
	var events logbuf.Buffer
	var boot ep.BootStatus
	r := &guestRun{model: "qcom-sdx55m", profile: "badimage",
		ipdata: ipdata.Config{Format: framing.RawIP, Responder: true},
		onMark: func(r *guestRun, step string) {
			if m := r.dev.Modem(); m != nil && step == "refused" {
				boot = m.BootStatus()
			}
		},
		device: func(c *ep.Config) {
			c.Boot = ep.BootConfig{Start: ep.BootPBL, SBL: ep.ImageCheck{SHA256: want[:]},
				OnImage: vfiouser.BootImageLogger(slog.New(slog.NewJSONHandler(&events, nil)))}
		},
	}
	r.run(t, lk, "")
	requireChecks(t, r, "pm-probes", "power-up-refused", "bhi-error", "no-netdev")
	for _, l := range regexp.MustCompile(`(?m)^.*(Image transfer failed|Reg: ERROR_CODE|did not load image|failed to power up).*$`).FindAllString(r.serial, -1) {
		t.Logf("guest kernel: %s", strings.TrimSpace(l))
	}
	if !regexp.MustCompile(`Reg: ERROR_CODE value: 0x` + strconv.Itoa(ep.BHIErrDigest)).MatchString(r.serial) {
		t.Errorf("Linux did not log the modem's error code %d", ep.BHIErrDigest)
	}
	evs := bhiEvents(t, events.String())
	if len(evs) != 1 || evs[0].Accepted || evs[0].Bytes != len(img) || !strings.Contains(evs[0].Error, "sha256") {
		t.Fatalf("bhi_image events %+v, want one refused image of %d bytes", evs, len(img))
	}
	st := r.mark(t, "refused").status
	if st.EE != wire.EEPBL || st.State == wire.StateM0 || st.State == wire.StateReady {
		t.Errorf("modem in %v/%v after the refused image, want PBL and not READY", st.State, st.EE)
	}
	if boot.ErrCode != ep.BHIErrDigest || !boot.AwaitImage || boot.EE != wire.EEPBL {
		t.Errorf("modem's boot ROM %+v, want PBL waiting for an image, BHI_ERRCODE %d", boot, ep.BHIErrDigest)
	}
}
