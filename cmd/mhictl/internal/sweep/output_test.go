package sweep

import (
	"bytes"
	"encoding/csv"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"gonum.org/v1/plot"
)

// handReport is a two-MRU, three-size report built by hand; MRU 3500
// halves the rate of 1263-byte packets, as in the MRU thread.
func handReport() *Report {
	r := &Report{Model: "telit-fn990", Format: "mbim", Mode: Generator, Packets: 20000, Elapsed: 1500 * time.Millisecond}
	for _, mru := range []int{3500, 32768} {
		for _, size := range []int{64, 1262, 1263} {
			med := 2_000_000.0 - float64(size)*1000
			if mru == 3500 && size == 1263 {
				med /= 2
			}
			p := Point{
				MRU: mru, Size: size, Iterations: 3,
				PPS:                Summary{Min: med * 0.9, Max: med * 1.1, Avg: med, Median: med},
				MBps:               Summary{Min: med * 0.9 * float64(size) / 1e6, Max: med * 1.1 * float64(size) / 1e6, Avg: med * float64(size) / 1e6, Median: med * float64(size) / 1e6},
				ElementsPerPacket:  1.0 / 32,
				EventsPerPacket:    1.0 / 32,
				PacketsPerTransfer: 32,
				RingMemory:         511 * mru,
				PoolMemory:         1024 * mru,
				Sent:               60000, Delivered: 60000, Conserved: true,
			}
			if mru == 3500 && size == 1263 {
				p.ChainsPerPacket, p.OverflowsPerPacket = 0.5, 0.25
				p.Delivered, p.Dropped = 59990, 10
				p.Drops = map[string]uint64{"modem_dropped": 6, "host_rx_errors": 4}
			}
			r.Points = append(r.Points, p)
		}
	}
	return r
}

// tableWith returns r's table for people, logged, and fails the test for
// each of wants it lacks.
func tableWith(t *testing.T, r *Report, wants ...string) string {
	t.Helper()
	var b bytes.Buffer
	if err := r.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	t.Logf("\n%s", out)
	for _, want := range wants {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q", want)
		}
	}
	return out
}

func TestWriteTable(t *testing.T) {
	out := tableWith(t, handReport(),
		"telit-fn990, mbim framing, generator mode, wall clock: 20000 packets × 3 iterations per point, 6 points",
		"elapsed 1.5s",
		"MRU 3500: ring 511 × 3500 B = 1747 KiB, pool 3500 KiB",
		"MRU 32768: ring 511 × 32768 B = 16352 KiB, pool 32768 KiB",
		"median packets/s, % of the best MRU for that size",
		"369k (50.0%)", // MRU 3500, size 1263
		"737k (100.0%)",
		"1.94M (100.0%)",
		"PPS MED", "MB/S MED", "ELEM/PKT", "CHAINS/PKT", "PKTS/XFER", "CONSERVED",
	)
	// The cross table has a row per size, MRUs as columns.
	cross := out[strings.Index(out, "median packets/s"):strings.Index(out, "elapsed")]
	lines := strings.Split(strings.TrimSpace(cross), "\n")
	if len(lines) != 5 || !strings.Contains(lines[1], "MRU 3500") || !strings.Contains(lines[1], "MRU 32768") {
		t.Fatalf("cross table:\n%s", cross)
	}
	if f := strings.Fields(lines[4]); f[0] != "1263" || len(f) != 5 {
		t.Errorf("cross row %q", lines[4])
	}
	// The point that lost nothing but counted drops is still conserved.
	if strings.Contains(out, "NO") {
		t.Errorf("unexpected not-conserved point")
	}
}

