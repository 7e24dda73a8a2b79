package sweep

import (
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/gomhi/gomhi/mhi/proto/framing"
	"github.com/gomhi/gomhi/mhinet"
)

// Row is one measured point of a table to fit: a packet size (the MRU
// thread's: an Ethernet frame without FCS), the host's MRU, and the
// throughput as a percentage of the link's line rate.
type Row struct {
	Size        int     `json:"size"`
	MRU         int     `json:"mru"`
	LineRatePct float64 `json:"line_rate_pct"`
}

// Residual is a row of a table with the model's value for it.
type Residual struct {
	Row
	// Model is the modelled line-rate percentage.
	Model float64 `json:"model_line_rate_pct"`
	// Rel is the relative residual, Model/LineRatePct − 1.
	Rel float64 `json:"relative_error"`
}

// ErrTable: a table that cannot be read.
var ErrTable = errors.New("sweep: bad table")

// ReadTable reads a CSV table with the columns size, mru and
// line_rate_pct (a header row naming them, in any order; further columns
// are ignored; lines starting with # are comments).
func ReadTable(r io.Reader) ([]Row, error) {
	cr := csv.NewReader(r)
	cr.Comment = '#'
	cr.FieldsPerRecord = -1
	recs, err := cr.ReadAll()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrTable, err)
	}
	if len(recs) < 2 {
		return nil, fmt.Errorf("%w: want a header and at least one row", ErrTable)
	}
	col := map[string]int{}
	for i, h := range recs[0] {
		col[strings.ToLower(strings.TrimSpace(h))] = i
	}
	idx := func(names ...string) (int, error) {
		for _, n := range names {
			if i, ok := col[n]; ok {
				return i, nil
			}
		}
		return 0, fmt.Errorf("%w: no column %q in the header %q", ErrTable, names[0], strings.Join(recs[0], ","))
	}
	is, err := idx("size")
	if err != nil {
		return nil, err
	}
	im, err := idx("mru")
	if err != nil {
		return nil, err
	}
	ip, err := idx("line_rate_pct", "line-rate-percent", "pct")
	if err != nil {
		return nil, err
	}
	var rows []Row
	for n, rec := range recs[1:] {
		field := func(i int) string {
			if i < len(rec) {
				return strings.TrimSpace(rec[i])
			}
			return ""
		}
		size, err1 := strconv.Atoi(field(is))
		mru, err2 := strconv.Atoi(field(im))
		pct, err3 := strconv.ParseFloat(field(ip), 64)
		if err := errors.Join(err1, err2, err3); err != nil {
			return nil, fmt.Errorf("%w: row %d: %w", ErrTable, n+2, err)
		}
		if size-FrameHeader < 36 || size-FrameHeader > mhinet.MaxMTU {
			return nil, fmt.Errorf("%w: row %d: size %d out of range", ErrTable, n+2, size)
		}
		if err := mhinet.ValidateMRU(mru); err != nil {
			return nil, fmt.Errorf("%w: row %d: %w", ErrTable, n+2, err)
		}
		if !(pct > 0 && pct <= 100) {
			return nil, fmt.Errorf("%w: row %d: line-rate percentage %g not in (0, 100]", ErrTable, n+2, pct)
		}
		rows = append(rows, Row{Size: size, MRU: mru, LineRatePct: pct})
	}
	return rows, nil
}

// SimulateRows runs the model of prof on every row (packets packets, one
// iteration each, in parallel) and returns the residuals in row order.
func SimulateRows(ctx context.Context, prof *Profile, rows []Row, packets, parallel int) ([]Residual, error) {
	res := make([]Residual, len(rows))
	// Rows of one MRU run as one sweep; MRUs in turn.
	byMRU := map[int][]int{}
	var mrus []int
	for i, r := range rows {
		if _, ok := byMRU[r.MRU]; !ok {
			mrus = append(mrus, r.MRU)
		}
		byMRU[r.MRU] = append(byMRU[r.MRU], i)
	}
	for _, mru := range mrus {
		var sizes []int
		for _, i := range byMRU[mru] {
			if !slices.Contains(sizes, rows[i].Size) {
				sizes = append(sizes, rows[i].Size)
			}
		}
		rep, err := Run(ctx, Options{
			Format: framing.NTB16, Sizes: sizes, MRUs: []int{mru},
			Packets: packets, Iterations: 1, Timing: prof, Parallel: parallel,
		})
		if err != nil {
			return nil, err
		}
		for _, i := range byMRU[mru] {
			p := rep.point(mru, rows[i].Size)
			if p == nil || p.LineRatePct == nil {
				return nil, fmt.Errorf("sweep: no result for MRU %d size %d", mru, rows[i].Size)
			}
			if !p.Conserved {
				return nil, fmt.Errorf("sweep: MRU %d size %d: %w", mru, rows[i].Size, ErrNotConserved)
			}
			res[i] = Residual{Row: rows[i], Model: p.LineRatePct.Median, Rel: p.LineRatePct.Median/rows[i].LineRatePct - 1}
		}
	}
	return res, nil
}

// ResidualStats returns the largest and the mean absolute relative residual.
func ResidualStats(res []Residual) (maxErr, meanErr float64) {
	for _, r := range res {
		a := math.Abs(r.Rel)
		maxErr = max(maxErr, a)
		meanErr += a
	}
	if len(res) > 0 {
		meanErr /= float64(len(res))
	}
	return maxErr, meanErr
}

// FitOptions tune Fit.
type FitOptions struct {
	// Packets is the number of packets each row simulates per evaluation
	// (default 20000).
	Packets int
	// Parallel is the number of rows simulated at once (default:
	// GOMAXPROCS).
	Parallel int
	// Rounds bounds the pattern search's rounds (default 60).
	Rounds int
	// Step is the search's first relative step (default 1/2).
	Step float64
	// Log, if set, receives a line per improvement.
	Log func(format string, args ...any)
}

