package sweep

import (
	"cmp"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
)

// WriteTable writes the report for people: a summary line, then per MRU a
// header line with the ring and pool memory and a table with one row per
// packet size (packets/s and MB/s as min/max/avg/median over the
// iterations, the per-packet costs, whether the point conserved its
// packets), and last a cross table of the median packets/s of every size
// and MRU with its percentage of the best MRU for that size — the form of
// the MRU thread's table, where small buffers show as small percentages.
// MRUs and sizes are listed in ascending order.
func (r *Report) WriteTable(w io.Writer) error {
	ew := &errWriter{w: w}
	iters := 0
	if len(r.Points) > 0 {
		iters = r.Points[0].Iterations
	}
	timing := "wall clock"
	if r.virtual() {
		timing = "virtual time, timing profile " + r.Timing
	}
	ew.printf("%s, %s framing, %s mode, %s: %s × %s per point, %s\n",
		orDash(r.Model), orDash(r.Format), orDash(string(r.Mode)), timing,
		plural(r.Packets, "packet"), plural(iters, "iteration"), plural(len(r.Points), "point"))
	if len(r.Points) == 0 {
		ew.printf("no points measured\n")
		ew.printf("elapsed %s\n", r.Elapsed.Round(1e6))
		return ew.err
	}
	if r.virtual() {
		if err := r.writeVirtualTables(ew); err != nil {
			return err
		}
		ew.printf("\nelapsed %s (wall clock)\n", r.Elapsed.Round(1e6))
		return ew.err
	}
	mrus, sizes := r.grid()
	for _, mru := range mrus {
		if err := r.writeWallclockMRU(ew, mru); err != nil {
			return err
		}
	}
	if err := r.writeWallclockCross(ew, mrus, sizes); err != nil {
		return err
	}
	ew.printf("\nelapsed %s\n", r.Elapsed.Round(1e6))
	return ew.err
}

// writeWallclockMRU writes a wall-clock report's header line and table
// for MRU mru, and the loss detail of its points that lost packets.
func (r *Report) writeWallclockMRU(ew *errWriter, mru int) error {
	return r.writeMRU(ew, mru, "SIZE\tPPS MIN\tPPS MAX\tPPS AVG\tPPS MED\tMB/S MIN\tMB/S MAX\tMB/S AVG\tMB/S MED\tELEM/PKT\tEVENTS/PKT\tCHAINS/PKT\tPKTS/XFER\tCONSERVED\t\n",
		func(tw io.Writer, p Point) {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%.1f\t%.1f\t%.1f\t%.1f\t%.3f\t%.3f\t%.3f\t%.1f\t%s\t\n",
				p.Size, humanPPS(p.PPS.Min), humanPPS(p.PPS.Max), humanPPS(p.PPS.Avg), humanPPS(p.PPS.Median),
				p.MBps.Min, p.MBps.Max, p.MBps.Avg, p.MBps.Median,
				p.ElementsPerPacket, p.EventsPerPacket, p.ChainsPerPacket, p.PacketsPerTransfer, conserved(p))
		})
}

// writeVirtualMRU writes a timing-mode report's header line and table
// for MRU mru, and the loss detail of its points that lost packets.
func (r *Report) writeVirtualMRU(ew *errWriter, mru int) error {
	return r.writeMRU(ew, mru, "SIZE\tIP\tPPS MIN\tPPS MAX\tPPS AVG\tPPS MED\tLINE% MED\tMB/S MED\tELEM/PKT\tEVENTS/PKT\tCHAINS/PKT\tPKTS/XFER\tLOST\tHOST NS/PKT\tCONSERVED\t\n",
		func(tw io.Writer, p Point) {
			fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%s\t%s\t%s\t%.1f\t%.3f\t%.3f\t%.3f\t%.1f\t%s\t%.0f\t%s\t\n",
				p.Size, p.IPSize, humanPPS(p.PPS.Min), humanPPS(p.PPS.Max), humanPPS(p.PPS.Avg), humanPPS(p.PPS.Median),
				pct(p.LineRatePct), p.MBps.Median,
				p.ElementsPerPacket, p.EventsPerPacket, p.ChainsPerPacket, p.PacketsPerTransfer,
				lostShare(p), p.HostCPUNsPerPacket, conserved(p))
		})
}

