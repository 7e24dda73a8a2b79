package fusefs

import (
	"github.com/gomhi/gomhi/mhi/testenv"
	"github.com/gomhi/gomhi/mhi/testenv/poll"

	"context"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/gomhi/gomhi/sysfs"
)

// TestOpenWriteNeedsRoot: the server's own check of write opens, which
// holds even if the kernel's mode check (default_permissions) were off.
func TestOpenWriteNeedsRoot(t *testing.T) {
	var logs strings.Builder
	srv := &Server{log: slog.New(slog.NewTextHandler(&logs, nil))}
	mru := &attrNode{srv: srv, path: "devices/mhi0/mru", attr: &sysfs.Attr{Name: "mru", Type: sysfs.Uint, Mode: 0o644, Max: 65535}}
	caller := func(uid, pid uint32) context.Context {
		return &fuse.Context{Caller: fuse.Caller{Owner: fuse.Owner{Uid: uid, Gid: uid}, Pid: pid}}
	}
	self := uint32(os.Getpid())
	for _, tc := range []struct {
		name  string
		ctx   context.Context
		flags uint32
		want  syscall.Errno
	}{
		{"root writes", caller(0, self), syscall.O_WRONLY, 0},
		{"root reads and writes", caller(0, self), syscall.O_RDWR, 0},
		{"uid 65534 reads", caller(65534, self), syscall.O_RDONLY, 0},
		{"uid 65534 reads and writes", caller(65534, self), syscall.O_RDWR, syscall.EACCES},
		{"uid 65534 truncates", caller(65534, self), syscall.O_RDONLY | syscall.O_TRUNC, syscall.EACCES},
		// This process has CAP_DAC_OVERRIDE (as root) but not fsuid 65534:
		// a reused pid must not lend its capabilities.
		{"uid 65534 at a root pid", caller(65534, self), syscall.O_WRONLY, syscall.EACCES},
		{"uid 65534, no such pid", caller(65534, 0), syscall.O_WRONLY, syscall.EACCES},
		{"no caller", context.Background(), syscall.O_WRONLY, syscall.EACCES},
	} {
		_, _, errno := mru.Open(tc.ctx, tc.flags)
		if errno != tc.want {
			t.Errorf("%s: Open(%#o) = %v, want %v", tc.name, tc.flags, errno, tc.want)
		}
	}
	if !strings.Contains(logs.String(), "write open refused") || !strings.Contains(logs.String(), "uid=65534") {
		t.Errorf("refusals not logged:\n%s", logs.String())
	}

	// A uid 65534 process holding CAP_DAC_OVERRIDE passes, as it passes
	// the kernel's check.
	testenv.NeedRoot(t, "to start a process with CAP_DAC_OVERRIDE")
	testenv.LookPath(t, "setpriv", "util-linux")
	for _, tc := range []struct {
		caps []string
		want syscall.Errno
	}{
		{[]string{"--inh-caps=+dac_override", "--ambient-caps=+dac_override"}, 0},
		{nil, syscall.EACCES},
	} {
		args := append([]string{"--reuid=65534", "--regid=65534", "--clear-groups"}, tc.caps...)
		cmd := exec.Command("setpriv", append(args, "sleep", "30")...)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Wait until setpriv has exec'd sleep with the new identity.
		poll.Until(5*time.Second, func() bool {
			b, err := os.ReadFile("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/comm")
			return err == nil && strings.TrimSpace(string(b)) == "sleep"
		})
		_, _, errno := mru.Open(caller(65534, uint32(cmd.Process.Pid)), syscall.O_WRONLY)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if errno != tc.want {
			t.Errorf("uid 65534 with %v: Open = %v, want %v", tc.caps, errno, tc.want)
		}
	}
}
