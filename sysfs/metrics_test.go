package sysfs_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/gomhi/gomhi/sysfs"
	"github.com/gomhi/gomhi/sysfs/sysfstest"
)

// scraped is one scrape of a tree's metrics handler.
type scraped struct {
	text        string
	contentType string
	fams        map[string]*dto.MetricFamily
}

// scrape fetches the tree's /metrics in the text format and parses it with
// the library's own parser.
func scrape(t *testing.T, tr *sysfs.Tree) scraped {
	t.Helper()
	srv := httptest.NewServer(tr.MetricsHandler())
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s\n%s", resp.Status, body)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("the exposition does not parse: %v\n%s", err, body)
	}
	return scraped{text: string(body), contentType: resp.Header.Get("Content-Type"), fams: fams}
}

// sample returns the value of the sample of family name whose labels are
// exactly want.
func (s scraped) sample(name string, want map[string]string) (float64, bool) {
	f, ok := s.fams[name]
	if !ok {
		return 0, false
	}
	for _, m := range f.GetMetric() {
		got := map[string]string{}
		for _, l := range m.GetLabel() {
			got[l.GetName()] = l.GetValue()
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			continue
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		}
	}
	return 0, false
}

func TestMetrics(t *testing.T) {
	tr, _ := newTree(t)
	s := scrape(t, tr)
	if !strings.HasPrefix(s.contentType, "text/plain; version=0.0.4") {
		t.Errorf("content type %q", s.contentType)
	}
	dev := map[string]string{"device": "mhi0"}
	for _, tc := range []struct {
		name   string
		typ    dto.MetricType
		labels map[string]string
		value  float64 // -1: any
	}{
		{"mhi_mru_bytes", dto.MetricType_GAUGE, dev, 32768},
		{"mhi_mtu_bytes", dto.MetricType_GAUGE, dev, 1500},
		{"mhi_timeout_seconds", dto.MetricType_GAUGE, dev, 8},
		{"mhi_device_info", dto.MetricType_GAUGE, map[string]string{"device": "mhi0", "state": "M0", "ee": "AMSS", "model": "qcom-sdx55m", "pm_state": "M0"}, 1},
		{"mhi_controller_recovery_failed", dto.MetricType_GAUGE, dev, 0},
		{"mhi_controller_recovery_backoff_seconds", dto.MetricType_GAUGE, dev, 0},
		{"mhi_controller_events_total", dto.MetricType_COUNTER, dev, -1},
		{"mhi_controller_bad_event_ring_rp_total", dto.MetricType_COUNTER, dev, 0},
		{"mhi_net_rx_packets_total", dto.MetricType_COUNTER, dev, 0},
		{"mhi_net_rx_elements_total", dto.MetricType_COUNTER, dev, 0},
		{"mhi_net_mru_changes_total", dto.MetricType_COUNTER, dev, 0},
		{"mhi_net_pool_memory_bytes", dto.MetricType_GAUGE, dev, -1},
		{"mhi_net_tx_agg_closed_by_size_total", dto.MetricType_COUNTER, dev, 0},
		{"mhi_channel_completed_total", dto.MetricType_COUNTER, map[string]string{"device": "mhi0", "channel": "101", "channel_name": "IP_HW0"}, -1},
		{"mhi_channel_bytes_total", dto.MetricType_COUNTER, map[string]string{"device": "mhi0", "channel": "101", "channel_name": "IP_HW0"}, -1},
		{"mhi_channel_pending", dto.MetricType_GAUGE, map[string]string{"device": "mhi0", "channel": "101", "channel_name": "IP_HW0"}, -1},
	} {
		f, ok := s.fams[tc.name]
		if !ok {
			t.Errorf("no family %s", tc.name)
			continue
		}
		if f.GetType() != tc.typ {
			t.Errorf("%s is a %v, want %v", tc.name, f.GetType(), tc.typ)
		}
		v, ok := s.sample(tc.name, tc.labels)
		if !ok {
			t.Errorf("%s has no sample with labels %v", tc.name, tc.labels)
		} else if tc.value >= 0 && v != tc.value {
			t.Errorf("%s%v = %v, want %v", tc.name, tc.labels, v, tc.value)
		}
	}
	// The values are live: a change shows in the next scrape.
	if err := tr.Set("devices/mhi0/timeout_ms", "2500"); err != nil {
		t.Fatal(err)
	}
	if v, _ := scrape(t, tr).sample("mhi_timeout_seconds", dev); v != 2.5 {
		t.Errorf("mhi_timeout_seconds = %v after writing 2500 to timeout_ms, want 2.5", v)
	}
	// The Go runtime's, the process's and the handler's own metrics.
	for _, name := range []string{"go_goroutines", "go_memstats_alloc_bytes", "process_cpu_seconds_total", "process_open_fds",
		"promhttp_metric_handler_requests_total"} {
		if _, ok := s.fams[name]; !ok {
			t.Errorf("no family %s", name)
		}
	}
	// The old hand-written names are gone.
	for _, old := range []string{"mhi_mru{", "mhi_timeout_ms", "mhi_mhi_", "mhi_net_rx_packets{"} {
		if strings.Contains(s.text, old) {
			t.Errorf("the exposition still has %q", old)
		}
	}
}

