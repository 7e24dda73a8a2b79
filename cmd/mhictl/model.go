package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/gomhi/gomhi/cmd/mhictl/internal/sweep"
	"github.com/gomhi/gomhi/internal/atomicfile"
)

func newModelCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "model",
		Short: "Work with the sweep's timing model: fit a profile to a measured table",
		Long: `The MRU sweep ('mhictl bench') runs in virtual time with a timing profile:
a few named parameters, each with a unit and a meaning, that say what the
modelled link, modem and host take (docs/FIDELITY.md). 'model fit' fits a
profile's parameters to a measured table.`,
	}
	cmd.AddCommand(newModelFitCmd(), newModelSensitivityCmd())
	return cmd
}

func newModelSensitivityCmd() *cobra.Command {
	var (
		table, prof       string
		packets, parallel int
		factor            float64
		jsonOut           bool
	)
	cmd := &cobra.Command{
		Use:   "sensitivity --table FILE.csv [--profile NAME|FILE.json]",
		Short: "Show how the fit's residuals move with each parameter of a profile",
		Long: `Evaluates the profile on the measured table as it is, and with each of its
parameters in turn multiplied and divided by --factor, and prints the
objective the fit minimises (the largest plus the mean absolute relative
residual) in the three cases and each row's residual. A parameter that
barely moves the objective is one the table cannot determine (it must be
set from other evidence); two that move the residuals the same way cannot
be told apart by the table.`,
		Example: `  mhictl model sensitivity --table cmd/mhictl/internal/sweep/profiles/mru-thread.csv`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			rows, p, err := loadTableAndProfile(table, prof)
			if err != nil {
				return err
			}
			if !cmd.Flags().Changed("packets") && p.Fit != nil && p.Fit.Packets > 0 {
				packets = p.Fit.Packets
			}
			if !(factor > 1) {
				return fmt.Errorf("--factor %g: want more than 1", factor)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			base, sens, err := sweep.Sensitivities(ctx, rows, p, factor, sweep.FitOptions{Packets: packets, Parallel: parallel})
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			if jsonOut {
				return printJSON(w, struct {
					Base        float64             `json:"objective"`
					Sensitivity []sweep.Sensitivity `json:"sensitivity"`
				}{base, sens})
			}
			fmt.Fprintf(w, "profile %s on %s: objective %.3f (largest + mean |residual|)\n\n", p.Name, table, base)
			tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
			fmt.Fprintf(tw, "PARAMETER\tSOURCE\t×%g\t÷%g\t", factor, factor)
			for _, r := range rows {
				fmt.Fprintf(tw, "%d ×\t%d ÷\t", r.Size, r.Size)
			}
			fmt.Fprint(tw, "\n")
			for _, s := range sens {
				src, _, _ := strings.Cut(s.Source, ":")
				fmt.Fprintf(tw, "%s\t%s\t%.3f\t%.3f\t", s.Parameter, src, s.Up, s.Down)
				for i := range s.UpRes {
					fmt.Fprintf(tw, "%+.0f%%\t%+.0f%%\t", 100*s.UpRes[i], 100*s.DownRes[i])
				}
				fmt.Fprint(tw, "\n")
			}
			return tw.Flush()
		},
	}
	f := cmd.Flags()
	f.StringVar(&table, "table", "", "measured table (CSV: size, mru, line_rate_pct)")
	f.StringVar(&prof, "profile", "mru-thread", "profile to examine (shipped name or .json file)")
	f.Float64Var(&factor, "factor", 1.25, "each parameter is multiplied and divided by this")
	f.IntVar(&packets, "packets", 0, "packets per row (0: the profile's fit's, else 20000)")
	f.IntVar(&parallel, "parallel", 0, "rows simulated at once (0: one per CPU)")
	f.BoolVar(&jsonOut, "json", false, "print as JSON")
	return cmd
}

// loadTableAndProfile reads a measured table and loads a profile.
func loadTableAndProfile(table, prof string) ([]sweep.Row, *sweep.Profile, error) {
	if table == "" {
		return nil, nil, errors.New("--table: a measured table (CSV) is required")
	}
	f, err := os.Open(table)
	if err != nil {
		return nil, nil, fmt.Errorf("--table: %w", err)
	}
	rows, err := sweep.ReadTable(f)
	f.Close()
	if err != nil {
		return nil, nil, fmt.Errorf("--table %s: %w", table, err)
	}
	p, err := sweep.LoadProfile(prof)
	if err != nil {
		return nil, nil, fmt.Errorf("--profile: %w", err)
	}
	return rows, p, nil
}

// modelFitFlags are the flags of 'mhictl model fit'.
type modelFitFlags struct {
	table, out, start string
	packets, rounds   int
	parallel          int
	step              float64
	jsonOut, verbose  bool
}

