package labvm

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// This file adds a Debian user space to the guest: the ModemManager test
// (pcigeneric/vfiouser/modemmanager_test.go) boots bookworm's ModemManager,
// D-Bus, udev and polkitd from an ext2 image that internal/labvm/setup/guest-rootfs.sh
// builds with mmdebstrap (run by make test-deps). The image is a virtio
// disk opened with snapshot=on, so the guest may write to it and the file
// never changes; the initramfs (busybox, the virtio modules) mounts it and
// switches to it.

// RootFSImage is the ModemManager guest's root file system image:
// $GOMHI_MM_ROOTFS, else CacheDir()/mm-rootfs/rootfs.ext2.
func RootFSImage() string {
	return envOr("GOMHI_MM_ROOTFS", filepath.Join(CacheDir(), "mm-rootfs", "rootfs.ext2"))
}

// VirtioBlkModules are the kernel modules (paths under
// lib/modules/<version>, in insmod order) the initramfs loads to reach a
// virtio disk: bookworm's cloud kernel (6.1) builds them all as modules;
// trixie's (6.12) and its backports (7.x) build virtio, virtio_ring and
// virtio_pci into the kernel. Env.VirtioBlkModules says which a kernel has
// as files.
var VirtioBlkModules = []string{
	"kernel/drivers/virtio/virtio_ring.ko",
	"kernel/drivers/virtio/virtio.ko",
	"kernel/drivers/virtio/virtio_pci_modern_dev.ko",
	"kernel/drivers/virtio/virtio_pci_legacy_dev.ko",
	"kernel/drivers/virtio/virtio_pci.ko",
	"kernel/drivers/block/virtio_blk.ko",
}

// VirtioBlkModules returns the modules of VirtioBlkModules that e's kernel
// has as files, in insmod order and as Env.Module names them (".ko.xz" for
// a compressed one, which Build decompresses); the others are
// taken to be built in. When the kernel's modules.builtin is there, a
// module that is neither a file nor listed in it is an error naming it:
// that kernel cannot reach the disk.
func (e *Env) VirtioBlkModules() ([]string, error) {
	builtin, haveList := e.BuiltinModules()
	var load []string
	for _, m := range VirtioBlkModules {
		rel, err := e.Module(m)
		switch {
		case err == nil:
			load = append(load, rel)
		case builtin[m] || !haveList:
		default:
			return nil, fmt.Errorf("kernel %s has no %s, neither as a module nor built in: the guest cannot mount the Debian root file system: %w", e.Release, filepath.Base(m), os.ErrNotExist)
		}
	}
	return load, nil
}

// BuiltinModules reads the kernel's modules.builtin: the module paths
// (under lib/modules/<version>) built into the kernel; ok is false when the
// kernel has no such list.
func (e *Env) BuiltinModules() (builtin map[string]bool, ok bool) {
	b, err := os.ReadFile(filepath.Join(e.Modules, "modules.builtin"))
	if err != nil {
		return nil, false
	}
	builtin = map[string]bool{}
	for _, l := range strings.Split(string(b), "\n") {
		builtin[strings.TrimSpace(l)] = true
	}
	return builtin, true
}

// FindRootFS returns the ModemManager guest's root file system image; an
// error is a *MissingError saying how to build it.
func FindRootFS() (string, error) {
	img := RootFSImage()
	var err error
	if fi, serr := os.Stat(img); serr != nil {
		err = fmt.Errorf("no root file system image at %s (built by internal/labvm/setup/guest-rootfs.sh; set GOMHI_MM_ROOTFS): %w", img, serr)
	} else if !fi.Mode().IsRegular() || fi.Size() == 0 {
		err = fmt.Errorf("%s is not a file system image", img)
	}
	if err != nil {
		return "", &MissingError{"the ModemManager guest's Debian root file system", err}
	}
	return img, nil
}

// DiskArgs are the QEMU arguments attaching image as the guest's virtio
// disk /dev/vda, read-only underneath: the guest's writes go to a
// temporary overlay QEMU discards when it exits.
func DiskArgs(image string) []string {
	return []string{"-drive", "file=" + image + ",format=raw,if=virtio,snapshot=on"}
}

// SerialFileArgs are the QEMU arguments giving the guest a second serial
// port (ttyS1) whose output goes to the host file path.
func SerialFileArgs(path string) []string { return SerialPortFileArgs(1, path) }

// SerialPortFileArgs are the QEMU arguments giving the guest the serial
// port ttyS<index> (1–3: ttyS0 is the console) whose output goes to the
// host file path.
func SerialPortFileArgs(index int, path string) []string {
	id := fmt.Sprintf("ttys%d", index)
	return []string{"-chardev", "file,id=" + id + ",path=" + path, "-device", fmt.Sprintf("isa-serial,chardev=%s,index=%d", id, index)}
}

// RunInteractive boots the guest with its console on the controlling
// terminal (QEMU's monitor multiplexed on it: Ctrl-A X quits) instead of
// capturing it, for a person to use the guest's shell. The terminal is
// /dev/tty when the process has one — go test gives a test binary neither
// its standard input nor, without -v, its output as it comes — else the
// standard streams. It returns when QEMU exits or ctx ends.
func (e *Env) RunInteractive(ctx context.Context, b Boot) error {
	args := append([]string{}, b.Args...)
	args = append(args, "-nodefaults", "-display", "none", "-no-reboot", "-serial", "mon:stdio",
		"-kernel", e.Kernel, "-initrd", b.Initrd,
		"-append", strings.TrimSpace("console=ttyS0 panic=-1 quiet "+b.Append))
	cmd := exec.CommandContext(ctx, e.QEMU, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	if tty, err := os.OpenFile("/dev/tty", os.O_RDWR, 0); err == nil {
		defer tty.Close()
		cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	}
	return cmd.Run()
}
