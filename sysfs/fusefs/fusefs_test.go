package fusefs_test

import (
	"bufio"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gomhi/gomhi/mhi"
	"github.com/gomhi/gomhi/mhi/testenv"
	"github.com/gomhi/gomhi/mhi/testenv/logbuf"
	"github.com/gomhi/gomhi/mhinet"
	"github.com/gomhi/gomhi/pcigeneric/mock"
	"github.com/gomhi/gomhi/sysfs"
	"github.com/gomhi/gomhi/sysfs/fusefs"
	"github.com/gomhi/gomhi/sysfs/sysfstest"
)

// needFUSE skips tests that mount: DirectMountStrict calls mount(2) and
// opens /dev/fuse (0600 root), so they need root.
func needFUSE(t *testing.T) {
	t.Helper()
	testenv.NeedRoot(t, "mounting FUSE with mount(2), no fusermount")
	testenv.NeedPath(t, "/dev/fuse")
}

// fixture is a tree bound to a powered-up mock modem and its network
// device.
type fixture struct {
	tree *sysfs.Tree
	ctrl *mhi.Controller
	net  *mhinet.Device
	mock *mock.Mock
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	tr, d := sysfstest.NewTree(t)
	return &fixture{tree: tr, ctrl: d.Mock.Controller, net: d.Net, mock: d.Mock}
}

// mount mounts f's tree on a fresh directory and unmounts it at cleanup.
func (f *fixture) mount(t *testing.T) (*fusefs.Server, string) {
	t.Helper()
	dir := t.TempDir()
	s, err := fusefs.Mount(dir, f.tree, fusefs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s, dir
}

// mounted reports whether dir is a mount point in /proc/self/mounts.
func mounted(t *testing.T, dir string) bool {
	t.Helper()
	f, err := os.Open("/proc/self/mounts")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) > 1 && fields[1] == dir {
			return true
		}
	}
	return false
}

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
	return out
}

