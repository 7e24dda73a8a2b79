// Package qemuguest boots a small Linux guest under QEMU (TCG, no KVM) for
// the tests that check gomhi against a real kernel: the VFIO transport
// (pcigeneric/vfio) and the mock modem under Linux's own MHI driver
// (pcigeneric/vfiouser). It finds the tools and the kernel, packs an
// initramfs (a static busybox, kernel modules, the test's /init and
// files), runs QEMU and streams the guest's serial console line by line.
//
// The kernel is Debian's cloud kernel unpacked by .ci/vfio-setup.sh (it
// carries the VFIO, MHI and WWAN modules); QEMU is the system one, or for
// vfio-user a QEMU >= 10.1 prepared by .ci/qemu-vfio-user-setup.sh.
// Without them the tests skip and say what is missing; with CI=true they
// fail instead, so the proof cannot silently stop running.
package qemuguest

import (
	"bufio"
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// DefaultKernelDir is where .ci/vfio-setup.sh unpacks the kernel
// (override: GOMHI_VFIO_KERNEL_DIR).
const DefaultKernelDir = "/var/cache/gomhi/vfio-kernel"

// DefaultVFIOUserQEMUDir is where .ci/qemu-vfio-user-setup.sh unpacks
// QEMU >= 10.1 (override: GOMHI_QEMU_DIR, or GOMHI_QEMU for a binary).
const DefaultVFIOUserQEMUDir = "/var/cache/gomhi/qemu-vfio-user"

// Env is what a boot needs, found on the host.
type Env struct {
	// QEMU is the qemu-system-x86_64 to run (a binary or a wrapper).
	QEMU string
	// Busybox is a statically linked busybox (the guest has no libc).
	Busybox string
	// CPIO is the cpio that packs the initramfs.
	CPIO string
	// Kernel is the kernel image; Modules its lib/modules/<version> folder.
	Kernel, Modules string
	// ModRoot is the Go module's root, for building guest programs.
	ModRoot string
}

// Options say which QEMU and which kernel modules a test needs.
type Options struct {
	// VFIOUser asks for a QEMU with the vfio-user-pci device.
	VFIOUser bool
	// Modules are module paths under lib/modules/<version> that must exist.
	Modules []string
	// Setup names the script that installs what is missing, for the
	// skip message.
	Setup string
}

// Find finds the tools and the kernel, or skips the test (fails it with
// CI=true) saying what is missing. Skipped in -short mode.
func Find(t testing.TB, opts Options) *Env {
	t.Helper()
	if testing.Short() {
		t.Skip("boots a VM; skipped in -short mode")
	}
	missing := func(what string) {
		t.Helper()
		msg := what + " (run: " + opts.Setup + ")"
		if os.Getenv("CI") == "true" {
			t.Fatal("CI=true but " + msg)
		}
		t.Skip(msg)
	}
	var e Env
	var err error
	if opts.VFIOUser {
		if e.QEMU, err = vfioUserQEMU(); err != nil {
			missing(err.Error())
		}
	} else if e.QEMU, err = exec.LookPath("qemu-system-x86_64"); err != nil {
		missing("qemu-system-x86_64 not found")
	}
	if e.CPIO, err = exec.LookPath("cpio"); err != nil {
		missing("cpio not found")
	}
	if e.Busybox, err = staticBusybox(); err != nil {
		missing(err.Error())
	}
	kdir := os.Getenv("GOMHI_VFIO_KERNEL_DIR")
	if kdir == "" {
		kdir = DefaultKernelDir
	}
	if e.Kernel, e.Modules, err = findKernel(kdir, opts.Modules); err != nil {
		missing(err.Error())
	}
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil || strings.TrimSpace(string(out)) == "" || strings.TrimSpace(string(out)) == os.DevNull {
		t.Fatalf("go env GOMOD: %q, %v", out, err)
	}
	e.ModRoot = filepath.Dir(strings.TrimSpace(string(out)))
	return &e
}

// vfioUserQEMU returns a QEMU that has vfio-user-pci: $GOMHI_QEMU, or the
// wrapper in $GOMHI_QEMU_DIR (default DefaultVFIOUserQEMUDir).
func vfioUserQEMU() (string, error) {
	q := os.Getenv("GOMHI_QEMU")
	if q == "" {
		dir := os.Getenv("GOMHI_QEMU_DIR")
		if dir == "" {
			dir = DefaultVFIOUserQEMUDir
		}
		q = filepath.Join(dir, "qemu")
	}
	if _, err := os.Stat(q); err != nil {
		return "", fmt.Errorf("no QEMU with vfio-user-pci at %s (set GOMHI_QEMU or GOMHI_QEMU_DIR)", q)
	}
	out, err := exec.Command(q, "-device", "vfio-user-pci,help").CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("socket")) {
		return "", fmt.Errorf("%s has no vfio-user-pci device (QEMU >= 10.1 needed): %v %s", q, err, firstLine(out))
	}
	return q, nil
}

func firstLine(b []byte) string {
	s, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	return s
}

// staticBusybox returns a statically linked busybox.
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

