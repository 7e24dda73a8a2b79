package main

import (
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/gomhi/gomhi/mhi/ep/quirk"
)

// quirkFlag is --quirk NAME[,NAME…] (repeatable): the field failures the
// mock modem reproduces (docs/QUIRKS.md).
type quirkFlag struct {
	values []string
	set    quirk.Set
}

// add defines --quirk on fs; what says which mock it configures.
func (q *quirkFlag) add(fs *pflag.FlagSet, what string) {
	fs.StringSliceVar(&q.values, "quirk", nil, "make "+what+" reproduce field failures: NAME[=PARAM][,NAME…] ('mhictl modem quirks' lists them; docs/QUIRKS.md)")
}

// parse checks the names and parameters given.
func (q *quirkFlag) parse() error {
	set, err := quirk.Parse(q.values...)
	if err != nil {
		return fmt.Errorf("--quirk: %w", err)
	}
	q.set = set
	return nil
}

func newModemQuirksCmd() *cobra.Command {
	var jsonOut bool
	cmd := &cobra.Command{
		Use:   "quirks",
		Short: "List the field failures the mock modem reproduces on demand (--quirk)",
		Long: `Lists the quirks the mock modem can reproduce: each a failure that real MHI
modems show in the field, named by the public report or kernel commit it
reproduces, with what it does on the wire. Give them to 'mhictl up' (the
embedded mock), 'mhictl modem serve' or 'mhictl lab' with --quirk
NAME[,NAME…]; they compose. A quirk with a parameter takes it as
NAME=VALUE (slow-ready=30s). docs/QUIRKS.md says what gomhi's host, Linux
and ModemManager do with each.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			qs := quirk.All()
			out := cmd.OutOrStdout()
			if jsonOut {
				return printJSON(out, qs)
			}
			tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "QUIRK\tWHAT IT DOES\tSOURCE")
			for _, q := range qs {
				desc := q.Description
				if q.Param != "" {
					desc += " [parameter: " + q.Param + "]"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\n", q.Name, desc, q.Source)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print as JSON")
	return cmd
}
