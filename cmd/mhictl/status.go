package main

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/gomhi/gomhi/mhi"
	"github.com/spf13/cobra"
)

func newStatusCmd(g *globalFlags) *cobra.Command {
	var jsonOut bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the MHI state, execution environment, SYS_ERR recovery, channels and event rings",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			m, err := g.openMock(true)
			if err != nil {
				return err
			}
			defer m.Close()
			st := m.Controller.Status()
			out := cmd.OutOrStdout()
			if jsonOut {
				return printJSON(out, st)
			}
			return writeStatus(out, st, m.Info.Name)
		},
	}
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print as JSON")
	return cmd
}

// recoveryLine says how SYS_ERR recovery stands, loudly when it gave up.
func recoveryLine(r mhi.RecoveryStatus) string {
	switch {
	case r.Failed:
		return fmt.Sprintf("recovery: FAILED after %d attempts (%d failed): %s\n  the device is left alone; power it down and up again",
			r.Attempts, r.Failures, r.LastError)
	case r.Consecutive > 0:
		return fmt.Sprintf("recovery: in progress, %d consecutive of %d allowed, backoff %v (%d attempts, %d failed)",
			r.Consecutive, r.Limit, r.Backoff, r.Attempts, r.Failures)
	}
	return fmt.Sprintf("recovery: ok (%d attempts, %d failed)", r.Attempts, r.Failures)
}

// writeStatus prints st as tables.
func writeStatus(out io.Writer, st mhi.Status, model string) error {
	fmt.Fprintf(out, "%s: model %s, MHI state %s, EE %s, host PM %s\n", st.Name, model, st.State, st.EE, st.PM)
	fmt.Fprintf(out, "%s\n\n", recoveryLine(st.Recovery))
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CH\tNAME\tDIR\tSTATE\tCTX\tELEMS\tER\tRP\tWP\tCTX_RP\tCTX_WP\tPENDING")
	for _, c := range st.Channels {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%d\t%d\t0x%x\t0x%x\t0x%x\t0x%x\t%d\n",
			c.Num, c.Name, c.Dir, c.State, c.CtxState, c.Elements, c.EventRing, c.HostRP, c.HostWP, c.CtxRP, c.CtxWP, c.Pending)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(out)
	tw = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ER\tKIND\tELEMS\tVECTOR\tMOD_MS\tRP\tWP\tDEVICE_RP")
	for _, e := range st.EventRings {
		fmt.Fprintf(tw, "%d\t%s\t%d\t%d\t%d\t0x%x\t0x%x\t0x%x\n", e.Index, e.Kind, e.Elements, e.Vector, e.ModMs, e.HostRP, e.HostWP, e.DeviceRP)
	}
	return tw.Flush()
}
