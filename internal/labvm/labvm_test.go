package labvm

import (
	"bytes"
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gomhi/gomhi/mhi/testenv"
)

func touch(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// pvhELF returns a minimal ELF64 file with one PT_NOTE segment holding
// one note of the given name and type.
func pvhELF(name string, typ uint32) []byte {
	le := binary.LittleEndian
	note := le.AppendUint32(nil, uint32(len(name)+1))
	note = le.AppendUint32(note, 4)
	note = le.AppendUint32(note, typ)
	note = append(note, name...)
	for len(note)%4 != 0 || len(note) < 12+len(name)+1 {
		note = append(note, 0)
	}
	note = le.AppendUint32(note, 0x1000000) // the entry address
	const ehsize, phsize = 64, 56
	b := make([]byte, ehsize+phsize)
	copy(b, "\x7fELF")
	b[4], b[5], b[6] = 2, 1, 1 // 64-bit, little endian, version 1
	le.PutUint16(b[16:], 2)    // ET_EXEC
	le.PutUint16(b[18:], 62)   // x86-64
	le.PutUint32(b[20:], 1)
	le.PutUint64(b[32:], ehsize) // program headers
	le.PutUint16(b[52:], ehsize)
	le.PutUint16(b[54:], phsize)
	le.PutUint16(b[56:], 1)
	ph := b[ehsize:]
	le.PutUint32(ph[0:], 4)                  // PT_NOTE
	le.PutUint64(ph[8:], ehsize+phsize)      // offset
	le.PutUint64(ph[32:], uint64(len(note))) // filesz
	le.PutUint64(ph[40:], uint64(len(note)))
	return append(b, note...)
}

// TestFindKernelLayouts checks the three layouts of Debian's kernel
// packages: bookworm's (boot/, lib/modules), trixie's (boot/,
// usr/lib/modules: merged /usr) and the split 7.x packages' (the kernel
// at usr/lib/modules/<release>/vmlinuz), and that an uncompressed kernel
// with a PVH entry is preferred.
func TestFindKernelLayouts(t *testing.T) {
	const rel = "9.9.9-cloud-amd64"
	mod := "kernel/drivers/bus/mhi/host/mhi.ko"
	for _, c := range []struct {
		name, kernel, modules string
	}{
		{"bookworm", "boot/vmlinuz-" + rel, "lib/modules/" + rel},
		{"merged-usr", "boot/vmlinuz-" + rel, "usr/lib/modules/" + rel},
		{"split", "usr/lib/modules/" + rel + "/vmlinuz", "usr/lib/modules/" + rel},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			touch(t, filepath.Join(dir, c.kernel), []byte("bzImage"))
			touch(t, filepath.Join(dir, c.modules, mod), nil)
			k, m, err := findKernel(dir, []string{mod})
			if err != nil || k != filepath.Join(dir, c.kernel) || m != filepath.Join(dir, c.modules) {
				t.Fatalf("findKernel: %q %q %v", k, m, err)
			}
			// A module only compressed is missing, with the reason.
			touch(t, filepath.Join(dir, c.modules, "kernel/drivers/net/wwan/wwan.ko.xz"), nil)
			if _, _, err := findKernel(dir, []string{"kernel/drivers/net/wwan/wwan.ko"}); err == nil || !strings.Contains(err.Error(), "wwan.ko.xz") {
				t.Fatalf("compressed module: %v", err)
			}
			// boot/vmlinux-<release> with a PVH note wins; without, not.
			vmlinux := filepath.Join(dir, "boot", "vmlinux-"+rel)
			touch(t, vmlinux, pvhELF("Xen", 17))
			if k, _, _ := findKernel(dir, nil); k != filepath.Join(dir, c.kernel) {
				t.Fatalf("ELF without the PVH entry note chosen: %s", k)
			}
			touch(t, vmlinux, pvhELF("Xen", 18))
			if k, _, _ := findKernel(dir, nil); k != vmlinux {
				t.Fatalf("PVH kernel not chosen: %s", k)
			}
		})
	}
	if _, _, err := findKernel(t.TempDir(), nil); err == nil {
		t.Fatal("empty folder: no error")
	}
}

