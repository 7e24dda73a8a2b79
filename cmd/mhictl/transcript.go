package main

import (
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/gomhi/gomhi/mhi/ep"
	"github.com/gomhi/gomhi/mhi/ep/transcript"
)

// Exit statuses of 'mhictl transcript diff'.
const (
	exitDiffUnexplained = 1 // differences no rule explains
	exitDiffUsage       = 2 // bad arguments, unreadable or malformed files
)

// usageStatus makes err exit with exitDiffUsage.
func usageStatus(err error) error { return &exitStatusError{exitDiffUsage, err} }

// newTranscriptCmd groups the commands on transcripts of what the mock
// modem observed ('mhictl up --transcript', 'mhictl modem serve
// --transcript').
func newTranscriptCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "transcript",
		Short: "Compare transcripts of what the mock modem observed of its host",
	}
	cmd.AddCommand(newTranscriptDiffCmd())
	return cmd
}

func newTranscriptDiffCmd() *cobra.Command {
	var (
		jsonOut bool
		rules   string
	)
	cmd := &cobra.Command{
		Use:   "diff A B",
		Short: "Compare two transcripts of what the mock modem observed, phase by phase",
		Long: `Compares transcript B with transcript A, each written by 'mhictl up
--transcript FILE' or 'mhictl modem serve --transcript FILE': one JSON object
per line, what the mock modem observed of its host (register accesses,
contexts, ring elements, doorbells) and what it answered (events, state
changes, interrupts), and the DMA maps a vfio-user client made, with ring
slots and names instead of addresses.

The records are split into phases (power-up, channel-start, channel-stop,
sys-err, suspend, resume, shutdown; a phase that comes back is numbered,
channel-start#2) derived from the state changes and the commands. The control
records of each phase are aligned per stream (register writes, commands and
their completions, states and EEs, each ring's contexts) and every
difference is reported with its kind:
register-order, register-value, context-field, ring-size, element-field,
event-field, doorbell-field, dma-field, state-value, command-order,
state-order, doorbell-order, missing (in A only), extra (in B only). Register reads are compared as the set of registers read (a host's
polls depend on timing). The data channels' records (transfer elements,
transfer events, their doorbells, interrupts) form the phase "data" and are
compared by their shape per ring: which distinct elements occur, not how
many, since traffic differs from run to run. So are the DMA maps, in the
phase "dma", when both transcripts have some.

--rules FILE (docs/transcript-rules.yaml in the repository) lists the
differences that are explained, each with its reason; they are reported but
do not count. The exit status is 0 when no difference is unexplained, 1 when
some are, 2 on bad arguments or an unreadable or malformed file. --json
prints {"compared", "differences" (kind, phase, where, field, a, b,
explained_by), "unexplained"}.`,
		Example: `  mhictl up --transcript /tmp/a.jsonl        # run, stop with ^C
  mhictl transcript diff /tmp/a.jsonl /tmp/b.jsonl --rules docs/transcript-rules.yaml`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 2 {
				return usageStatus(fmt.Errorf("want two transcripts, A and B; got %d arguments", len(args)))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return runTranscriptDiff(cmd.OutOrStdout(), args[0], args[1], rules, jsonOut)
		},
	}
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageStatus(err) })
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print the result as JSON")
	cmd.Flags().StringVar(&rules, "rules", "", "rules file of explained differences (docs/transcript-rules.yaml)")
	return cmd
}

// readTranscript reads the transcript at path.
func readTranscript(path string) ([]transcript.Record, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	recs, err := transcript.Read(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return recs, nil
}

// runTranscriptDiff compares the transcripts at pathA and pathB and
// prints the result to w.
func runTranscriptDiff(w io.Writer, pathA, pathB, rulesPath string, jsonOut bool) error {
	var rs *transcript.Rules
	if rulesPath != "" {
		var err error
		if rs, err = transcript.LoadRules(rulesPath); err != nil {
			return usageStatus(err)
		}
	}
	a, err := readTranscript(pathA)
	if err != nil {
		return usageStatus(err)
	}
	b, err := readTranscript(pathB)
	if err != nil {
		return usageStatus(err)
	}
	res := transcript.Diff(a, b, rs)
	if jsonOut {
		err = printJSON(w, res)
	} else {
		err = transcript.WriteText(w, res)
	}
	if err != nil {
		return usageStatus(err)
	}
	if res.Unexplained > 0 {
		return &exitStatusError{status: exitDiffUnexplained}
	}
	return nil
}

// openTranscript creates the recorder --transcript asks for (nil for "")
// and returns the device option that attaches it.
func openTranscript(path string) (*transcript.Recorder, func(*ep.Config), error) {
	if path == "" {
		return nil, func(*ep.Config) {}, nil
	}
	rec, err := transcript.Create(path)
	if err != nil {
		return nil, nil, fmt.Errorf("--transcript: %w", err)
	}
	return rec, func(c *ep.Config) { c.Observer = rec }, nil
}
