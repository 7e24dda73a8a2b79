// Package reexec runs a piece of a test elsewhere by re-executing the
// running test binary, with one helper test selected and an environment
// variable telling it what to do:
//
//   - as another user (RunTestAs, Command): under setpriv (util-linux)
//     with another uid and gid, no supplementary groups and, if asked,
//     ambient capabilities. go test keeps its binary in a directory only
//     root may enter, so Binary first copies it, once per process, into a
//     directory any user can enter; RemoveBinary, called from TestMain
//     after m.Run, deletes the copy.
//   - in a new network namespace (InNetns): under `unshare --net`, so that
//     netlink ports, interfaces and addresses touch nothing of the host.
//
// The helper tests themselves are kept out of ordinary runs with
// testenv.RunHelpersOnlyWhenAsked. It is a test helper, imported only by
// _test.go files and test-support packages.
package reexec

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/gomhi/gomhi/mhi/testenv"
)

// Nobody is the uid (and gid) of the unprivileged user the tests run
// helpers as.
const Nobody = 65534

// RequireSetpriv makes sure the test can run processes as other users:
// root, setpriv and the tools named (from util-linux, such as unshare).
// Outside CI a missing piece skips the test; under CI=true it fails,
// naming what is missing (testenv.Need).
func RequireSetpriv(tb testing.TB, tools ...string) {
	tb.Helper()
	testenv.NeedRoot(tb, "to run helper processes as other users with setpriv")
	for _, tool := range append([]string{"setpriv"}, tools...) {
		testenv.LookPath(tb, tool, "util-linux")
	}
}

var shared struct {
	once sync.Once
	path string
	err  error
}

// Binary returns the path of a copy of the running test binary that any
// user may execute, made once per process in a new 0755 directory.
func Binary(tb testing.TB) string {
	tb.Helper()
	shared.once.Do(func() {
		dir, err := os.MkdirTemp("", "gomhi-test-bin-")
		if err == nil {
			err = os.Chmod(dir, 0o755)
		}
		if err != nil {
			shared.err = err
			return
		}
		shared.path = filepath.Join(dir, filepath.Base(os.Args[0]))
		shared.err = copyExecutable(os.Args[0], shared.path)
	})
	if shared.err != nil {
		tb.Fatalf("copying the test binary for another user: %v", shared.err)
	}
	return shared.path
}

// RemoveBinary removes Binary's copy and its directory, if there is one;
// call it from TestMain after m.Run.
func RemoveBinary() {
	if shared.path != "" {
		_ = os.RemoveAll(filepath.Dir(shared.path))
	}
}

// User is whom a helper runs as.
type User struct {
	// UID is the real and effective uid, and the gid, of the helper.
	UID int
	// Caps are capabilities the helper keeps (inheritable and ambient),
	// named as setpriv names them: "net_admin", "dac_override".
	Caps []string
}

// setprivArgs returns setpriv's options for u.
func (u User) setprivArgs() []string {
	id := strconv.Itoa(u.UID)
	args := []string{"--reuid=" + id, "--regid=" + id, "--clear-groups"}
	for _, c := range u.Caps {
		args = append(args, "--inh-caps=+"+c, "--ambient-caps=+"+c)
	}
	return args
}

// Command returns the command that runs bin with args as u, in bin's
// directory, with this process's environment.
func Command(u User, bin string, args ...string) *exec.Cmd {
	cmd := exec.Command("setpriv", append(append(u.setprivArgs(), bin), args...)...)
	cmd.Dir = filepath.Dir(bin)
	cmd.Env = os.Environ()
	return cmd
}

// RunTestAs runs the helper test named test (its whole name, matched
// exactly) of the test binary's shared copy (Binary) as u, verbosely,
// with env added to the environment, and returns its combined output and
// its exit error.
func RunTestAs(tb testing.TB, u User, test string, env ...string) (string, error) {
	tb.Helper()
	cmd := Command(u, Binary(tb), "-test.run=^"+test+"$", "-test.v", "-test.count=1")
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// nsEnv marks a test binary re-executed in new namespaces; its value
// names the unshare flags.
const nsEnv = "GOMHI_IN_TEST_NS"

// InNetns runs the calling test t in a new network namespace: the test
// binary re-executed under `unshare --net` running t alone (verbosely,
// its output in t's log), which must pass. It reports whether the caller
// is already in that namespace, in which case the caller runs the test's
// body; otherwise it returns false once the re-executed test passed, and
// fails t if it did not. need, called only before re-executing, checks
// the test's requirements (root and unshare among them: see testenv).
func InNetns(t *testing.T, need func(*testing.T)) bool {
	t.Helper()
	return inNamespaces(t, need, "--net")
}

// InSmallTmpfs runs the calling test t again, as InNetns does, in a new
// mount namespace (`unshare --mount --propagation private`, as root); there
// it mounts a tmpfs of size (mount's notation: "64k") on a new directory
// and returns it with true. The caller returns at once on false: the
// re-executed test passed (or t failed).
func InSmallTmpfs(t *testing.T, size string) (dir string, in bool) {
	t.Helper()
	need := func(t *testing.T) {
		testenv.NeedRoot(t, "a mount namespace with a small tmpfs")
		testenv.LookPath(t, "unshare", "util-linux")
	}
	if !inNamespaces(t, need, "--mount", "--propagation", "private") {
		return "", false
	}
	dir = t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size="+size); err != nil {
		t.Fatalf("mount -t tmpfs -o size=%s: %v", size, err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
	return dir, true
}

// inNamespaces is InNetns for any unshare flags.
func inNamespaces(t *testing.T, need func(*testing.T), flags ...string) bool {
	t.Helper()
	which := strings.Join(flags, " ")
	if os.Getenv(nsEnv) == which {
		return true
	}
	need(t)
	cmd := exec.Command("unshare", append(flags, os.Args[0], "-test.run", "^"+t.Name()+"$", "-test.v", "-test.count=1")...)
	cmd.Env = append(os.Environ(), nsEnv+"="+which)
	out, err := cmd.CombinedOutput()
	t.Logf("in new namespaces (unshare %s):\n%s", which, out)
	if err != nil {
		t.Fatalf("%v", err)
	}
	if !strings.Contains(string(out), "--- PASS: "+t.Name()) {
		t.Fatal("the test did not pass in the namespace")
	}
	return false
}

// copyExecutable copies the file src to dst, executable by anyone.
func copyExecutable(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
