package main

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/gomhi/gomhi/mhi/testenv/reexec"
)

// TestDumpDiskFull: on a 64 KiB tmpfs (its own mount namespace, as root),
// `mhictl dump --out FILE` — the embedded mock's RAM dump, 192 KiB — fails
// saying "no space left on device" and leaves no file, neither FILE nor a
// temporary one; over an existing FILE it keeps FILE's old content. The
// running-stack form's writer (writeNewFile: new file only) leaves nothing
// either. Before internal/atomicfile, a truncated FILE stayed.
func TestDumpDiskFull(t *testing.T) {
	dir, ok := reexec.InSmallTmpfs(t, "64k")
	if !ok {
		return
	}
	listDir := func() []string {
		ents, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		return names
	}

	file := filepath.Join(dir, "dump.bin")
	out, err := runCmd(t, mhictl("dump", "--out", file))
	t.Logf("$ mhictl dump --out %s (64 KiB tmpfs): %v\n%s", file, err, out)
	if err == nil || !strings.Contains(out, "no space left on device") {
		t.Errorf("dump to a full file system: %v, want an error saying no space left on device", err)
	}
	if names := listDir(); len(names) != 0 {
		t.Errorf("files left on the full file system: %q, want none", names)
	}

	old := []byte("an older dump\n")
	if err := os.WriteFile(file, old, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err = runCmd(t, mhictl("dump", "--out", file))
	if err == nil || !strings.Contains(out, "no space left on device") {
		t.Errorf("dump over an existing file on a full file system: %v, want no space left on device\n%s", err, out)
	}
	if b, err := os.ReadFile(file); err != nil || !bytes.Equal(b, old) {
		t.Errorf("the existing --out holds %d bytes (%v), want its old content", len(b), err)
	}
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}

	err = writeNewFile(file, bytes.Repeat([]byte{0xd0}, 192<<10))
	if !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), "no space left on device") {
		t.Errorf("writeNewFile on a full file system: %v, want no space left on device", err)
	}
	if _, err := os.Lstat(file); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("writeNewFile left %s: %v", file, err)
	}
	if names := listDir(); len(names) != 0 {
		t.Errorf("files left on the full file system: %q, want none", names)
	}
}
