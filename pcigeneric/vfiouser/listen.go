package vfiouser

import (
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/gomhi/gomhi/pcigeneric/vfiouser/protocol"
	"golang.org/x/sys/unix"
)

// Who may connect: ListenAndServe creates its socket with socketMode
// (owner only) whatever the process's umask, so the kernel lets only the
// owner (and root) connect; and it checks every peer's credentials
// (SO_PEERCRED) as well, refusing with an EPERM reply and a Warn log any
// peer that is neither root nor the socket's owner — for a socket whose
// mode was widened after the fact, or a directory that exposes it.

// socketMode is the mode of the socket ListenAndServe creates.
const socketMode fs.FileMode = 0o600

// listenSocket creates the listening socket at path with socketMode. An
// existing socket nobody listens on (left by a server that died) is
// replaced; a live one, or anything that is not a socket, is refused.
//
// The socket is bound under a temporary name in the same directory,
// given its mode, made to listen, and only then renamed to path (without
// replacing anything that appeared there meanwhile), so the node at path
// is never seen half made: wider than socketMode, or not yet listening.
// The mode is set on the socket before bind (on Linux the node is created
// with the socket inode's mode less the umask, so never wider than
// socketMode) and made exact after it, without following a link put in
// its place. When the temporary name would not fit a socket address, the
// socket is bound at path directly. It returns the listener and the
// node's inode, for removeSocket.
func listenSocket(path string) (*net.UnixListener, uint64, error) {
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&fs.ModeSocket == 0 {
			return nil, 0, fmt.Errorf("vfiouser: listen %s: %w: a %s is there; refusing to replace it", path, protocol.ErrNotSocket, protocol.FileKind(fi.Mode()))
		}
		c, err := net.DialTimeout("unix", path, time.Second)
		switch {
		case err == nil:
			_ = c.Close()
			return nil, 0, fmt.Errorf("vfiouser: listen %s: another server listens there", path)
		case errors.Is(err, unix.ECONNREFUSED):
			_ = os.Remove(path) // a stale socket from an earlier run
		default:
			return nil, 0, fmt.Errorf("vfiouser: listen %s: a socket is there that cannot be checked (%w); refusing to replace it", path, err)
		}
	}
	bindPath := filepath.Join(filepath.Dir(path), fmt.Sprintf(".vu%d-%d", os.Getpid(), rand.Uint32()))
	if len(bindPath) >= len(unix.RawSockaddrUnix{}.Path) {
		bindPath = path
	}
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, 0, fmt.Errorf("vfiouser: listen: %w", err)
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close() // FileListener dups it
	if err := unix.Fchmod(fd, uint32(socketMode)); err != nil {
		return nil, 0, fmt.Errorf("vfiouser: listen %s: fchmod: %w", path, err)
	}
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: bindPath}); err != nil {
		return nil, 0, fmt.Errorf("vfiouser: listen %s: %w", path, err)
	}
	bound := bindPath
	defer func() {
		if bound != "" {
			_ = os.Remove(bound)
		}
	}()
	ino, err := setSocketMode(bindPath)
	if err == nil {
		err = unix.Listen(fd, 8)
	}
	if err == nil && bindPath != path {
		err = renameNoReplace(bindPath, path)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("vfiouser: listen %s: %w", path, err)
	}
	bound = path
	ln, err := net.FileListener(f)
	if err != nil {
		return nil, 0, fmt.Errorf("vfiouser: listen %s: %w", path, err)
	}
	bound = ""
	return ln.(*net.UnixListener), ino, nil
}

// renameNoReplace renames from to to, failing if to exists.
func renameNoReplace(from, to string) error {
	err := unix.Renameat2(unix.AT_FDCWD, from, unix.AT_FDCWD, to, unix.RENAME_NOREPLACE)
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) {
		// The file system cannot do it: check, then rename.
		if _, lerr := os.Lstat(to); lerr == nil {
			return fmt.Errorf("%s appeared meanwhile: %w", to, unix.EEXIST)
		}
		return os.Rename(from, to)
	}
	if errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("%s appeared meanwhile; refusing to replace it: %w", to, err)
	}
	return err
}

// setSocketMode makes the socket node at path exactly socketMode. It
// opens the node with O_PATH|O_NOFOLLOW, checks it is a socket owned by
// this process's user, and chmods it through /proc/self/fd, so that a
// node swapped in meanwhile is never touched.
func setSocketMode(path string) (uint64, error) {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return 0, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK || st.Uid != uint32(os.Geteuid()) {
		return 0, fmt.Errorf("%w: the node at the path changed after bind", protocol.ErrNotSocket)
	}
	if st.Mode&0o7777 != uint32(socketMode) {
		if err := unix.Chmod("/proc/self/fd/"+strconv.Itoa(fd), uint32(socketMode)); err != nil {
			return 0, fmt.Errorf("chmod %#o: %w", socketMode, err)
		}
	}
	return st.Ino, nil
}

// removeSocket removes the node at path if it is still the one with inode
// ino (a later server may have replaced it).
func removeSocket(path string, ino uint64) {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err == nil && st.Ino == ino {
		_ = os.Remove(path)
	}
}

// peerCred returns the credentials of the process at the other end of
// conn, as the kernel recorded them at connect.
func peerCred(conn *net.UnixConn) (*unix.Ucred, error) {
	rc, err := conn.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *unix.Ucred
	var gerr error
	if err := rc.Control(func(fd uintptr) {
		cred, gerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return nil, err
	}
	return cred, gerr
}

// checkPeer lets root and the socket owner's uid (this process's
// effective uid) through.
func checkPeer(conn *net.UnixConn) (*unix.Ucred, error) {
	cred, err := peerCred(conn)
	if err != nil {
		return nil, fmt.Errorf("%w: SO_PEERCRED: %w", protocol.ErrPeerRefused, err)
	}
	if owner := uint32(os.Geteuid()); cred.Uid != 0 && cred.Uid != owner {
		return cred, fmt.Errorf("%w: peer pid %d uid %d is neither root nor the socket's owner (uid %d)", protocol.ErrPeerRefused, cred.Pid, cred.Uid, owner)
	}
	return cred, nil
}