// findKernel returns the kernel image under dir (a dpkg -x tree of a
// Debian linux-image package) and its modules folder, checking that the
// modules the test needs are there.
func findKernel(dir string, need []string) (kernel, modules string, err error) {
	imgs, _ := filepath.Glob(filepath.Join(dir, "boot", "vmlinuz-*"))
	if len(imgs) == 0 {
		return "", "", fmt.Errorf("no kernel in %s (boot/vmlinuz-*; set GOMHI_VFIO_KERNEL_DIR)", dir)
	}
	kernel = imgs[len(imgs)-1]
	version := strings.TrimPrefix(filepath.Base(kernel), "vmlinuz-")
	modules = filepath.Join(dir, "lib", "modules", version)
	for _, m := range need {
		if _, err := os.Stat(filepath.Join(modules, m)); err != nil {
			return "", "", fmt.Errorf("kernel %s lacks module %s", version, m)
		}
	}
	return kernel, modules, nil
}

// Initramfs describes the guest's root file system.
type Initramfs struct {
	// Init is the /init script (run by busybox sh).
	Init string
	// Modules are module paths under the kernel's modules folder, copied
	// to /lib/modules/<base name>.
	Modules []string
	// Files maps guest paths to host files to copy (mode kept).
	Files map[string]string
	// Programs maps guest paths to Go packages (./path in the module) to
	// build statically for the guest.
	Programs map[string]string
}

// Build packs the initramfs into dir and returns the archive's path.
func (e *Env) Build(t testing.TB, dir string, fs Initramfs) string {
	t.Helper()
	root := filepath.Join(dir, "root")
	for _, d := range []string{"bin", "lib/modules", "proc", "sys", "dev", "tmp"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for dst, pkg := range fs.Programs {
		build := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", filepath.Join(root, dst), pkg)
		build.Dir = e.ModRoot
		build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("building %s: %v\n%s", pkg, err, out)
		}
	}
	copyFile(t, e.Busybox, filepath.Join(root, "bin", "busybox"), 0o755)
	for _, m := range fs.Modules {
		copyFile(t, filepath.Join(e.Modules, m), filepath.Join(root, "lib", "modules", filepath.Base(m)), 0o644)
	}
	for dst, src := range fs.Files {
		fi, err := os.Stat(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, dst)), 0o755); err != nil {
			t.Fatal(err)
		}
		copyFile(t, src, filepath.Join(root, dst), fi.Mode().Perm())
	}
	if err := os.WriteFile(filepath.Join(root, "init"), []byte(fs.Init), 0o755); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "initrd.cpio")
	packInitramfs(t, e.CPIO, root, out)
	return out
}

// Boot is one QEMU run.
type Boot struct {
	// Args are QEMU's arguments besides the kernel, initramfs, command
	// line and serial port, which Run adds.
	Args []string
	// Initrd is the initramfs (from Build).
	Initrd string
	// Append is added to the kernel command line.
	Append string
	// Timeout bounds the run (default 90 s); QEMU is killed after it.
	Timeout time.Duration
	// OnLine, if set, is called with each serial console line as it
	// arrives (CR stripped), from one goroutine.
	OnLine func(line string)
}

// Result is what a run left.
type Result struct {
	// Serial is the guest's whole serial log.
	Serial string
	// Stderr is QEMU's own output.
	Stderr string
	// Elapsed is the run's wall time.
	Elapsed time.Duration
	// Err is QEMU's exit error (nil for exit 0), or the timeout.
	Err error
}

// Run boots the guest and waits for QEMU to exit (the guest powers off)
// or the timeout.
func (e *Env) Run(ctx context.Context, b Boot) Result {
	if b.Timeout == 0 {
		b.Timeout = 90 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, b.Timeout)
	defer cancel()
	args := append([]string{}, b.Args...)
	args = append(args, "-nodefaults", "-display", "none", "-no-reboot", "-serial", "stdio",
		"-kernel", e.Kernel, "-initrd", b.Initrd,
		"-append", strings.TrimSpace("console=ttyS0 panic=-1 quiet "+b.Append))
	cmd := exec.CommandContext(ctx, e.QEMU, args...)
	cmd.WaitDelay = 2 * time.Second
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return Result{Err: err}
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return Result{Err: fmt.Errorf("start %s: %w", e.QEMU, err)}
	}
	var serial strings.Builder
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		r := bufio.NewReader(stdout)
		for {
			line, err := r.ReadString('\n')
			if line != "" {
				line = strings.TrimRight(line, "\r\n")
				serial.WriteString(line)
				serial.WriteByte('\n')
				if b.OnLine != nil {
					b.OnLine(line)
				}
			}
			if err != nil {
				return
			}
		}
	}()
	wg.Wait()
	runErr := cmd.Wait()
	if ctx.Err() == context.DeadlineExceeded {
		runErr = fmt.Errorf("killed after %v: %w", b.Timeout, ctx.Err())
	}
	return Result{Serial: serial.String(), Stderr: stderr.String(), Elapsed: time.Since(start), Err: runErr}
}

// packInitramfs writes root as an uncompressed newc cpio archive (gzip
// would halve it but boots no faster under TCG).
func packInitramfs(t testing.TB, cpio, root, out string) {
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

func copyFile(t testing.TB, src, dst string, mode os.FileMode) {
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
