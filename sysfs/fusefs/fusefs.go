// Package fusefs serves a sysfs.Tree as a FUSE file system, laid out like
// /sys/bus/mhi/devices: one directory per sysfs.Dir, one file per
// sysfs.Attr.
//
//	<mount>/devices/mhi0/mru            0644  "32768\n"
//	<mount>/devices/mhi0/state          0444  "M0\n"
//	<mount>/devices/mhi0/soc_reset      0200  write "1"
//	<mount>/devices/mhi0/channels/101_IP_HW0/…
//
// Nothing is cached: directories are listed and looked up in the tree on
// every request (entry and attribute timeouts are zero) and files are
// opened with FOPEN_DIRECT_IO, so reads return the live value and devices
// added or removed while mounted appear and vanish at once.
//
// Files report size 4096 like sysfs; a read returns the value followed by
// a newline. A write(2) hands its whole buffer to sysfs.Attr.Write (the
// trailing newline of echo is ignored) and fails with the errno Errno
// maps the tree's error to. Truncation to 0, which the shell's O_TRUNC
// sends, is accepted and does nothing.
//
// Mounting calls mount(2) directly (go-fuse DirectMountStrict), so it
// needs root (or CAP_SYS_ADMIN and access to /dev/fuse) and never runs
// fusermount.
package fusefs

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/gomhi/gomhi/sysfs"
)

// ErrNeedRoot is wrapped by Mount's error when mount(2) or opening
// /dev/fuse is refused because the process is not root.
var ErrNeedRoot = errors.New("fusefs: FUSE mounting needs root here")

// Default mount names: /proc/mounts shows "<FsName> <dir> fuse.<Name> …".
const (
	DefaultFsName = "gomhi"
	DefaultName   = "mhi"
)

// lazyGrace is how long Close waits, after a lazy unmount, for open files
// to be closed before it aborts the connection.
const lazyGrace = 100 * time.Millisecond

// waitLimit bounds each wait of Close for the serving goroutines.
const waitLimit = 2 * time.Second

// Options configure Mount. The zero value is usable.
type Options struct {
	// FsName is the mount source shown in /proc/mounts and df
	// (DefaultFsName if empty).
	FsName string
	// Name is the subtype: the file system type is "fuse.<Name>"
	// (DefaultName if empty).
	Name string
	// AllowOther lets users other than the mounting one (root) use the
	// mount (the allow_other mount option).
	AllowOther bool
	// Logger receives rejected writes (Info), unmount fallbacks (Info,
	// Warn) and go-fuse's own messages. Nil discards them.
	Logger *slog.Logger
	// Debug makes go-fuse log every FUSE request and reply to Logger at
	// debug level.
	Debug bool
}

// Server is a mounted tree. Close unmounts it.
type Server struct {
	dir   string
	tree  *sysfs.Tree
	log   *slog.Logger
	inos  *inodes
	start time.Time
	fuse  *fuse.Server
	conn  uint64 // FUSE connection id (the mount's st_dev), 0 if unknown
	done  chan struct{}

	closeOnce sync.Once
	closeErr  error
}

// Mount mounts t on dir, which must be an existing directory, and serves
// it until Close. If the mount is refused because the process is not
// root, the error wraps ErrNeedRoot. If dir is a stale mount left by a
// process that died, call CleanupStale first.
func Mount(dir string, t *sysfs.Tree, opts Options) (*Server, error) {
	if t == nil || t.Root == nil {
		return nil, fmt.Errorf("fusefs: mount %s: nil tree", dir)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("fusefs: mount %s: %w", dir, err)
	}
	if opts.FsName == "" {
		opts.FsName = DefaultFsName
	}
	if opts.Name == "" {
		opts.Name = DefaultName
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{dir: abs, tree: t, log: logger, inos: newInodes(), start: time.Now(), done: make(chan struct{})}

	fuseLevel := slog.LevelWarn
	if opts.Debug {
		fuseLevel = slog.LevelDebug
	}
	fsOpts := &fs.Options{
		// No EntryTimeout/AttrTimeout/NegativeTimeout: zero, so the
		// kernel asks again on every access and the tree stays live.
		RootStableAttr: &fs.StableAttr{Ino: rootIno},
		MountOptions: fuse.MountOptions{
			DirectMountStrict: true,
			FsName:            opts.FsName,
			Name:              opts.Name,
			AllowOther:        opts.AllowOther,
			DisableXAttrs:     true,
			// The kernel enforces the mode bits for non-root users
			// (relevant with AllowOther); Open enforces them for root.
			Options: []string{"default_permissions"},
			Debug:   opts.Debug,
			Logger:  slog.NewLogLogger(logger.With("component", "go-fuse").Handler(), fuseLevel),
		},
	}
	root := &dirNode{srv: s, dir: t.Root}
	srv, err := fuse.NewServer(fs.NewNodeFS(root, fsOpts), abs, &fsOpts.MountOptions)
	if err != nil {
		return nil, mountError(abs, err)
	}
	s.fuse = srv
	go func() {
		srv.Serve()
		close(s.done)
	}()
	if err := srv.WaitMount(); err != nil {
		_ = s.Close()
		return nil, fmt.Errorf("fusefs: mount %s: waiting for the kernel: %w", abs, err)
	}
	var st unix.Stat_t
	if err := unix.Stat(abs, &st); err == nil {
		s.conn = uint64(unix.Major(st.Dev))<<20 | uint64(unix.Minor(st.Dev))
	}
	logger.Debug("fusefs: mounted", "dir", abs, "fsname", opts.FsName, "type", "fuse."+opts.Name, "conn", s.conn)
	return s, nil
}

func mountError(dir string, err error) error {
	switch {
	case os.Geteuid() != 0 && (errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EACCES)):
		return fmt.Errorf("%w: mount %s: %w (go-fuse calls mount(2) directly, without fusermount, and /dev/fuse is root-only)", ErrNeedRoot, dir, err)
	case errors.Is(err, syscall.ENOTCONN):
		return fmt.Errorf("fusefs: mount %s: stale FUSE mount, clean it up with CleanupStale or umount -l: %w", dir, err)
	default:
		return fmt.Errorf("fusefs: mount %s: %w", dir, err)
	}
}

