package main

import (
	"flag"
	"os"
	"testing"

	"github.com/gomhi/gomhi/mhi/testenv"
	"github.com/gomhi/gomhi/sysfs/genl/genltest"
)

// TestMain lets tests run this test binary as mhictl itself: with
// GOMHI_RUN_MHICTL=1 in the environment it executes main() with its
// arguments, so the integration tests need no separate build.
func TestMain(m *testing.M) {
	if os.Getenv("GOMHI_RUN_MHICTL") == "1" {
		main()
		os.Exit(0)
	}
	flag.Parse()
	testenv.RunHelpersOnlyWhenAsked(map[string]string{"TestHelperNetlinkSquatter": genltest.ModeEnv})
	os.Exit(m.Run())
}
