package labvm

import (
	"context"
	"embed"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
)

// setupScripts are the scripts that fill the cache: `make test-deps` runs
// them from the source tree, Setup from the binary that embeds them, so
// an installed mhictl prepares its lab with the same code.
//
//go:embed setup/*.sh
var setupScripts embed.FS

// Setup prepares the cache (CacheDir) as `make test-deps` does: QEMU 11.1,
// busybox, Debian's 6.1, 6.12 and 7.x kernels and, with rootFS and where
// mmdebstrap can run, the ModemManager root file system — downloaded from
// the Debian mirror the machine uses, without root. What is in place already is only
// checked. The scripts' output goes to out; a part that cannot be
// prepared is reported there and Find names it afterwards.
func Setup(ctx context.Context, out io.Writer, rootFS bool) error {
	dir, err := os.MkdirTemp("", "gomhi-setup-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	entries, err := setupScripts.ReadDir("setup")
	if err != nil {
		return err
	}
	for _, e := range entries {
		b, err := setupScripts.ReadFile("setup/" + e.Name())
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, e.Name()), b, 0o755); err != nil {
			return err
		}
	}
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(dir, "test-deps.sh"))
	cmd.Stdout, cmd.Stderr = out, out
	if !rootFS {
		cmd.Env = append(os.Environ(), "GOMHI_SETUP_ROOTFS=0")
	}
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("preparing the lab's cache in %s: %w", CacheDir(), err)
	}
	return nil
}
