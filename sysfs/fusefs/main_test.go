package fusefs_test

import (
	"flag"
	"os"
	"testing"

	"github.com/gomhi/gomhi/mhi/testenv"
	"github.com/gomhi/gomhi/mhi/testenv/reexec"
)

// TestMain leaves TestHelperFUSEClient, the unprivileged side of
// TestNonRootCannotWrite, out of every run but the one that test starts,
// and removes the copy of the test binary the helper ran.
func TestMain(m *testing.M) {
	flag.Parse()
	testenv.RunHelpersOnlyWhenAsked(map[string]string{"TestHelperFUSEClient": fuseHelperEnv})
	code := m.Run()
	reexec.RemoveBinary()
	os.Exit(code)
}
