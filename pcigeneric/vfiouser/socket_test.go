package vfiouser

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhi/testenv/logbuf"
	"github.com/gomhi/gomhi/mhi/testenv/reexec"
	"github.com/gomhi/gomhi/pcigeneric/vfiouser/client"
	"github.com/gomhi/gomhi/pcigeneric/vfiouser/protocol"
)

// listen runs ListenAndServe on path until the test ends and waits for
// its socket (the node appears complete: bound elsewhere and renamed). If
// a stale socket is there, it waits until one accepts a connection, which
// opens (and at once ends) one session.
func listen(t *testing.T, path string, dev *ServerDevice) {
	t.Helper()
	_, err := os.Lstat(path)
	stale := err == nil
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ListenAndServe(ctx, path, dev) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("ListenAndServe: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("ListenAndServe did not return")
		}
	})
	for range 500 {
		if fi, err := os.Lstat(path); err == nil && fi.Mode()&fs.ModeSocket != 0 {
			if !stale {
				return
			}
			if c, err := net.Dial("unix", path); err == nil {
				_ = c.Close()
				return
			}
		}
		select {
		case err := <-done:
			t.Fatalf("ListenAndServe: %v", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	t.Fatalf("no socket at %s", path)
}

// TestSocketModeIgnoresUmask: the socket is 0600 and this user's, whatever
// the umask (including ones that strip the owner's bits), and is removed
// at the end.
func TestSocketModeIgnoresUmask(t *testing.T) {
	for _, umask := range []int{0, 0o022, 0o077, 0o277, 0o777} {
		t.Run(fmt.Sprintf("umask %#o", umask), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "vu.sock")
			old := syscall.Umask(umask)
			func() {
				defer syscall.Umask(old)
				listen(t, path, newDevice(t))
			}()
			fi, err := os.Lstat(path)
			if err != nil {
				t.Fatal(err)
			}
			st := fi.Sys().(*syscall.Stat_t)
			if fi.Mode() != fs.ModeSocket|socketMode || st.Uid != uint32(os.Geteuid()) {
				t.Fatalf("socket %v uid %d, want %v uid %d", fi.Mode(), st.Uid, fs.ModeSocket|socketMode, os.Geteuid())
			}
			c, err := client.Dial(path, client.Options{Memory: 1 << 20})
			if err != nil {
				t.Fatalf("owner's Dial: %v", err)
			}
			_ = c.Close()
		})
	}
}

// TestListenRefusesToReplace: anything but a stale socket at the path is
// left alone and the server does not start; a stale socket is replaced.
func TestListenRefusesToReplace(t *testing.T) {
	dir := t.TempDir()
	regular := filepath.Join(dir, "file")
	if err := os.WriteFile(regular, []byte("keep me"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(regular, link); err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(dir, "dir")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	live := filepath.Join(dir, "live.sock")
	listen(t, live, newDevice(t))
	for _, tc := range []struct {
		path string
		want string
	}{
		{regular, "a regular file is there"},
		{link, "a symbolic link is there"},
		{sub, "a directory is there"},
		{live, "another server listens there"},
	} {
		// A server that wrongly starts ends with the context (nil error).
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := ListenAndServe(ctx, tc.path, newDevice(t))
		cancel()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ListenAndServe(%s) = %v, want %q", filepath.Base(tc.path), err, tc.want)
		}
		if tc.path != live && !errors.Is(err, protocol.ErrNotSocket) {
			t.Errorf("ListenAndServe(%s) = %v, want ErrNotSocket", filepath.Base(tc.path), err)
		}
	}
	if b, err := os.ReadFile(regular); err != nil || string(b) != "keep me" {
		t.Errorf("the regular file is now %q, %v", b, err)
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&fs.ModeSymlink == 0 {
		t.Errorf("the link is now %v, %v", fi, err)
	}
	c, err := client.Dial(live, client.Options{Memory: 1 << 20})
	if err != nil {
		t.Fatalf("the live server after the attempts: %v", err)
	}
	_ = c.Close()

	// A stale socket (its server gone without removing it) is replaced.
	stale := filepath.Join(dir, "stale.sock")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: stale, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	_ = l.Close()
	listen(t, stale, newDevice(t))
	c, err = client.Dial(stale, client.Options{Memory: 1 << 20})
	if err != nil {
		t.Fatalf("Dial after replacing a stale socket: %v", err)
	}
	_ = c.Close()
}

const peerHelperEnv = "GOMHI_VFIOUSER_PEER_SOCKET"

// TestPeerRefused: uid 65534 cannot connect to the 0600 socket (the kernel
// refuses); with the socket's mode widened it connects, and the server
// refuses it by its credentials (SO_PEERCRED) with an EPERM reply and a
// Warn log naming it, without giving it the device. Root is served after.
func TestPeerRefused(t *testing.T) {
	reexec.RequireSetpriv(t)
	dir, err := os.MkdirTemp("", "vfiouser-peer-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var logs logbuf.Buffer
	dev, err := NewServerDevice(DeviceOptions{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "vu.sock")
	listen(t, path, dev)

	nobody := func() string {
		t.Helper()
		out, err := reexec.RunTestAs(t, reexec.User{UID: reexec.Nobody}, "TestHelperPeer", peerHelperEnv+"="+path)
		if err != nil {
			t.Fatalf("helper as uid 65534: %v\n%s", err, out)
		}
		for _, l := range strings.Split(out, "\n") {
			if r, ok := strings.CutPrefix(l, "RESULT "); ok {
				return r
			}
		}
		t.Fatalf("no result from the helper:\n%s", out)
		return ""
	}
	if got := nobody(); !strings.HasPrefix(got, "EACCES") {
		t.Errorf("uid 65534 on the 0600 socket: %s, want EACCES", got)
	}
	if err := os.Chmod(path, 0o666); err != nil {
		t.Fatal(err)
	}
	got := nobody()
	if !strings.HasPrefix(got, "REFUSED") {
		t.Errorf("uid 65534 on a 0666 socket: %s, want REFUSED (ErrPeerRefused); server log:\n%s", got, logs.String())
	}
	t.Logf("uid 65534 on a 0666 socket: %s", got)
	if l := logs.String(); !strings.Contains(l, "level=WARN msg=refuse") || !strings.Contains(l, "peer_uid=65534") {
		t.Errorf("the refusal is not logged with the peer's uid:\n%s", l)
	}
	c, err := client.Dial(path, client.Options{Memory: 1 << 20})
	if err != nil {
		t.Fatalf("root after the refused peer: %v", err)
	}
	_ = c.Close()
	if s := dev.Stats().Sessions; s != 1 {
		t.Errorf("%d sessions, want 1 (root's only)", s)
	}
}

// TestHelperPeer is the uid 65534 client of TestPeerRefused.
func TestHelperPeer(t *testing.T) {
	path := os.Getenv(peerHelperEnv)
	if path == "" {
		return // run only by TestPeerRefused (TestMain keeps it out otherwise)
	}
	c, err := client.Dial(path, client.Options{Memory: 1 << 20, Timeout: 5 * time.Second})
	switch {
	case err == nil:
		_ = c.Close()
		fmt.Println("RESULT OK")
	case errors.Is(err, syscall.EACCES):
		fmt.Printf("RESULT EACCES %v\n", err)
	case errors.Is(err, protocol.ErrPeerRefused) && errors.Is(err, syscall.EPERM):
		fmt.Printf("RESULT REFUSED %v\n", err)
	default:
		fmt.Printf("RESULT OTHER %v\n", err)
	}
}
