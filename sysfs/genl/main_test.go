package genl_test

import (
	"flag"
	"os"
	"testing"
)

// TestMain leaves TestHelperClient, the unprivileged side of
// TestNonRootClient, out of every run but the one TestNonRootClient starts
// (helperPortEnv set): it is not a test of its own, so it neither passes
// nor skips in an ordinary run.
func TestMain(m *testing.M) {
	flag.Parse()
	if os.Getenv(helperPortEnv) == "" {
		skip := "^TestHelperClient$"
		if prev := flag.Lookup("test.skip").Value.String(); prev != "" {
			skip = prev + "|" + skip
		}
		if err := flag.Set("test.skip", skip); err != nil {
			panic(err)
		}
	}
	os.Exit(m.Run())
}