// Dir returns the absolute mount point.
func (s *Server) Dir() string { return s.dir }

// Tree returns the tree being served.
func (s *Server) Tree() *sysfs.Tree { return s.tree }

// Done is closed when the server has stopped serving requests: after
// Close, or once the last open file is closed after a lazy unmount that
// could not abort the connection.
func (s *Server) Done() <-chan struct{} { return s.done }

// Close unmounts the file system and waits for the server to stop. If a
// process holds a file or directory of the mount open (EBUSY), the mount
// is detached lazily (MNT_DETACH): it disappears from the mount table at
// once; after a short grace period the FUSE connection is aborted through
// /sys/fs/fuse/connections/<id>/abort when fusectl is mounted there, so
// the holder's further calls fail with ENOTCONN. Without fusectl Close
// returns without waiting and the server keeps answering the open files
// until they are closed (see Done). Close is idempotent and safe for
// concurrent use.
func (s *Server) Close() error {
	s.closeOnce.Do(func() { s.closeErr = s.close() })
	return s.closeErr
}

func (s *Server) close() error {
	lazy := false
	err := unix.Unmount(s.dir, 0)
	if errors.Is(err, unix.EBUSY) {
		s.log.Info("fusefs: mount busy, detaching lazily", "dir", s.dir)
		lazy = true
		err = unix.Unmount(s.dir, unix.MNT_DETACH)
	}
	if errors.Is(err, unix.EINVAL) && s.stopped(waitLimit) {
		err = nil // unmounted by someone else (umount, CleanupStale)
	}
	if err != nil {
		return fmt.Errorf("fusefs: unmount %s: %w", s.dir, err)
	}
	if lazy {
		if s.stopped(lazyGrace) {
			return nil
		}
		if err := s.abort(); err != nil {
			s.log.Info("fusefs: detached; serving open files until they are closed", "dir", s.dir, "reason", err)
			return nil
		}
	}
	if !s.stopped(waitLimit) {
		if err := s.abort(); err != nil || !s.stopped(waitLimit) {
			s.log.Warn("fusefs: unmounted, but the FUSE connection is still open", "dir", s.dir, "conn", s.conn)
		}
	}
	return nil
}

// stopped waits up to d for the serve loop to end.
func (s *Server) stopped(d time.Duration) bool {
	if d <= 0 {
		select {
		case <-s.done:
			return true
		default:
			return false
		}
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-s.done:
		return true
	case <-timer.C:
		return false
	}
}

// fusectlDir is where the fusectl file system is mounted.
const fusectlDir = "/sys/fs/fuse/connections"

// abort aborts the FUSE connection through fusectl.
func (s *Server) abort() error {
	if s.conn == 0 {
		return errors.New("connection id unknown")
	}
	p := filepath.Join(fusectlDir, strconv.FormatUint(s.conn, 10), "abort")
	if err := os.WriteFile(p, []byte("1"), 0); err != nil {
		return fmt.Errorf("abort connection %d: %w", s.conn, err)
	}
	s.log.Info("fusefs: aborted FUSE connection", "dir", s.dir, "conn", s.conn)
	return nil
}

// times stamps an attribute with the mount time, as sysfs shows the time
// the kernel created the node.
func (s *Server) times(a *fuse.Attr) {
	sec, nsec := uint64(s.start.Unix()), uint32(s.start.Nanosecond())
	a.Atime, a.Mtime, a.Ctime = sec, sec, sec
	a.Atimensec, a.Mtimensec, a.Ctimensec = nsec, nsec, nsec
}

// CleanupStale lazily unmounts dir if it is a stale FUSE mount, one whose
// server died without unmounting (stat fails with "transport endpoint is
// not connected"). Anything else — a plain directory, a live mount, a
// missing path — is left alone and gives nil.
func CleanupStale(dir string) error {
	var st unix.Stat_t
	err := unix.Stat(dir, &st)
	if !errors.Is(err, unix.ENOTCONN) && !errors.Is(err, unix.ECONNABORTED) {
		return nil
	}
	if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
		return fmt.Errorf("fusefs: unmount stale mount %s: %w", dir, err)
	}
	return nil
}
