package atomicfile

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/gomhi/gomhi/mhi/testenv/reexec"
)

// TestWriteDiskFull: on a 64 KiB tmpfs, writing 256 KiB fails with "no
// space left on device" (matching syscall.ENOSPC); a new file does not
// appear, an existing one keeps its content, and no temporary file is
// left — with and without NoReplace. Then a file that fits is written.
func TestWriteDiskFull(t *testing.T) {
	dir, ok := reexec.InSmallTmpfs(t, "64k")
	if !ok {
		return
	}
	big := bytes.Repeat([]byte("dump"), 64<<10) // 256 KiB
	old := []byte("the previous profile\n")
	kept := filepath.Join(dir, "kept.json")
	if err := os.WriteFile(kept, old, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path  string
		flags Flag
	}{
		{filepath.Join(dir, "new.bin"), 0},
		{filepath.Join(dir, "excl.bin"), NoReplace | ExactPerm},
		{kept, 0},
	} {
		err := WriteFile(tc.path, big, 0o600, tc.flags)
		if !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), "no space left on device") {
			t.Errorf("%s: error %v, want no space left on device", tc.path, err)
		}
		b, rerr := os.ReadFile(tc.path)
		switch {
		case tc.path == kept && !bytes.Equal(b, old):
			t.Errorf("%s holds %d bytes (%v), want its old content", tc.path, len(b), rerr)
		case tc.path != kept && !errors.Is(rerr, fs.ErrNotExist):
			t.Errorf("%s exists after the failed write (%d bytes, %v)", tc.path, len(b), rerr)
		}
	}
	if n := names(t, dir); !slices.Equal(n, []string{"kept.json"}) {
		t.Errorf("files on the full tmpfs: %q, want only kept.json", n)
	}
	small := []byte("fits")
	if err := WriteFile(filepath.Join(dir, "small"), small, 0o600, NoReplace); err != nil {
		t.Errorf("a file that fits: %v", err)
	}
}