func newModelFitCmd() *cobra.Command {
	var mf modelFitFlags
	cmd := &cobra.Command{
		Use:   "fit --table FILE.csv [--profile OUT.json]",
		Short: "Fit a timing profile to a measured table and print every row's residual",
		Long: `Fits the parameters of the --start profile whose source is "fitted" to the
measured table (CSV with the columns size, mru and line_rate_pct: the packet
size as the MRU thread counts it, an Ethernet frame without FCS; the host's
MRU; the throughput as a percentage of the link's line rate). The other
parameters keep the values --start sets them to.

Every evaluation runs the model in virtual time on every row of the table
(--packets packets per row, one iteration). The method is a deterministic
pattern search in the logarithms of the fitted parameters, starting from
each parameter's "start" value: every round tries each parameter ×(1+s) and
÷(1+s) and keeps every change that lowers the objective, the largest plus
the mean absolute relative residual; s halves after a round without one,
from 1 down to 1/64, within --rounds rounds. The same table, start profile
and options give the same profile: fitting the MRU thread's table from the
shipped profile reproduces it.

Prints each row's measured and modelled line-rate percentage and their
relative residual, then the fitted parameters; --profile writes the fitted
profile as JSON.`,
		Example: `  mhictl model fit --table cmd/mhictl/internal/sweep/profiles/mru-thread.csv
  mhictl model fit --table mytable.csv --start mru-thread --profile mine.json
  mhictl bench --timing mine.json --quick`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			rows, prof, err := loadTableAndProfile(mf.table, mf.start)
			if err != nil {
				return err
			}
			mf.applyProfileDefaults(cmd.Flags(), prof)
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return mf.run(ctx, rows, prof, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	mf.register(cmd.Flags())
	return cmd
}

// register defines the flags on f.
func (mf *modelFitFlags) register(f *pflag.FlagSet) {
	f.StringVar(&mf.table, "table", "", "measured table to fit (CSV: size, mru, line_rate_pct)")
	f.StringVar(&mf.out, "profile", "", "write the fitted profile (JSON) to this file")
	f.StringVar(&mf.start, "start", "mru-thread", "profile to start from: which parameters are fitted, their start values, the others' values (shipped name or .json file)")
	f.IntVar(&mf.packets, "packets", 0, "packets per row and evaluation (0: the start profile's, else 20000)")
	f.IntVar(&mf.rounds, "rounds", 0, "most rounds of the pattern search (0: the start profile's, else 60)")
	f.Float64Var(&mf.step, "step", 0, "first relative step of the pattern search (0: the start profile's, else 0.5)")
	f.IntVar(&mf.parallel, "parallel", 0, "rows simulated at once (0: one per CPU)")
	f.BoolVar(&mf.jsonOut, "json", false, "print the fitted profile and the residuals as JSON")
	f.BoolVarP(&mf.verbose, "verbose", "v", false, "log every improvement of the fit to stderr")
}

// applyProfileDefaults takes --packets, --rounds and --step from the start
// profile's fit options where they were not given explicitly.
func (mf *modelFitFlags) applyProfileDefaults(flags *pflag.FlagSet, prof *sweep.Profile) {
	if prof.Fit == nil {
		return
	}
	if !flags.Changed("packets") && prof.Fit.Packets > 0 {
		mf.packets = prof.Fit.Packets
	}
	if !flags.Changed("rounds") && prof.Fit.Rounds > 0 {
		mf.rounds = prof.Fit.Rounds
	}
	if !flags.Changed("step") && prof.Fit.Step > 0 {
		mf.step = prof.Fit.Step
	}
}

// run fits prof to rows, writes the fitted profile to --profile and prints
// the residuals and parameters to out (the fit's progress with --verbose
// to errOut).
func (mf *modelFitFlags) run(ctx context.Context, rows []sweep.Row, prof *sweep.Profile, out, errOut io.Writer) error {
	o := sweep.FitOptions{Packets: mf.packets, Rounds: mf.rounds, Step: mf.step, Parallel: mf.parallel}
	if mf.verbose {
		o.Log = func(format string, args ...any) { fmt.Fprintf(errOut, format+"\n", args...) }
	}
	fitted, res, err := sweep.Fit(ctx, rows, prof, o)
	if err != nil {
		return err
	}
	if fitted.Fit != nil {
		fitted.Fit.Table = mf.table
	}
	if mf.out != "" {
		if err := writeProfileFile(mf.out, fitted); err != nil {
			return fmt.Errorf("--profile: %w", err)
		}
	}
	if mf.jsonOut {
		return printJSON(out, struct {
			Profile   *sweep.Profile   `json:"profile"`
			Residuals []sweep.Residual `json:"residuals"`
		}{fitted, res})
	}
	return writeFit(out, fitted, res)
}

// writeProfileFile writes p as JSON to a file at path, created or
// replaced once complete (atomicfile).
func writeProfileFile(path string, p *sweep.Profile) error {
	return atomicfile.Write(path, 0o666, 0, p.WriteJSON)
}

// writeFit prints the residuals table and the fitted parameters.
func writeFit(w io.Writer, p *sweep.Profile, res []sweep.Residual) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "SIZE\tMRU\tMEASURED %\tMODEL %\tRESIDUAL\t\n")
	for _, r := range res {
		fmt.Fprintf(tw, "%d\t%d\t%.2f\t%.2f\t%+.1f%%\t\n", r.Size, r.MRU, r.LineRatePct, r.Model, 100*r.Rel)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	mx, mn := sweep.ResidualStats(res)
	fmt.Fprintf(w, "largest |residual| %.1f%%, mean %.1f%%\n\nprofile %s:\n", 100*mx, 100*mn, p.Name)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, q := range p.Parameters {
		src, _, _ := strings.Cut(q.Source, ":")
		fmt.Fprintf(tw, "  %s\t%.6g %s\t%s\n", q.Name, q.Value, q.Unit, src)
	}
	return tw.Flush()
}