// TestWriteTableVirtual: a timing-mode report shows the line-rate
// percentage beside packets/s, the host's CPU per packet, and the
// reference table's measured column beside its MRU.
func TestWriteTableVirtual(t *testing.T) {
	r := handReport()
	r.Timing = "mru-thread"
	r.Reference = []Row{{Size: 1262, MRU: 3500, LineRatePct: 43.82}, {Size: 1263, MRU: 3500, LineRatePct: 22.45}}
	for i := range r.Points {
		p := &r.Points[i]
		p.IPSize = p.Size - FrameHeader
		lr := Summary{Median: 100 * p.PPS.Median / LineRatePPS(1e9, p.Size)}
		p.LineRatePct = &lr
		p.HostCPUNsPerPacket = 42
	}
	out := tableWith(t, r,
		"virtual time, timing profile mru-thread",
		"LINE% MED", "HOST NS/PKT", "PPS MED",
		"median % of the line rate (packets/s); MEASURED: the table profile mru-thread was fitted to",
		"MEASURED 3500", "43.82%", "22.45%",
		"elapsed 1.5s (wall clock)",
	)
	cross := out[strings.Index(out, "median % of the line rate"):strings.Index(out, "elapsed")]
	lines := strings.Split(strings.TrimSpace(cross), "\n")
	if len(lines) != 5 || strings.Contains(lines[1], "MEASURED 32768") {
		t.Fatalf("cross table:\n%s", cross)
	}
	// 64 has no measured figure: a dash in the MEASURED column.
	if f := strings.Fields(lines[2]); f[0] != "64" || f[3] != "-" {
		t.Errorf("cross row %q", lines[2])
	}
}

func TestWriteTableNotConserved(t *testing.T) {
	r := handReport()
	r.Points[2].Conserved = false
	r.Points[2].Delivered = 59000
	// The loss is explained beside the table.
	tableWith(t, r, "NO",
		"size 1263: sent 60000, delivered 59000, dropped 10, unaccounted 990, host_rx_errors 4, modem_dropped 6")
}

func TestWriteTableEmpty(t *testing.T) {
	var b bytes.Buffer
	if err := (&Report{}).WriteTable(&b); err != nil || !strings.Contains(b.String(), "no points") {
		t.Errorf("%v %q", err, b.String())
	}
}

func TestHumanPPS(t *testing.T) {
	for v, want := range map[float64]string{
		0: "0", 7.4: "7", 999: "999", 999.6: "1.00k", 1234: "1.23k", 45_678: "45.7k", 368_500: "369k",
		456_000: "456k", 999_999: "1.00M", 1_234_567: "1.23M", 12_345_678: "12.3M", 2.5e9: "2.50G", -1500: "-1.50k",
	} {
		if got := humanPPS(v); got != want {
			t.Errorf("humanPPS(%v) = %q, want %q", v, got, want)
		}
	}
}

func TestWriteCSV(t *testing.T) {
	r := handReport()
	var b bytes.Buffer
	if err := r.WriteCSV(&b); err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(&b).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1+len(r.Points) {
		t.Fatalf("%d rows, want %d", len(rows), 1+len(r.Points))
	}
	hdr := CSVHeader()
	if strings.Join(rows[0], ",") != strings.Join(hdr, ",") {
		t.Fatalf("header %v", rows[0])
	}
	col := map[string]int{}
	for i, h := range hdr {
		col[h] = i
	}
	for i, p := range r.Points {
		row := rows[i+1]
		if len(row) != len(hdr) {
			t.Fatalf("row %d has %d fields", i+1, len(row))
		}
		num := func(name string) float64 {
			v, err := strconv.ParseFloat(row[col[name]], 64)
			if err != nil {
				t.Fatalf("row %d %s: %v", i+1, name, err)
			}
			return v
		}
		for name, want := range map[string]float64{
			"packets_per_iteration": 20000, "mru": float64(p.MRU), "size": float64(p.Size), "iterations": 3,
			"pps_min": p.PPS.Min, "pps_max": p.PPS.Max, "pps_avg": p.PPS.Avg, "pps_median": p.PPS.Median,
			"mbps_min": p.MBps.Min, "mbps_max": p.MBps.Max, "mbps_avg": p.MBps.Avg, "mbps_median": p.MBps.Median,
			"elements_per_packet": p.ElementsPerPacket, "events_per_packet": p.EventsPerPacket,
			"overflow_chains_per_packet": p.ChainsPerPacket, "overflow_events_per_packet": p.OverflowsPerPacket,
			"packets_per_transfer": p.PacketsPerTransfer,
			"ring_memory_bytes":    float64(p.RingMemory), "pool_memory_bytes": float64(p.PoolMemory),
			"sent": float64(p.Sent), "delivered": float64(p.Delivered), "dropped": float64(p.Dropped),
		} {
			if got := num(name); got != want {
				t.Errorf("row %d %s = %v, want %v", i+1, name, got, want)
			}
		}
		if row[col["model"]] != "telit-fn990" || row[col["format"]] != "mbim" || row[col["mode"]] != "generator" || row[col["conserved"]] != "true" {
			t.Errorf("row %d: %v", i+1, row)
		}
	}
	if got := rows[3][col["drops"]]; got != "host_rx_errors=4;modem_dropped=6" {
		t.Errorf("drops %q", got)
	}
}

