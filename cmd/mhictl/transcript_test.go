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

// linuxTranscripts holds Linux's transcripts and the scenario's scripts
// (docs/transcripts; docs/FIDELITY.md §10).
var linuxTranscripts = filepath.Join("..", "..", "docs", "transcripts")

// Kernels and models of the comparison with Linux's host.
var (
	transcriptKernels = []string{"6.1", "6.12", "7.3"}
	transcriptModels  = []string{"telit-fn990", "qcom-sdx55m"}
)

// linuxFixture is Linux's transcript of kernel on model, recorded in the
// lab by TestTranscriptLinuxCurrent's scenario.
func linuxFixture(kernel, model string) string {
	return filepath.Join(linuxTranscripts, "linux-"+kernel+"-"+model+".jsonl")
}

// recordGomhiPinging records gomhi's host on model pinging the gateway
// ten times (as the lab's ping.sh: 56 bytes of data), then stopped: over
// vfio-user against 'modem serve --transcript', or with the embedded mock
// ('up --transcript'). Root, in the test's network namespace.
func recordGomhiPinging(t *testing.T, model string, vfioUser bool) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "gomhi.jsonl")
	var u *upProc
	var stopServer func()
	if vfioUser {
		srv, sock, srvLog := serveModem(t, "--model", model, "--transcript", f)
		u = startUp(t, "--vfio-user", sock)
		stopServer = func() { sigterm(t, srv, srvLog) }
	} else {
		u = startUp(t, "--model", model, "--transcript", f)
	}
	for i := uint16(1); i <= 10; i++ {
		if !pingData(t, i, make([]byte, 56)) {
			t.Fatalf("%s: ping %d not answered:\n%s", model, i, u.logText())
		}
	}
	u.stop(t)
	if stopServer != nil {
		stopServer()
	}
	return f
}

// diffAgainstLinux compares gomhi's transcript with Linux's of every
// kernel under the rules: nothing unexplained, hundreds of records.
func diffAgainstLinux(t *testing.T, model, gomhi, what string) {
	t.Helper()
	for _, k := range transcriptKernels {
		diffOneAgainstLinux(t, linuxFixture(k, model), gomhi, "Linux "+k+" against gomhi's host ("+what+") on "+model)
	}
}

// diffOneAgainstLinux compares gomhi's transcript with Linux's (the file
// linux) under the rules: nothing unexplained, at least 200 records.
func diffOneAgainstLinux(t *testing.T, linux, gomhi, what string) {
	t.Helper()
	out, err := run(t, "transcript", "diff", linux, gomhi, "--json", "--rules", transcriptRules)
	var res transcript.Result
	if jerr := json.Unmarshal([]byte(out), &res); jerr != nil {
		t.Fatalf("%v\n%s", jerr, out)
	}
	if err != nil || res.Unexplained != 0 || res.Compared < 200 {
		text, _ := run(t, "transcript", "diff", linux, gomhi, "--rules", transcriptRules)
		t.Errorf("%s: %v, %d compared, %d unexplained\n%s", what, err, res.Compared, res.Unexplained, text)
		return
	}
	t.Logf("%s: %d records compared, %d differences, all explained", what, res.Compared, len(res.Differences))
}

// TestTranscriptAgainstLinux: gomhi's host ('mhictl up --vfio-user' on a
// served modem, and 'mhictl up' on the embedded mock) pinging ten times
// and stopped programs the device as Linux 6.1's, 6.12's and 7.3's hosts
// do in the lab (their checked-in transcripts: the guest pinging ten
// times and powering off), but for the differences
// docs/transcript-rules.yaml explains, on telit-fn990 and qcom-sdx55m.
// TestTranscriptLinuxCurrent keeps the Linux transcripts current.
func TestTranscriptAgainstLinux(t *testing.T) {
	if !inNetns(t) {
		return
	}
	for _, model := range transcriptModels {
		diffAgainstLinux(t, model, recordGomhiPinging(t, model, true), "vfio-user")
		diffAgainstLinux(t, model, recordGomhiPinging(t, model, false), "in process")
	}
}

// TestTranscriptLinuxCurrent runs the Linux side of the comparison in the
// lab — Linux's drivers in the guest, docs/transcripts/ping.sh, the guest
// powering off — once per kernel (one model each, in turn), and requires
// the record to match the checked-in one with no rule at all: Linux's
// host does the same each run, so a difference means the kernel package
// or the served modem changed and the fixture must be recorded again
// (docs/FIDELITY.md §10 says how).
func TestTranscriptLinuxCurrent(t *testing.T) {
	needLab(t)
	script := filepath.Join(linuxTranscripts, "ping.sh")
	for i, k := range transcriptKernels {
		model := transcriptModels[i%len(transcriptModels)]
		f := filepath.Join(t.TempDir(), "linux.jsonl")
		status, out, errOut := labRun(t, "--json", "--kernel", k, "--model", model, "--serve-args", "--transcript "+f, script)
		if status != 0 {
			t.Fatalf("Linux %s on %s: lab exit %d\n%s\n%s", k, model, status, out, errOut)
		}
		if bad := vfioUserErrors(t, out); len(bad) > 0 {
			t.Errorf("Linux %s on %s: %s", k, model, strings.Join(bad, "; "))
		}
		diff, err := run(t, "transcript", "diff", linuxFixture(k, model), f)
		if err != nil {
			t.Errorf("Linux %s on %s: the checked-in transcript is not current: %v\n%s", k, model, err, diff)
			continue
		}
		t.Logf("Linux %s on %s: %s", k, model, strings.TrimSpace(diff))
	}
}
