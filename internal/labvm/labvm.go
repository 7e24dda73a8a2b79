// Package labvm boots a small Linux guest under QEMU (TCG, no KVM): the
// engine of `mhictl lab` and of the tests that check gomhi against a real
// kernel (the VFIO transport, the mock modem under Linux's own MHI
// drivers, ModemManager). It finds QEMU, the kernel and a static busybox,
// packs an initramfs (busybox, kernel modules, an /init script and files)
// in Go, runs QEMU and streams the guest's serial console line by line.
//
// `make test-deps` prepares everything with internal/labvm/setup/test-deps.sh, without
// root, into CacheDir: one QEMU (Debian's 11.1, with the edu device, the
// emulated Intel IOMMU and vfio-user-pci), a static busybox, and Debian's
// cloud kernels (they carry the VFIO, MHI and WWAN modules) — bookworm's
// 6.1, trixie's 6.12 and trixie-backports' newest (internal/labvm/setup/guest-kernels.sh) —
// and the ModemManager root file system (internal/labvm/setup/guest-rootfs.sh). Find says
// what is missing as an error that names the setup command; it never
// skips or fails a test itself (pcigeneric/internal/qemuguest does that
// for the tests).
package labvm

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
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/u-root/u-root/pkg/cpio"
	"github.com/ulikunitz/xz"
)

// SetupCommand prepares what the guests need (idempotent, no root).
const SetupCommand = "make test-deps"

// CacheDir is where internal/labvm/setup/test-deps.sh keeps what the guests need:
// $GOMHI_CACHE_DIR, else /var/cache/gomhi for root, else gomhi in the
// user's cache directory ($XDG_CACHE_HOME or ~/.cache). The script
// computes the same default.
func CacheDir() string {
	if d := os.Getenv("GOMHI_CACHE_DIR"); d != "" {
		return d
	}
	if os.Geteuid() == 0 {
		return "/var/cache/gomhi"
	}
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "gomhi")
	}
	return filepath.Join(os.TempDir(), "gomhi-cache")
}

// QEMUDir is the folder of the unpacked QEMU bundle (its wrapper is
// QEMUDir()/qemu): $GOMHI_QEMU_DIR, else CacheDir()/qemu-vfio-user.
func QEMUDir() string { return envOr("GOMHI_QEMU_DIR", filepath.Join(CacheDir(), "qemu-vfio-user")) }

// KernelDir is the dpkg -x tree of the guest kernel:
// $GOMHI_VFIO_KERNEL_DIR, else CacheDir()/vfio-kernel.
func KernelDir() string {
	return envOr("GOMHI_VFIO_KERNEL_DIR", filepath.Join(CacheDir(), "vfio-kernel"))
}

// Kernel is one guest kernel of the Linux-driver tests' kernel matrix.
type Kernel struct {
	// Name is the Debian suite it comes from (a stable subtest name).
	Name string
	// Dir is its dpkg -x tree (either layout findKernel knows).
	Dir string
}

