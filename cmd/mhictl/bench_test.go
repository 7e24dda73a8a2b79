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

// tinyBench is a grid small enough for a unit test.
var tinyBench = []string{"bench", "--sizes", "64,1500", "--mrus", "1024,32768", "--packets", "2000", "--iterations", "2"}

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

func TestBenchQuickKeepsExplicitFlags(t *testing.T) {
	out, _, err := runSplit(t, "bench", "--quick", "--sizes", "100", "--mrus", "4096", "--packets", "500", "--iterations", "1", "--csv")
	if err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	if err != nil || len(rows) != 2 || rows[1][3] != "500" || rows[1][4] != "4096" || rows[1][5] != "100" || rows[1][6] != "1" {
		t.Fatalf("%v %q", err, rows)
	}
}
