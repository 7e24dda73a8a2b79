package main

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/gomhi/gomhi/mhi"
	"github.com/gomhi/gomhi/sysfs/genl"
	"github.com/spf13/cobra"
)

func newStatusCmd(g *globalFlags) *cobra.Command {
	d := &dialFlags{}
	cmd := &cobra.Command{
		Use:   "status [DEV]",
		Short: "Show the MHI state, execution environment, power state, SYS_ERR recovery and channels",
		Long: `With DEV, shows device DEV of the running 'mhictl up' (or the service) that
serves it, over its netlink family: its MHI state, execution environment,
the host's power-management state, SYS_ERR recovery and its channels. The
exit status is 1 when the device is left alone — it fell off the bus
(pm_state LINK_DOWN) or recovery gave up (RECOVERY_FAILED) — so that a
monitoring script notices.

Without DEV, shows every device of the running 'mhictl up' it finds; when
none runs, it powers up the embedded mock modem (--model) for the command
and shows that, saying so.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dev := ""
			if len(args) == 1 {
				dev = args[0]
			}
			c, err := d.dial(dev)
			if err != nil {
				if dev != "" || !errors.Is(err, genl.ErrNoServer) {
					return err
				}
				return embeddedStatus(cmd, g, d.json)
			}
			defer c.Close()
			return runningStatus(cmd.OutOrStdout(), c, dev, d.json)
		},
	}
	d.add(cmd)
	return cmd
}

// embeddedStatus shows the embedded mock modem, powered up for the
// command.
func embeddedStatus(cmd *cobra.Command, g *globalFlags, jsonOut bool) error {
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
	fmt.Fprintf(out, "no running 'mhictl up': the embedded mock modem (--model %s), powered up for this command\n", m.Info.Name)
	return writeStatus(out, st, m.Info.Name)
}

// deviceStatus is one device of a running instance, as status --json
// prints it.
type deviceStatus struct {
	genl.Device
	Channels []genl.Channel `json:"channels"`
}

// errDeviceLeftAlone: status found a device the stack has given up on.
var errDeviceLeftAlone = errors.New("the device is left alone")

// runningStatus shows dev (or every device) of the running instance c
// reaches; a device in LINK_DOWN or RECOVERY_FAILED makes it fail.
func runningStatus(out io.Writer, c *genl.Client, dev string, jsonOut bool) error {
	var devs []genl.Device
	if dev != "" {
		d, err := c.GetDevice(dev)
		if err != nil {
			return err
		}
		devs = []genl.Device{d}
	} else {
		var err error
		if devs, err = c.Devices(); err != nil {
			return err
		}
	}
	var all []deviceStatus
	var gone []string
	for _, d := range devs {
		chans, err := c.Channels(d.Name)
		if err != nil {
			return err
		}
		all = append(all, deviceStatus{d, chans})
		if d.PMState == mhi.PMLinkDown || d.PMState == mhi.PMRecoveryFailed {
			gone = append(gone, fmt.Sprintf("%s: pm_state %s", d.Name, d.PMState))
		}
	}
	if jsonOut {
		if err := printJSON(out, all); err != nil {
			return err
		}
	} else {
		for i, d := range all {
			if i > 0 {
				fmt.Fprintln(out)
			}
			writeRunningStatus(out, d)
		}
	}
	if len(gone) > 0 {
		return fmt.Errorf("%w: %s", errDeviceLeftAlone, strings.Join(gone, "; "))
	}
	return nil
}

// writeRunningStatus prints one device of a running instance.
func writeRunningStatus(out io.Writer, d deviceStatus) {
	fmt.Fprintf(out, "%s: model %s, MHI state %s, EE %s, host PM %s\n", d.Name, d.Model, d.State, d.EE, d.PMState)
	fmt.Fprintf(out, "recovery: %s\n\n", d.Recovery)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CH\tNAME\tDIR\tSTATE\tCTX\tELEMS\tRP\tWP\tCTX_RP\tCTX_WP\tPENDING")
	for _, c := range d.Channels {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%d\t0x%x\t0x%x\t0x%x\t0x%x\t%d\n",
			c.Num, c.Name, c.Dir, c.State, c.CtxState, c.Elements, c.HostRP, c.HostWP, c.CtxRP, c.CtxWP, c.Pending)
	}
	_ = tw.Flush()
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
