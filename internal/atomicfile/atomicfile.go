// Package atomicfile writes the files gomhi makes for its user (RAM
// dumps, timing profiles, soak reports, plots, manual pages, run files)
// so that nothing is ever left half written under the final name: the
// content goes to a temporary file in the same directory, which is
// synced and then renamed to the final name only when it is complete.
// On any error the temporary file is removed, and the final name keeps
// what it had (nothing, or the previous file). A reader, or the file
// system after a crash, sees the old file or the whole new one.
//
// Why not github.com/google/renameio/v2, which does the temporary file,
// the fsync and the rename: it always replaces what is at the final name
// (a RAM dump from a running stack must refuse an existing file, as its
// O_CREAT|O_EXCL|O_NOFOLLOW open did, see NoReplace), it does not sync
// the directory after the rename (so the rename itself may not survive a
// crash), and by default it may put the temporary file in $TMPDIR rather
// than beside the final name. This package is small enough to own.
package atomicfile

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

// Flag changes how Write and WriteFile create the file; flags combine
// with |.
type Flag uint

const (
	// NoReplace refuses to write when anything exists at the final name
	// — a file, a directory, a symbolic link (even a dangling one, which
	// is never followed) — with an error matching fs.ErrExist. The name
	// is checked before anything is written and again, atomically, by
	// the rename (renameat2 RENAME_NOREPLACE, or link(2) where the file
	// system lacks it), so a file that appears meanwhile is not replaced
	// either.
	NoReplace Flag = 1 << iota
	// ExactPerm gives the file exactly the permission bits passed,
	// whatever the umask (without it the umask applies, as with
	// os.WriteFile).
	ExactPerm
)

// maxTempTries bounds the attempts at a free temporary name.
const maxTempTries = 100

// WriteFile writes data to path atomically (see Write): a file that
// appears under path only when complete and synced, with permissions
// perm (less the umask unless flags has ExactPerm). Without NoReplace it
// replaces what is at path, a symbolic link included: the link itself
// is replaced, its target is never written.
func WriteFile(path string, data []byte, perm fs.FileMode, flags Flag) error {
	return Write(path, perm, flags, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// Write creates a temporary file beside path (".NAME.tmp-RANDOM", mode
// perm less the umask, or exactly perm with ExactPerm), lets fill write
// the content to it (buffered), syncs and closes it, renames it to path
// and syncs the directory. If fill, or any step before the rename, fails
// (a full file system, say) or fill panics, the temporary file is
// removed and path is left as it was; the error names path and wraps the
// cause. Without NoReplace the rename replaces what is at path (a
// symbolic link is replaced, not followed); with NoReplace an existing
// path is refused, see NoReplace.
func Write(path string, perm fs.FileMode, flags Flag, fill func(w io.Writer) error) (err error) {
	if flags&NoReplace != 0 {
		if err := checkFree(path); err != nil {
			return err
		}
	}
	f, err := createTemp(path, perm)
	if err != nil {
		return err
	}
	tmp := f.Name()
	renamed := false
	defer func() {
		if !renamed {
			_ = f.Close() // may already be closed; the error of interest is err
			_ = os.Remove(tmp)
		}
	}()
	if flags&ExactPerm != 0 {
		if err := f.Chmod(perm); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
	}
	bw := bufio.NewWriterSize(f, 64<<10)
	if err := fill(bw); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if flags&NoReplace != 0 {
		err = renameNoReplace(tmp, path)
	} else if err = os.Rename(tmp, path); err != nil {
		err = fmt.Errorf("%s: %w", path, err)
	}
	if err != nil {
		return err
	}
	renamed = true
	return syncDir(filepath.Dir(path))
}

// checkFree returns an error matching fs.ErrExist if anything exists at
// path, without following a symbolic link.
func checkFree(path string) error {
	_, err := os.Lstat(path)
	switch {
	case err == nil:
		return &fs.PathError{Op: "create", Path: path, Err: syscall.EEXIST}
	case errors.Is(err, fs.ErrNotExist):
		return nil
	default:
		return err
	}
}

// createTemp creates a new file for path's content in path's directory,
// with a name no other file has (O_EXCL, never following a link).
func createTemp(path string, perm fs.FileMode) (*os.File, error) {
	dir, base := filepath.Split(path)
	if len(base) > 200 { // leave room for the suffix within NAME_MAX
		base = base[:200]
	}
	var rnd [6]byte
	for range maxTempTries {
		if _, err := rand.Read(rnd[:]); err != nil {
			return nil, fmt.Errorf("%s: temporary name: %w", path, err)
		}
		tmp := filepath.Join(dir, "."+base+".tmp-"+hex.EncodeToString(rnd[:]))
		f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, perm.Perm())
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		return f, nil
	}
	return nil, fmt.Errorf("%s: no free temporary name in %d tries", path, maxTempTries)
}

// renameNoReplace renames tmp to path unless something exists at path,
// which it reports as checkFree does.
func renameNoReplace(tmp, path string) error {
	err := unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, path, unix.RENAME_NOREPLACE)
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EOPNOTSUPP) {
		// The file system (or kernel) has no RENAME_NOREPLACE.
		return linkNoReplace(tmp, path)
	}
	return noReplaceErr(path, "rename", tmp, err)
}

// linkNoReplace gives tmp the name path with link(2), which fails if
// path exists, then removes the name tmp (best effort: the content is
// complete under path by then, and a leftover name of it is harmless).
func linkNoReplace(tmp, path string) error {
	if err := os.Link(tmp, path); err != nil {
		return noReplaceErr(path, "link", tmp, err)
	}
	_ = os.Remove(tmp)
	return nil
}

// noReplaceErr returns nil for a nil err, checkFree's error for EEXIST
// and otherwise err (of op from tmp to path), naming path.
func noReplaceErr(path, op, tmp string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, unix.EEXIST):
		return &fs.PathError{Op: "create", Path: path, Err: syscall.EEXIST}
	default:
		return fmt.Errorf("%s: %w", path, &os.LinkError{Op: op, Old: tmp, New: path, Err: err})
	}
}

// syncDir syncs directory dir, so that a rename in it is durable. File
// systems that cannot sync a directory (EINVAL) are let be.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("%s: written, but the directory cannot be synced: %w", dir, err)
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.EOPNOTSUPP) {
		return fmt.Errorf("%s: written, but the directory cannot be synced: %w", dir, err)
	}
	return nil
}
