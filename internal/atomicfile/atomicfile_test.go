package atomicfile

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// names returns the names in dir, sorted.
func names(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	slices.Sort(out)
	return out
}

// TestWriteAppearsWhenComplete: while fill writes, the final name does
// not exist (or keeps its old content) and only a temporary file beside
// it does; afterwards the final name has the whole content and no
// temporary file is left.
func TestWriteAppearsWhenComplete(t *testing.T) {
	for _, tc := range []struct {
		name  string
		old   []byte // content at the final name before, nil for none
		flags Flag
	}{
		{"new file", nil, 0},
		{"replaces", []byte("old content\n"), 0},
		{"new file, NoReplace", nil, NoReplace},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "out.bin")
			if tc.old != nil {
				if err := os.WriteFile(path, tc.old, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want := bytes.Repeat([]byte("0123456789abcdef"), 64<<10) // 1 MiB, several buffer flushes
			err := Write(path, 0o644, tc.flags, func(w io.Writer) error {
				for i := 0; i < len(want); i += 100 << 10 {
					if _, err := w.Write(want[i:min(i+100<<10, len(want))]); err != nil {
						return err
					}
					got, err := os.ReadFile(path)
					switch {
					case tc.old == nil && !errors.Is(err, fs.ErrNotExist):
						t.Errorf("after %d bytes: the final name exists (%d bytes, %v)", i, len(got), err)
					case tc.old != nil && !bytes.Equal(got, tc.old):
						t.Errorf("after %d bytes: the final name holds %q, %v; want the old content", i, got, err)
					}
					if n := names(t, dir); len(n) != len(slices.DeleteFunc(slices.Clone(n), isTemp))+1 {
						t.Errorf("after %d bytes: files %q, want one temporary file", i, n)
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(path)
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("final file: %d bytes, %v; want %d bytes", len(got), err, len(want))
			}
			if n := names(t, dir); !slices.Equal(n, []string{"out.bin"}) {
				t.Errorf("files after the write: %q, want only out.bin", n)
			}
		})
	}
}

// isTemp reports whether name is one of Write's temporary names.
func isTemp(name string) bool { return strings.Contains(name, ".tmp-") && strings.HasPrefix(name, ".") }

// TestWriteErrorLeavesNothing: when fill fails (or panics) halfway, the
// error wraps fill's and names the file, the final name does not exist
// or keeps its old content, and no temporary file is left.
func TestWriteErrorLeavesNothing(t *testing.T) {
	errFill := errors.New("fill failed")
	for _, tc := range []struct {
		name  string
		old   []byte
		flags Flag
		panic bool
	}{
		{"new file", nil, 0, false},
		{"existing file", []byte("old content\n"), 0, false},
		{"NoReplace", nil, NoReplace | ExactPerm, false},
		{"panic, existing file", []byte("old content\n"), 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "out.bin")
			if tc.old != nil {
				if err := os.WriteFile(path, tc.old, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			var err error
			func() {
				defer func() {
					if r := recover(); r != nil && !tc.panic {
						panic(r)
					}
				}()
				err = Write(path, 0o600, tc.flags, func(w io.Writer) error {
					if _, err := w.Write(bytes.Repeat([]byte{'x'}, 200<<10)); err != nil {
						return err
					}
					if tc.panic {
						panic("fill panicked")
					}
					return errFill
				})
			}()
			if !tc.panic && (!errors.Is(err, errFill) || !strings.Contains(err.Error(), path)) {
				t.Errorf("error %v, want one wrapping %v and naming %s", err, errFill, path)
			}
			got, rerr := os.ReadFile(path)
			switch {
			case tc.old == nil && !errors.Is(rerr, fs.ErrNotExist):
				t.Errorf("the final name exists after the error (%d bytes, %v)", len(got), rerr)
			case tc.old != nil && !bytes.Equal(got, tc.old):
				t.Errorf("the final name holds %q, %v; want the old content", got, rerr)
			}
			want := []string(nil)
			if tc.old != nil {
				want = []string{"out.bin"}
			}
			if n := names(t, dir); !slices.Equal(n, want) {
				t.Errorf("files after the error: %q, want %q", n, want)
			}
		})
	}
}

// TestWriteUnwritableDir: a directory the temporary file cannot be made
// in is an error naming the file, and leaves nothing.
func TestWriteUnwritableDir(t *testing.T) {
	path := filepath.Join(t.TempDir(), "missing", "out.bin")
	err := WriteFile(path, []byte("x"), 0o644, 0)
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), path) {
		t.Fatalf("error %v, want one matching fs.ErrNotExist naming %s", err, path)
	}
}

