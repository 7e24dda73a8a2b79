package genl_test

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/gomhi/gomhi/mhi/testenv/reexec"
	"github.com/gomhi/gomhi/sysfs/genl"
	"golang.org/x/sys/unix"
)

// helperPortEnv tells the re-executed test binary which port to use.
const (
	helperPortEnv = "GOMHI_GENL_HELPER_PORT"
	helperModeEnv = "GOMHI_GENL_HELPER_MODE" // "nobody" or "netadmin"
)

// TestNonRootClient runs TestHelperClient in this test binary as uid
// 65534 (setpriv) against a server run by root here: GET works, SET is
// refused with EPERM; with CAP_NET_ADMIN (ambient) the SET goes through.
func TestNonRootClient(t *testing.T) {
	reexec.RequireSetpriv(t)
	tr, n := newTree(t, false)
	srv := startServer(t, tr)
	run := func(t *testing.T, mode string, caps ...string) {
		out, err := reexec.RunTestAs(t, reexec.User{UID: reexec.Nobody, Caps: caps}, "TestHelperClient",
			helperPortEnv+"="+strconv.FormatUint(uint64(srv.Port()), 10), helperModeEnv+"="+mode)
		t.Logf("helper output:\n%s", out)
		if err != nil {
			t.Fatalf("helper as uid 65534: %v", err)
		}
		if !strings.Contains(out, "HELPER-OK") {
			t.Fatal("helper did not run its checks")
		}
	}
	t.Run("nobody", func(t *testing.T) {
		run(t, "nobody")
		if n.MRU() != 32768 {
			t.Errorf("MRU changed to %d by an unprivileged client", n.MRU())
		}
	})
	t.Run("nobody+CAP_NET_ADMIN", func(t *testing.T) {
		run(t, "netadmin", "net_admin")
		if n.MRU() != 16384 {
			t.Errorf("MRU %d after a SET by a CAP_NET_ADMIN client", n.MRU())
		}
	})
}

// TestHelperClient is the unprivileged side of TestNonRootClient; TestMain
// leaves it out of every run that test did not start.
func TestHelperClient(t *testing.T) {
	portStr := os.Getenv(helperPortEnv)
	if portStr == "" {
		t.Fatal("runs only as the helper process of TestNonRootClient")
	}
	port, err := strconv.ParseUint(portStr, 10, 32)
	if err != nil {
		t.Fatal(err)
	}
	if os.Getuid() == 0 {
		t.Fatal("helper runs as root; setpriv did not drop privileges")
	}
	c, err := genl.Dial(genl.ClientOptions{Port: uint32(port)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	d, err := c.GetDevice("mhi0")
	if err != nil || d.MRU != 32768 {
		t.Fatalf("GET as uid %d: %+v, %v", os.Getuid(), d, err)
	}
	_, err = c.SetDevice("mhi0", genl.SetRequest{MRU: u32(16384)})
	if os.Getenv(helperModeEnv) == "netadmin" {
		if err != nil {
			t.Fatalf("SET as uid %d with CAP_NET_ADMIN: %v", os.Getuid(), err)
		}
		fmt.Printf("SET as uid %d with CAP_NET_ADMIN accepted\nHELPER-OK\n", os.Getuid())
		return
	}
	if !errors.Is(err, genl.ErrPermission) || !errors.Is(err, unix.EPERM) ||
		!strings.Contains(err.Error(), "needs root or CAP_NET_ADMIN") {
		t.Fatalf("SET as uid %d: %v, want ErrPermission", os.Getuid(), err)
	}
	fmt.Printf("SET as uid %d refused: %v\nHELPER-OK\n", os.Getuid(), err)
}
