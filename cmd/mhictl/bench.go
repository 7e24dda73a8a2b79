package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/term"

	"github.com/gomhi/gomhi/cmd/mhictl/internal/sweep"
	"github.com/gomhi/gomhi/mhi/ep/ipdata"
	"github.com/gomhi/gomhi/mhi/proto/framing"
	"github.com/gomhi/gomhi/mhinet"
	"github.com/gomhi/gomhi/pcigeneric"
	"github.com/gomhi/gomhi/pcigeneric/vfiouser/client"
)

// benchLongFormat is the long help of 'mhictl bench': a format taking
// the quick grid's sizes, MRUs, packets and iterations.
const benchLongFormat = `Measures how the MRU (the size of the host's receive buffers) changes
throughput when the modem aggregates packets: for every MRU and packet size
it pushes --packets packets through the mock modem and gomhi's network device
--iterations times and reports packets/s and MB/s (min/max/avg/median over
the iterations), the ring elements, events and overflow chains each packet
cost, and the ring and pool memory of each MRU.

By default the sweep runs in virtual time with the timing profile
mru-thread (--timing; docs/FIDELITY.md): the generator sends on a 1 GbE
link at line rate, the packets wait in the modem's receive queue, which
the modem aggregates batch by batch, and the profile says what the
modem's work on each packet, its headers and each host buffer and its
reads of the host's ring take (the host's work on each packet and buffer
takes the model's measured constants), while the host's real
code and the mock modem's real ring processing do all of that work. Sizes are then the
MRU thread's packet sizes (Ethernet frames without FCS: the datagrams are
14 bytes shorter), packets counts the packets the modem takes in (those it
had no buffer for are lost and counted, as on a real link), and every
point also reports its percentage of the line rate (LINE%%) and the host
code's real time per packet; the last table puts the line-rate
percentages beside the measured table the profile was fitted to. Results
are deterministic: the same profile, grid and packets give the same
figures. Points run in parallel (--parallel). --timing wallclock runs in
real time instead (the mock's sleeps and timers are real; sizes are IP
packet sizes), as loopback mode and --vfio-user always do; its last table
gives each point's median packets/s as a percentage of the best MRU for
that size.

In generator mode the modem generates the packets (like the external packet
generator of the MRU thread); in loopback mode the host transmits and the
modem loops every packet back aggregated.

The model is the global --model if given, else telit-fn990. --quick runs a
small grid in seconds (sizes %s; MRUs %s;
%d packets; %d iterations); flags given explicitly still win. Ctrl-C stops
the sweep and prints the points measured so far. Exits non-zero if any point
lost packets.

With --vfio-user the modem is the mock modem another process serves
('mhictl modem serve --socket PATH --ip-mode loopback'): the sweep runs in
loopback mode (the default there; the served modem's generator is out of
reach), the model is the one the served modem presents, --format defaults to
its natural framing (mbim on IP_HW0_MBIM, raw on IP_HW0) and must match the
served modem's --format, and the aggregation limits are the served modem's
(--max-datagrams and --max-aggregate of 'modem serve'). A probe packet checks
first that the modem loops back in --format. The served modem's drop counters
are out of reach: a packet it drops counts as lost.`

// benchFlags are the flags of 'mhictl bench'.
type benchFlags struct {
	quick, jsonOut, csvOut        bool
	sizes, mrus                   []int
	packets, iterations           int
	maxDatagrams, maxAggregate    int
	modeName, formatName, plotOut string
	vfioUser, timingName          string
	parallel                      int
}

