package fusefs_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gomhi/gomhi/mhi/testenv/reexec"
	"github.com/gomhi/gomhi/sysfs/fusefs"
)

const fuseHelperEnv = "GOMHI_FUSEFS_HELPER_FILE"

// TestNonRootCannotWrite: uid 65534 tries to read, open for writing,
// truncate and chmod the mru file of a mount without allow_other (as
// `mhictl up` mounts it: other users cannot even look) and with it (they
// can read, not change); with CAP_DAC_OVERRIDE, which the kernel lets
// write root's files, it can. The MRU changes only then.
func TestNonRootCannotWrite(t *testing.T) {
	if os.Getenv("CI") == "true" {
		if os.Geteuid() != 0 {
			t.Fatal("CI=true: needs root, to mount and to run uid 65534 with setpriv")
		}
		if _, err := os.Stat("/dev/fuse"); err != nil {
			t.Fatalf("CI=true: needs /dev/fuse: %v", err)
		}
	}
	needFUSE(t)
	reexec.RequireSetpriv(t)
	f := newFixture(t)
	base, err := os.MkdirTemp("", "fusefs-nonroot-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(base)
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	mount := func(t *testing.T, i int, allowOther bool) string {
		dir := filepath.Join(base, fmt.Sprintf("mnt-%d", i))
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		s, err := fusefs.Mount(dir, f.tree, fusefs.Options{AllowOther: allowOther})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		opts := mountOptions(t, dir)
		if !strings.Contains(opts, "default_permissions") || strings.Contains(opts, "allow_other") != allowOther {
			t.Fatalf("mount options %q (allow_other %v)", opts, allowOther)
		}
		return filepath.Join(dir, "devices", "mhi0", "mru")
	}
	as := func(t *testing.T, file string, caps ...string) string {
		out, err := reexec.RunTestAs(t, reexec.User{UID: reexec.Nobody, Caps: caps}, "TestHelperFUSEClient", fuseHelperEnv+"="+file)
		if err != nil {
			t.Fatalf("helper as uid 65534: %v\n%s", err, out)
		}
		for _, l := range strings.Split(out, "\n") {
			if r, ok := strings.CutPrefix(l, "RESULT "); ok {
				return r
			}
		}
		t.Fatalf("helper printed no result:\n%s", out)
		return ""
	}
	for i, tc := range []struct {
		name       string
		allowOther bool
		caps       []string
		want       string
	}{
		{"no allow_other", false, nil, "read=EACCES write=EACCES rdwr=EACCES truncate=EACCES chmod=EACCES"},
		{"allow_other", true, nil, "read=32768 write=EACCES rdwr=EACCES truncate=EACCES chmod=EPERM"},
		{"allow_other, CAP_DAC_OVERRIDE", true, []string{"dac_override"},
			"read=32768 write=ok rdwr=ok truncate=ok chmod=EPERM"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := mount(t, i, tc.allowOther)
			got := as(t, file, tc.caps...)
			if got != tc.want {
				t.Errorf("as uid 65534: %s\nwant:          %s", got, tc.want)
			}
			t.Logf("uid 65534: %s", got)
		})
	}
	// Only the CAP_DAC_OVERRIDE helper wrote (16384, twice).
	if f.net.MRU() != 16384 {
		t.Errorf("MRU %d, want 16384 (written only by the CAP_DAC_OVERRIDE helper)", f.net.MRU())
	}
}

// mountOptions returns the options /proc/self/mounts shows for dir.
func mountOptions(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 3 && f[1] == dir {
			return f[3]
		}
	}
	t.Fatalf("%s is not mounted", dir)
	return ""
}

// TestHelperFUSEClient is the uid 65534 side of TestNonRootCannotWrite: it
// reads the file, opens it for writing and for both (writing 16384),
// truncates it and chmods it, and prints one RESULT line.
func TestHelperFUSEClient(t *testing.T) {
	file := os.Getenv(fuseHelperEnv)
	if file == "" {
		return // run only by TestNonRootCannotWrite (TestMain keeps it out otherwise)
	}
	if os.Getuid() == 0 {
		t.Fatal("helper runs as root")
	}
	res := func(err error) string {
		var errno syscall.Errno
		switch {
		case err == nil:
			return "ok"
		case errors.As(err, &errno):
			return unix.ErrnoName(errno)
		default:
			return err.Error()
		}
	}
	read := "?"
	if b, err := os.ReadFile(file); err == nil {
		read = strings.TrimSpace(string(b))
	} else {
		read = res(err)
	}
	write := func(flag int) string {
		f, err := os.OpenFile(file, flag, 0)
		if err != nil {
			return res(err)
		}
		defer f.Close()
		_, err = f.WriteString("16384\n")
		return res(err)
	}
	fmt.Printf("RESULT read=%s write=%s rdwr=%s truncate=%s chmod=%s\n", read,
		write(os.O_WRONLY), write(os.O_RDWR), res(os.Truncate(file, 0)), res(os.Chmod(file, 0o666)))
}
