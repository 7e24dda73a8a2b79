package vfiouser

import (
	"flag"
	"os"
	"sync"
	"testing"

	"github.com/gomhi/gomhi/mhi/testenv"
	"github.com/gomhi/gomhi/mhi/testenv/reexec"
)

// TestMain leaves TestHelperPeer, the uid 65534 client of TestPeerRefused,
// out of every run but the one that test starts, and runs what AfterTests
// registered once every test has finished.
func TestMain(m *testing.M) {
	flag.Parse()
	testenv.RunHelpersOnlyWhenAsked(map[string]string{"TestHelperPeer": peerHelperEnv})
	code := m.Run()
	afterTests.Lock()
	for _, f := range afterTests.fs {
		f()
	}
	afterTests.Unlock()
	reexec.RemoveBinary()
	os.Exit(code)
}

var afterTests struct {
	sync.Mutex
	fs []func()
}

// AfterTests registers f to run once every test of the binary has
// finished: the Linux-driver tests (package vfiouser_test) share one
// initramfs per kernel between tests and remove them so.
func AfterTests(f func()) {
	afterTests.Lock()
	afterTests.fs = append(afterTests.fs, f)
	afterTests.Unlock()
}
