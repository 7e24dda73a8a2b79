package soak

import (
	"context"
	"os"
	"testing"
	"time"
)

func TestShortSoak(t *testing.T) {
	o := Options{Duration: 30 * time.Second, SysErrGap: 2 * time.Second, Warmup: 3 * time.Second, KnownBugs: []KnownBug{BugRecoveryDiscard, BugCommandDuringRecovery}}
	sum, err := Run(context.Background(), o)
	if sum != nil {
		_ = sum.WriteTable(os.Stdout, 20)
	}
	if err != nil {
		t.Fatal(err)
	}
}
