package genl_test

import (
	"flag"
	"os"
	"testing"

	"github.com/gomhi/gomhi/mhi/testenv"
	"github.com/gomhi/gomhi/mhi/testenv/reexec"
	"github.com/gomhi/gomhi/sysfs/genl/genltest"
)

// TestMain leaves the helper processes (TestHelperClient, the unprivileged
// side of TestNonRootClient; TestHelperSquatter and TestHelperSquatClient,
// the squatter tests' processes) out of every run but the ones their tests
// start, and removes the copy of the test binary the helpers ran.
func TestMain(m *testing.M) {
	flag.Parse()
	testenv.RunHelpersOnlyWhenAsked(map[string]string{
		"TestHelperClient":        helperPortEnv,
		"TestHelperSessionClient": sessionHelperEnv,
		"TestHelperDumpClient":    dumpHelperEnv,
		"TestHelperSquatter":      genltest.ModeEnv,
		"TestHelperSquatClient":   squatClientEnv,
	})
	code := m.Run()
	reexec.RemoveBinary()
	os.Exit(code)
}
