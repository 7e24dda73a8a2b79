package vfio_test

import (
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gomhi/gomhi/internal/labvm"
	"github.com/gomhi/gomhi/pcigeneric/internal/qemuguest"
)

// The QEMU proof of the VFIO transport. TestVFIOInQEMU boots Debian's cloud
// kernel under QEMU (TCG, no KVM needed) with QEMU's edu device behind an
// emulated Intel IOMMU, and runs internal/edutest in the guest: it binds edu
// to vfio-pci and drives it through this package (config space, BAR0 mmap,
// MSI, DMA through the IOMMU, teardown). The verdict comes from the guest's
// serial log, because QEMU exits 0 whatever the guest did.
//
// Requirements (make test-deps, run by make test, prepares them without
// root): a QEMU with the edu and intel-iommu devices (the QEMU 11.1 bundle
// of the Linux-driver tests, else qemu-system-x86_64 from $PATH), a static
// busybox and the cloud kernel, in labvm.CacheDir. Without them the
// tests skip and say what is missing; with CI=true they fail instead. Both
// tests are skipped in -short mode. See docs/VFIO.md.

// bootTimeout bounds one boot (the `timeout` wrapper around QEMU). A boot
// takes about 4 s here.
const bootTimeout = 90 * time.Second

// vfioModules are the VFIO modules of the cloud kernel, in insmod order
// (a dpkg -x tree has no modules.dep, so dependencies come first by hand).
var vfioModules = []string{
	"kernel/virt/lib/irqbypass.ko",
	"kernel/drivers/vfio/vfio.ko",
	"kernel/drivers/vfio/vfio_virqfd.ko",
	"kernel/drivers/vfio/vfio_iommu_type1.ko",
	"kernel/drivers/vfio/pci/vfio-pci-core.ko",
	"kernel/drivers/vfio/pci/vfio-pci.ko",
}

// TestVFIOInQEMU runs the edu checks in the guest and passes only if every
// check passed.
func TestVFIOInQEMU(t *testing.T) {
	env := qemuEnv(t)
	log := boot(t, env)
	failures := failLine.FindAllString(log, -1)
	m := passLine.FindStringSubmatch(log)
	if m == nil || len(failures) > 0 {
		t.Fatalf("guest did not pass (verdict %q, %d failed checks); serial log:\n%s", verdict(log), len(failures), log)
	}
	n, _ := strconv.Atoi(m[1])
	if got := len(checkPassLine.FindAllString(log, -1)); got != n || n == 0 {
		t.Fatalf("verdict says %d checks but the log has %d CHECK ... PASS lines; serial log:\n%s", n, got, log)
	}
	if testing.Verbose() {
		for _, l := range checkLine.FindAllString(log, -1) {
			t.Log("guest: " + l)
		}
	}
	t.Logf("guest: %s", verdict(log))
}

// TestVFIOInQEMUCatchesBrokenTransport boots the same guest with -break,
// which gives the device IOVAs other than those its buffers are mapped at.
// It passes only if the guest reports FAIL, and for the DMA round trip: a
// test that cannot fail proves nothing.
func TestVFIOInQEMUCatchesBrokenTransport(t *testing.T) {
	env := qemuEnv(t)
	log := boot(t, env, "-break")
	if !strings.Contains(log, "EDUTEST RESULT: FAIL") {
		t.Fatalf("broken transport not caught: verdict %q; serial log:\n%s", verdict(log), log)
	}
	if !regexp.MustCompile(`(?m)^CHECK dma-dev-to-ram FAIL `).MatchString(log) {
		t.Fatalf("guest failed, but not on the DMA round trip; serial log:\n%s", log)
	}
	for _, l := range failLine.FindAllString(log, -1) {
		t.Logf("guest, as expected: %s", strings.TrimSpace(l))
	}
}

var (
	passLine      = regexp.MustCompile(`(?m)^EDUTEST RESULT: PASS \((\d+) checks\)`)
	failLine      = regexp.MustCompile(`(?m)^CHECK \S+ FAIL .*$`)
	checkPassLine = regexp.MustCompile(`(?m)^CHECK \S+ PASS `)
	checkLine     = regexp.MustCompile(`(?m)^CHECK .*$`)
	resultLine    = regexp.MustCompile(`(?m)^EDUTEST RESULT: .*$`)
)

// verdict returns the guest's result line, or says there is none.
func verdict(log string) string {
	if l := resultLine.FindString(log); l != "" {
		return strings.TrimSpace(l)
	}
	return "no EDUTEST RESULT line"
}

// qemuEnv finds QEMU, busybox and the kernel with the VFIO modules,
// or skips the test saying what is missing (fails it with CI=true).
func qemuEnv(t *testing.T) *qemuguest.Env {
	t.Helper()
	return qemuguest.Find(t, labvm.Options{Modules: vfioModules})
}

// initScript is the guest's /init: mount the pseudo file systems, load the
// VFIO modules, run edutest, print its exit status, power off. On failure
// it adds the tail of the kernel log (DMAR faults, vfio messages).
const initScript = `#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
for m in %s; do insmod /lib/modules/$m || echo "insmod $m failed"; done
/bin/edutest %s
rc=$?
echo "EDUTEST_RC=$rc"
if [ $rc -ne 0 ]; then echo "--- kernel log tail ---"; dmesg | tail -n 40; fi
poweroff -f
`

// boot builds edutest and an initramfs holding it, boots the guest and
// returns its serial log. Arguments are passed to edutest.
func boot(t *testing.T, e *qemuguest.Env, args ...string) string {
	t.Helper()
	names := make([]string, len(vfioModules))
	for i, m := range vfioModules {
		names[i] = filepath.Base(m)
	}
	start := time.Now()
	initrd := e.Build(t, t.TempDir(), labvm.Initramfs{
		Init:     fmt.Sprintf(initScript, strings.Join(names, " "), strings.Join(args, " ")),
		Modules:  vfioModules,
		Programs: map[string]string{"bin/edutest": "./pcigeneric/vfio/internal/edutest"},
	})
	tBuild := time.Since(start)
	// QEMU's stderr carries the vIOMMU's fault reports of the negative DMA
	// check, which are expected.
	res := e.Run(context.Background(), labvm.Boot{
		Args: []string{"-machine", "q35,kernel-irqchip=split", "-accel", "tcg",
			"-m", "256", "-smp", "1",
			"-device", "intel-iommu,intremap=on", "-device", "edu"},
		Initrd:  initrd,
		Append:  "intel_iommu=on",
		Timeout: bootTimeout,
	})
	log := res.Serial
	t.Logf("edutest build + initramfs %v, boot+run %v (qemu: %v)",
		tBuild.Round(time.Millisecond), res.Elapsed.Round(time.Millisecond), exitText(res.Err))
	if res.Err != nil || !strings.Contains(log, "EDUTEST_RC=") {
		t.Logf("qemu output:\n%s", res.Stderr)
	}
	if !resultLine.MatchString(log) {
		t.Fatalf("guest printed no EDUTEST RESULT line (qemu: %v); serial log:\n%s\nqemu output:\n%s", exitText(res.Err), log, res.Stderr)
	}
	return log
}

func exitText(err error) string {
	if err == nil {
		return "exit 0"
	}
	return err.Error()
}
