package main

import (
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"
)

func newRegdumpCmd(g *globalFlags) *cobra.Command {
	var jsonOut, noPowerUp bool
	cmd := &cobra.Command{
		Use:   "regdump",
		Short: "Dump the MHI and BHI registers with names, offsets and values",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			m, err := g.openMock(!noPowerUp)
			if err != nil {
				return err
			}
			defer m.Close()
			regs, err := m.Controller.RegDump()
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if jsonOut {
				return printJSON(out, map[string]any{"device": m.Controller.Name(), "registers": regs})
			}
			tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "REGISTER\tOFFSET\tVALUE")
			for _, r := range regs {
				fmt.Fprintf(tw, "%s\t0x%03x\t0x%08x\n", r.Name, r.Offset, r.Value)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print as JSON")
	cmd.Flags().BoolVar(&noPowerUp, "no-power-up", false, "dump the registers of the device as found, before power-up")
	return cmd
}
