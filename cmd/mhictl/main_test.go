package main

import (
	"os"
	"testing"
)

// TestMain lets tests run this test binary as mhictl itself: with
// GOMHI_RUN_MHICTL=1 in the environment it executes main() with its
// arguments, so the integration tests need no separate build.
func TestMain(m *testing.M) {
	if os.Getenv("GOMHI_RUN_MHICTL") == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}
