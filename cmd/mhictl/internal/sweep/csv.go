package sweep

import (
	"encoding/csv"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
)

// CSVHeader returns the header row of WriteCSV, in column order. The order
// is stable: new columns are only ever appended.
//
//	model, format, mode            the report's (the same on every row)
//	packets_per_iteration          packets per point and iteration
//	mru, size, iterations          the point
//	pps_min … pps_median           packets/s over the iterations
//	mbps_min … mbps_median         MB/s (10^6 bytes/s) over the iterations
//	elements_per_packet            ring elements consumed per delivered packet
//	events_per_packet              completion events per delivered packet
//	overflow_chains_per_packet     overflow chains per delivered packet
//	overflow_events_per_packet     overflow events per delivered packet
//	packets_per_transfer           delivered packets per transfer
//	ring_memory_bytes              usable ring elements × MRU
//	pool_memory_bytes              all receive buffers the host holds
//	sent, delivered, dropped       packet counts over all iterations
//	conserved                      true if sent = delivered + dropped
//	drops                          the named drop counters, "name=n;name=n"
//	timing                         the timing profile, or wallclock
//	ip_size                        the IP datagram size (size − 14 in timing mode)
//	line_rate_pct_min … _median    % of the link's line rate (timing mode; empty otherwise)
//	host_cpu_ns_per_packet         the host code's real time per packet (timing mode)
func CSVHeader() []string { return slices.Clone(csvHeader) }

var csvHeader = []string{
	"model", "format", "mode", "packets_per_iteration",
	"mru", "size", "iterations",
	"pps_min", "pps_max", "pps_avg", "pps_median",
	"mbps_min", "mbps_max", "mbps_avg", "mbps_median",
	"elements_per_packet", "events_per_packet",
	"overflow_chains_per_packet", "overflow_events_per_packet",
	"packets_per_transfer",
	"ring_memory_bytes", "pool_memory_bytes",
	"sent", "delivered", "dropped", "conserved", "drops",
	"timing", "ip_size",
	"line_rate_pct_min", "line_rate_pct_max", "line_rate_pct_avg", "line_rate_pct_median",
	"host_cpu_ns_per_packet",
}

// WriteCSV writes the report as CSV: the CSVHeader row, then one row per
// point in the report's order. Floats are written with the fewest digits
// that read back exactly.
func (r *Report) WriteCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(csvHeader); err != nil {
		return err
	}
	for _, p := range r.Points {
		row := []string{
			r.Model, r.Format, string(r.Mode), strconv.Itoa(r.Packets),
			strconv.Itoa(p.MRU), strconv.Itoa(p.Size), strconv.Itoa(p.Iterations),
			ftoa(p.PPS.Min), ftoa(p.PPS.Max), ftoa(p.PPS.Avg), ftoa(p.PPS.Median),
			ftoa(p.MBps.Min), ftoa(p.MBps.Max), ftoa(p.MBps.Avg), ftoa(p.MBps.Median),
			ftoa(p.ElementsPerPacket), ftoa(p.EventsPerPacket),
			ftoa(p.ChainsPerPacket), ftoa(p.OverflowsPerPacket),
			ftoa(p.PacketsPerTransfer),
			strconv.Itoa(p.RingMemory), strconv.Itoa(p.PoolMemory),
			strconv.FormatUint(p.Sent, 10), strconv.FormatUint(p.Delivered, 10), strconv.FormatUint(p.Dropped, 10),
			strconv.FormatBool(p.Conserved), dropsField(p.Drops),
			r.Timing, strconv.Itoa(p.IPSize),
		}
		if lr := p.LineRatePct; lr != nil {
			row = append(row, ftoa(lr.Min), ftoa(lr.Max), ftoa(lr.Avg), ftoa(lr.Median), ftoa(p.HostCPUNsPerPacket))
		} else {
			row = append(row, "", "", "", "", "")
		}
		if len(row) != len(csvHeader) {
			return fmt.Errorf("sweep: CSV row has %d fields, header %d", len(row), len(csvHeader))
		}
		if err := cw.Write(row); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

func ftoa(f float64) string {
	return strconv.FormatFloat(f, 'f', -1, 64)
}

// dropsField encodes the drop counters sorted by name.
func dropsField(d map[string]uint64) string {
	keys := make([]string, 0, len(d))
	for k := range d {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + strconv.FormatUint(d[k], 10)
	}
	return strings.Join(parts, ";")
}
