package genl_test

import (
	"github.com/gomhi/gomhi/mhi/testenv"

	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gomhi/gomhi/sysfs/genl"
)

// requireRoot skips (fails under CI=true) a test that needs root.
func requireRoot(t *testing.T, why string) {
	t.Helper()
	testenv.NeedRoot(t, why)
}

// liveRunFile is a run file naming this process, as a server writes it.
func liveRunFile(t *testing.T, port uint32) string {
	t.Helper()
	st, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		t.Fatal(err)
	}
	i := strings.LastIndexByte(string(st), ')')
	f := strings.Fields(string(st[i+1:]))
	return fmt.Sprintf(`{"family":"mhi","pid":%d,"uid":0,"port":%d,"start_time":%s}`, os.Getpid(), port, f[19])
}

// TestReadRunFileTrust: a run file counts only if it and the directories
// above it are root's (or the reader's) and writable by nobody else.
func TestReadRunFileTrust(t *testing.T) {
	requireRoot(t, "to give files to other users")
	content := liveRunFile(t, 0x1234)
	for _, tc := range []struct {
		name    string
		setup   func(t *testing.T, dir, file string)
		unsafe  string // "" if the file is to be trusted
		invalid bool
	}{
		{name: "root 0644 in 0755", setup: func(t *testing.T, dir, file string) {}},
		{name: "sticky world-writable dir", setup: func(t *testing.T, dir, file string) { chmod(t, dir, 0o1777) }},
		{name: "file writable by others", setup: func(t *testing.T, dir, file string) { chmod(t, file, 0o666) }, unsafe: "writable by others"},
		{name: "file writable by group", setup: func(t *testing.T, dir, file string) { chmod(t, file, 0o664) }, unsafe: "writable by others"},
		{name: "file owned by uid 65534", setup: func(t *testing.T, dir, file string) { chown(t, file, 65534) }, unsafe: "owned by uid 65534"},
		{name: "dir owned by uid 65534", setup: func(t *testing.T, dir, file string) { chown(t, dir, 65534) }, unsafe: "owned by uid 65534"},
		{name: "dir writable by others", setup: func(t *testing.T, dir, file string) { chmod(t, dir, 0o777) }, unsafe: "writable by others"},
		{name: "parent writable by others", setup: func(t *testing.T, dir, file string) { chmod(t, filepath.Dir(dir), 0o757) }, unsafe: "writable by others"},
		{name: "symbolic link", setup: func(t *testing.T, dir, file string) {
			other := filepath.Join(dir, "other.json")
			if err := os.Rename(file, other); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(other, file); err != nil {
				t.Fatal(err)
			}
		}, unsafe: "symbolic link"},
		{name: "fifo", setup: func(t *testing.T, dir, file string) {
			_ = os.Remove(file)
			if err := syscall.Mkfifo(file, 0o644); err != nil {
				t.Fatal(err)
			}
		}, unsafe: "not a regular file"},
		{name: "garbage", setup: func(t *testing.T, dir, file string) {
			if err := os.WriteFile(file, []byte("pid=1"), 0o644); err != nil {
				t.Fatal(err)
			}
		}, invalid: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base, err := os.MkdirTemp("", "genl-trust-")
			if err != nil {
				t.Fatal(err)
			}
			defer os.RemoveAll(base)
			chmod(t, base, 0o755)
			dir := filepath.Join(base, "gomhi")
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			chmod(t, dir, 0o755)
			file := filepath.Join(dir, "genl.json")
			if err := os.WriteFile(file, []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
			chmod(t, file, 0o644)
			tc.setup(t, dir, file)
			r, err := genl.ReadRunFile(file)
			switch {
			case tc.invalid:
				if !errors.Is(err, genl.ErrProtocol) {
					t.Fatalf("ReadRunFile = %+v, %v; want ErrProtocol", r, err)
				}
			case tc.unsafe != "":
				if !errors.Is(err, genl.ErrUnsafeRunFile) || !strings.Contains(err.Error(), tc.unsafe) {
					t.Fatalf("ReadRunFile = %+v, %v; want ErrUnsafeRunFile (%s)", r, err, tc.unsafe)
				}
				t.Logf("refused: %v", err)
				// A client ignores it: with an explicit port it dials that
				// (nothing there: ErrNoServer), it never takes the port
				// from the file.
				_, derr := genl.Dial(genl.ClientOptions{RunFile: file, Port: 0x7fff0000 + rand.Uint32N(0xffff)})
				if !errors.Is(derr, genl.ErrNoServer) {
					t.Errorf("Dial with an unsafe run file: %v, want ErrNoServer", derr)
				}
			default:
				if err != nil || r.PID != os.Getpid() || r.Port != 0x1234 || !r.Live() {
					t.Fatalf("ReadRunFile = %+v, %v", r, err)
				}
			}
		})
	}
}

func chmod(t *testing.T, p string, m os.FileMode) {
	t.Helper()
	if err := os.Chmod(p, m|modeBits(m)); err != nil {
		t.Fatal(err)
	}
}

