package genl

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gomhi/gomhi/internal/atomicfile"
)

// The run file: a server that owns the "mhi" family of its network
// namespace (ServerOptions.RunFile) writes a small JSON file saying which
// process serves it and on which port, and clients (ClientOptions with
// Port 0) read it first. It is how a server pushed off DefaultPort by a
// squatter is still found, and it gives the client the pid whose
// credentials the replies must carry.
//
// Trust: a run file counts only when it and every directory above it are
// owned by root or by the reading user and writable by nobody else (a
// sticky directory such as /tmp is allowed: others cannot replace what is
// in it). Root's run files live in RunDir (/run/gomhi, 0755 root); a user's
// own server, which cannot write there, uses $XDG_RUNTIME_DIR/gomhi, which
// only that user's clients read. One exception: root may hand RunDir itself
// to a service user (a systemd unit with User=gomhi and
// RuntimeDirectory=gomhi; docs/DEPLOY.md). RunDir is then owned by that
// user, not writable by group or others, in directories that are root's and
// writable by nobody else — only root can have made it so — and its owner
// is trusted for run files in it like root: that user's server advertises
// itself there and root's clients find it. A run file whose process is gone, or was
// replaced by another process with the same pid (the start time differs),
// is stale: clients ignore it and the next server replaces it.

// RunDir is where a server run by root advertises itself.
const RunDir = "/run/gomhi"

// maxRunFile bounds the size of a run file read.
const maxRunFile = 4 << 10

// ErrUnsafeRunFile: a run file, or a directory above it, is owned by
// another user or writable by others, so it cannot be trusted (clients
// ignore it; servers refuse to write there).
var ErrUnsafeRunFile = errors.New("genl: run file not trustworthy")

// RunFile is the content of a run file.
type RunFile struct {
	// Family is the family served ("mhi").
	Family string `json:"family"`
	// PID is the serving process.
	PID int `json:"pid"`
	// UID is the serving process's real uid: the uid its replies carry.
	UID uint32 `json:"uid"`
	// Port is the NETLINK_USERSOCK port the family is served on.
	Port uint32 `json:"port"`
	// StartTime is the process's start time in clock ticks after boot
	// (/proc/<pid>/stat field 22), which tells it apart from a later
	// process that reuses the pid.
	StartTime uint64 `json:"start_time"`
	// NetNS is the inode of the network namespace the port is in.
	NetNS uint64 `json:"netns"`
	// Started is when the server started serving.
	Started time.Time `json:"started"`
}

// Live reports whether the process the run file names still runs: same
// pid, same start time.
func (r RunFile) Live() bool {
	if r.PID <= 0 {
		return false
	}
	st, err := procStartTime(r.PID)
	return err == nil && st == r.StartTime
}

// runFileName is the run file's name for the network namespace ns:
// netlink ports are per namespace, so each has its own.
func runFileName(ns uint64) string {
	return "genl-" + strconv.FormatUint(ns, 10) + ".json"
}

// DeviceRunFile is the run file, beside general (a run file path such as
// DefaultRunFile's), in which a server advertises the device dev it serves:
// genl-<netns>@<dev>.json for genl-<netns>.json. Several servers share a
// network namespace this way — one `mhictl up` per modem —, each found by
// the name of its device. It is "" when general is "" or dev cannot be part
// of a file name.
func DeviceRunFile(general, dev string) string {
	if general == "" || dev == "" || dev == "." || dev == ".." || strings.ContainsAny(dev, "/\x00") {
		return ""
	}
	dir, base := filepath.Split(general)
	return filepath.Join(dir, strings.TrimSuffix(base, ".json")+"@"+dev+".json")
}

// DefaultRunFile is where a server run by this user advertises itself:
// RunDir/genl-<netns>.json for root and for the service user root handed
// RunDir to, $XDG_RUNTIME_DIR/gomhi/genl-<netns>.json for other users who
// have one, else "" (no run file).
func DefaultRunFile() string {
	ns, err := netnsID()
	if err != nil {
		return ""
	}
	if os.Geteuid() == 0 {
		return filepath.Join(RunDir, runFileName(ns))
	}
	if uid, ok := delegatedOwner(RunDir); ok && uid == uint32(os.Geteuid()) {
		return filepath.Join(RunDir, runFileName(ns))
	}
	if x := os.Getenv("XDG_RUNTIME_DIR"); filepath.IsAbs(x) {
		return filepath.Join(x, "gomhi", runFileName(ns))
	}
	return ""
}