// writeMRU writes MRU mru's header line (its ring and pool memory), then
// its table: the column headings columns and one line per point, written
// by row; last the loss detail of its points that lost packets.
func (r *Report) writeMRU(ew *errWriter, mru int, columns string, row func(tw io.Writer, p Point)) error {
	pts := r.pointsOf(mru)
	ring := pts[0].RingMemory
	elems := ring / max(mru, 1)
	ew.printf("\nMRU %d: ring %d × %d B = %s, pool %s\n", mru, elems, mru, kib(ring), poolKiB(pts))
	tw := newTable(ew)
	fmt.Fprint(tw, columns)
	for _, p := range pts {
		row(tw, p)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, p := range pts {
		if !p.Conserved {
			ew.printf("  size %d: %s\n", p.Size, lossDetail(p))
		}
	}
	return nil
}

// newTable returns a writer of right-aligned columns onto w.
func newTable(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
}

// writeWallclockCross writes a wall-clock report's cross table: per size
// the median packets/s of every MRU and its percentage of the best.
func (r *Report) writeWallclockCross(ew *errWriter, mrus, sizes []int) error {
	ew.printf("\nmedian packets/s, %% of the best MRU for that size\n")
	tw := newTable(ew)
	fmt.Fprint(tw, "SIZE\t")
	for _, mru := range mrus {
		fmt.Fprintf(tw, "MRU %d\t", mru)
	}
	fmt.Fprint(tw, "\n")
	for _, size := range sizes {
		best := 0.0
		for _, mru := range mrus {
			if p := r.point(mru, size); p != nil {
				best = max(best, p.PPS.Median)
			}
		}
		fmt.Fprintf(tw, "%d\t", size)
		for _, mru := range mrus {
			p := r.point(mru, size)
			switch {
			case p == nil:
				fmt.Fprint(tw, "-\t")
			case best <= 0:
				fmt.Fprintf(tw, "%s (-)\t", humanPPS(p.PPS.Median))
			default:
				fmt.Fprintf(tw, "%s (%.1f%%)\t", humanPPS(p.PPS.Median), 100*p.PPS.Median/best)
			}
		}
		fmt.Fprint(tw, "\n")
	}
	return tw.Flush()
}

// virtual reports whether the report is of a sweep in virtual time.
func (r *Report) virtual() bool { return r.Timing != "" && r.Timing != Wallclock }

// writeVirtualTables writes a timing-mode report: per MRU the modelled
// packets/s, line-rate percentage, per-packet costs and the host's real
// CPU per packet; then the cross table of median line-rate percentages
// with the reference table's measured column beside its MRU.
func (r *Report) writeVirtualTables(ew *errWriter) error {
	mrus, sizes := r.grid()
	for _, mru := range mrus {
		if err := r.writeVirtualMRU(ew, mru); err != nil {
			return err
		}
	}
	ew.printf("\nmedian %% of the line rate (packets/s)")
	refMRUs := r.referenceMRUs()
	if len(refMRUs) > 0 {
		ew.printf("; MEASURED: the table profile %s was fitted to", r.Timing)
	}
	ew.printf("\n")
	tw := newTable(ew)
	fmt.Fprint(tw, "SIZE\t")
	for _, mru := range mrus {
		fmt.Fprintf(tw, "MRU %d\t", mru)
		if slices.Contains(refMRUs, mru) {
			fmt.Fprintf(tw, "MEASURED %d\t", mru)
		}
	}
	fmt.Fprint(tw, "\n")
	for _, size := range sizes {
		fmt.Fprintf(tw, "%d\t", size)
		for _, mru := range mrus {
			if p := r.point(mru, size); p == nil {
				fmt.Fprint(tw, "-\t")
			} else {
				fmt.Fprintf(tw, "%s (%s)\t", pct(p.LineRatePct), humanPPS(p.PPS.Median))
			}
			if slices.Contains(refMRUs, mru) {
				if ref, ok := r.reference(mru, size); ok {
					fmt.Fprintf(tw, "%.2f%%\t", ref)
				} else {
					fmt.Fprint(tw, "-\t")
				}
			}
		}
		fmt.Fprint(tw, "\n")
	}
	return tw.Flush()
}

// referenceMRUs returns the MRUs of the report that the reference table
// has rows for.
func (r *Report) referenceMRUs() []int {
	var out []int
	for _, row := range r.Reference {
		if !slices.Contains(out, row.MRU) && r.pointsOf(row.MRU) != nil {
			out = append(out, row.MRU)
		}
	}
	return out
}

// reference returns the reference table's line-rate percentage for a point.
func (r *Report) reference(mru, size int) (float64, bool) {
	for _, row := range r.Reference {
		if row.MRU == mru && row.Size == size {
			return row.LineRatePct, true
		}
	}
	return 0, false
}

func pct(s *Summary) string {
	if s == nil {
		return "-"
	}
	return fmt.Sprintf("%.2f%%", s.Median)
}

// lostShare is the share of the offered packets a point lost (in timing
// mode: dropped at the modem for want of a buffer).
func lostShare(p Point) string {
	if p.Sent == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", 100*float64(p.Dropped)/float64(p.Sent))
}

// humanPPS formats a rate with three significant digits and a k, M or G
// suffix: 999, 45.6k, 456k, 1.23M.
func humanPPS(v float64) string {
	n, suffix := scaleSI(v)
	switch a := math.Abs(n); {
	case suffix == "" || a >= 100:
		return fmt.Sprintf("%.0f%s", n, suffix)
	case a >= 10:
		return fmt.Sprintf("%.1f%s", n, suffix)
	default:
		return fmt.Sprintf("%.2f%s", n, suffix)
	}
}

// humanTick formats an axis label like humanPPS without trailing zeros:
// 1k, 2.5k, 10M.
func humanTick(v float64) string {
	n, suffix := scaleSI(v)
	return strconv.FormatFloat(n, 'f', -1, 64) + suffix
}

// scaleSI rounds v to three significant digits and scales it by the
// largest of k, M, G that keeps it at 1 or more.
func scaleSI(v float64) (float64, string) {
	if math.IsNaN(v) || math.IsInf(v, 0) || v == 0 {
		return v, ""
	}
	r := math.Copysign(roundSig(math.Abs(v), 3), v)
	for _, u := range []struct {
		div float64
		s   string
	}{{1e9, "G"}, {1e6, "M"}, {1e3, "k"}} {
		if math.Abs(r) >= u.div {
			return roundSig(math.Abs(r)/u.div, 3) * math.Copysign(1, r), u.s
		}
	}
	return r, ""
}

// roundSig rounds a non-negative x to n significant digits.
func roundSig(x float64, n int) float64 {
	if x == 0 {
		return 0
	}
	p := math.Pow(10, float64(n)-math.Ceil(math.Log10(x)))
	return math.Round(x*p) / p
}

// grid returns the MRUs and sizes of the report, ascending and unique.
func (r *Report) grid() (mrus, sizes []int) {
	for _, p := range r.Points {
		mrus = append(mrus, p.MRU)
		sizes = append(sizes, p.Size)
	}
	slices.Sort(mrus)
	slices.Sort(sizes)
	return slices.Compact(mrus), slices.Compact(sizes)
}

// pointsOf returns the points of one MRU, by ascending size (stable, so
// repeated sizes keep their run order).
func (r *Report) pointsOf(mru int) []Point {
	var pts []Point
	for _, p := range r.Points {
		if p.MRU == mru {
			pts = append(pts, p)
		}
	}
	slices.SortStableFunc(pts, func(a, b Point) int { return cmp.Compare(a.Size, b.Size) })
	return pts
}

// point returns the first point of an MRU and size, or nil.
func (r *Report) point(mru, size int) *Point {
	for i := range r.Points {
		if r.Points[i].MRU == mru && r.Points[i].Size == size {
			return &r.Points[i]
		}
	}
	return nil
}

func kib(b int) string {
	return fmt.Sprintf("%.0f KiB", float64(b)/1024)
}

// poolKiB gives the pool memory of an MRU's points, as a range if it
// changed between sizes.
func poolKiB(pts []Point) string {
	lo, hi := pts[0].PoolMemory, pts[0].PoolMemory
	for _, p := range pts {
		lo, hi = min(lo, p.PoolMemory), max(hi, p.PoolMemory)
	}
	if lo == hi {
		return kib(lo)
	}
	return fmt.Sprintf("%.0f–%s", float64(lo)/1024, kib(hi))
}

func conserved(p Point) string {
	if p.Conserved {
		return "yes"
	}
	return "NO"
}

// lossDetail explains a point that did not conserve its packets.
func lossDetail(p Point) string {
	var b strings.Builder
	fmt.Fprintf(&b, "sent %d, delivered %d, dropped %d", p.Sent, p.Delivered, p.Dropped)
	if miss := int64(p.Sent) - int64(p.Delivered) - int64(p.Dropped); miss != 0 {
		fmt.Fprintf(&b, ", unaccounted %d", miss)
	}
	keys := make([]string, 0, len(p.Drops))
	for k := range p.Drops {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, ", %s %d", k, p.Drops[k])
	}
	return b.String()
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return strconv.Itoa(n) + " " + what + "s"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// errWriter remembers the first write error so the table code can write
// freely and report it once.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(b []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(b)
	e.err = err
	return n, err
}

func (e *errWriter) printf(format string, args ...any) {
	fmt.Fprintf(e, format, args...)
}