func TestHasPVHEntry(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		name string
		data []byte
		want bool
	}{
		{"xen-18", pvhELF("Xen", 18), true},
		{"xen-17", pvhELF("Xen", 17), false},
		{"other-18", pvhELF("GNU", 18), false},
		{"truncated", pvhELF("Xen", 18)[:130], false},
		{"not-elf", []byte("MZ\x00\x00 bzImage"), false},
	} {
		p := filepath.Join(dir, c.name)
		touch(t, p, c.data)
		if got := hasPVHEntry(p); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

// TestWithDependencies resolves the MHI modules' dependencies of every
// kernel of the matrix from their .modinfo: each dependency comes before
// the module that needs it, each module once.
func TestWithDependencies(t *testing.T) {
	mods := []string{"kernel/drivers/net/wwan/mhi_wwan_ctrl.ko", "kernel/drivers/bus/mhi/host/mhi_pci_generic.ko"}
	for _, k := range Kernels() {
		t.Run(k.Name, func(t *testing.T) {
			kernel, modules, err := findKernel(k.Dir, mods)
			testenv.Need(t, "the guest kernel "+k.Name+" (run: "+SetupCommand+")", err)
			e := &Env{Kernel: kernel, Modules: modules, Release: filepath.Base(modules)}
			got, err := e.WithDependencies(mods)
			if err != nil {
				t.Fatal(err)
			}
			names := make([]string, len(got))
			for i, m := range got {
				names[i] = strings.TrimSuffix(filepath.Base(m), ".ko")
			}
			pos := func(n string) int { return slices.Index(names, n) }
			if pos("mhi") < 0 || pos("wwan") < 0 || pos("mhi") > pos("mhi_wwan_ctrl") || pos("wwan") > pos("mhi_wwan_ctrl") ||
				pos("mhi") > pos("mhi_pci_generic") || len(names) != len(unique(names)) {
				t.Fatalf("%s: %v", e.Release, names)
			}
			t.Logf("%s: %v", e.Release, names)
		})
	}
}

func unique(s []string) map[string]bool {
	m := map[string]bool{}
	for _, v := range s {
		m[v] = true
	}
	return m
}

// TestSetupChecksAFullCache runs the embedded setup scripts (what an
// installed mhictl lab runs on first use) on the cache make test-deps
// filled: each component is found in place and only checked, and Find
// succeeds afterwards.
func TestSetupChecksAFullCache(t *testing.T) {
	if testing.Short() {
		t.Skip("checks the guest cache; skipped in -short mode")
	}
	_, err := Find(Options{VFIOUser: true})
	testenv.Need(t, "the guest cache (run: "+SetupCommand+")", err)
	var out bytes.Buffer
	if err := Setup(context.Background(), &out, false); err != nil {
		t.Fatalf("Setup: %v\n%s", err, out.String())
	}
	for _, want := range []string{"test-deps: qemu:", "test-deps: busybox:"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the setup's output lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "rootfs") && strings.Contains(out.String(), "mmdebstrap") {
		t.Errorf("the root file system was looked at although rootFS is false:\n%s", out.String())
	}
	if _, err := Find(Options{VFIOUser: true}); err != nil {
		t.Errorf("Find after Setup: %v", err)
	}
}

// TestVirtioBlkModules: the virtio modules a kernel has as files are
// loaded in order, the ones it builds in are skipped, and one it has in
// neither form is an error; without a modules.builtin, missing ones are
// taken as built in (the 7.x cache's layout).
func TestVirtioBlkModules(t *testing.T) {
	mk := func(t *testing.T, files []string, builtin string) *Env {
		dir := t.TempDir()
		for _, f := range files {
			p := filepath.Join(dir, f)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if builtin != "" {
			if err := os.WriteFile(filepath.Join(dir, "modules.builtin"), []byte(builtin), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return &Env{Modules: dir, Release: "test"}
	}
	// bookworm: all modules.
	all := mk(t, VirtioBlkModules, "kernel/fs/ext4/ext4.ko\n")
	if got, err := all.VirtioBlkModules(); err != nil || !slices.Equal(got, VirtioBlkModules) {
		t.Errorf("all modules: %v, %v", got, err)
	}
	// virtio, virtio_ring and virtio_pci built in, the rest .ko.xz.
	builtin := "kernel/drivers/virtio/virtio.ko\nkernel/drivers/virtio/virtio_ring.ko\nkernel/drivers/virtio/virtio_pci.ko\n"
	trixie := mk(t, []string{"kernel/drivers/virtio/virtio_pci_modern_dev.ko.xz", "kernel/drivers/virtio/virtio_pci_legacy_dev.ko.xz", "kernel/drivers/block/virtio_blk.ko.xz"}, builtin)
	want := []string{"kernel/drivers/virtio/virtio_pci_modern_dev.ko.xz", "kernel/drivers/virtio/virtio_pci_legacy_dev.ko.xz", "kernel/drivers/block/virtio_blk.ko.xz"}
	if got, err := trixie.VirtioBlkModules(); err != nil || !slices.Equal(got, want) {
		t.Errorf("trixie: %v, %v; want %v", got, err, want)
	}
	// virtio_blk neither a file nor built in: an error naming it.
	none := mk(t, nil, builtin+"kernel/drivers/virtio/virtio_pci_modern_dev.ko\nkernel/drivers/virtio/virtio_pci_legacy_dev.ko\n")
	if got, err := none.VirtioBlkModules(); err == nil || !strings.Contains(err.Error(), "virtio_blk") {
		t.Errorf("without virtio_blk: %v, %v", got, err)
	}
	// No modules.builtin (the 7.x cache): what is not a file is skipped.
	nolist := mk(t, []string{"kernel/drivers/block/virtio_blk.ko.xz"}, "")
	if got, err := nolist.VirtioBlkModules(); err != nil || !slices.Equal(got, []string{"kernel/drivers/block/virtio_blk.ko.xz"}) {
		t.Errorf("no modules.builtin: %v, %v", got, err)
	}
}
