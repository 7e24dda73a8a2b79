package main

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// TestLowFileLimit runs this binary as mhictl under `ulimit -n N` (soft
// and hard limit) for a few commands: none may panic (go-fuse's splice
// package panicked in its init under `ulimit -n 8`, before main); a
// command that fails must say it is the open-file limit. Under 8 every
// command fails with cmd/mhictl/internal/fdlimit's line; under 32 (above
// fdlimit.Min) they all work (bench --quick is run under 8 and 16 only).
func TestLowFileLimit(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skipf("no sh: %v", err)
	}
	for _, limit := range []int{8, 16, 32} {
		for _, args := range [][]string{{"models"}, {"--help"}, {"bench", "--quick"}} {
			if limit > 16 && args[0] == "bench" {
				continue // works under 16, takes seconds under -race
			}
			name := strconv.Itoa(limit) + "/" + strings.Join(args, "_")
			t.Run(name, func(t *testing.T) {
				cmd := exec.Command(sh, append([]string{"-c", `ulimit -n "$0" && exec "$@"`, strconv.Itoa(limit), os.Args[0]}, args...)...)
				cmd.Env = append(os.Environ(), "GOMHI_RUN_MHICTL=1")
				b, err := cmd.CombinedOutput()
				out := string(b)
				t.Logf("$ ulimit -n %d; mhictl %s: %v\n%s", limit, strings.Join(args, " "), err, firstLines(out, 4))
				if strings.Contains(out, "panic:") || strings.Contains(out, "goroutine ") {
					t.Fatalf("mhictl panicked under ulimit -n %d:\n%s", limit, out)
				}
				if err != nil && !strings.Contains(out, "open-file limit") {
					t.Errorf("mhictl failed under ulimit -n %d without naming the open-file limit: %v\n%s", limit, err, out)
				}
				switch want := "mhictl: open-file limit 8 is too low: need at least "; {
				case limit == 8 && (err == nil || !strings.HasPrefix(out, want) || strings.Count(out, "\n") != 1):
					t.Errorf("under ulimit -n 8: %v, output %q; want an error, one line starting %q", err, out, want)
				case limit == 32 && err != nil:
					t.Errorf("under ulimit -n 32: %v", err)
				}
			})
		}
	}
}

// firstLines returns the first n lines of s.
func firstLines(s string, n int) string {
	lines := strings.SplitAfter(s, "\n")
	return strings.Join(lines[:min(n, len(lines))], "")
}
