package client

import (
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/gomhi/gomhi/pcigeneric/vfiouser/protocol"
)

// TestOpenErrors: nothing at the path, a socket nobody listens on, and a
// file that is not a socket each give their sentinel.
func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	regular := filepath.Join(dir, "file")
	if err := os.WriteFile(regular, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(dir, "stale.sock")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: stale, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	l.Close()
	for _, tc := range []struct {
		path string
		want []error
	}{
		{filepath.Join(dir, "missing"), []error{ErrNoServer, fs.ErrNotExist}},
		{stale, []error{ErrNoServer}},
		{regular, []error{protocol.ErrNotSocket}},
		{dir, []error{protocol.ErrNotSocket}},
	} {
		r, err := Open(tc.path, OpenOptions{})
		if err == nil {
			r.Close()
		}
		for _, w := range tc.want {
			if !errors.Is(err, w) {
				t.Errorf("%s: %v, want %v", tc.path, err, w)
			}
		}
	}
}
