package main

import (
	"fmt"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/gomhi/gomhi/sysfs/genl"
)

// dialFlags are the flags of the commands that talk to a running `mhictl up`.
type dialFlags struct {
	port    uint32
	timeout time.Duration
	json    bool
}

func (d *dialFlags) add(cmd *cobra.Command) {
	cmd.Flags().Uint32Var(&d.port, "netlink-port", 0, "netlink port of the running `mhictl up` (default: the one its run file names, else 0x4d4849)")
	cmd.Flags().DurationVar(&d.timeout, "timeout", 5*time.Second, "per-request timeout")
	cmd.Flags().BoolVar(&d.json, "json", false, "print as JSON")
}

// dial connects to the running `mhictl up` that serves dev (with one per
// modem, each advertises its device in a run file of its own).
func (d *dialFlags) dial(dev string) (*genl.Client, error) {
	return genl.Dial(genl.ClientOptions{Port: d.port, Timeout: d.timeout, Device: dev})
}

func parseBytes(s, what string) (uint32, error) {
	n, err := strconv.ParseUint(s, 0, 32)
	if err != nil {
		return 0, fmt.Errorf("%s %q: not a number of bytes", what, s)
	}
	return uint32(n), nil
}

// newSetCmd builds set-mru and set-mtu.
func newSetCmd(use, what string, set func(*genl.SetRequest, uint32)) *cobra.Command {
	d := &dialFlags{}
	cmd := &cobra.Command{
		Use:   use + " DEV BYTES",
		Short: "Set the " + what + " of a device of a running `mhictl up` (needs root or CAP_NET_ADMIN)",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			v, err := parseBytes(args[1], what)
			if err != nil {
				return err
			}
			c, err := d.dial(args[0])
			if err != nil {
				return err
			}
			defer c.Close()
			var req genl.SetRequest
			set(&req, v)
			dev, err := c.SetDevice(args[0], req)
			if err != nil {
				return err
			}
			if d.json {
				return printJSON(cmd.OutOrStdout(), dev)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: mru %d, mtu %d\n", dev.Name, dev.MRU, dev.MTU)
			return nil
		},
	}
	d.add(cmd)
	return cmd
}

func newSetMRUCmd() *cobra.Command {
	return newSetCmd("set-mru", "MRU", func(r *genl.SetRequest, v uint32) { r.MRU = &v })
}

func newSetMTUCmd() *cobra.Command {
	return newSetCmd("set-mtu", "MTU", func(r *genl.SetRequest, v uint32) { r.MTU = &v })
}

func newGetCmd() *cobra.Command {
	d := &dialFlags{}
	cmd := &cobra.Command{
		Use:   "get DEV [ATTR|ports|session|sessions]",
		Short: "Show a device of a running `mhictl up`, one attribute (mru, mtu, state, ee, model, serial, timeout_ms), its control ports, its data session (0) or all its data sessions",
		Args:  cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := d.dial(args[0])
			if err != nil {
				return err
			}
			defer c.Close()
			if len(args) == 2 && (args[1] == "ports" || args[1] == "session" || args[1] == "sessions") {
				return getControl(cmd.OutOrStdout(), c, args[0], args[1], d.json)
			}
			dev, err := c.GetDevice(args[0])
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if len(args) == 1 {
				if d.json {
					return printJSON(out, dev)
				}
				tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
				for _, kv := range deviceFields(dev) {
					fmt.Fprintf(tw, "%s\t%s\n", kv[0], kv[1])
				}
				return tw.Flush()
			}
			for _, kv := range deviceFields(dev) {
				if kv[0] == args[1] {
					if d.json {
						return printJSON(out, map[string]string{kv[0]: kv[1]})
					}
					fmt.Fprintln(out, kv[1])
					return nil
				}
			}
			return fmt.Errorf("%s: no attribute %q (mru, mtu, state, ee, model, serial, timeout_ms)", args[0], args[1])
		},
	}
	d.add(cmd)
	return cmd
}

func deviceFields(d genl.Device) [][2]string {
	u := func(v uint32) string { return strconv.FormatUint(uint64(v), 10) }
	return [][2]string{
		{"name", d.Name}, {"state", d.State}, {"ee", d.EE}, {"model", d.Model}, {"serial", d.Serial},
		{"mru", u(d.MRU)}, {"mtu", u(d.MTU)}, {"timeout_ms", u(d.TimeoutMs)},
	}
}

func newStatsCmd() *cobra.Command {
	d := &dialFlags{}
	var watch time.Duration
	cmd := &cobra.Command{
		Use:   "stats DEV",
		Short: "Show the counters of a device of a running `mhictl up`",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := d.dial(args[0])
			if err != nil {
				return err
			}
			defer c.Close()
			out := cmd.OutOrStdout()
			var prev map[string]uint64
			for {
				stats, err := c.Stats(args[0])
				if err != nil {
					return err
				}
				if d.json {
					m := make(map[string]uint64, len(stats))
					for _, s := range stats {
						m[s.Name] = s.Value
					}
					if err := printJSON(out, m); err != nil {
						return err
					}
				} else {
					tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
					if watch > 0 {
						fmt.Fprintf(tw, "COUNTER\tVALUE\tPER SECOND\n")
					}
					cur := map[string]uint64{}
					for _, s := range stats {
						cur[s.Name] = s.Value
						if watch > 0 && prev != nil {
							rate := float64(s.Value-prev[s.Name]) / watch.Seconds()
							fmt.Fprintf(tw, "%s\t%d\t%.0f\n", s.Name, s.Value, rate)
						} else {
							fmt.Fprintf(tw, "%s\t%d\n", s.Name, s.Value)
						}
					}
					prev = cur
					if err := tw.Flush(); err != nil {
						return err
					}
				}
				if watch <= 0 {
					return nil
				}
				select {
				case <-cmd.Context().Done():
					return nil
				case <-time.After(watch):
				}
				fmt.Fprintln(out)
			}
		},
	}
	d.add(cmd)
	cmd.Flags().DurationVar(&watch, "watch", 0, "repeat every interval (e.g. 1s) with rates, until interrupted")
	return cmd
}