func newBenchCmd(g *globalFlags) *cobra.Command {
	var bf benchFlags
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Sweep MRUs and packet sizes through the mock modem and report the throughput",
		Long: fmt.Sprintf(benchLongFormat,
			joinInts(sweep.QuickSizes), joinInts(sweep.QuickMRUs), sweep.QuickPackets, sweep.QuickIterations),
		Example: `  mhictl bench --quick
  mhictl bench --sizes 64,1262,1263,1500 --mrus 3500,32768 --plot mru.svg
  mhictl bench --timing mru-thread --mrus 3500,32768 --packets 200000 --iterations 1 --json
  mhictl bench --quick --timing wallclock
  mhictl bench --quick --mode loopback --format qmap --csv > sweep.csv
  mhictl bench --quick --vfio-user /tmp/m.sock`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o, remote, err := bf.prepare(cmd, g)
			if err != nil {
				return err
			}
			if remote != nil {
				defer remote.Close()
			}
			return bf.run(cmd.Context(), o, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	bf.register(cmd.Flags())
	return cmd
}

// register defines the flags on f.
func (bf *benchFlags) register(f *pflag.FlagSet) {
	f.BoolVar(&bf.quick, "quick", false, "small grid: quick sizes, MRUs, packets and iterations unless given explicitly")
	f.IntSliceVar(&bf.sizes, "sizes", slices.Clone(sweep.DefaultSizes), fmt.Sprintf("packet sizes in bytes: with a timing profile Ethernet frames without FCS (the IP datagram is %d bytes shorter), with --timing wallclock IP packets (%d..%d)", sweep.FrameHeader, ipdata.GenMinPacket, mhinet.MaxMTU))
	f.IntSliceVar(&bf.mrus, "mrus", slices.Clone(sweep.DefaultMRUs), fmt.Sprintf("MRUs (receive buffer sizes) in bytes (%d..%d)", mhinet.MinMRU, mhinet.MaxMRU))
	f.IntVar(&bf.packets, "packets", sweep.DefaultPackets, "packets per point and iteration")
	f.IntVar(&bf.iterations, "iterations", sweep.DefaultIterations, "iterations per point")
	f.StringVar(&bf.modeName, "mode", string(sweep.Generator), "generator (the modem generates) or loopback (the host transmits, the modem loops back)")
	f.StringVar(&bf.formatName, "format", "mbim", "framing: mbim, qmap or raw")
	f.IntVar(&bf.maxDatagrams, "max-datagrams", 0, "modem aggregation limit in packets per transfer (0: the modem's default, 32)")
	f.IntVar(&bf.maxAggregate, "max-aggregate", 0, "modem aggregation limit in bytes per transfer (0: the modem's default, 32768)")
	f.BoolVar(&bf.jsonOut, "json", false, "print the report as JSON")
	f.BoolVar(&bf.csvOut, "csv", false, "print the report as CSV, one row per point")
	f.StringVar(&bf.plotOut, "plot", "", "also plot packets/s against packet size per MRU to this .svg or .png file")
	f.StringVar(&bf.vfioUser, "vfio-user", "", "sweep the mock modem another process serves on the vfio-user socket PATH (loopback mode)")
	f.StringVar(&bf.timingName, "timing", "mru-thread", "timing profile for virtual time (shipped: "+strings.Join(sweep.ProfileNames(), ", ")+"; or a .json file), or wallclock for real time")
	f.IntVar(&bf.parallel, "parallel", 0, "points simulated at once in virtual time (0: one per CPU)")
}

// prepare validates the flags and turns them into the sweep's options;
// with --vfio-user it connects to the served modem, which the caller
// closes after the sweep.
func (bf *benchFlags) prepare(cmd *cobra.Command, g *globalFlags) (sweep.Options, *client.Remote, error) {
	flags := cmd.Flags()
	bf.applyQuick(flags)
	o := sweep.Options{
		Sizes: bf.sizes, MRUs: bf.mrus, Packets: bf.packets, Iterations: bf.iterations,
		MaxDatagrams: bf.maxDatagrams, MaxAggregate: bf.maxAggregate, Parallel: bf.parallel,
	}
	if err := bf.chooseTiming(flags, &o); err != nil {
		return o, nil, err
	}
	if flags.Changed("model") {
		o.Model = g.model
	}
	log, err := g.logger()
	if err != nil {
		return o, nil, err
	}
	var remote *client.Remote
	if bf.vfioUser != "" {
		if remote, err = bf.connectServedModem(cmd, log, &o); err != nil {
			return o, nil, err
		}
	}
	if err := checkBenchFlags(&o, bf.modeName, bf.formatName, bf.jsonOut, bf.csvOut, bf.plotOut); err != nil {
		if remote != nil {
			_ = remote.Close()
		}
		return o, nil, err
	}
	o.Logger = log
	return o, remote, nil
}

// applyQuick sets the quick grid for every grid flag --quick covers and
// that was not given explicitly.
func (bf *benchFlags) applyQuick(flags *pflag.FlagSet) {
	if !bf.quick {
		return
	}
	if !flags.Changed("sizes") {
		bf.sizes = sweep.QuickSizes
	}
	if !flags.Changed("mrus") {
		bf.mrus = sweep.QuickMRUs
	}
	if !flags.Changed("packets") {
		bf.packets = sweep.QuickPackets
	}
	if !flags.Changed("iterations") {
		bf.iterations = sweep.QuickIterations
	}
}

// chooseTiming loads the --timing profile into o.Timing, or leaves it nil
// for real time: wallclock is the default for loopback mode and a served
// modem.
func (bf *benchFlags) chooseTiming(flags *pflag.FlagSet, o *sweep.Options) error {
	// Virtual time models the generator mode of the in-process
	// mock: loopback mode and a served modem run in real time
	// unless a profile is asked for explicitly.
	if !flags.Changed("timing") && (bf.vfioUser != "" || strings.EqualFold(bf.modeName, string(sweep.Loopback))) {
		bf.timingName = sweep.Wallclock
	}
	if strings.EqualFold(bf.timingName, sweep.Wallclock) {
		return nil
	}
	prof, err := sweep.LoadProfile(bf.timingName)
	if err != nil {
		return fmt.Errorf("--timing: %w", err)
	}
	if bf.vfioUser != "" {
		return fmt.Errorf("--timing %s and --vfio-user: virtual time runs the in-process mock modem (use --timing wallclock)", bf.timingName)
	}
	o.Timing = prof
	return nil
}

// connectServedModem checks every flag, then connects to the modem served
// on --vfio-user and points o at it (checkBenchRemoteFlags,
// openBenchRemote).
func (bf *benchFlags) connectServedModem(cmd *cobra.Command, log *slog.Logger, o *sweep.Options) (*client.Remote, error) {
	if err := checkBenchRemoteFlags(cmd, bf.vfioUser, &bf.modeName); err != nil {
		return nil, err
	}
	// Every flag is checked before the served modem is
	// touched: it serves one client at a time. Its framing
	// (the --format default) is not known yet: check with
	// raw, which fits any packet size; the check after this one, with
	// the real format, can then only refuse a size too big
	// for the modem's aggregates.
	pre, preFormat := *o, bf.formatName
	if !cmd.Flags().Changed("format") {
		preFormat = framing.RawIP.String()
	}
	if err := checkBenchFlags(&pre, bf.modeName, preFormat, bf.jsonOut, bf.csvOut, bf.plotOut); err != nil {
		return nil, err
	}
	return openBenchRemote(cmd, bf.vfioUser, log, o, &bf.formatName)
}

// run sweeps o, drawing a progress bar on errOut when it is a terminal,
// and prints the report to out. Ctrl-C (or SIGTERM) stops the sweep and
// prints the points measured so far.
func (bf *benchFlags) run(ctx context.Context, o sweep.Options, out, errOut io.Writer) error {
	bar := newSweepProgressBar(errOut, len(o.MRUs)*len(o.Sizes)*o.Iterations)
	o.Progress = func(done, _ int) { _ = bar.Set(done) }

	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, runErr := sweep.Run(ctx, o)
	_ = bar.Clear()
	if runErr != nil && ctx.Err() != nil {
		runErr = fmt.Errorf("bench: interrupted after %d of %d points", pointsOf(rep), len(o.MRUs)*len(o.Sizes))
	}
	if pointsOf(rep) == 0 {
		if errors.Is(runErr, sweep.ErrModemMismatch) {
			runErr = fmt.Errorf("%w; serve it with 'mhictl modem serve --ip-mode loopback --format %s'", runErr, o.Format)
		}
		return runErr
	}
	if err := bf.writeReport(rep, out, errOut); err != nil {
		return errors.Join(runErr, err)
	}
	if runErr != nil {
		return runErr
	}
	return notConserved(rep)
}

// newSweepProgressBar returns the sweep's progress bar over total
// measurements, drawn on w only when w is a terminal.
func newSweepProgressBar(w io.Writer, total int) *progressbar.ProgressBar {
	return progressbar.NewOptions(total,
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetVisibility(isTerminal(w)),
		progressbar.OptionSetDescription("sweep"),
		progressbar.OptionShowCount(),
		progressbar.OptionSetPredictTime(true),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionClearOnFinish(),
	)
}

// writeReport prints rep to out as JSON, CSV or a table, and plots it to
// --plot if given; notes go to errOut.
func (bf *benchFlags) writeReport(rep *sweep.Report, out, errOut io.Writer) error {
	var err error
	switch {
	case bf.jsonOut:
		err = printJSON(out, rep)
	case bf.csvOut:
		err = rep.WriteCSV(out)
		// The table ends with the elapsed time; CSV has no place
		// for it (JSON has elapsed_ns).
		fmt.Fprintf(errOut, "elapsed %v (wall clock)\n", rep.Elapsed.Round(time.Millisecond))
	default:
		err = rep.WriteTable(out)
	}
	if err != nil {
		return err
	}
	if bf.plotOut != "" {
		if err := rep.Plot(bf.plotOut); err != nil {
			return err
		}
		fmt.Fprintf(errOut, "wrote plot to %s\n", bf.plotOut)
	}
	return nil
}

// checkBenchRemoteFlags checks the flags that cannot go with --vfio-user
// and sets the mode default (loopback).
func checkBenchRemoteFlags(cmd *cobra.Command, path string, modeName *string) error {
	if err := checkModemSource(cmd, "", path, "max-datagrams", "max-aggregate"); err != nil {
		return err
	}
	if !cmd.Flags().Changed("mode") {
		*modeName = string(sweep.Loopback)
	}
	if sweep.Mode(strings.ToLower(*modeName)) == sweep.Generator {
		return fmt.Errorf("--mode generator and --vfio-user: %w (to receive a served generator's packets run 'mhictl up --vfio-user' against 'mhictl modem serve --ip-mode generator')", sweep.ErrNoGenerator)
	}
	return nil
}

// openBenchRemote connects to the served modem, powers it up and points
// the sweep at it: o.Target, o.Model and the format default. The flags
// are checked first (checkBenchRemoteFlags, checkBenchFlags).
func openBenchRemote(cmd *cobra.Command, path string, log *slog.Logger, o *sweep.Options, formatName *string) (*client.Remote, error) {
	fl := cmd.Flags()
	r, err := openRemote(path, "mhi0", log)
	if err != nil {
		return nil, err
	}
	if r.DataPair == "" {
		_ = r.Close()
		return nil, fmt.Errorf("%s: model %s has no IP data channel", path, r.Info.Name)
	}
	if !fl.Changed("format") {
		*formatName = pcigeneric.PairFormat(r.DataPair).String()
	}
	o.Model = r.Info.Name
	o.Target = &sweep.Target{Controller: r.Controller, Pair: r.DataPair}
	return r, nil
}

// checkBenchFlags validates everything before the sweep starts and fills in
// o.Mode and o.Format.
func checkBenchFlags(o *sweep.Options, modeName, formatName string, jsonOut, csvOut bool, plotOut string) error {
	if jsonOut && csvOut {
		return errors.New("--json and --csv are mutually exclusive")
	}
	switch m := sweep.Mode(strings.ToLower(modeName)); m {
	case sweep.Generator, sweep.Loopback:
		o.Mode = m
	default:
		return fmt.Errorf("--mode %q: want generator or loopback", modeName)
	}
	f, err := framing.Parse(formatName)
	if err != nil {
		return fmt.Errorf("--format: %w", err)
	}
	o.Format = f
	if len(o.Sizes) == 0 {
		return errors.New("--sizes: want at least one packet size")
	}
	if len(o.MRUs) == 0 {
		return errors.New("--mrus: want at least one MRU")
	}
	o.Sizes, o.MRUs = unique(o.Sizes), unique(o.MRUs)
	if o.Packets < 1 {
		return fmt.Errorf("--packets %d: want at least 1", o.Packets)
	}
	if o.Iterations < 1 {
		return fmt.Errorf("--iterations %d: want at least 1", o.Iterations)
	}
	if err := o.Validate(); err != nil {
		return err
	}
	if plotOut != "" {
		if err := sweep.CheckPlotPath(plotOut); err != nil {
			return fmt.Errorf("--plot: %w", err)
		}
		if dir := filepath.Dir(plotOut); dir != "" {
			if st, err := os.Stat(dir); err != nil {
				return fmt.Errorf("--plot: %w", err)
			} else if !st.IsDir() {
				return fmt.Errorf("--plot: %s is not a directory", dir)
			}
		}
	}
	return nil
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}

// unique drops repeated values, keeping the first of each.
func unique(v []int) []int {
	var out []int
	for _, x := range v {
		if !slices.Contains(out, x) {
			out = append(out, x)
		}
	}
	return out
}

func pointsOf(r *sweep.Report) int {
	if r == nil {
		return 0
	}
	return len(r.Points)
}

// notConserved returns an error naming every point that lost packets.
func notConserved(r *sweep.Report) error {
	if r.Conserved() {
		return nil
	}
	var bad []string
	for _, p := range r.Points {
		if !p.Conserved {
			bad = append(bad, fmt.Sprintf("MRU %d size %d (sent %d, delivered %d, dropped %d)", p.MRU, p.Size, p.Sent, p.Delivered, p.Dropped))
		}
	}
	return fmt.Errorf("%w: %s", sweep.ErrNotConserved, strings.Join(bad, "; "))
}

// isTerminal reports whether w is a terminal (the progress bar is drawn
// only there, so piped and captured output stays clean).
func isTerminal(w any) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
