package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/gomhi/gomhi/cmd/mhictl/internal/soak"
	"github.com/gomhi/gomhi/internal/atomicfile"
	"github.com/gomhi/gomhi/mhi/proto/framing"
)

// soakLong is the long help of 'mhictl soak'.
const soakLong = `Runs generator and loopback traffic at full rate through the mock modem, the
host controller and the mhinet network device, in phases of --phase-packets
packets (the modem's generator and the host's loopback traffic in turn, each
packet numbered and its payload checked), while the LOOPBACK pair (0/1)
carries random payloads compared byte for byte. Meanwhile it changes the
MRU in the middle of every phase by writing devices/mhi0/mru in the
attribute tree (cycling through --mrus), injects SYS_ERR in bursts at
seeded random times (--sys-err-gap apart at least; over vfio-user a SoC
reset written to devices/mhi0/soc_reset), takes the data channels down and
up (--restart-gap), reopens the LOOPBACK pair (--loopback-restart-gap) and,
with --transport vfio-user, kills the served modem's process and starts a
new one (--modem-restart-gap): the host must notice and re-attach.

It checks, and stops at the first violation:
  - at the end of every phase, exactly: packets sent = delivered + drops
    counted by a named counter (host, modem and the links between them;
    duplicates, corrupt packets, packets of another phase are violations);
  - every --check-every: no channel with work outstanding goes --stall
    without progress (the state of every channel and ring is dumped), and
    RSS, goroutines and open file descriptors stay within twice their slack
    above their warm-up maximum;
  - at the end: each resource's maximum over the last half of the run is at
    most its warm-up maximum plus its slack (RSS: max(32 MiB, 25%);
    goroutines: 16; fds: 8).

It ends after --duration or --packets, whichever comes first, prints a
summary (a table, or --json) with the drops by counter and the resource
curves, writes it as Markdown with --report, and exits non-zero on any
violation.`

// soakFlags are the flags of 'mhictl soak'.
type soakFlags struct {
	o                                soak.Options
	transport, formatName, reportOut string
	jsonOut                          bool
	rows                             int
	progress                         time.Duration
	slackRSSMiB                      int
}

