package reexec_test

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/gomhi/gomhi/mhi/testenv"
	"github.com/gomhi/gomhi/mhi/testenv/reexec"
)

// identityEnv tells TestHelperIdentity to report who it runs as.
const identityEnv = "GOMHI_ASUSER_IDENTITY"

// TestMain leaves TestHelperIdentity out of every run but the ones
// TestRunTest starts, and removes the copy of the test binary.
func TestMain(m *testing.M) {
	flag.Parse()
	testenv.RunHelpersOnlyWhenAsked(map[string]string{"TestHelperIdentity": identityEnv})
	code := m.Run()
	reexec.RemoveBinary()
	os.Exit(code)
}

// TestRunTest runs TestHelperIdentity as uid 65534, without and with
// CAP_NET_ADMIN, and checks the identity the kernel gave it: uid and gid
// 65534 (real and effective), no supplementary groups, and the ambient
// capability only when asked for.
func TestRunTest(t *testing.T) {
	reexec.RequireSetpriv(t)
	const capNetAdmin = 1 << 12
	for _, tc := range []struct {
		name    string
		caps    []string
		ambient uint64
	}{
		{"nobody", nil, 0},
		{"nobody+net_admin", []string{"net_admin"}, capNetAdmin},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := reexec.RunTestAs(t, reexec.User{UID: reexec.Nobody, Caps: tc.caps}, "TestHelperIdentity", identityEnv+"=1")
			if err != nil {
				t.Fatalf("helper: %v\n%s", err, out)
			}
			var got string
			for _, l := range strings.Split(out, "\n") {
				if r, ok := strings.CutPrefix(l, "IDENTITY "); ok {
					got = r
				}
			}
			want := fmt.Sprintf("Uid=65534 65534 65534 65534 Gid=65534 65534 65534 65534 Groups= CapAmb=%016x", tc.ambient)
			if got != want {
				t.Errorf("helper's identity:\n got %s\nwant %s\noutput:\n%s", got, want, out)
			}
		})
	}
}

// TestHelperIdentity prints the Uid, Gid, Groups and CapAmb lines of its
// own /proc status as one IDENTITY line.
func TestHelperIdentity(t *testing.T) {
	if os.Getenv(identityEnv) == "" {
		t.Fatal("runs only as the helper process of TestRunTest")
	}
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	fields := map[string]string{}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok {
			fields[k] = strings.Join(strings.Fields(v), " ")
		}
	}
	var parts []string
	for _, k := range []string{"Uid", "Gid", "Groups", "CapAmb"} {
		parts = append(parts, k+"="+fields[k])
	}
	fmt.Println("IDENTITY " + strings.Join(parts, " "))
}

// TestInNetns: the body runs in another network namespace than the test
// that started it, whose namespace it learns from the environment.
func TestInNetns(t *testing.T) {
	const parentEnv = "GOMHI_REEXEC_PARENT_NETNS"
	if os.Getenv(parentEnv) == "" {
		t.Setenv(parentEnv, netnsOf(t))
	}
	if !reexec.InNetns(t, func(t *testing.T) {
		testenv.NeedRoot(t, "to unshare the network namespace")
		testenv.LookPath(t, "unshare", "util-linux")
	}) {
		return
	}
	if got := netnsOf(t); got == os.Getenv(parentEnv) {
		t.Fatalf("the body runs in the parent's network namespace %s", got)
	}
}

// netnsOf names this process's network namespace ("net:[4026531840]").
func netnsOf(t *testing.T) string {
	t.Helper()
	ns, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	return ns
}
