package main

import (
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/gomhi/gomhi/pcigeneric"
)

func newModelsCmd() *cobra.Command {
	var jsonOut bool
	cmd := &cobra.Command{
		Use:   "models",
		Short: "List the modem models of the device table",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			type row struct {
				Name     string `json:"name"`
				Config   string `json:"config"`
				MRU      int    `json:"mru_default"`
				Channels int    `json:"channels"`
			}
			var rows []row
			for _, n := range pcigeneric.Models() {
				m, _ := pcigeneric.Model(n)
				rows = append(rows, row{n, m.ConfigName, m.MRUDefault, len(m.Config.Channels)})
			}
			out := cmd.OutOrStdout()
			if jsonOut {
				return printJSON(out, rows)
			}
			tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "MODEL\tCONFIG\tMRU\tCHANNELS")
			for _, r := range rows {
				fmt.Fprintf(tw, "%s\t%s\t%d\t%d\n", r.Name, r.Config, r.MRU, r.Channels)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print as JSON")
	return cmd
}
