package vfiouser

import (
	"flag"
	"os"
	"testing"

	"github.com/gomhi/gomhi/mhi/testenv"
)

// TestMain leaves TestHelperPeer, the uid 65534 client of TestPeerRefused,
// out of every run but the one that test starts.
func TestMain(m *testing.M) {
	flag.Parse()
	testenv.RunHelpersOnlyWhenAsked(map[string]string{"TestHelperPeer": peerHelperEnv})
	os.Exit(m.Run())
}