// TestMetricsOpenMetrics: a scraper that asks for OpenMetrics gets it.
func TestMetricsOpenMetrics(t *testing.T) {
	tr, _ := newTree(t)
	srv := httptest.NewServer(tr.MetricsHandler())
	defer srv.Close()
	req, _ := http.NewRequest("GET", srv.URL, nil)
	req.Header.Set("Accept", "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/openmetrics-text") {
		t.Fatalf("content type %q", ct)
	}
	text := string(body)
	for _, want := range []string{
		"# TYPE mhi_net_rx_packets counter\n",
		"# HELP mhi_net_rx_packets packets received and delivered\n",
		`mhi_net_rx_packets_total{device="mhi0"} 0.0` + "\n",
		"# TYPE mhi_mru_bytes gauge\n" + `mhi_mru_bytes{device="mhi0"} 32768.0` + "\n",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("OpenMetrics exposition lacks %q", want)
		}
	}
	if !strings.HasSuffix(text, "# EOF\n") {
		t.Errorf("OpenMetrics exposition does not end with # EOF")
	}
}

// controlTree is a tree over a device with every kind of group: network
// device, a control port, a data session and the mock modem's counters.
func controlTree(t *testing.T) *sysfs.Tree {
	t.Helper()
	d := sysfstest.NewControlDevice(t, "mhi0", "")
	tr := sysfs.NewTree()
	tr.AddDevice("mhi0", d.Binding())
	return tr
}

// gather collects the tree's own families (no Go or process metrics).
func gather(t *testing.T, tr *sysfs.Tree) []*dto.MetricFamily {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(sysfs.NewCollector(tr))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	return mfs
}

var snakeCase = regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)

// TestMetricsFollowConventions runs the library's own linter (promlint,
// what `promtool check metrics` runs) over every family of a device with
// all groups, and checks the naming rules it does not: counters and only
// counters end in _total, no abbreviated units, snake_case labels.
func TestMetricsFollowConventions(t *testing.T) {
	mfs := gather(t, controlTree(t))
	if len(mfs) < 150 {
		t.Fatalf("only %d families", len(mfs))
	}
	problems, err := promlint.NewWithMetricFamilies(mfs).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
	for _, f := range mfs {
		name := f.GetName()
		if !strings.HasPrefix(name, "mhi_") || !snakeCase.MatchString(name) {
			t.Errorf("%s: not an mhi_ snake_case name", name)
		}
		if (f.GetType() == dto.MetricType_COUNTER) != strings.HasSuffix(name, "_total") {
			t.Errorf("%s is a %v", name, f.GetType())
		}
		if strings.Contains(name+"_", "_ms_") {
			t.Errorf("%s: milliseconds in a name", name)
		}
		if f.GetHelp() == "" {
			t.Errorf("%s has no HELP", name)
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if !snakeCase.MatchString(l.GetName()) {
					t.Errorf("%s: label %q", name, l.GetName())
				}
			}
		}
	}
}

