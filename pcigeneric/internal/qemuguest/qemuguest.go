// Package qemuguest gives the tests that boot a Linux guest (the VFIO
// transport in pcigeneric/vfio, the mock modem under Linux's drivers and
// ModemManager in pcigeneric/vfiouser) the lab's guest engine,
// internal/labvm, in a test's terms: what is missing skips the test — or,
// with CI=true, fails it (mhi/testenv) so the proof cannot silently stop
// running — and every other error fails it.
package qemuguest

import (
	"testing"

	"github.com/gomhi/gomhi/internal/labvm"
	"github.com/gomhi/gomhi/mhi/testenv"
)

// Env is what a boot needs, found on the host (labvm.Env), with the
// test's Build.
type Env struct{ *labvm.Env }

// Find finds the tools and the kernel opts asks for, or skips the test
// (fails it with CI=true) saying what is missing. Skipped in -short mode,
// which CI does not use.
func Find(t testing.TB, opts labvm.Options) *Env {
	t.Helper()
	if testing.Short() {
		t.Skip("boots a VM; skipped in -short mode")
	}
	e, err := labvm.Find(opts)
	if err != nil {
		testenv.Need(t, "what the guest needs", err)
	}
	if e.ModRoot == "" {
		t.Fatal("go env GOMOD names no module: the guest tests build programs from gomhi's source tree")
	}
	t.Logf("guest: qemu %s, busybox %s, kernel %s (%s)", e.QEMU, e.Busybox, e.Kernel, e.Release)
	return &Env{e}
}

// Build packs the initramfs into dir and returns the archive's path,
// failing the test on an error.
func (e *Env) Build(t testing.TB, dir string, fs labvm.Initramfs) string {
	t.Helper()
	out, err := e.Env.Build(dir, fs)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// FindRootFS returns the ModemManager guest's root file system image, or
// skips the test (fails it with CI=true) saying how to build it.
func FindRootFS(t testing.TB) string {
	t.Helper()
	img, err := labvm.FindRootFS()
	if err != nil {
		testenv.Need(t, "the ModemManager guest's root file system", err)
	}
	return img
}