// modeBits turns the octal sticky bit into os.ModeSticky.
func modeBits(m os.FileMode) os.FileMode {
	if m&0o1000 != 0 {
		return os.ModeSticky
	}
	return 0
}

func chown(t *testing.T, p string, uid int) {
	t.Helper()
	if err := os.Lchown(p, uid, uid); err != nil {
		t.Fatal(err)
	}
}

// TestRunFileLifecycle: the server writes its run file (0644 under any
// umask), a client finds the port there, Close removes it; a stale run
// file (dead pid, or a live pid with another start time) is ignored by
// clients and replaced by the next server; a file another server wrote
// since is left alone by Close.
func TestRunFileLifecycle(t *testing.T) {
	requireRoot(t, "the run file's directory must be root's")
	tr, _ := newTree(t, false)
	runFile := filepath.Join(newRunDir(t), "genl.json")

	old := syscall.Umask(0o077)
	srv := startServerWith(t, tr, genl.ServerOptions{RunFile: runFile})
	syscall.Umask(old)
	checkRunFile(t, runFile, srv.Port())
	c, err := genl.Dial(genl.ClientOptions{RunFile: runFile})
	if err != nil {
		t.Fatal(err)
	}
	if c.Port() != srv.Port() || c.RunFile() != runFile {
		t.Errorf("client on %#x from %q, want %#x from %s", c.Port(), c.RunFile(), srv.Port(), runFile)
	}
	if _, err := c.GetDevice("mhi0"); err != nil {
		t.Fatal(err)
	}
	c.Close()
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(runFile); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("run file after Close: %v", err)
	}

	// Stale: a pid that is gone, and this pid with another start time. The
	// port they name is live (another server of this test), so a client
	// that believed them would go there.
	live := startServer(t, tr)
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	for _, stale := range []string{
		fmt.Sprintf(`{"family":"mhi","pid":%d,"uid":0,"port":%d,"start_time":1}`, gone.Process.Pid, live.Port()),
		fmt.Sprintf(`{"family":"mhi","pid":%d,"uid":0,"port":%d,"start_time":1}`, os.Getpid(), live.Port()),
	} {
		if err := os.WriteFile(runFile, []byte(stale), 0o644); err != nil {
			t.Fatal(err)
		}
		if r, err := genl.ReadRunFile(runFile); err != nil || r.Live() {
			t.Fatalf("stale run file: %+v live=%v, %v", r, r.Live(), err)
		}
		// The client ignores it: it goes to DefaultPort, not to the port
		// the stale file names.
		c, err := genl.Dial(genl.ClientOptions{RunFile: runFile, Timeout: 500 * time.Millisecond})
		var ge *genl.Error
		switch {
		case err == nil:
			if c.Port() != genl.DefaultPort || c.RunFile() != "" {
				t.Errorf("Dial with a stale run file went to %#x (run file %q)", c.Port(), c.RunFile())
			}
			c.Close()
		case !errors.As(err, &ge) || ge.Port != genl.DefaultPort:
			t.Errorf("Dial with a stale run file: %v; want it to try DefaultPort", err)
		}
		port := 0x7ffe0000 + rand.Uint32N(0xffff)
		// The next server replaces it.
		srv2, err := genl.NewServer(tr, genl.ServerOptions{Port: port, RunFile: runFile})
		if err != nil {
			t.Fatalf("server over a stale run file: %v", err)
		}
		checkRunFile(t, runFile, port)
		// A file written by someone else since is not Close's to remove.
		other := strings.Replace(liveRunFile(t, port+1), `"pid"`, `"x":1,"pid"`, 1)
		if err := os.WriteFile(runFile, []byte(other), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := srv2.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(runFile); err != nil {
			t.Errorf("Close removed a run file that was not its own: %v", err)
		}
		_ = os.Remove(runFile)
	}
}

// TestRunFilePortHeldByAnother: a live run file names this process, but
// its port is held by another process (uid 65534): the client refuses the
// port without sending anything to it.
func TestRunFilePortHeldByAnother(t *testing.T) {
	requirePrivDrop(t)
	port := 0x7ffd0000 + rand.Uint32N(0xffff)
	sq := startSquatter(t, port, "listen")
	runFile := filepath.Join(newRunDir(t), "genl.json")
	if err := os.MkdirAll(filepath.Dir(runFile), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(runFile, []byte(liveRunFile(t, port)), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := genl.Dial(genl.ClientOptions{RunFile: runFile})
	var ge *genl.Error
	if !errors.Is(err, genl.ErrUntrustedServer) || !errors.As(err, &ge) || ge.Peer == nil || ge.Peer.PID != sq.PID ||
		!strings.Contains(err.Error(), runFile) {
		t.Fatalf("Dial: %v; want ErrUntrustedServer naming pid %d and the run file", err, sq.PID)
	}
	t.Logf("Dial: %v", err)
	if got := sq.Received(); len(got) != 0 {
		t.Errorf("the holder received %d datagrams", len(got))
	}
}