func newSoakCmd(g *globalFlags) *cobra.Command {
	var sf soakFlags
	cmd := &cobra.Command{
		Use:   "soak",
		Short: "Run traffic and faults through the whole stack for a long time and check that nothing is lost or leaks",
		Long:  soakLong,
		Example: `  mhictl soak --duration 1m
  mhictl soak --packets 10000000 --report soak.md
  mhictl soak --duration 5m --transport vfio-user --json > soak.json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := sf.validate(cmd, g); err != nil {
				return err
			}
			return sf.run(cmd)
		},
	}
	sf.register(cmd.Flags())
	return cmd
}

// register defines the flags on f.
func (sf *soakFlags) register(f *pflag.FlagSet) {
	f.DurationVar(&sf.o.Duration, "duration", 0, "run this long (with --packets: whichever comes first)")
	f.Uint64Var(&sf.o.Packets, "packets", 0, "run until this many data packets were sent")
	f.StringVar(&sf.transport, "transport", string(soak.Inproc), "inproc (the mock modem in this process) or vfio-user (served by another process, killed and restarted)")
	f.StringVar(&sf.formatName, "format", "", "data channel framing: raw, mbim or qmap (default: the model's own)")
	f.Uint64Var(&sf.o.Seed, "seed", 1, "seed of every random choice (fault times, MRU order, payloads)")
	f.Uint64Var(&sf.o.PhasePackets, "phase-packets", soak.DefaultPhasePackets, "data packets per phase: one MRU change each, conservation checked exactly at its end")
	f.IntSliceVar(&sf.o.MRUs, "mrus", slices.Clone(soak.DefaultMRUs), "MRUs written to the attribute tree in turn")
	f.IntSliceVar(&sf.o.Sizes, "sizes", slices.Clone(soak.DefaultSizes), "data packet sizes, used in turn")
	f.DurationVar(&sf.o.SysErrGap, "sys-err-gap", soak.DefaultSysErrGap, "least time between two SYS_ERR bursts (negative: none); shorter than the host's recovery window (10 s) makes it give up by design")
	f.DurationVar(&sf.o.RestartGap, "restart-gap", 3*time.Second, "least time between two restarts of the data channels (negative: none)")
	f.DurationVar(&sf.o.LoopbackRestartGap, "loopback-restart-gap", 3*time.Second, "least time between two reopenings of the LOOPBACK pair (negative: none)")
	f.DurationVar(&sf.o.ModemRestartGap, "modem-restart-gap", 5*time.Second, "vfio-user: least time between two kills of the served modem (negative: none)")
	f.DurationVar(&sf.o.CheckEvery, "check-every", soak.DefaultCheckEvery, "interval of the continuous checks and resource samples")
	f.DurationVar(&sf.o.Warmup, "warmup", 0, "warm-up before resources must stay flat (default: a quarter of --duration, 10 s..5 min)")
	f.DurationVar(&sf.o.Stall, "stall", soak.DefaultStall, "longest time a channel with work outstanding may make no progress")
	f.DurationVar(&sf.o.Settle, "settle", soak.DefaultSettle, "longest wait at the end of a phase for every packet to be delivered or counted")
	f.IntVar(&sf.slackRSSMiB, "slack-rss", 0, "RSS growth allowed after the warm-up, MiB (default: max(32, 25% of the warm-up max))")
	f.IntVar(&sf.o.Slack.Goroutines, "slack-goroutines", 16, "goroutine growth allowed after the warm-up")
	f.IntVar(&sf.o.Slack.FDs, "slack-fds", 8, "file descriptor growth allowed after the warm-up")
	f.BoolVar(&sf.jsonOut, "json", false, "print the summary as JSON (with every resource sample)")
	f.StringVar(&sf.reportOut, "report", "", "also write the summary as Markdown tables to FILE ('-': standard output)")
	f.IntVar(&sf.rows, "curve-rows", 20, "rows of the resource curve in the table and the report (evenly spaced samples)")
	f.DurationVar(&sf.progress, "progress", 10*time.Second, "print a progress line to stderr this often (0: never)")
}

// validate checks the flags and completes the soak's options from them
// and the global flags.
func (sf *soakFlags) validate(cmd *cobra.Command, g *globalFlags) error {
	fl := cmd.Flags()
	o := &sf.o
	o.Transport = soak.Transport(strings.ToLower(sf.transport))
	if fl.Changed("model") {
		o.Model = g.model
	}
	if sf.formatName != "" {
		f, err := framing.Parse(sf.formatName)
		if err != nil {
			return fmt.Errorf("--format: %w", err)
		}
		o.Format, o.FormatSet = f, true
	}
	if sf.slackRSSMiB > 0 {
		o.Slack.RSSBytes = int64(sf.slackRSSMiB) << 20
	}
	if o.Transport == soak.VFIOUser {
		self, err := os.Executable()
		if err != nil {
			return fmt.Errorf("--transport vfio-user: finding this program to serve the modem: %w", err)
		}
		o.ServeCommand = serveCommand(self, g.logLevel)
	}
	log, err := g.logger()
	if err != nil {
		return err
	}
	o.Logger = log
	if err := o.Validate(); err != nil {
		return err
	}
	if sf.jsonOut && sf.reportOut == "-" {
		return errors.New("--json and --report -: both write to standard output")
	}
	return nil
}

// run runs the soak until interrupted, prints its summary and writes the
// report; the soak's own error (a violation) is returned with any of
// writing.
func (sf *soakFlags) run(cmd *cobra.Command) error {
	o := sf.o
	errOut := cmd.ErrOrStderr()
	if sf.progress > 0 {
		var last time.Duration
		o.Progress = func(s soak.Sample) {
			if s.At-last < sf.progress {
				return
			}
			last = s.At
			fmt.Fprintf(errOut, "soak: %v: %d packets, RSS %.1f MiB, %d goroutines, %d fds\n",
				s.At.Round(time.Second), s.Packets, float64(s.RSS)/(1<<20), s.Goroutines, s.FDs)
		}
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	sum, runErr := soak.Run(ctx, o)
	if sum == nil {
		return runErr
	}
	out := cmd.OutOrStdout()
	var err error
	if sf.jsonOut {
		err = sum.WriteJSON(out)
	} else {
		err = sum.WriteTable(out, sf.rows)
	}
	if err != nil {
		return errors.Join(runErr, err)
	}
	if sf.reportOut != "" {
		if err := writeSoakReport(sf.reportOut, sum, strings.Join(os.Args[1:], " "), sf.rows); err != nil {
			return errors.Join(runErr, err)
		}
	}
	return runErr
}

// serveCommand returns the command that serves the mock modem for a
// vfio-user soak: this program's 'modem serve' in loopback mode, its
// events as JSON lines (the soak reads the modem's counters from them).
func serveCommand(self, logLevel string) func(socket, model string, format framing.Format) *exec.Cmd {
	return func(socket, model string, format framing.Format) *exec.Cmd {
		return exec.Command(self, "--model", model, "--log-level", logLevel,
			"modem", "serve", "--socket", socket, "--ip-mode", "loopback", "--format", format.String(), "--json-log")
	}
}

func writeSoakReport(path string, sum *soak.Summary, command string, rows int) error {
	if path == "-" {
		return sum.WriteMarkdown(os.Stdout, "mhictl "+command, rows)
	}
	// Created or replaced once complete (atomicfile).
	err := atomicfile.Write(path, 0o666, 0, func(w io.Writer) error {
		return sum.WriteMarkdown(w, "mhictl "+command, rows)
	})
	if err != nil {
		return fmt.Errorf("--report: %w", err)
	}
	return nil
}