// fitObjective is what Fit minimises: the largest relative residual plus
// the mean one, so that no row is sacrificed for the others and the
// typical row counts too.
func fitObjective(res []Residual) float64 {
	mx, mn := ResidualStats(res)
	return mx + mn
}

// Fit adjusts the parameters of start whose Source is "fitted" to the
// table and returns the fitted profile and its residuals. The method is a
// deterministic pattern search in the logarithms of the fitted
// parameters: each round tries every parameter ×(1+s) and ÷(1+s), keeps
// every change that lowers the objective (largest plus mean absolute
// relative residual), and halves s after a round without one, from s =
// FitOptions.Step (default 1/2) down to 1/256. The other parameters stay as set. The same table, start
// profile and options give the same result.
func Fit(ctx context.Context, table []Row, start *Profile, o FitOptions) (*Profile, []Residual, error) {
	if err := start.Validate(); err != nil {
		return nil, nil, err
	}
	if o.Packets <= 0 {
		o.Packets = 20000
	}
	if o.Rounds <= 0 {
		o.Rounds = 60
	}
	logf := o.Log
	if logf == nil {
		logf = func(string, ...any) {}
	}
	var free []string
	best := start.Clone()
	for i := range best.Parameters {
		q := &best.Parameters[i]
		if strings.HasPrefix(q.Source, "fitted") {
			if q.Start > 0 {
				q.Value = q.Start
			}
			if q.Value <= 0 {
				return nil, nil, fmt.Errorf("%w: fitted parameter %s starts at %g, want > 0", ErrProfile, q.Name, q.Value)
			}
			free = append(free, q.Name)
		}
	}
	eval := func(p *Profile) (float64, []Residual, error) {
		res, err := SimulateRows(ctx, p, table, o.Packets, o.Parallel)
		if err != nil {
			return 0, nil, err
		}
		return fitObjective(res), res, nil
	}
	bestF, bestRes, err := eval(best)
	if err != nil {
		return nil, nil, err
	}
	logf("start: objective %.4f", bestF)
	step := o.Step
	if step <= 0 {
		step = 0.5
	}
	o.Step = step
	for round := 0; round < o.Rounds && step >= 1.0/256; round++ {
		improved := false
		for _, name := range free {
			for _, f := range []float64{1 + step, 1 / (1 + step)} {
				if ctx.Err() != nil {
					return nil, nil, ctx.Err()
				}
				cand := best.Clone()
				v, _ := cand.Value(name)
				cand.set(name, v*f)
				cf, cres, err := eval(cand)
				if err != nil {
					return nil, nil, err
				}
				if cf < bestF {
					best, bestF, bestRes, improved = cand, cf, cres, true
					logf("round %d step %.3f: %s = %.6g, objective %.4f", round, step, name, v*f, cf)
					break
				}
			}
		}
		if !improved {
			step /= 2
		}
	}
	mx, mn := ResidualStats(bestRes)
	best.Fit = &FitRecord{Packets: o.Packets, MaxError: mx, MeanError: mn, Rounds: o.Rounds, Step: o.Step}
	if start.Fit != nil {
		best.Fit.Table = start.Fit.Table
	}
	return best, bestRes, nil
}

// Sensitivity is how the fit's residuals move when one parameter moves.
type Sensitivity struct {
	Parameter string `json:"parameter"`
	Source    string `json:"source"`
	// Factor is the change tried: the parameter ×Factor and ÷Factor.
	Factor float64 `json:"factor"`
	// Up and Down are the objective (largest plus mean absolute relative
	// residual) with the parameter ×Factor and ÷Factor; Base without
	// change.
	Base, Up, Down float64
	// UpRes and DownRes are the rows' relative residuals in the two cases.
	UpRes, DownRes []float64
}

// Sensitivities evaluates the profile on the table with each parameter in
// turn ×factor and ÷factor: a parameter the table cannot see barely moves
// the objective, two it cannot tell apart move it the same way.
func Sensitivities(ctx context.Context, table []Row, prof *Profile, factor float64, o FitOptions) (base float64, out []Sensitivity, err error) {
	if o.Packets <= 0 {
		o.Packets = 20000
	}
	res, err := SimulateRows(ctx, prof, table, o.Packets, o.Parallel)
	if err != nil {
		return 0, nil, err
	}
	base = fitObjective(res)
	rels := func(res []Residual) []float64 {
		r := make([]float64, len(res))
		for i := range res {
			r[i] = res[i].Rel
		}
		return r
	}
	for _, q := range prof.Parameters {
		if q.Name == ParamLinkRate {
			continue
		}
		s := Sensitivity{Parameter: q.Name, Source: q.Source, Factor: factor, Base: base}
		for _, f := range []float64{factor, 1 / factor} {
			c := prof.Clone()
			c.set(q.Name, q.Value*f)
			r, err := SimulateRows(ctx, c, table, o.Packets, o.Parallel)
			if err != nil {
				return 0, nil, err
			}
			if f > 1 {
				s.Up, s.UpRes = fitObjective(r), rels(r)
			} else {
				s.Down, s.DownRes = fitObjective(r), rels(r)
			}
		}
		out = append(out, s)
	}
	return base, out, nil
}

// The tolerance of the shipped mru-thread profile's fit (TestFitTolerance):
// every row within ±10 % and a mean under 5 %, as issue 14 asks (the fit
// achieves 7.3 % and 3.8 %; docs/FIDELITY.md section 5).
const (
	fitMaxTolerance  = 0.10
	fitMeanTolerance = 0.05
)