// Kernels is the kernel matrix, oldest first: bookworm's 6.1 (KernelDir),
// trixie's 6.12 ($GOMHI_KERNEL_TRIXIE_DIR, else CacheDir()/kernel-trixie)
// and the newest of trixie-backports ($GOMHI_KERNEL_TRIXIE_BACKPORTS_DIR,
// else CacheDir()/kernel-trixie-backports), all Debian's cloud flavour;
// internal/labvm/setup/test-deps.sh and internal/labvm/setup/guest-kernels.sh unpack them.
func Kernels() []Kernel {
	return []Kernel{
		{Name: "bookworm", Dir: KernelDir()},
		{Name: "trixie", Dir: envOr("GOMHI_KERNEL_TRIXIE_DIR", filepath.Join(CacheDir(), "kernel-trixie"))},
		{Name: "trixie-backports", Dir: envOr("GOMHI_KERNEL_TRIXIE_BACKPORTS_DIR", filepath.Join(CacheDir(), "kernel-trixie-backports"))},
	}
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// Env is what a boot needs, found on the host.
type Env struct {
	// QEMU is the qemu-system-x86_64 to run (a binary or a wrapper).
	QEMU string
	// Busybox is a statically linked busybox (the guest has no libc).
	Busybox string
	// Kernel is the kernel image; Modules its lib/modules/<version> folder.
	Kernel, Modules string
	// Release is the kernel's release (uname -r), e.g. 6.1.0-57-cloud-amd64.
	Release string
	// ModRoot is the Go module's root, for building guest programs
	// (Initramfs.Programs); "" outside a source tree.
	ModRoot string
}

// Options say which QEMU, which kernel and which kernel modules a guest
// needs.
type Options struct {
	// VFIOUser asks for a QEMU with the vfio-user-pci device; otherwise
	// the QEMU must have the edu device and the emulated Intel IOMMU.
	VFIOUser bool
	// Modules are module paths under lib/modules/<version> that must exist.
	Modules []string
	// KernelDir is the kernel's dpkg -x tree (default KernelDir()).
	KernelDir string
	// KernelImage, if set, is a kernel image the user built, booted
	// instead of KernelDir's; ModulesDir is its lib/modules/<release>.
	KernelImage, ModulesDir string
}

// ErrMissing wraps what Find and FindRootFS could not find: the guest
// cannot boot until SetupCommand (or the environment variable the error
// names) provides it.
var ErrMissing = errors.New("labvm: missing")

// MissingError says which part of the guest is missing and why.
type MissingError struct {
	// What is the part, e.g. "a static busybox".
	What string
	// Err is why it was not found.
	Err error
}

// Error implements error.
func (e *MissingError) Error() string {
	return fmt.Sprintf("%s (run: %s): %v", e.What, SetupCommand, e.Err)
}

// Unwrap returns ErrMissing and the cause.
func (e *MissingError) Unwrap() []error { return []error{ErrMissing, e.Err} }

// Find finds QEMU, busybox and the kernel opts asks for. An error is a
// *MissingError (errors.Is(err, ErrMissing)) naming the first part that
// is missing.
func Find(opts Options) (*Env, error) {
	var e Env
	var err error
	if opts.VFIOUser {
		if e.QEMU, err = findQEMU([]string{"vfio-user-pci"}); err != nil {
			return nil, &MissingError{"a QEMU >= 10.1 with vfio-user-pci", err}
		}
	} else {
		if e.QEMU, err = findQEMU([]string{"edu", "intel-iommu"}); err != nil {
			return nil, &MissingError{"a QEMU with the edu and intel-iommu devices", err}
		}
	}
	if e.Busybox, err = staticBusybox(); err != nil {
		return nil, &MissingError{"a static busybox", err}
	}
	kdir := opts.KernelDir
	if kdir == "" {
		kdir = KernelDir()
	}
	if opts.KernelImage != "" {
		e.Kernel, e.Modules, err = userKernel(opts.KernelImage, opts.ModulesDir, opts.Modules)
	} else {
		e.Kernel, e.Modules, err = findKernel(kdir, opts.Modules)
	}
	if err != nil {
		return nil, &MissingError{"the guest kernel", err}
	}
	e.Release = filepath.Base(e.Modules)
	e.ModRoot = moduleRoot()
	return &e, nil
}

// moduleRoot returns the Go module's root when the go tool can name one
// (a source tree), else "": building guest programs needs it.
func moduleRoot() string {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	mod := strings.TrimSpace(string(out))
	if err != nil || mod == "" || mod == os.DevNull {
		return ""
	}
	return filepath.Dir(mod)
}

// userKernel checks a kernel image the user built and its modules folder
// (lib/modules/<release>), which must hold the modules need names
// (uncompressed).
func userKernel(image, modules string, need []string) (string, string, error) {
	if fi, err := os.Stat(image); err != nil {
		return "", "", fmt.Errorf("kernel image: %w", err)
	} else if !fi.Mode().IsRegular() {
		return "", "", fmt.Errorf("kernel image %s is not a file", image)
	}
	if modules == "" {
		return "", "", fmt.Errorf("kernel image %s: no modules folder given (its lib/modules/<release>)", image)
	}
	if fi, err := os.Stat(modules); err != nil || !fi.IsDir() {
		return "", "", fmt.Errorf("modules folder %s: not a folder (%v)", modules, err)
	}
	for _, m := range need {
		if _, err := os.Stat(filepath.Join(modules, m)); err != nil {
			return "", "", fmt.Errorf("kernel %s lacks module %s", filepath.Base(modules), m)
		}
	}
	return image, modules, nil
}

// Release returns the release (uname -r) of the kernel in dir, a dpkg -x
// tree as Kernels names, or "" when dir holds none.
func Release(dir string) string {
	_, modules, err := findKernel(dir, nil)
	if err != nil {
		return ""
	}
	return filepath.Base(modules)
}

// findQEMU returns a QEMU that has every device of devices: $GOMHI_QEMU if
// set, else the bundle's wrapper in QEMUDir(), else qemu-system-x86_64 from
// $PATH (a system QEMU has edu and intel-iommu, but vfio-user-pci only
// from 10.1 on).
func findQEMU(devices []string) (string, error) {
	var cands []string
	if q := os.Getenv("GOMHI_QEMU"); q != "" {
		cands = []string{q}
	} else {
		cands = []string{filepath.Join(QEMUDir(), "qemu")}
		if p, err := exec.LookPath("qemu-system-x86_64"); err == nil {
			cands = append(cands, p)
		}
	}
	var errs []error
	for _, q := range cands {
		if _, err := os.Stat(q); err != nil {
			errs = append(errs, fmt.Errorf("no QEMU at %s (set GOMHI_QEMU or GOMHI_QEMU_DIR)", q))
			continue
		}
		if err := qemuHas(q, devices); err != nil {
			errs = append(errs, err)
			continue
		}
		return q, nil
	}
	return "", errors.Join(errs...)
}

// qemuHas checks that QEMU q knows every device of devices.
func qemuHas(q string, devices []string) error {
	for _, d := range devices {
		out, err := exec.Command(q, "-device", d+",help").CombinedOutput()
		if err != nil || !bytes.Contains(out, []byte(" options:")) {
			return fmt.Errorf("%s has no %s device: %v %s", q, d, err, firstLine(out))
		}
	}
	return nil
}

func firstLine(b []byte) string {
	s, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	return s
}

// staticBusybox returns a statically linked busybox: $GOMHI_BUSYBOX, else
// the one unpacked into CacheDir()/busybox, else one on the host.
func staticBusybox() (string, error) {
	var cands []string
	if p := os.Getenv("GOMHI_BUSYBOX"); p != "" {
		cands = []string{p}
	} else {
		cands = []string{filepath.Join(CacheDir(), "busybox", "bin", "busybox")}
		if p, err := exec.LookPath("busybox"); err == nil {
			cands = append(cands, p)
		}
		cands = append(cands, "/bin/busybox", "/usr/bin/busybox")
	}
	var errs []error
	for _, p := range cands {
		f, err := elf.Open(p)
		if err != nil {
			errs = append(errs, err)
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
		errs = append(errs, fmt.Errorf("busybox at %s is dynamically linked; a static one (busybox-static) is needed", p))
	}
	return "", errors.Join(errs...)
}

// findKernel returns the kernel image under dir, a dpkg -x tree of
// Debian's kernel packages, and its modules folder, checking that the
// modules the test needs are there. It knows the layouts Debian has used:
// boot/vmlinuz-<release> with lib/modules/<release> (bookworm) or
// usr/lib/modules/<release> (merged /usr, trixie), and the kernel at
// usr/lib/modules/<release>/vmlinuz (the split linux-binary package, 7.x).
func findKernel(dir string, need []string) (kernel, modules string, err error) {
	moduleDir := func(release string) string {
		for _, base := range []string{"lib", "usr/lib"} {
			m := filepath.Join(dir, base, "modules", release)
			if fi, err := os.Stat(m); err == nil && fi.IsDir() {
				return m
			}
		}
		return ""
	}
	if imgs, _ := filepath.Glob(filepath.Join(dir, "boot", "vmlinuz-*")); len(imgs) > 0 {
		kernel = imgs[len(imgs)-1]
		modules = moduleDir(strings.TrimPrefix(filepath.Base(kernel), "vmlinuz-"))
	} else {
		for _, base := range []string{"usr/lib", "lib"} {
			imgs, _ := filepath.Glob(filepath.Join(dir, base, "modules", "*", "vmlinuz"))
			if len(imgs) > 0 {
				kernel = imgs[len(imgs)-1]
				modules = filepath.Dir(kernel)
				break
			}
		}
	}
	if kernel == "" {
		return "", "", fmt.Errorf("no kernel in %s (boot/vmlinuz-* or usr/lib/modules/*/vmlinuz)", dir)
	}
	if modules == "" {
		return "", "", fmt.Errorf("kernel %s has no modules folder in %s", kernel, dir)
	}
	version := filepath.Base(modules)
	// The uncompressed kernel internal/labvm/setup/guest-kernels.sh takes out of the
	// bzImage boots through its PVH entry, without the decompression.
	if vmlinux := filepath.Join(dir, "boot", "vmlinux-"+version); hasPVHEntry(vmlinux) {
		kernel = vmlinux
	}
	for _, m := range need {
		if _, err := os.Stat(filepath.Join(modules, m)); err != nil {
			hint := ""
			if _, xerr := os.Stat(filepath.Join(modules, m) + ".xz"); xerr == nil {
				hint = " (only " + filepath.Base(m) + ".xz: internal/labvm/setup/guest-kernels.sh decompresses the modules the tests load)"
			}
			return "", "", fmt.Errorf("kernel %s lacks module %s%s", version, m, hint)
		}
	}
	return kernel, modules, nil
}

// hasPVHEntry reports whether path is an ELF kernel with a PVH entry point
// (the Xen note XEN_ELFNOTE_PHYS32_ENTRY, type 18), which QEMU's -kernel
// boots directly.
func hasPVHEntry(path string) bool {
	f, err := elf.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type != elf.PT_NOTE || p.Filesz > 1<<20 {
			continue
		}
		b := make([]byte, p.Filesz)
		if _, err := p.ReadAt(b, 0); err != nil {
			continue
		}
		for len(b) >= 12 {
			le := f.ByteOrder
			namesz, descsz, typ := le.Uint32(b[0:]), le.Uint32(b[4:]), le.Uint32(b[8:])
			align := func(n uint32) int { return int((uint64(n) + 3) &^ 3) }
			if 12+align(namesz)+align(descsz) > len(b) {
				break
			}
			if name := b[12 : 12+namesz]; string(bytes.TrimRight(name, "\x00")) == "Xen" && typ == 18 {
				return true
			}
			b = b[12+align(namesz)+align(descsz):]
		}
	}
	return false
}

// WithDependencies returns modules (paths under the modules folder, in
// insmod order) with the modules each depends on (the depends= entry of
// its .modinfo section) inserted before it, each once: wwan needs gnss on
// kernels built with CONFIG_GNSS, for instance. A dependency that is not
// among the kernel's uncompressed modules is an error naming it.
func (e *Env) WithDependencies(modules []string) ([]string, error) {
	byName := map[string]string{}
	err := filepath.WalkDir(e.Modules, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		name, ok := moduleName(d.Name())
		if !ok {
			return nil
		}
		rel, err := filepath.Rel(e.Modules, p)
		if err != nil {
			return err
		}
		key := strings.ReplaceAll(name, "-", "_")
		if prev, seen := byName[key]; !seen || !strings.HasSuffix(prev, ".ko") {
			byName[key] = rel // the uncompressed file wins
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("modules of %s: %w", e.Release, err)
	}
	var out []string
	seen := map[string]bool{}
	var visit func(rel string, path []string) error
	visit = func(rel string, path []string) error {
		if seen[rel] {
			return nil
		}
		if slices.Contains(path, rel) {
			return fmt.Errorf("kernel %s: module dependency loop %v", e.Release, append(path, rel))
		}
		deps, err := moduleDepends(filepath.Join(e.Modules, rel))
		if err != nil {
			return fmt.Errorf("kernel %s: %w", e.Release, err)
		}
		for _, d := range deps {
			dep, ok := byName[strings.ReplaceAll(d, "-", "_")]
			if !ok {
				return fmt.Errorf("kernel %s: module %s needs %s, which is not among its uncompressed modules", e.Release, filepath.Base(rel), d)
			}
			if err := visit(dep, append(path, rel)); err != nil {
				return err
			}
		}
		seen[rel] = true
		out = append(out, rel)
		return nil
	}
	for _, m := range modules {
		rel, err := e.Module(m)
		if err != nil {
			return nil, err
		}
		if err := visit(rel, nil); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// compressedExts are the module compressions Module accepts; Build
// decompresses .xz (the guest's busybox insmod takes plain modules only).
var compressedExts = []string{".xz", ".zst", ".gz"}

// moduleName returns a module file's name without .ko and compression.
func moduleName(file string) (string, bool) {
	for _, ext := range compressedExts {
		file = strings.TrimSuffix(file, ext)
	}
	return strings.CutSuffix(file, ".ko")
}

// Module returns the path under the modules folder of module rel (a .ko
// path such as kernel/drivers/net/tun.ko): rel itself, or rel with the
// compression suffix the kernel's build gave it. An error names the
// module.
func (e *Env) Module(rel string) (string, error) {
	if fileExists(filepath.Join(e.Modules, rel)) {
		return rel, nil
	}
	for _, ext := range compressedExts {
		if fileExists(filepath.Join(e.Modules, rel+ext)) {
			return rel + ext, nil
		}
	}
	return "", fmt.Errorf("kernel %s has no module %s: %w", e.Release, rel, os.ErrNotExist)
}

// GuestModule is the name Build gives module rel in the guest's
// /lib/modules: its base name, decompressed.
func GuestModule(rel string) string {
	name, _ := moduleName(filepath.Base(rel))
	return name + ".ko"
}

// IsStatic reports whether the executable at path is statically linked
// (an ELF without an interpreter), so that it runs in the guest, which
// has no libc.
func IsStatic(path string) bool {
	f, err := elf.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return false
		}
	}
	return true
}

// HasModule reports whether the kernel has module rel as a file (plain or
// compressed).
func (e *Env) HasModule(rel string) bool {
	_, err := e.Module(rel)
	return err == nil
}

func fileExists(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}

// readModule returns a module file's bytes, decompressing .xz.
func readModule(path string) ([]byte, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	switch {
	case strings.HasSuffix(path, ".xz"):
		r, err := xz.NewReader(bytes.NewReader(raw))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		b, err := io.ReadAll(r)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		return b, nil
	case strings.HasSuffix(path, ".ko"):
		return raw, nil
	}
	return nil, fmt.Errorf("%s: compressed as the guest's insmod cannot load and gomhi cannot decompress (decompress it: unxz/unzstd/gunzip)", path)
}

// moduleDepends reads the depends= entry of a kernel module's .modinfo
// section.
func moduleDepends(path string) ([]string, error) {
	b, err := readModule(path)
	if err != nil {
		return nil, err
	}
	f, err := elf.NewFile(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	defer f.Close()
	sec := f.Section(".modinfo")
	if sec == nil {
		return nil, fmt.Errorf("%s has no .modinfo section", path)
	}
	data, err := sec.Data()
	if err != nil {
		return nil, fmt.Errorf("%s: .modinfo: %w", path, err)
	}
	for _, kv := range bytes.Split(data, []byte{0}) {
		if v, ok := bytes.CutPrefix(kv, []byte("depends=")); ok {
			if len(v) == 0 {
				return nil, nil
			}
			return strings.Split(string(v), ","), nil
		}
	}
	return nil, nil
}

// Initramfs describes the guest's root file system.
type Initramfs struct {
	// Init is the /init script (run by busybox sh).
	Init string
	// Modules are module paths under the kernel's modules folder (as
	// WithDependencies returns them), copied to /lib/modules/<name>.ko,
	// decompressed.
	Modules []string
	// Files maps guest paths to host files to copy (mode kept).
	Files map[string]string
	// Programs maps guest paths to Go packages (./path in the module) to
	// build statically for the guest.
	Programs map[string]string
}

// Build packs the initramfs into dir and returns the archive's path.
func (e *Env) Build(dir string, fs Initramfs) (string, error) {
	root := filepath.Join(dir, "root")
	for _, d := range []string{"bin", "lib/modules", "proc", "sys", "dev", "tmp"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			return "", err
		}
	}
	for dst, pkg := range fs.Programs {
		if e.ModRoot == "" {
			return "", fmt.Errorf("building %s for the guest: not in gomhi's source tree (no go.mod)", pkg)
		}
		build := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", filepath.Join(root, dst), pkg)
		build.Dir = e.ModRoot
		build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
		if out, err := build.CombinedOutput(); err != nil {
			return "", fmt.Errorf("building %s for the guest: %v\n%s", pkg, err, out)
		}
	}
	if err := copyFile(e.Busybox, filepath.Join(root, "bin", "busybox"), 0o755); err != nil {
		return "", err
	}
	for _, m := range fs.Modules {
		b, err := readModule(filepath.Join(e.Modules, m))
		if err != nil {
			return "", err
		}
		name, _ := moduleName(filepath.Base(m))
		if err := os.WriteFile(filepath.Join(root, "lib", "modules", name+".ko"), b, 0o644); err != nil {
			return "", err
		}
	}
	for dst, src := range fs.Files {
		fi, err := os.Stat(src)
		if err != nil {
			return "", err
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, dst)), 0o755); err != nil {
			return "", err
		}
		if err := copyFile(src, filepath.Join(root, dst), fi.Mode().Perm()); err != nil {
			return "", err
		}
	}
	if err := os.WriteFile(filepath.Join(root, "init"), []byte(fs.Init), 0o755); err != nil {
		return "", err
	}
	out := filepath.Join(dir, "initrd.cpio")
	if err := packInitramfs(root, out); err != nil {
		return "", err
	}
	return out, nil
}

