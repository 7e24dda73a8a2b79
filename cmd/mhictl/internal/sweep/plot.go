package sweep

import (
	"errors"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/gomhi/gomhi/internal/atomicfile"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// plotExtensions are the file extensions Plot accepts.
var plotExtensions = []string{".svg", ".png"}

// Plot size.
const (
	plotWidth  = 8 * vg.Inch
	plotHeight = 5 * vg.Inch
)

// CheckPlotPath returns an error unless path ends in an extension Plot can write
// (.svg or .png, in any case), so a caller can reject a bad --plot before a long sweep.
func CheckPlotPath(path string) error {
	ext := strings.ToLower(filepath.Ext(path))
	if !slices.Contains(plotExtensions, ext) {
		if ext == "" {
			ext = "no extension"
		}
		return fmt.Errorf("sweep: plot file %q has %s, want %s", path, ext, strings.Join(plotExtensions, " or "))
	}
	return nil
}

// Plot draws the median packets/s against the packet size, one line per
// MRU, and saves it to path as SVG or PNG, chosen by the extension. The
// y axis is logarithmic when the rates span more than a factor of 20 and
// linear from zero otherwise (where a 50% drop should look like one); the
// x axis is logarithmic when the sizes span a factor of 8 or more.
func (r *Report) Plot(path string) error {
	if err := CheckPlotPath(path); err != nil {
		return err
	}
	if len(r.Points) == 0 {
		return errors.New("sweep: nothing to plot, the report has no points")
	}
	p, err := r.newPlot()
	if err != nil {
		return err
	}
	c, err := p.WriterTo(plotWidth, plotHeight, strings.TrimPrefix(strings.ToLower(filepath.Ext(path)), "."))
	if err != nil {
		return fmt.Errorf("sweep: plot: %w", err)
	}
	// Not p.Save, which truncates path first: the file appears only
	// complete (atomicfile).
	err = atomicfile.Write(path, 0o666, 0, func(w io.Writer) error {
		_, err := c.WriteTo(w)
		return err
	})
	if err != nil {
		return fmt.Errorf("sweep: plot: %w", err)
	}
	return nil
}

func (r *Report) newPlot() (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("MRU sweep: %s, %s framing, %s mode, median of %d × %d packets",
		orDash(r.Model), orDash(r.Format), orDash(string(r.Mode)), r.Points[0].Iterations, r.Packets)
	p.X.Label.Text = "packet size (bytes)"
	p.Y.Label.Text = "packets/s (median)"

	mrus, sizes := r.grid()
	var lines []any
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, mru := range mrus {
		pts := r.pointsOf(mru)
		xys := make(plotter.XYs, 0, len(pts))
		for _, pt := range pts {
			xys = append(xys, plotter.XY{X: float64(pt.Size), Y: pt.PPS.Median})
			lo, hi = min(lo, pt.PPS.Median), max(hi, pt.PPS.Median)
		}
		lines = append(lines, "MRU "+strconv.Itoa(mru), xys)
	}
	// Leave some room around the data so no glyph sits on the frame.
	if lo > 0 && hi/lo > 20 {
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = logTicks{}
		p.Y.Min, p.Y.Max = lo/1.15, hi*1.15
	} else {
		p.Y.Tick.Marker = humanTicks{}
		p.Y.Min, p.Y.Max = 0, max(hi*1.08, 1)
	}
	xlo, xhi := float64(sizes[0]), float64(sizes[len(sizes)-1])
	if xlo > 0 && xhi >= 8*xlo {
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = sizeTicks(sizes)
		p.X.Min, p.X.Max = xlo/1.06, xhi*1.06
	} else {
		pad := max((xhi-xlo)*0.04, 1)
		p.X.Min, p.X.Max = max(xlo-pad, 0), xhi+pad
	}
	p.Add(plotter.NewGrid())
	if err := plotutil.AddLinePoints(p, lines...); err != nil {
		return nil, fmt.Errorf("sweep: plot: %w", err)
	}
	// Rates mostly fall with the packet size: the bottom left is freest.
	p.Legend.Top, p.Legend.Left = false, true
	p.Legend.XOffs, p.Legend.YOffs = vg.Points(8), vg.Points(8)
	return p, nil
}

// humanTicks are linear ticks at 1, 2 or 5 times a power of ten, about
// six labelled ones with a minor tick between each, labelled like the
// table (400k, 1.2M).
type humanTicks struct{}

func (humanTicks) Ticks(lo, hi float64) []plot.Tick {
	if !(hi > lo) || math.IsInf(hi-lo, 0) {
		return plot.DefaultTicks{}.Ticks(lo, hi)
	}
	raw := (hi - lo) / 6
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := 10 * mag
	for _, m := range []float64{1, 2, 5} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	var ticks []plot.Tick
	for i := math.Ceil(lo / step * 2); i*step/2 <= hi*(1+1e-12); i++ {
		t := plot.Tick{Value: i * step / 2}
		if math.Mod(i, 2) == 0 {
			t.Label = humanTick(t.Value)
		}
		ticks = append(ticks, t)
	}
	return ticks
}

// logTicks label 1, 2 and 5 times the powers of ten (all nine multiples,
// or linear ticks, when that leaves fewer than two labels) and mark the
// rest as minor.
type logTicks struct{}

func (logTicks) Ticks(lo, hi float64) []plot.Tick {
	if lo <= 0 || hi <= 0 || lo > hi {
		return nil
	}
	build := func(labelled func(int) bool) ([]plot.Tick, int) {
		var ticks []plot.Tick
		n := 0
		for e := math.Floor(math.Log10(lo)); e <= math.Ceil(math.Log10(hi)); e++ {
			for m := 1; m < 10; m++ {
				v := float64(m) * math.Pow(10, e)
				if v < lo*(1-1e-9) || v > hi*(1+1e-9) {
					continue
				}
				t := plot.Tick{Value: v}
				if labelled(m) {
					t.Label = humanTick(v)
					n++
				}
				ticks = append(ticks, t)
			}
		}
		return ticks, n
	}
	ticks, n := build(func(m int) bool { return m == 1 || m == 2 || m == 5 })
	if n < 2 {
		ticks, n = build(func(int) bool { return true })
	}
	if n < 2 { // less than a step of the mantissa: label like a linear axis
		return humanTicks{}.Ticks(lo, hi)
	}
	return ticks
}

// sizeTicks label the powers of two in the size range and the largest
// size (when it is not too close to a power of two), and put minor ticks
// at the other measured sizes.
type sizeTicks []int

func (s sizeTicks) Ticks(lo, hi float64) []plot.Tick {
	var ticks []plot.Tick
	top := 0.0 // the largest labelled power of two
	for v := 1.0; v <= hi; v *= 2 {
		if v >= lo {
			ticks = append(ticks, plot.Tick{Value: v, Label: strconv.Itoa(int(v))})
			top = v
		}
	}
	largest := slices.Max(s)
	for _, size := range s {
		v := float64(size)
		if v < lo || v > hi || v == math.Exp2(math.Round(math.Log2(v))) {
			continue
		}
		t := plot.Tick{Value: v}
		if size == largest && v >= 1.3*top {
			t.Label = strconv.Itoa(size)
		}
		ticks = append(ticks, t)
	}
	return ticks
}