// runFileCandidates are the run files a client reads, in order: root's,
// then (for other users) the user's own.
func runFileCandidates() []string {
	ns, err := netnsID()
	if err != nil {
		return nil
	}
	out := []string{filepath.Join(RunDir, runFileName(ns))}
	if os.Geteuid() != 0 {
		if x := os.Getenv("XDG_RUNTIME_DIR"); filepath.IsAbs(x) {
			out = append(out, filepath.Join(x, "gomhi", runFileName(ns)))
		}
	}
	return out
}

// trustedOwners are the owners whose files this process trusts: root and
// itself.
func trustedOwners() []uint32 {
	own := []uint32{0}
	for _, id := range []int{os.Geteuid(), os.Getuid()} {
		if !slices.Contains(own, uint32(id)) {
			own = append(own, uint32(id))
		}
	}
	return own
}

// delegableRunDirs are the directories root may hand to a service user
// (RunDir; tests add their own).
var delegableRunDirs = []string{RunDir}

// delegatedOwner returns the owner of dir when root handed dir to that
// user: dir is one of delegableRunDirs, a directory (not a link) owned by a
// user other than root, not writable by group or others, and every
// directory above it is root's and writable by nobody else (no sticky
// exception: under /tmp anyone can make such a directory).
func delegatedOwner(dir string) (uint32, bool) {
	dir = filepath.Clean(dir)
	if !slices.Contains(delegableRunDirs, dir) {
		return 0, false
	}
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR || st.Uid == 0 || st.Mode&0o022 != 0 {
		return 0, false
	}
	for d := filepath.Dir(dir); ; d = filepath.Dir(d) {
		var pst unix.Stat_t
		if err := unix.Lstat(d, &pst); err != nil || pst.Mode&unix.S_IFMT != unix.S_IFDIR || pst.Uid != 0 || pst.Mode&0o022 != 0 {
			return 0, false
		}
		if d == "/" {
			return st.Uid, true
		}
	}
}

// runFileOwners are the owners whose run files in dir this process
// trusts: root, itself, and the user root handed dir to, if any.
func runFileOwners(dir string) []uint32 {
	owners := trustedOwners()
	if uid, ok := delegatedOwner(dir); ok && !slices.Contains(owners, uid) {
		owners = append(owners, uid)
	}
	return owners
}

// checkDirChain checks dir and every directory above it: owned by one of
// owners and not writable by group or others, unless sticky.
func checkDirChain(dir string, owners []uint32) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return err
	}
	for d := real; ; d = filepath.Dir(d) {
		var st unix.Stat_t
		if err := unix.Lstat(d, &st); err != nil {
			return fmt.Errorf("%s: %w", d, err)
		}
		mode := st.Mode
		switch {
		case mode&unix.S_IFMT != unix.S_IFDIR:
			return fmt.Errorf("%w: %s is not a directory", ErrUnsafeRunFile, d)
		case !slices.Contains(owners, st.Uid):
			return fmt.Errorf("%w: directory %s is owned by uid %d", ErrUnsafeRunFile, d, st.Uid)
		case mode&0o022 != 0 && mode&unix.S_ISVTX == 0:
			return fmt.Errorf("%w: directory %s is writable by others (mode %#o)", ErrUnsafeRunFile, d, mode&0o7777)
		}
		if d == "/" {
			return nil
		}
	}
}