// TestNoReplaceRefusesExisting: with NoReplace a file, a directory, a
// symbolic link to a file and a dangling symbolic link at the final name
// are all refused with fs.ErrExist (checked before fill runs); nothing
// is written through the link and no temporary file is left.
func TestNoReplaceRefusesExisting(t *testing.T) {
	for _, tc := range []struct {
		name string
		make func(t *testing.T, dir, path string)
	}{
		{"file", func(t *testing.T, dir, path string) {
			if err := os.WriteFile(path, []byte("old"), 0o600); err != nil {
				t.Fatal(err)
			}
		}},
		{"directory", func(t *testing.T, dir, path string) {
			if err := os.Mkdir(path, 0o700); err != nil {
				t.Fatal(err)
			}
		}},
		{"symlink to a file", func(t *testing.T, dir, path string) {
			target := filepath.Join(dir, "target")
			if err := os.WriteFile(target, []byte("target"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(target, path); err != nil {
				t.Fatal(err)
			}
		}},
		{"dangling symlink", func(t *testing.T, dir, path string) {
			if err := os.Symlink(filepath.Join(dir, "target"), path); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "out.bin")
			tc.make(t, dir, path)
			before := names(t, dir)
			filled := false
			err := Write(path, 0o600, NoReplace|ExactPerm, func(w io.Writer) error {
				filled = true
				_, err := w.Write([]byte("new"))
				return err
			})
			if !errors.Is(err, fs.ErrExist) || !strings.Contains(err.Error(), "file exists") {
				t.Fatalf("error %v, want one matching fs.ErrExist", err)
			}
			if filled {
				t.Error("fill ran although the name was taken")
			}
			if after := names(t, dir); !slices.Equal(after, before) {
				t.Errorf("files %q after the refusal, want %q", after, before)
			}
			if b, err := os.ReadFile(filepath.Join(dir, "target")); err == nil && string(b) != "target" {
				t.Errorf("the link's target was written: %q", b)
			}
		})
	}
}

// TestNoReplaceRace: a file that appears at the final name while fill
// writes is not replaced (the rename refuses it) and the temporary file
// is removed; the link(2) fallback refuses it too.
func TestNoReplaceRace(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "out.bin")
	err := Write(path, 0o600, NoReplace, func(w io.Writer) error {
		if err := os.WriteFile(path, []byte("raced"), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := w.Write([]byte("new"))
		return err
	})
	if !errors.Is(err, fs.ErrExist) {
		t.Fatalf("error %v, want one matching fs.ErrExist", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "raced" {
		t.Errorf("the final name holds %q, want the file that raced in", b)
	}
	if n := names(t, dir); !slices.Equal(n, []string{"out.bin"}) {
		t.Errorf("files %q, want only out.bin", n)
	}

	// The fallback, driven directly (Write uses renameat2 where the file
	// system has it).
	tmp := filepath.Join(dir, ".out.bin.tmp-fallback")
	if err := os.WriteFile(tmp, []byte("new"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := linkNoReplace(tmp, path); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("link fallback: error %v, want one matching fs.ErrExist", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "raced" {
		t.Errorf("after the link fallback the final name holds %q, want the file that raced in", b)
	}
}

// TestLinkNoReplaceSucceeds: the link(2) fallback gives the file its
// final name and removes the temporary one.
func TestLinkNoReplaceSucceeds(t *testing.T) {
	dir := t.TempDir()
	tmp, path := filepath.Join(dir, ".out.tmp-x"), filepath.Join(dir, "out")
	if err := os.WriteFile(tmp, []byte("new"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := linkNoReplace(tmp, path); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != "new" {
		t.Errorf("final name: %q, %v", b, err)
	}
	if n := names(t, dir); !slices.Equal(n, []string{"out"}) {
		t.Errorf("files %q, want only out", n)
	}
}

// TestReplaceSymlink: without NoReplace a symbolic link at the final name
// is replaced by the file; its target is not written.
func TestReplaceSymlink(t *testing.T) {
	dir := t.TempDir()
	path, target := filepath.Join(dir, "out"), filepath.Join(dir, "target")
	if err := os.WriteFile(target, []byte("target"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, path); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(path, []byte("new"), 0o644, 0); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Lstat(path); err != nil || !st.Mode().IsRegular() {
		t.Fatalf("final name: %v, %v; want a regular file", st, err)
	}
	if b, _ := os.ReadFile(target); string(b) != "target" {
		t.Errorf("the link's target was written: %q", b)
	}
}

// TestPermissions: the umask applies to perm unless ExactPerm.
func TestPermissions(t *testing.T) {
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	dir := t.TempDir()
	for i, tc := range []struct {
		flags      Flag
		perm, want fs.FileMode
	}{
		{0, 0o644, 0o600},
		{ExactPerm, 0o644, 0o644},
		{ExactPerm | NoReplace, 0o600, 0o600},
	} {
		path := filepath.Join(dir, strconv.Itoa(i))
		if err := WriteFile(path, []byte("x"), tc.perm, tc.flags); err != nil {
			t.Fatal(err)
		}
		if st, err := os.Stat(path); err != nil || st.Mode().Perm() != tc.want {
			t.Errorf("flags %b perm %v: mode %v, %v; want %v", tc.flags, tc.perm, st.Mode().Perm(), err, tc.want)
		}
	}
}

// TestLongName: a final name near NAME_MAX still gets a temporary name.
func TestLongName(t *testing.T) {
	path := filepath.Join(t.TempDir(), strings.Repeat("n", 250))
	if err := WriteFile(path, []byte("x"), 0o644, 0); err != nil {
		t.Fatal(err)
	}
}
