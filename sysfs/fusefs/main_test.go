package fusefs_test

import (
	"flag"
	"os"
	"testing"

	"github.com/gomhi/gomhi/mhi/testenv"
)

// TestMain leaves TestHelperFUSEClient, the unprivileged side of
// TestNonRootCannotWrite, out of every run but the one that test starts.
func TestMain(m *testing.M) {
	flag.Parse()
	testenv.RunHelpersOnlyWhenAsked(map[string]string{"TestHelperFUSEClient": fuseHelperEnv})
	os.Exit(m.Run())
}
