package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/gomhi/gomhi/mhi/testenv"
	"github.com/gomhi/gomhi/mhi/testenv/poll"
)

// docMetricRE matches a row of the metrics table in docs/CONTROL.md.
var docMetricRE = regexp.MustCompile("(?m)^\\| `(mhi_[a-z0-9_]+)` \\| (counter|gauge) \\|")

// TestMetricsPromtool: Prometheus's own linter, `promtool check metrics`
// (Debian's prometheus package), finds nothing to report on the metrics of
// a live `mhictl up` whose device has every kind of family: control ports,
// a connected session, the mock modem's counters, and a SoC reset behind
// it, so the recovery counters have moved. Every mhi_ family it serves is
// in the table of docs/CONTROL.md, with the same type.
func TestMetricsPromtool(t *testing.T) {
	promtool := testenv.LookPath(t, "promtool", "prometheus")
	if !inNetns(t) {
		return
	}
	u := startUp(t, "--model", "telit-fn990", "--run-dir", filepath.Join(t.TempDir(), "run"))
	defer u.stop(t)
	if out, err := runCmd(t, mhictl("connect", "mhi0", "--apn", "internet")); err != nil {
		t.Fatalf("connect: %v\n%s", err, out)
	}
	// A SoC reset through the FUSE tree: the controller recovers to M0.
	if err := os.WriteFile(filepath.Join(u.mount, "devices/mhi0/soc_reset"), []byte("1\n"), 0o200); err != nil {
		t.Fatalf("soc_reset: %v", err)
	}
	var text string
	if !poll.Until(10*time.Second, func() bool {
		text = scrape(t, u)
		return strings.Contains(text, `mhi_controller_soc_resets_total{device="mhi0"} 1`) &&
			strings.Contains(text, `mhi_controller_recoveries_total{device="mhi0"} 1`)
	}) {
		t.Fatalf("no recovery after the SoC reset:\n%s", grepLines(text, "mhi_controller_"))
	}

	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = strings.NewReader(text)
	out, err := cmd.CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) != 0 {
		t.Errorf("promtool check metrics: %v, %d problems:\n%s", err, bytes.Count(out, []byte("\n")), out)
	}

	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatalf("the exposition does not parse: %v", err)
	}
	doc, err := os.ReadFile("../../docs/CONTROL.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]string{}
	for _, m := range docMetricRE.FindAllStringSubmatch(string(doc), -1) {
		documented[m[1]] = m[2]
	}
	n := 0
	for name, f := range fams {
		if !strings.HasPrefix(name, "mhi_") {
			continue
		}
		n++
		typ, ok := documented[name]
		if !ok {
			t.Errorf("%s is served but not in the metrics table of docs/CONTROL.md", name)
		} else if !strings.EqualFold(typ, f.GetType().String()) {
			t.Errorf("%s is a %v, the table says %s", name, f.GetType(), typ)
		}
	}
	for _, want := range []string{"mhi_port_ul_messages_total", "mhi_port_pair_dl_bytes_total", "mhi_session_connects_total",
		"mhi_session_info", "mhi_modem_mbim_commands_total", "mhi_controller_recovery_attempts_total",
		"mhi_controller_recovery_failed", "mhi_controller_recovery_backoff_seconds", "go_goroutines", "process_resident_memory_bytes"} {
		if _, ok := fams[want]; !ok {
			t.Errorf("no family %s", want)
		}
	}
	if !strings.Contains(text, `mhi_session_up{device="mhi0"} 1`) {
		t.Errorf("the session is not up in the metrics:\n%s", grepLines(text, "mhi_session"))
	}
	t.Logf("checked %d families (%d mhi_), %d bytes of exposition", len(fams), n, len(text))
}

// grepLines returns the lines of s containing sub.
func grepLines(s, sub string) string {
	var b strings.Builder
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}
