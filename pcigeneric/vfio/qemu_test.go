package vfio_test

import (
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The QEMU proof of the VFIO transport. TestVFIOInQEMU boots Debian's cloud
// kernel under QEMU (TCG, no KVM needed) with QEMU's edu device behind an
// emulated Intel IOMMU, and runs internal/edutest in the guest: it binds edu
// to vfio-pci and drives it through this package (config space, BAR0 mmap,
// MSI, DMA through the IOMMU, teardown). The verdict comes from the guest's
// serial log, because QEMU exits 0 whatever the guest did.
//
// Requirements (bash .ci/vfio-setup.sh installs them): qemu-system-x86_64,
// a static busybox, cpio, and the cloud kernel unpacked under
// $GOMHI_VFIO_KERNEL_DIR (default /var/cache/gomhi/vfio-kernel). Without
// them the tests skip and say what is missing; with CI=true they fail
// instead. Both tests are skipped in -short mode. See docs/VFIO.md.

// defaultKernelDir is where .ci/vfio-setup.sh unpacks the kernel.
const defaultKernelDir = "/var/cache/gomhi/vfio-kernel"

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
	log := env.boot(t)
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
	log := env.boot(t, "-break")
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

// env is what a boot needs, found on the host.
type env struct {
	qemu, busybox, cpio string
	vmlinuz, modules    string // kernel image; its lib/modules/<version> directory
	modRoot             string // the module root, for go build
}

// qemuEnv finds the tools and the kernel, or skips the test saying what is
// missing.
func qemuEnv(t *testing.T) *env {
	t.Helper()
	if testing.Short() {
		t.Skip("boots a VM; skipped in -short mode")
	}
	// In CI (CI=true) .ci/run has installed everything with
	// .ci/vfio-setup.sh, so something missing is a failure, not a skip
	// that would let the proof silently stop running.
	missing := func(what string) {
		t.Helper()
		msg := what + " (run: sudo bash .ci/vfio-setup.sh)"
		if os.Getenv("CI") == "true" {
			t.Fatal("CI=true but " + msg)
		}
		t.Skip(msg)
	}
	var e env
	var err error
	if e.qemu, err = exec.LookPath("qemu-system-x86_64"); err != nil {
		missing("qemu-system-x86_64 not found")
	}
	if e.cpio, err = exec.LookPath("cpio"); err != nil {
		missing("cpio not found")
	}
	if e.busybox, err = staticBusybox(); err != nil {
		missing(err.Error())
	}
	kdir := os.Getenv("GOMHI_VFIO_KERNEL_DIR")
	if kdir == "" {
		kdir = defaultKernelDir
	}
	if e.vmlinuz, e.modules, err = findKernel(kdir); err != nil {
		missing(err.Error())
	}
	if _, err := exec.LookPath("timeout"); err != nil {
		missing("timeout (coreutils) not found")
	}
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil || strings.TrimSpace(string(out)) == "" || strings.TrimSpace(string(out)) == os.DevNull {
		t.Fatalf("go env GOMOD: %q, %v", out, err)
	}
	e.modRoot = filepath.Dir(strings.TrimSpace(string(out)))
	return &e
}

// staticBusybox returns a statically linked busybox: the guest has no libc.
func staticBusybox() (string, error) {
	cands := []string{"/bin/busybox", "/usr/bin/busybox"}
	if p, err := exec.LookPath("busybox"); err == nil {
		cands = append([]string{p}, cands...)
	}
	found := ""
	for _, p := range cands {
		f, err := elf.Open(p)
		if err != nil {
			continue
		}
		static := true
		for _, prog := range f.Progs {
			if prog.Type == elf.PT_INTERP {
				static = false
			}
		}
		f.Close()
		if static {
			return p, nil
		}
		found = p
	}
	if found != "" {
		return "", fmt.Errorf("busybox at %s is dynamically linked; a static one (busybox-static) is needed", found)
	}
	return "", errors.New("busybox not found")
}

// findKernel returns the kernel image under dir (a dpkg -x tree of
// linux-image-*-cloud-amd64) and its modules directory, checking that the
// VFIO modules are there.
func findKernel(dir string) (vmlinuz, modules string, err error) {
	imgs, _ := filepath.Glob(filepath.Join(dir, "boot", "vmlinuz-*"))
	if len(imgs) == 0 {
		return "", "", fmt.Errorf("no kernel in %s (boot/vmlinuz-*; set GOMHI_VFIO_KERNEL_DIR)", dir)
	}
	vmlinuz = imgs[len(imgs)-1]
	version := strings.TrimPrefix(filepath.Base(vmlinuz), "vmlinuz-")
	modules = filepath.Join(dir, "lib", "modules", version)
	for _, m := range vfioModules {
		if _, err := os.Stat(filepath.Join(modules, m)); err != nil {
			return "", "", fmt.Errorf("kernel %s lacks module %s", version, m)
		}
	}
	return vmlinuz, modules, nil
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
func (e *env) boot(t *testing.T, args ...string) string {
	t.Helper()
	dir := t.TempDir()
	root := filepath.Join(dir, "root")
	for _, d := range []string{"bin", "lib/modules", "proc", "sys", "dev"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}

	start := time.Now()
	build := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w",
		"-o", filepath.Join(root, "bin", "edutest"), "./pcigeneric/vfio/internal/edutest")
	build.Dir = e.modRoot
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building edutest: %v\n%s", err, out)
	}
	tBuild := time.Since(start)

	start = time.Now()
	copyFile(t, e.busybox, filepath.Join(root, "bin", "busybox"), 0o755)
	names := make([]string, len(vfioModules))
	for i, m := range vfioModules {
		names[i] = filepath.Base(m)
		copyFile(t, filepath.Join(e.modules, m), filepath.Join(root, "lib", "modules", names[i]), 0o644)
	}
	script := fmt.Sprintf(initScript, strings.Join(names, " "), strings.Join(args, " "))
	if err := os.WriteFile(filepath.Join(root, "init"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	initrd := filepath.Join(dir, "initrd.cpio")
	packInitramfs(t, e.cpio, root, initrd)
	tPack := time.Since(start)

	// The serial port goes to a file: QEMU's stdio would want a terminal,
	// and its stderr carries the vIOMMU's fault reports of the negative
	// DMA check, which are expected.
	serial := filepath.Join(dir, "serial.log")
	ctx, cancel := context.WithTimeout(context.Background(), bootTimeout+10*time.Second)
	defer cancel()
	qemu := exec.CommandContext(ctx, "timeout", strconv.Itoa(int(bootTimeout/time.Second)), e.qemu,
		"-machine", "q35,kernel-irqchip=split", "-accel", "tcg",
		"-m", "256", "-smp", "1",
		"-nodefaults", "-display", "none", "-no-reboot",
		"-serial", "file:"+serial,
		"-device", "intel-iommu,intremap=on", "-device", "edu",
		"-kernel", e.vmlinuz, "-initrd", initrd,
		"-append", "console=ttyS0 intel_iommu=on panic=-1 quiet")
	var stderr bytes.Buffer
	qemu.Stdout, qemu.Stderr = &stderr, &stderr
	start = time.Now()
	runErr := qemu.Run()
	tBoot := time.Since(start)
	logb, err := os.ReadFile(serial)
	if err != nil {
		t.Fatalf("qemu (%v) left no serial log: %v\nqemu output:\n%s", runErr, err, stderr.String())
	}
	log := strings.ReplaceAll(string(logb), "\r\n", "\n")
	t.Logf("edutest build %v, initramfs %v, boot+run %v (qemu: %v)",
		tBuild.Round(time.Millisecond), tPack.Round(time.Millisecond), tBoot.Round(time.Millisecond), exitText(runErr))
	if runErr != nil || !strings.Contains(log, "EDUTEST_RC=") {
		t.Logf("qemu output:\n%s", stderr.String())
	}
	if !resultLine.MatchString(log) {
		t.Fatalf("guest printed no EDUTEST RESULT line (qemu: %v); serial log:\n%s\nqemu output:\n%s", exitText(runErr), log, stderr.String())
	}
	return log
}

func exitText(err error) string {
	var ee *exec.ExitError
	switch {
	case err == nil:
		return "exit 0"
	case errors.As(err, &ee) && ee.ExitCode() == 124:
		return fmt.Sprintf("killed by timeout after %v", bootTimeout)
	default:
		return err.Error()
	}
}

// packInitramfs writes root as an uncompressed newc cpio archive (4.8 MB;
// gzip would halve it but boots no faster under TCG: 3.6-4.4 s either way).
func packInitramfs(t *testing.T, cpio, root, out string) {
	t.Helper()
	var list bytes.Buffer
	err := filepath.WalkDir(root, func(p string, _ os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err == nil {
			fmt.Fprintln(&list, rel)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd := exec.Command(cpio, "-o", "-H", "newc", "--quiet")
	cmd.Dir, cmd.Stdin, cmd.Stdout = root, &list, f
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("cpio: %v\n%s", err, stderr.String())
	}
}

func copyFile(t *testing.T, src, dst string, mode os.FileMode) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}
