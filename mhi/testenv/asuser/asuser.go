// Package asuser runs a piece of a test as another user: the test binary
// re-executed under setpriv (util-linux) with another uid and gid, no
// supplementary groups and, if asked, ambient capabilities, running one
// helper test that an environment variable tells what to do.
//
// go test keeps its binary in a directory only root may enter, so Binary
// first copies it, once per process, into a directory any user can
// enter; RemoveBinary, called from TestMain after m.Run, deletes the
// copy. The helper test itself is kept out of ordinary runs with
// testenv.RunHelpersOnlyWhenAsked.
//
// It is a test helper, imported only by _test.go files and test-support
// packages.
package asuser

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"

	"github.com/gomhi/gomhi/mhi/testenv"
)

// Nobody is the uid (and gid) of the unprivileged user the tests run
// helpers as.
const Nobody = 65534

// Require makes sure the test can run processes as other users: root,
// setpriv and the tools named (from util-linux, such as unshare). Outside
// CI a missing piece skips the test; under CI=true it fails, naming what
// is missing (testenv.Need).
func Require(tb testing.TB, tools ...string) {
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

// RunTest runs the helper test named test (its whole name, matched
// exactly) of the test binary's shared copy (Binary) as u, verbosely,
// with env added to the environment, and returns its combined output and
// its exit error.
func RunTest(tb testing.TB, u User, test string, env ...string) (string, error) {
	tb.Helper()
	cmd := Command(u, Binary(tb), "-test.run=^"+test+"$", "-test.v", "-test.count=1")
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

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
