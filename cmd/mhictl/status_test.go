package main

import (
	"strings"
	"testing"

	"github.com/gomhi/gomhi/mhi"
)

// The status table says loudly when SYS_ERR recovery gave up.
func TestStatusShowsRecovery(t *testing.T) {
	for _, tc := range []struct {
		name string
		st   mhi.Status
		want []string
	}{
		{"healthy", mhi.Status{Name: "mhi0", PM: "M0", Recovery: mhi.RecoveryStatus{Attempts: 1}},
			[]string{"host PM M0", "recovery: ok (1 attempts, 0 failed)"}},
		{"recovering", mhi.Status{Name: "mhi0", PM: "SYS_ERR_PROCESS", Recovery: mhi.RecoveryStatus{Attempts: 2, Failures: 1, Consecutive: 2, Limit: 5, Backoff: 10e6}},
			[]string{"recovery: in progress, 2 consecutive of 5 allowed, backoff 10ms"}},
		{"failed", mhi.Status{Name: "mhi0", PM: mhi.PMRecoveryFailed, Recovery: mhi.RecoveryStatus{Attempts: 5, Failures: 5, Failed: true, LastError: "gave up"}},
			[]string{"host PM RECOVERY_FAILED", "recovery: FAILED after 5 attempts (5 failed): gave up", "power it down and up again"}},
	} {
		var b strings.Builder
		if err := writeStatus(&b, tc.st, "qcom-sdx55m"); err != nil {
			t.Fatal(err)
		}
		for _, w := range tc.want {
			if !strings.Contains(b.String(), w) {
				t.Errorf("%s: output lacks %q:\n%s", tc.name, w, b.String())
			}
		}
	}
}
