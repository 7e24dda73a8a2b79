package sweep

import (
	"context"
	"math"
	"os"
	"testing"
)

func threadTable(t *testing.T) []Row {
	t.Helper()
	f, err := os.Open("profiles/mru-thread.csv")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := ReadTable(f)
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

// TestFitTolerance: the shipped profile, simulated as its fit simulated
// it, gives the residuals its fit recorded, and they stay within the
// tolerance docs/FIDELITY.md states for it.
func TestFitTolerance(t *testing.T) {
	prof := shipped(t, "mru-thread")
	if prof.Fit == nil || prof.Fit.Packets <= 0 {
		t.Fatal("the shipped profile records no fit")
	}
	res, err := SimulateRows(context.Background(), prof, threadTable(t), prof.Fit.Packets, 0)
	if err != nil {
		t.Fatal(err)
	}
	mx, mn := ResidualStats(res)
	for _, r := range res {
		t.Logf("%5d %6.2f %6.2f %+6.1f%%", r.Size, r.LineRatePct, r.Model, 100*r.Rel)
	}
	t.Logf("largest %.1f%%, mean %.1f%%", 100*mx, 100*mn)
	if math.Abs(mx-prof.Fit.MaxError) > 1e-9 || math.Abs(mn-prof.Fit.MeanError) > 1e-9 {
		t.Errorf("residuals %.6f/%.6f, the fit recorded %.6f/%.6f: the model changed since the fit", mx, mn, prof.Fit.MaxError, prof.Fit.MeanError)
	}
	if mx > fitMaxTolerance || mn > fitMeanTolerance {
		t.Errorf("largest residual %.1f%% (tolerance %.0f%%), mean %.1f%% (tolerance %.0f%%)", 100*mx, 100*fitMaxTolerance, 100*mn, 100*fitMeanTolerance)
	}
}

// TestFitDeterministic: a fit (a short one here) gives the same profile
// every time, and never a worse objective than its start.
func TestFitDeterministic(t *testing.T) {
	rows := []Row{{Size: 64, MRU: 3500, LineRatePct: 6.21}, {Size: 1500, MRU: 3500, LineRatePct: 46.32}}
	start := shipped(t, "mru-thread")
	o := FitOptions{Packets: 1500, Rounds: 1}
	a, resA, err := Fit(context.Background(), rows, start, o)
	if err != nil {
		t.Fatal(err)
	}
	b, _, err := Fit(context.Background(), rows, start, o)
	if err != nil {
		t.Fatal(err)
	}
	for i := range a.Parameters {
		if a.Parameters[i] != b.Parameters[i] {
			t.Errorf("%+v vs %+v", a.Parameters[i], b.Parameters[i])
		}
	}
	begin := start.Clone()
	for i := range begin.Parameters {
		if q := &begin.Parameters[i]; q.Start > 0 {
			q.Value = q.Start
		}
	}
	res0, err := SimulateRows(context.Background(), begin, rows, o.Packets, 0)
	if err != nil {
		t.Fatal(err)
	}
	if fitObjective(resA) > fitObjective(res0) {
		t.Errorf("fit made it worse: %.4f > %.4f", fitObjective(resA), fitObjective(res0))
	}
}