func TestPlot(t *testing.T) {
	r := handReport()
	dir := t.TempDir()
	svg := filepath.Join(dir, "sweep.svg")
	if err := r.Plot(svg); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(svg)
	if err != nil {
		t.Fatal(err)
	}
	if s := strings.TrimSpace(string(b)); !strings.HasPrefix(s, "<?xml") && !strings.HasPrefix(s, "<svg") ||
		!strings.Contains(s, "</svg>") || !strings.Contains(s, "MRU 32768") {
		t.Errorf("not an SVG with the legend: %.200q", s)
	}

	png := filepath.Join(dir, "sweep.PNG")
	if err := r.Plot(png); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(png); err != nil || !bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")) {
		t.Errorf("not a PNG: %v %.16q", err, b)
	}

	for _, bad := range []string{"sweep.gif", "sweep.pdf", "sweep"} {
		err := r.Plot(filepath.Join(dir, bad))
		if err == nil || !strings.Contains(err.Error(), ".svg or .png") {
			t.Errorf("%s: %v", bad, err)
		}
		if _, serr := os.Stat(filepath.Join(dir, bad)); serr == nil {
			t.Errorf("%s written", bad)
		}
	}
	if err := (&Report{}).Plot(filepath.Join(dir, "empty.svg")); err == nil {
		t.Error("empty report plotted")
	}
}

// TestPlotScales covers the other axis choices: one size (linear x) and
// rates spanning more than a factor of 20 (log y).
func TestPlotScales(t *testing.T) {
	r := &Report{Model: "m", Format: "qmap", Mode: Loopback}
	for i, mru := range []int{1024, 65535} {
		r.Points = append(r.Points, Point{MRU: mru, Size: 1500, Iterations: 1, PPS: Summary{Median: float64(1000 * (1 + 99*i))}})
	}
	p, err := r.newPlot()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := p.Y.Scale.(plot.LogScale); !ok {
		t.Errorf("y scale %T, want log for rates 1k..100k", p.Y.Scale)
	}
	if _, ok := p.X.Scale.(plot.LinearScale); !ok {
		t.Errorf("x scale %T, want linear for one size", p.X.Scale)
	}
	if p, _ := handReport().newPlot(); p != nil {
		if _, ok := p.Y.Scale.(plot.LinearScale); !ok {
			t.Errorf("y scale %T, want linear for rates within a factor of 20", p.Y.Scale)
		}
		if _, ok := p.X.Scale.(plot.LogScale); !ok {
			t.Errorf("x scale %T, want log for sizes 64..1263", p.X.Scale)
		}
	}
	if err := r.Plot(filepath.Join(t.TempDir(), "one.svg")); err != nil {
		t.Fatal(err)
	}
	ticks := logTicks{}.Ticks(1000, 100000)
	var labels []string
	for _, tk := range ticks {
		if tk.Label != "" {
			labels = append(labels, tk.Label)
		}
	}
	if got := strings.Join(labels, " "); got != "1k 2k 5k 10k 20k 50k 100k" {
		t.Errorf("log ticks %q", got)
	}
	if ticks := (logTicks{}).Ticks(1.2e6, 1.8e6); len(ticks) == 0 || ticks[0].Label == "" {
		t.Errorf("narrow log range: %v", ticks)
	}
}