// ReadRunFile reads and checks the run file at path: a regular file (not
// followed through a symbolic link), owned by root or by this process's
// user (or by the service user root handed RunDir to), not writable by
// group or others, in directories that pass the same test; its content names a family, a pid and a port. It does not
// check that the process still runs (RunFile.Live). Untrustworthy files
// give an error wrapping ErrUnsafeRunFile.
func ReadRunFile(path string) (RunFile, error) {
	owners := runFileOwners(filepath.Dir(path))
	if err := checkDirChain(filepath.Dir(path), owners); err != nil {
		return RunFile{}, fmt.Errorf("genl: run file %s: %w", path, err)
	}
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, unix.ELOOP) {
			return RunFile{}, fmt.Errorf("genl: run file %s: %w: a symbolic link", path, ErrUnsafeRunFile)
		}
		return RunFile{}, fmt.Errorf("genl: run file: %w", err)
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return RunFile{}, fmt.Errorf("genl: run file %s: %w", path, err)
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return RunFile{}, fmt.Errorf("genl: run file %s: %w: not a regular file", path, ErrUnsafeRunFile)
	case !slices.Contains(owners, st.Uid):
		return RunFile{}, fmt.Errorf("genl: run file %s: %w: owned by uid %d", path, ErrUnsafeRunFile, st.Uid)
	case st.Mode&0o022 != 0:
		return RunFile{}, fmt.Errorf("genl: run file %s: %w: writable by others (mode %#o)", path, ErrUnsafeRunFile, st.Mode&0o7777)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxRunFile+1))
	if err != nil {
		return RunFile{}, fmt.Errorf("genl: run file %s: %w", path, err)
	}
	r, err := decodeRunFile(b)
	if err != nil {
		return RunFile{}, fmt.Errorf("genl: run file %s: %w", path, err)
	}
	return r, nil
}

// decodeRunFile parses and validates a run file's content.
func decodeRunFile(b []byte) (RunFile, error) {
	if len(b) > maxRunFile {
		return RunFile{}, fmt.Errorf("%w: larger than %d bytes", ErrProtocol, maxRunFile)
	}
	var r RunFile
	d := json.NewDecoder(bytes.NewReader(b))
	if err := d.Decode(&r); err != nil {
		return RunFile{}, fmt.Errorf("%w: %w", ErrProtocol, err)
	}
	switch {
	case r.Family != FamilyName:
		return RunFile{}, fmt.Errorf("%w: family %q, want %q", ErrProtocol, r.Family, FamilyName)
	case r.PID <= 0:
		return RunFile{}, fmt.Errorf("%w: pid %d", ErrProtocol, r.PID)
	case r.Port == 0:
		return RunFile{}, fmt.Errorf("%w: port 0", ErrProtocol)
	}
	return r, nil
}

// newRunFile describes this process serving on port.
func newRunFile(port uint32) (RunFile, error) {
	st, err := procStartTime(os.Getpid())
	if err != nil {
		return RunFile{}, fmt.Errorf("genl: own start time: %w", err)
	}
	ns, err := netnsID()
	if err != nil {
		return RunFile{}, err
	}
	return RunFile{Family: FamilyName, PID: os.Getpid(), UID: uint32(os.Getuid()), Port: port,
		StartTime: st, NetNS: ns, Started: time.Now().UTC().Truncate(time.Second)}, nil
}

// writeRunFile writes r to path atomically (a temporary file in the same
// directory, renamed over it), mode 0644 whatever the umask. The directory
// is created (0755) if missing; it and the directories above it must pass
// the run-file trust test.
func writeRunFile(path string, r RunFile) error {
	dir := filepath.Dir(path)
	if _, err := os.Lstat(dir); errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("genl: run directory: %w", err)
		}
		if err := os.Chmod(dir, 0o755); err != nil {
			return fmt.Errorf("genl: run directory: %w", err)
		}
	}
	if err := checkDirChain(dir, runFileOwners(dir)); err != nil {
		return fmt.Errorf("genl: run file %s: %w", path, err)
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := atomicfile.WriteFile(path, append(b, '\n'), 0o644, atomicfile.ExactPerm); err != nil {
		return fmt.Errorf("genl: run file: %w", err)
	}
	return nil
}

// removeRunFile removes the run file at path if it still names r's
// process and port (a later server may have replaced it).
func removeRunFile(path string, r RunFile) error {
	cur, err := ReadRunFile(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	if cur.PID != r.PID || cur.Port != r.Port || cur.StartTime != r.StartTime {
		return nil
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("genl: remove run file: %w", err)
	}
	return nil
}
