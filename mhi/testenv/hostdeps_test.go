package testenv_test

import (
	"bufio"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/gomhi/gomhi/mhi/testenv"
)

// repoRoot is the module's root, from this package's folder.
const repoRoot = "../.."

// hostPackages reads .ci/host-packages: each line's check and package.
func hostPackages(t *testing.T) map[[2]string]bool {
	t.Helper()
	f, err := os.Open(filepath.Join(repoRoot, ".ci", "host-packages"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	lines := map[[2]string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 || strings.HasPrefix(fields[0], "#") {
			continue
		}
		if len(fields) != 2 {
			t.Fatalf(".ci/host-packages: want CHECK PACKAGE, got %q", sc.Text())
		}
		lines[[2]string{fields[0], fields[1]}] = true
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return lines
}

// TestHostPackagesNameEveryTool: every tool a test looks up by name and
// Debian package (testenv.LookPath, the packages' needTool helpers) is a
// line of .ci/host-packages, the one list make test installs from — so a
// new test's tool cannot be missing on a fresh machine.
func TestHostPackagesNameEveryTool(t *testing.T) {
	list := hostPackages(t)
	lookup := regexp.MustCompile(`(?:LookPath|needTool)\(t, "([^"]+)", "([^"]+)"\)`)
	found := 0
	err := filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && path != repoRoot || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range lookup.FindAllStringSubmatch(string(b), -1) {
			found++
			if !list[[2]string{m[1], m[2]}] {
				t.Errorf("%s looks up %s in package %s: not a line of .ci/host-packages", path, m[1], m[2])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if found < 10 {
		t.Fatalf("found %d tool look-ups in the tests; the pattern no longer matches them", found)
	}
}

// runHostDeps runs .ci/host-deps.sh as uid 65534 (or as the caller when
// not root) with env added; it returns the output and the exit status.
func runHostDeps(t *testing.T, env ...string) (string, int) {
	t.Helper()
	script, err := filepath.Abs(filepath.Join(repoRoot, ".ci", "host-deps.sh"))
	if err != nil {
		t.Fatal(err)
	}
	bash := testenv.LookPath(t, "bash", "bash")
	args := []string{bash, script}
	if os.Geteuid() == 0 {
		setpriv := testenv.LookPath(t, "setpriv", "util-linux")
		args = append([]string{setpriv, "--reuid=65534", "--regid=65534", "--clear-groups"}, args...)
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=/nonexistent"}, env...)
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return string(out), code
}

// TestHostDepsWithoutRoot: make test's first step, run by a user who is
// not root, stops under CI=true (as make test runs) before any test, with
// the one command that installs what is missing, or the one that runs the
// tests as root; with CI=false it warns and lets the tests run (and skip).
func TestHostDepsWithoutRoot(t *testing.T) {
	// A list readable by uid 65534: one tool that exists, two that do not.
	dir, err := os.MkdirTemp("", "hostdeps")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	fake := filepath.Join(dir, "packages")
	body := "# a comment\nsh dash\ngomhi-no-such-tool gomhi-no-such-package\n/gomhi/no/such/file gomhi-no-such-package\n/gomhi/no/such/other gomhi-other-package\n"
	if err := os.WriteFile(fake, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	hasApt := exec.Command("sh", "-c", "command -v apt-get && command -v dpkg").Run() == nil

	out, code := runHostDeps(t, "CI=true", "GOMHI_HOST_PACKAGES="+fake)
	t.Logf("CI=true, missing packages:\n%s", out)
	if code != 1 {
		t.Errorf("CI=true with packages missing: exit %d, want 1", code)
	}
	want := "install the Debian packages gomhi-no-such-package gomhi-other-package"
	if hasApt {
		want = "\n  sudo apt-get install -y --no-install-recommends gomhi-no-such-package gomhi-other-package\n"
	}
	if !strings.Contains(out, want) {
		t.Errorf("CI=true with packages missing: the output lacks %q", want)
	}

	out, code = runHostDeps(t, "CI=false", "GOMHI_HOST_PACKAGES="+fake)
	t.Logf("CI=false, missing packages:\n%s", out)
	if code != 0 || !strings.Contains(out, "warning: missing gomhi-no-such-tool /gomhi/no/such/file /gomhi/no/such/other") {
		t.Errorf("CI=false with packages missing: exit %d, want 0 and a warning naming the three", code)
	}

	// The real list: everything is there on a machine that ran make test
	// as root; not being root is what stops it.
	if os.Geteuid() == 0 {
		out, code = runHostDeps(t, "CI=true")
		t.Logf("CI=true, the real list:\n%s", out)
		if code != 1 || !strings.Contains(out, "need root; run:\n  sudo env \"PATH=$PATH\" make test\n") {
			t.Errorf("CI=true, not root: exit %d, want 1 and the command that runs the tests as root", code)
		}
	}
}
