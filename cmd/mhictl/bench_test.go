package main

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// tinyBench is a grid small enough for a unit test, in real time.
var tinyBench = []string{"bench", "--timing", "wallclock", "--sizes", "64,1500", "--mrus", "1024,32768", "--packets", "2000", "--iterations", "2"}

// runSplit runs mhictl with separate stdout and stderr.
func runSplit(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	cmd := newRootCmd()
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs(args)
	err = cmd.Execute()
	return out.String(), errOut.String(), err
}

func TestBenchTable(t *testing.T) {
	out, err := run(t, tinyBench...)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, want := range []string{"telit-fn990, mbim framing, generator mode", "MRU 1024: ring", "MRU 32768: ring", "median packets/s, % of the best MRU"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestBenchJSON(t *testing.T) {
	args := append(append([]string(nil), tinyBench...), "--json", "--mode", "loopback", "--format", "qmap", "--model", "qcom-sdx55m")
	out, stderr, err := runSplit(t, args...)
	if err != nil {
		t.Fatalf("%v\n%s%s", err, out, stderr)
	}
	if stderr != "" {
		t.Errorf("stderr not empty (no progress bar off a terminal): %q", stderr)
	}
	var rep struct {
		Model, Format, Mode string
		Points              []struct {
			MRU, Size       int
			Delivered, Sent uint64
			Conserved       bool
			PPS             struct{ Median float64 }
		}
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if rep.Model != "qcom-sdx55m" || rep.Format != "qmap" || rep.Mode != "loopback" || len(rep.Points) != 4 {
		t.Fatalf("%+v", rep)
	}
	for _, p := range rep.Points {
		if !p.Conserved || p.Sent != 4000 || p.Delivered != 4000 || p.PPS.Median <= 0 {
			t.Errorf("point %+v", p)
		}
	}
}

func TestBenchCSVAndPlot(t *testing.T) {
	plot := filepath.Join(t.TempDir(), "sweep.svg")
	args := append(append([]string(nil), tinyBench...), "--csv", "--plot", plot)
	out, stderr, err := runSplit(t, args...)
	if err != nil {
		t.Fatalf("%v\n%s%s", err, out, stderr)
	}
	rows, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(rows) != 5 || rows[0][4] != "mru" || rows[1][4] != "1024" || rows[4][4] != "32768" {
		t.Fatalf("%q", rows)
	}
	if !strings.Contains(stderr, "wrote plot to "+plot) {
		t.Errorf("stderr %q", stderr)
	}
	b, err := os.ReadFile(plot)
	if err != nil {
		t.Fatal(err)
	}
	if s := string(b); !strings.HasPrefix(s, "<?xml") && !strings.HasPrefix(s, "<svg") || !strings.Contains(s, "MRU 1024") {
		t.Errorf("not an SVG: %.100q", s)
	}
}

func TestBenchBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--mode", "sideways"}, "--mode"},
		{[]string{"--format", "ppp"}, "--format"},
		{[]string{"--mrus", "100"}, "valid range 256..65535"},
		{[]string{"--mrus", "70000"}, "valid range 256..65535"},
		{[]string{"--sizes", "10"}, "packet size 10, want 36..65507"},
		{[]string{"--sizes", "64,x"}, "--sizes"},
		{[]string{"--sizes", "64,40000"}, "aggregate"},
		{[]string{"--sizes", "64,2000", "--max-aggregate", "1500"}, "aggregate"},
		{[]string{"--packets", "0"}, "--packets"},
		{[]string{"--iterations", "-1"}, "--iterations"},
		{[]string{"--max-datagrams", "-1"}, "-1 packets"},
		{[]string{"--json", "--csv"}, "mutually exclusive"},
		{[]string{"--plot", "sweep.gif"}, ".svg or .png"},
		{[]string{"--plot", "/no/such/dir/sweep.svg"}, "--plot"},
		{[]string{"--model", "no-such-modem"}, "unknown modem model"},
		{[]string{"--timing", "no-such-profile"}, "unknown timing profile"},
		{[]string{"--timing", "mru-thread", "--mode", "loopback"}, "generator mode only"},
		{[]string{"--timing", "mru-thread", "--sizes", "40"}, "at least 36"},
	} {
		args := append(append([]string(nil), tinyBench...), tc.args...)
		out, err := run(t, args...)
		if err == nil {
			t.Errorf("%v succeeded:\n%s", tc.args, out)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %q does not name %q", tc.args, err, tc.want)
		}
		if strings.Contains(out, "MRU") {
			t.Errorf("%v: ran before failing:\n%s", tc.args, out)
		}
	}
}

// TestBenchTiming: the command runs in virtual time and prints,
// for every point, the MRU, the size, packets/s, the line-rate
// percentage and the host's CPU per packet; every point is conserved.
func TestBenchTiming(t *testing.T) {
	out, stderr, err := runSplit(t, "bench", "--timing", "mru-thread", "--mrus", "3500,32768",
		"--sizes", "64,128,256,512,1024,1262,1263,1280,1428,1500,1518", "--packets", "2000", "--iterations", "1", "--json")
	if err != nil {
		t.Fatalf("%v\n%s%s", err, out, stderr)
	}
	var rep struct {
		Timing string
		Points []struct {
			MRU, Size          *int
			PPS                *struct{ Median float64 }
			LineRatePct        *struct{ Median, Min, Max float64 } `json:"line_rate_pct"`
			HostCPUNsPerPacket *float64                            `json:"host_cpu_ns_per_packet"`
			Conserved          bool
			Delivered, Sent    uint64
		}
		Reference []struct{ Size, MRU int }
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if rep.Timing != "mru-thread" || len(rep.Points) != 22 || len(rep.Reference) != 10 {
		t.Fatalf("timing %q, %d points, %d reference rows", rep.Timing, len(rep.Points), len(rep.Reference))
	}
	for _, p := range rep.Points {
		if p.MRU == nil || p.Size == nil || p.PPS == nil || p.LineRatePct == nil || p.HostCPUNsPerPacket == nil {
			t.Fatalf("point lacks a field: %+v", p)
		}
		if !p.Conserved || p.Delivered != 2000 || p.Sent < p.Delivered || p.PPS.Median <= 0 ||
			p.LineRatePct.Median <= 0 || p.LineRatePct.Max > 100 || *p.HostCPUNsPerPacket <= 0 {
			t.Errorf("MRU %d size %d: %+v", *p.MRU, *p.Size, p)
		}
	}
}

// TestBenchTimingTable: the table shows line-rate percentages and, for
// the profile's table, the measured column.
func TestBenchTimingTable(t *testing.T) {
	out, err := run(t, "bench", "--quick", "--packets", "2000", "--iterations", "1")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, want := range []string{"virtual time, timing profile mru-thread", "LINE% MED", "HOST NS/PKT",
		"MEASURED 3500", "43.82%", "22.45%", "elapsed"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// TestModelFit: a fit (tiny here) prints every row's residual and writes
// a profile that 'bench --timing' takes.
func TestModelFit(t *testing.T) {
	dir := t.TempDir()
	table := filepath.Join(dir, "t.csv")
	if err := os.WriteFile(table, []byte("size,mru,line_rate_pct\n64,3500,6.21\n1500,3500,46.32\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	prof := filepath.Join(dir, "p.json")
	out, err := run(t, "model", "fit", "--table", table, "--profile", prof, "--packets", "1000", "--rounds", "1")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, want := range []string{"MEASURED %", "MODEL %", "RESIDUAL", "largest |residual|", "tre_poll", "fitted", "set"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if out, err := run(t, "bench", "--timing", prof, "--sizes", "64", "--mrus", "3500", "--packets", "500", "--iterations", "1"); err != nil {
		t.Fatalf("bench with the fitted profile: %v\n%s", err, out)
	}
	if _, err := run(t, "model", "fit"); err == nil || !strings.Contains(err.Error(), "--table") {
		t.Errorf("fit without --table: %v", err)
	}
}

// TestModelSensitivity: every parameter but the link's gets a row with the
// objective at ×factor and ÷factor and each table row's residuals.
func TestModelSensitivity(t *testing.T) {
	dir := t.TempDir()
	table := filepath.Join(dir, "t.csv")
	if err := os.WriteFile(table, []byte("size,mru,line_rate_pct\n1262,3500,43.82\n1263,3500,22.45\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := run(t, "model", "sensitivity", "--table", table, "--packets", "1000", "--factor", "1.1")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, want := range []string{"objective", "×1.1", "÷1.1", "1262 ×", "1263 ÷", "ingress_queue", "tre_burst", "tre_poll", "modem_packet", "modem_header_byte", "header_window", "modem_element"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "link_rate") {
		t.Errorf("the link's rate is varied:\n%s", out)
	}
	if _, err := run(t, "model", "sensitivity", "--table", table, "--factor", "1"); err == nil {
		t.Error("--factor 1 accepted")
	}
}

func TestBenchQuickKeepsExplicitFlags(t *testing.T) {
	out, _, err := runSplit(t, "bench", "--timing", "wallclock", "--quick", "--sizes", "100", "--mrus", "4096", "--packets", "500", "--iterations", "1", "--csv")
	if err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	if err != nil || len(rows) != 2 || rows[1][3] != "500" || rows[1][4] != "4096" || rows[1][5] != "100" || rows[1][6] != "1" {
		t.Fatalf("%v %q", err, rows)
	}
}