func readAttr(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestMountServesTree(t *testing.T) {
	needFUSE(t)
	f := newFixture(t)
	_, mnt := f.mount(t)
	dev := filepath.Join(mnt, "devices", "mhi0")
	mru := filepath.Join(dev, "mru")

	t.Run("read", func(t *testing.T) {
		if got := readAttr(t, mru); got != "32768\n" {
			t.Errorf("mru = %q, want %q", got, "32768\n")
		}
		if got := readAttr(t, filepath.Join(dev, "state")); got != "M0\n" {
			t.Errorf("state = %q", got)
		}
		if got := readAttr(t, filepath.Join(dev, "channels", "101_IP_HW0", "ctx_state")); got != "RUNNING\n" {
			t.Errorf("ctx_state = %q", got)
		}
	})

	t.Run("list", func(t *testing.T) {
		if got := names(t, mnt); !slices.Equal(got, []string{"devices"}) {
			t.Errorf("root lists %q", got)
		}
		got := names(t, dev)
		for _, want := range []string{"channels", "stats", "mru", "mtu", "state", "ee", "soc_reset", "timeout_ms"} {
			if !slices.Contains(got, want) {
				t.Errorf("devices/mhi0 lists %q, missing %q", got, want)
			}
		}
		chans := names(t, filepath.Join(dev, "channels"))
		for _, want := range []string{"100_IP_HW0", "101_IP_HW0", "14_QMI"} {
			if !slices.Contains(chans, want) {
				t.Errorf("channels lists %q, missing %q", chans, want)
			}
		}
		if got := names(t, filepath.Join(dev, "channels", "101_IP_HW0")); !slices.Contains(got, "ctx_rp") {
			t.Errorf("101_IP_HW0 lists %q", got)
		}
	})

	t.Run("stat", func(t *testing.T) {
		for name, want := range map[string]fs.FileMode{
			"mru": 0o644, "state": 0o444, "soc_reset": 0o200, "channels": fs.ModeDir | 0o755,
		} {
			fi, err := os.Stat(filepath.Join(dev, name))
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode() != want {
				t.Errorf("%s: mode %v, want %v", name, fi.Mode(), want)
			}
			if !fi.IsDir() && fi.Size() != 4096 {
				t.Errorf("%s: size %d, want 4096", name, fi.Size())
			}
			if fi.ModTime().Before(time.Now().Add(-time.Hour)) {
				t.Errorf("%s: mtime %v", name, fi.ModTime())
			}
		}
		var st unix.Stat_t
		if err := unix.Stat(filepath.Join(dev, "channels"), &st); err != nil || st.Nlink < 3 {
			t.Errorf("channels: nlink %d, %v", st.Nlink, err)
		}
		var a, b unix.Stat_t
		_ = unix.Stat(mru, &a)
		_ = unix.Stat(mru, &b)
		if a.Ino == 0 || a.Ino != b.Ino {
			t.Errorf("mru inode numbers %d, %d: not stable", a.Ino, b.Ino)
		}
	})

	t.Run("write", func(t *testing.T) {
		if err := os.WriteFile(mru, []byte("16384\n"), 0o644); err != nil {
			t.Fatalf("WriteFile(mru, 16384): %v", err)
		}
		if got, _ := f.tree.Get("devices/mhi0/mru"); got != "16384" || f.net.MRU() != 16384 {
			t.Errorf("after writing 16384: tree %q, mhinet %d", got, f.net.MRU())
		}
		if got := readAttr(t, mru); got != "16384\n" {
			t.Errorf("mru reads %q after the write", got)
		}
	})

	t.Run("write errors", func(t *testing.T) {
		for _, tc := range []struct {
			name, value string
			want        error
		}{
			{"mru", "bogus\n", syscall.EINVAL},
			{"mru", "65536", syscall.EINVAL},
			{"soc_reset", "2", syscall.EINVAL},
			{"state", "M3", syscall.EACCES},
			{"channels/101_IP_HW0/elements", "7", syscall.EACCES},
		} {
			err := os.WriteFile(filepath.Join(dev, tc.name), []byte(tc.value), 0o644)
			if !errors.Is(err, tc.want) {
				t.Errorf("write %q to %s: %v, want %v", tc.value, tc.name, err, tc.want)
			}
		}
		if _, err := os.ReadFile(filepath.Join(dev, "soc_reset")); !errors.Is(err, fs.ErrPermission) {
			t.Errorf("reading write-only soc_reset: %v, want permission denied", err)
		}
		if err := os.Truncate(filepath.Join(dev, "mru"), 10); !errors.Is(err, syscall.EPERM) {
			t.Errorf("truncate mru to 10: %v, want EPERM", err)
		}
		if err := os.Chmod(filepath.Join(dev, "mru"), 0o600); !errors.Is(err, syscall.EPERM) {
			t.Errorf("chmod mru: %v, want EPERM", err)
		}
		if err := os.Remove(mru); !errors.Is(err, syscall.EPERM) {
			t.Errorf("rm mru: %v, want EPERM", err)
		}
		if err := os.Mkdir(filepath.Join(dev, "x"), 0o755); !errors.Is(err, syscall.EPERM) {
			t.Errorf("mkdir: %v, want EPERM", err)
		}
		if err := os.WriteFile(filepath.Join(dev, "new"), nil, 0o644); !errors.Is(err, syscall.EPERM) {
			t.Errorf("creating a file: %v, want EPERM", err)
		}
		if f.net.MRU() != 16384 {
			t.Errorf("MRU %d after rejected writes, want 16384", f.net.MRU())
		}
	})

	t.Run("shell", func(t *testing.T) {
		sh := testenv.LookPath(t, "sh", "dash")
		bash := testenv.LookPath(t, "bash", "bash")
		if out, err := exec.Command(sh, "-c", "echo 8192 > "+mru).CombinedOutput(); err != nil {
			t.Fatalf("sh echo 8192 > mru: %v: %s", err, out)
		}
		if f.net.MRU() != 8192 {
			t.Errorf("MRU %d after sh echo 8192, want 8192", f.net.MRU())
		}
		if out, err := exec.Command(sh, "-c", "cat "+mru).Output(); err != nil || string(out) != "8192\n" {
			t.Errorf("cat mru: %q, %v", out, err)
		}
		for _, tc := range []struct{ file, value, msg string }{
			{"mru", "bogus", "Invalid argument"},
			{"mru", "7", "Invalid argument"},
			{"state", "M3", "Permission denied"},
		} {
			cmd := exec.Command(bash, "-c", "echo "+tc.value+" > "+filepath.Join(dev, tc.file))
			var stderr strings.Builder
			cmd.Stderr = &stderr
			err := cmd.Run()
			if err == nil || !strings.Contains(stderr.String(), tc.msg) {
				t.Errorf("bash echo %s > %s: %v, stderr %q; want failure with %q", tc.value, tc.file, err, stderr.String(), tc.msg)
			}
		}
		if f.net.MRU() != 8192 {
			t.Errorf("MRU %d after rejected shell writes, want 8192", f.net.MRU())
		}
	})

	t.Run("hotplug", func(t *testing.T) {
		devices := filepath.Join(mnt, "devices")
		if got := names(t, devices); !slices.Equal(got, []string{"mhi0"}) {
			t.Fatalf("devices lists %q", got)
		}
		if _, err := os.Stat(filepath.Join(devices, "mhi1")); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("mhi1 before adding: %v", err)
		}
		f.tree.AddDevice("mhi1", sysfs.Device{Controller: f.ctrl, Model: "second"})
		if got := names(t, devices); !slices.Equal(got, []string{"mhi0", "mhi1"}) {
			t.Errorf("after AddDevice, devices lists %q", got)
		}
		if got := readAttr(t, filepath.Join(devices, "mhi1", "model")); got != "second\n" {
			t.Errorf("mhi1/model = %q", got)
		}
		f.tree.RemoveDevice("mhi1")
		if got := names(t, devices); !slices.Equal(got, []string{"mhi0"}) {
			t.Errorf("after RemoveDevice, devices lists %q", got)
		}
		if _, err := os.Stat(filepath.Join(devices, "mhi1", "model")); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("mhi1/model after removal: %v", err)
		}
	})
}