// KernelArgs start every guest's kernel command line. no_timer_check: on
// a loaded host a TCG guest can fail the kernel's IO-APIC timer check
// ("IO-APIC + timer doesn't work!") and panic at boot; seen with 6.12.
const KernelArgs = "console=ttyS0 panic=-1 quiet no_timer_check"

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
		"-append", strings.TrimSpace(KernelArgs+" "+b.Append))
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

// packInitramfs writes the tree under root as an uncompressed newc cpio
// archive, the format the kernel unpacks as its initramfs (gzip would halve
// it but boots no faster under TCG). Names are relative to root; owners are
// kept (0 when the tests run as root) as the archive says nothing else.
func packInitramfs(root, out string) error {
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	bw := bufio.NewWriter(f)
	w := cpio.Newc.Writer(bw)
	rec := cpio.NewRecorder()
	err = filepath.WalkDir(root, func(p string, _ os.DirEntry, err error) error {
		if err != nil || p == root {
			return err
		}
		r, err := rec.GetRecord(p)
		if err != nil {
			return err
		}
		if r.Name, err = filepath.Rel(root, p); err != nil {
			return err
		}
		if err := w.WriteRecord(r); err != nil {
			return fmt.Errorf("initramfs: %s: %w", r.Name, err)
		}
		return nil
	})
	if err == nil {
		err = cpio.WriteTrailer(w)
	}
	if err == nil {
		err = bw.Flush()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("initramfs %s: %w", out, err)
	}
	return nil
}

// copyFile copies src to dst with mode.
func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("copy %s: %w", src, err)
	}
	return out.Close()
}
