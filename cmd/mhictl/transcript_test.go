package main

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gomhi/gomhi/mhi/ep/transcript"
)

// transcriptFixture is the checked-in record of gomhi's host on the mock
// (mhi/ep/transcript's TestFixtureCurrent keeps it current).
var transcriptFixture = filepath.Join("..", "..", "mhi", "ep", "transcript", "testdata", "sdx55.jsonl")

// transcriptRules is the repository's rules file.
var transcriptRules = filepath.Join("..", "..", "docs", "transcript-rules.yaml")

// exitStatusOf is the status main exits with for err.
func exitStatusOf(err error) int {
	var es *exitStatusError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &es):
		return es.status
	}
	return 1
}

// cutFifth writes the transcript at src with every fifth line cut out.
func cutFifth(t *testing.T, src string) string {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	var kept []string
	for i, l := range strings.SplitAfter(string(b), "\n") {
		if i%5 != 2 {
			kept = append(kept, l)
		}
	}
	dst := filepath.Join(t.TempDir(), "cut.jsonl")
	if err := os.WriteFile(dst, []byte(strings.Join(kept, "")), 0o644); err != nil {
		t.Fatal(err)
	}
	return dst
}

// TestTranscriptDiffExitStatus: 0 when nothing is unexplained, 1 when
// something is, 2 on usage and file errors.
func TestTranscriptDiffExitStatus(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.jsonl")
	if err := os.WriteFile(bad, []byte("{\"seq\":1,\"kind\":\"nonsense\"}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	badRules := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(badRules, []byte("rules:\n  - kind: missing\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cut := cutFifth(t, transcriptFixture)
	for _, tc := range []struct {
		args []string
		want int
	}{
		{[]string{transcriptFixture, transcriptFixture}, 0},
		{[]string{transcriptFixture, transcriptFixture, "--rules", transcriptRules}, 0},
		{[]string{transcriptFixture, cut, "--rules", transcriptRules}, 1},
		{[]string{transcriptFixture}, 2},
		{[]string{transcriptFixture, transcriptFixture, transcriptFixture}, 2},
		{[]string{transcriptFixture, "/nonexistent.jsonl"}, 2},
		{[]string{transcriptFixture, bad}, 2},
		{[]string{transcriptFixture, transcriptFixture, "--rules", badRules}, 2},
		{[]string{transcriptFixture, transcriptFixture, "--no-such-flag"}, 2},
	} {
		out, err := run(t, append([]string{"transcript", "diff"}, tc.args...)...)
		if got := exitStatusOf(err); got != tc.want {
			t.Errorf("%v: exit status %d (%v), want %d:\n%s", tc.args, got, err, tc.want, out)
		}
	}
}

// TestTranscriptDiffJSON: the JSON result of a self-diff and of a diff
// against the transcript with a fifth cut out.
func TestTranscriptDiffJSON(t *testing.T) {
	var res transcript.Result
	out, err := run(t, "transcript", "diff", transcriptFixture, transcriptFixture, "--json")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if res.Compared < 100 || len(res.Differences) != 0 || res.Unexplained != 0 {
		t.Fatalf("self-diff: %+v", res)
	}
	out, err = run(t, "transcript", "diff", transcriptFixture, cutFifth(t, transcriptFixture), "--json")
	if exitStatusOf(err) != exitDiffUnexplained {
		t.Fatalf("cut: %v\n%s", err, out)
	}
	res = transcript.Result{}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if res.Unexplained == 0 || res.Unexplained != len(res.Differences) {
		t.Fatalf("cut: %d unexplained of %d", res.Unexplained, len(res.Differences))
	}
	for _, d := range res.Differences {
		if d.Kind == "" || d.Phase == "" || d.Where == "" || d.A == "" && d.B == "" {
			t.Fatalf("incomplete difference %+v", d)
		}
	}
	out, _ = run(t, "transcript", "diff", transcriptFixture, cutFifth(t, transcriptFixture))
	if !strings.Contains(out, "unexplained") || !strings.Contains(out, "compared ") {
		t.Fatalf("text output:\n%s", out)
	}
}

// TestTranscriptUpAndServe: `mhictl up --transcript` (the embedded mock)
// and `mhictl modem serve --transcript` (gomhi's host over vfio-user)
// write transcripts of the same model that compare clean under the rules,
// and --transcript is refused where the modem is not in the process.
func TestTranscriptUpAndServe(t *testing.T) {
	dir := t.TempDir()
	inproc, served := filepath.Join(dir, "inproc.jsonl"), filepath.Join(dir, "served.jsonl")
	up := mhictl("up", "--transcript", inproc, "--netlink-port", testPort(11), "--run-dir", filepath.Join(dir, "run1"))
	sigterm(t, up, startProc(t, up, "ready"))

	srv, sock, srvLog := serveModem(t, "--transcript", served)
	remote := mhictl("up", "--vfio-user", sock, "--netlink-port", testPort(12), "--run-dir", filepath.Join(dir, "run2"))
	sigterm(t, remote, startProc(t, remote, "ready"))
	sigterm(t, srv, srvLog)

	for _, f := range []string{inproc, served} {
		recs, err := readTranscript(f)
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) < 100 {
			t.Fatalf("%s: %d records", f, len(recs))
		}
		maps := 0
		for _, r := range recs {
			if r.Kind == transcript.KindDMAMap {
				maps++
			}
		}
		if (maps > 0) != (f == served) {
			t.Errorf("%s: %d DMA maps recorded", f, maps)
		}
	}
	out, err := run(t, "transcript", "diff", inproc, served, "--rules", transcriptRules)
	if err != nil {
		t.Fatalf("in process against vfio-user: %v\n%s", err, out)
	}
	t.Logf("in process against vfio-user: %s", out)

	_, err = run(t, "up", "--vfio-user", sock, "--transcript", filepath.Join(dir, "x.jsonl"))
	if err == nil || !strings.Contains(err.Error(), "--transcript") {
		t.Fatalf("up --vfio-user --transcript: %v", err)
	}
}