func TestCloseUnmounts(t *testing.T) {
	needFUSE(t)
	f := newFixture(t)
	dir := t.TempDir()
	s, err := fusefs.Mount(dir, f.tree, fusefs.Options{FsName: "gomhi-test", Name: "mhitest"})
	if err != nil {
		t.Fatal(err)
	}
	if !mounted(t, dir) {
		_ = s.Close()
		t.Fatalf("%s not in /proc/self/mounts after Mount", dir)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if mounted(t, dir) {
		t.Errorf("%s still in /proc/self/mounts after Close", dir)
	}
	select {
	case <-s.Done():
	default:
		t.Errorf("Done not closed after Close")
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if ents, err := os.ReadDir(dir); err != nil || len(ents) != 0 {
		t.Errorf("mount point after Close: %d entries, %v", len(ents), err)
	}
}

func TestCloseWithOpenFile(t *testing.T) {
	needFUSE(t)
	f := newFixture(t)
	dir := t.TempDir()
	var logs logbuf.Buffer
	s, err := fusefs.Mount(dir, f.tree, fusefs.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	held, err := os.Open(filepath.Join(dir, "devices", "mhi0", "mtu"))
	if err != nil {
		_ = s.Close()
		t.Fatal(err)
	}
	start := time.Now()
	if err := s.Close(); err != nil {
		t.Fatalf("Close with an open file: %v", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("Close took %v", d)
	}
	if mounted(t, dir) {
		t.Errorf("%s still mounted after Close", dir)
	}
	if !strings.Contains(logs.String(), "detaching lazily") {
		t.Errorf("no lazy unmount logged:\n%s", logs.String())
	}
	// Depending on fusectl, the held file was aborted (ENOTCONN) or is
	// still served; either way closing it must let the server finish.
	buf := make([]byte, 64)
	if n, err := held.ReadAt(buf, 0); err == nil && string(buf[:n]) != "1500\n" {
		t.Errorf("held file reads %q", buf[:n])
	}
	_ = held.Close()
	select {
	case <-s.Done():
	case <-time.After(2 * time.Second):
		t.Errorf("server still running 2s after the last open file was closed")
	}
}

// TestCloseAbortsHeldFile mounts fusectl if needed, so Close can abort
// the connection a held file keeps alive.
func TestCloseAbortsHeldFile(t *testing.T) {
	needFUSE(t)
	const fusectl = "/sys/fs/fuse/connections"
	testenv.NeedPath(t, filepath.Join(fusectl, ".."))
	if !mounted(t, fusectl) {
		if err := unix.Mount("fusectl", fusectl, "fusectl", 0, ""); err != nil {
			testenv.Need(t, "the fusectl file system at "+fusectl, err)
		}
		t.Cleanup(func() { _ = unix.Unmount(fusectl, 0) })
	}
	f := newFixture(t)
	dir := t.TempDir()
	s, err := fusefs.Mount(dir, f.tree, fusefs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	held, err := os.Open(filepath.Join(dir, "devices", "mhi0", "mtu"))
	if err != nil {
		_ = s.Close()
		t.Fatal(err)
	}
	defer held.Close()
	if err := s.Close(); err != nil {
		t.Fatalf("Close with an open file: %v", err)
	}
	select {
	case <-s.Done():
	default:
		t.Errorf("server still running after Close aborted the connection")
	}
	if _, err := held.ReadAt(make([]byte, 64), 0); !errors.Is(err, syscall.ENOTCONN) {
		t.Errorf("reading the held file after the abort: %v, want ENOTCONN", err)
	}
}

func TestCleanupStale(t *testing.T) {
	if err := fusefs.CleanupStale(t.TempDir()); err != nil {
		t.Errorf("CleanupStale on a plain directory: %v", err)
	}
	if err := fusefs.CleanupStale(filepath.Join(t.TempDir(), "missing")); err != nil {
		t.Errorf("CleanupStale on a missing path: %v", err)
	}

	needFUSE(t)
	// A stale mount: mount /dev/fuse by hand, then close the device
	// without serving, as a crashed server would.
	dir := t.TempDir()
	fd, err := unix.Open("/dev/fuse", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	data := "fd=" + strconv.Itoa(fd) + ",rootmode=40000,user_id=0,group_id=0"
	if err := unix.Mount("stale-test", dir, "fuse.stale", unix.MS_NOSUID|unix.MS_NODEV, data); err != nil {
		unix.Close(fd)
		t.Fatalf("mount: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	unix.Close(fd)
	if _, err := os.Stat(dir); !errors.Is(err, syscall.ENOTCONN) {
		t.Fatalf("stat of the stale mount: %v, want ENOTCONN", err)
	}
	if _, err := fusefs.Mount(dir, sysfs.NewTree(), fusefs.Options{}); !errors.Is(err, syscall.ENOTCONN) {
		t.Errorf("Mount on a stale mount: %v, want ENOTCONN", err)
	}
	if err := fusefs.CleanupStale(dir); err != nil {
		t.Fatalf("CleanupStale: %v", err)
	}
	if mounted(t, dir) {
		t.Errorf("%s still mounted after CleanupStale", dir)
	}
	if _, err := os.Stat(dir); err != nil {
		t.Errorf("stat after CleanupStale: %v", err)
	}
	// A live mount is left alone.
	s, err := fusefs.Mount(dir, sysfs.NewTree(), fusefs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := fusefs.CleanupStale(dir); err != nil || !mounted(t, dir) {
		t.Errorf("CleanupStale on a live mount: %v, mounted %v", err, mounted(t, dir))
	}
}

// TestMountNeedsRoot drops the effective uid to nobody around Mount, so
// opening /dev/fuse is refused as it is for a normal user.
func TestMountNeedsRoot(t *testing.T) {
	needFUSE(t)
	base := t.TempDir()
	dir := filepath.Join(base, "mnt")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{filepath.Dir(base), base} {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Setresuid(-1, 65534, -1); err != nil {
		testenv.Need(t, "to change the effective uid to 65534", err)
	}
	s, err := fusefs.Mount(dir, sysfs.NewTree(), fusefs.Options{})
	if rerr := syscall.Setresuid(-1, 0, -1); rerr != nil {
		t.Fatalf("restoring euid 0: %v", rerr)
	}
	if err == nil {
		_ = s.Close()
		t.Fatal("Mount as uid 65534 succeeded")
	}
	if !errors.Is(err, fusefs.ErrNeedRoot) || !strings.Contains(err.Error(), "needs root") {
		t.Errorf("Mount as uid 65534: %v, want ErrNeedRoot", err)
	}
	if testing.Verbose() {
		t.Logf("as uid 65534: %v", err)
	}
}

func TestErrno(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want syscall.Errno
	}{
		{nil, 0},
		{sysfs.ErrInvalid, syscall.EINVAL},
		{errors.Join(sysfs.ErrInvalid, errors.New("x")), syscall.EINVAL},
		{sysfs.ErrReadOnly, syscall.EACCES},
		{sysfs.ErrWriteOnly, syscall.EACCES},
		{sysfs.ErrBusy, syscall.EBUSY},
		{sysfs.ErrNotFound, syscall.ENOENT},
		{&os.PathError{Op: "x", Path: "y", Err: syscall.EAGAIN}, syscall.EAGAIN},
		{errors.New("boom"), syscall.EIO},
	} {
		if got := fusefs.Errno(tc.err); got != tc.want {
			t.Errorf("Errno(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