// TestEveryMetricDocumented: every counter-group attribute has a
// description of its own (statDocs), and the catalogue names nothing the
// tree does not have.
func TestEveryMetricDocumented(t *testing.T) {
	tr := controlTree(t)
	seen := map[string]bool{}
	tr.Walk(func(path string, a *sysfs.Attr) {
		parts := strings.Split(path, "/")
		// devices/mhi0/stats/<group>/<attr> or stats/ports/<port>/<attr>
		if len(parts) >= 5 && parts[2] == "stats" {
			seen[parts[3]+"/"+a.Name] = true
		}
		if a.Metric != sysfs.NotAMetric && (a.Doc == "" || strings.HasPrefix(a.Doc, sysfs.Undocumented)) {
			t.Errorf("%s has no description: add it to statDocs in sysfs/statdocs.go", path)
		}
	})
	for group, names := range sysfs.StatDocNames() {
		for _, n := range names {
			if !seen[group+"/"+n] {
				t.Errorf("statDocs describes %s/%s, which the tree does not have", group, n)
			}
		}
	}
}

// metricRow is one line of the metrics table in docs/CONTROL.md.
type metricRow struct {
	name, typ, labels, attr, was, help string
}

// metricRows lists the tree's families with the attribute each comes
// from and the name the hand-written exposition used before.
func metricRows(t *testing.T, tr *sysfs.Tree) []metricRow {
	t.Helper()
	rows := map[string]metricRow{}
	add := func(r metricRow) {
		if old, ok := rows[r.name]; ok && old != r {
			t.Fatalf("family %s from two attributes: %+v and %+v", r.name, old, r)
		}
		rows[r.name] = r
	}
	tr.Walk(func(path string, a *sysfs.Attr) {
		if a.Metric == sysfs.NotAMetric {
			return
		}
		parts := strings.Split(path, "/")[2:] // after devices/<dev>/
		typ := "gauge"
		if a.Metric == sysfs.Counter {
			typ = "counter"
		}
		r := metricRow{typ: typ, labels: "device", help: a.Doc}
		switch {
		case len(parts) == 1:
			r.name, r.attr, r.was = sysfs.MetricName("", a), a.Name, "mhi_"+a.Name
		case parts[0] == "channels":
			r.name, r.attr, r.was = sysfs.MetricName("channel_", a), "channels/<num>_<name>/"+a.Name, "mhi_channel_"+a.Name
			r.labels = "device, channel, channel_name"
		case parts[0] == "stats" && parts[1] == "ports":
			r.name, r.attr, r.was = sysfs.MetricName("port_", a), "stats/ports/<port>/"+a.Name, "mhi_port_"+a.Name
			r.labels = "device, port"
		case parts[0] == "stats" && (parts[1] == "sessions" || parts[1] == "modem_sessions") && len(parts) == 4:
			r.name, r.attr = sysfs.MetricName(parts[1]+"_", a), "stats/"+parts[1]+"/<n>/"+a.Name
			r.was, r.labels = r.name, "device, session"
		case parts[0] == "stats" && parts[1] == "sessions":
			r.name, r.attr = sysfs.MetricName("sessions_", a), "stats/sessions/"+a.Name
			r.was = r.name // new with sessions by number
		case parts[0] == "stats" && parts[1] == "mhi":
			r.name, r.attr, r.was = sysfs.MetricName("controller_", a), "stats/mhi/"+a.Name, "mhi_mhi_"+a.Name
		case parts[0] == "stats":
			r.name, r.attr, r.was = sysfs.MetricName(parts[1]+"_", a), "stats/"+parts[1]+"/"+a.Name, "mhi_"+parts[1]+"_"+a.Name
		default:
			t.Fatalf("%s is a metric the table does not place", path)
		}
		add(r)
	})
	add(metricRow{name: "mhi_device_info", typ: "gauge", labels: "device, model, state, ee, pm_state", attr: "model, state, ee, pm_state", was: "mhi_device_info"})
	add(metricRow{name: "mhi_session_info", typ: "gauge", labels: "device, state, protocol, apn, ip_type, ipv4, ipv6, interface", attr: "session/…", was: "mhi_session_info"})
	add(metricRow{name: "mhi_session_up", typ: "gauge", labels: "device", attr: "session/state", was: "mhi_session_up"})
	add(metricRow{name: "mhi_sessions_info", typ: "gauge", labels: "device, session, state, protocol, apn, ip_type, ipv4, ipv6, interface", attr: "sessions/<n>/…", was: "mhi_sessions_info"})
	add(metricRow{name: "mhi_sessions_up", typ: "gauge", labels: "device, session", attr: "sessions/<n>/state", was: "mhi_sessions_up"})
	// The rows and the collector's families must be the same set, with
	// the same types and HELP texts.
	fams := gather(t, tr)
	for _, f := range fams {
		r, ok := rows[f.GetName()]
		if !ok {
			t.Errorf("the collector exposes %s, which no tree attribute explains", f.GetName())
			continue
		}
		if !strings.EqualFold(r.typ, f.GetType().String()) {
			t.Errorf("%s: table type %s, collector %v", r.name, r.typ, f.GetType())
		}
		if r.help == "" {
			r.help = f.GetHelp()
			rows[r.name] = r
		} else if r.help != f.GetHelp() {
			t.Errorf("%s: HELP %q, attribute doc %q", r.name, f.GetHelp(), r.help)
		}
	}
	if len(fams) != len(rows) {
		t.Errorf("%d families, %d table rows", len(fams), len(rows))
	}
	out := make([]metricRow, 0, len(rows))
	for _, r := range rows {
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

// TestMetricsDocTable: the table of metrics in docs/CONTROL.md is the
// collector's; GOMHI_UPDATE_DOCS=1 rewrites it.
func TestMetricsDocTable(t *testing.T) {
	const path = "../docs/CONTROL.md"
	const begin, end = "<!-- metrics-table:begin -->\n", "<!-- metrics-table:end -->"
	rows := metricRows(t, controlTree(t))
	var b strings.Builder
	b.WriteString("| metric | type | labels | attribute (under `devices/<dev>/`) | before | description |\n")
	b.WriteString("|---|---|---|---|---|---|\n")
	for _, r := range rows {
		was := "same"
		if r.was != r.name {
			was = "`" + r.was + "`"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | `%s` | %s | %s |\n", r.name, r.typ, r.labels, r.attr, was,
			strings.ReplaceAll(r.help, "|", `\|`))
	}
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	i, j := bytes.Index(doc, []byte(begin)), bytes.Index(doc, []byte(end))
	if i < 0 || j < i {
		t.Fatalf("%s lacks the markers %q … %q", path, begin, end)
	}
	if string(doc[i+len(begin):j]) == b.String() {
		return
	}
	if os.Getenv("GOMHI_UPDATE_DOCS") == "1" {
		out := slices.Concat(doc[:i+len(begin)], []byte(b.String()), doc[j:])
		if err := os.WriteFile(path, out, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("rewrote the metrics table in %s", path)
		return
	}
	t.Errorf("the metrics table in %s is stale; run GOMHI_UPDATE_DOCS=1 go test ./sysfs -run TestMetricsDocTable\nwant:\n%s", path, b.String())
}
