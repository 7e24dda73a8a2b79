package main

import (
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/gomhi/gomhi/sysfs/genl"
)

// newConnectCmd builds `mhictl connect DEV --apn APN`.
func newConnectCmd() *cobra.Command {
	d := &dialFlags{}
	var apn, ipType string
	cmd := &cobra.Command{
		Use:   "connect DEV --apn APN [--ip-type ipv4|ipv6|ipv4v6]",
		Short: "Connect the data session of a device of a running `mhictl up` and configure its interface (needs root or CAP_NET_ADMIN)",
		Long: `Asks the running 'mhictl up' to connect the modem's data session over its
MBIM control channel (attach the packet service, CONNECT with the APN and IP
type, read IP_CONFIGURATION) or, on a model without MBIM, its QMI one (WDS
START_NETWORK per IP family, GET_CURRENT_SETTINGS), then give the TUN
interface the addresses, a route to a gateway outside their prefix, and the
MTU the modem assigned. It prints what was configured. A modem started
with --require-connect (or a real one) passes IP data only while a session
is connected.`,
		Example: `  mhictl connect mhi0 --apn internet
  mhictl connect mhi0 --apn internet --ip-type ipv4v6 --json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if apn == "" {
				return fmt.Errorf("--apn is required")
			}
			switch ipType {
			case "ipv4", "ipv6", "ipv4v6":
			default:
				return fmt.Errorf("--ip-type %q: want ipv4, ipv6 or ipv4v6", ipType)
			}
			c, err := d.dial(args[0])
			if err != nil {
				return err
			}
			defer c.Close()
			s, err := c.Connect(args[0], apn, ipType)
			if err != nil {
				return err
			}
			return printSession(cmd.OutOrStdout(), s, d.json)
		},
	}
	d.add(cmd)
	cmd.Flags().StringVar(&apn, "apn", "", "access point name (required)")
	cmd.Flags().StringVar(&ipType, "ip-type", "ipv4", "IP type of the session: ipv4, ipv6 or ipv4v6")
	return cmd
}

// newDisconnectCmd builds `mhictl disconnect DEV`.
func newDisconnectCmd() *cobra.Command {
	d := &dialFlags{}
	cmd := &cobra.Command{
		Use:   "disconnect DEV",
		Short: "Disconnect the data session of a device of a running `mhictl up` and remove its addresses (needs root or CAP_NET_ADMIN)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := d.dial(args[0])
			if err != nil {
				return err
			}
			defer c.Close()
			s, err := c.Disconnect(args[0])
			if err != nil {
				return err
			}
			return printSession(cmd.OutOrStdout(), s, d.json)
		},
	}
	d.add(cmd)
	return cmd
}

// printSession prints a session as a table or JSON.
func printSession(w io.Writer, s genl.Session, asJSON bool) error {
	if asJSON {
		if s.DNS4 == nil {
			s.DNS4 = []string{}
		}
		if s.DNS6 == nil {
			s.DNS6 = []string{}
		}
		return printJSON(w, s)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "device\t%s\n", s.Device)
	fmt.Fprintf(tw, "state\t%s\n", s.State)
	fmt.Fprintf(tw, "protocol\t%s\n", s.Protocol)
	row := func(k, v string) {
		if v != "" {
			fmt.Fprintf(tw, "%s\t%s\n", k, v)
		}
	}
	row("apn", s.APN)
	row("ip_type", s.IPType)
	row("interface", s.Interface)
	row("ipv4", s.IPv4)
	row("gateway4", s.Gateway4)
	row("dns4", strings.Join(s.DNS4, " "))
	row("ipv6", s.IPv6)
	row("gateway6", s.Gateway6)
	row("dns6", strings.Join(s.DNS6, " "))
	if s.MTU > 0 {
		row("mtu", strconv.FormatUint(uint64(s.MTU), 10))
	}
	row("last_error", s.LastError)
	return tw.Flush()
}

// portDrops sums the counters of messages a port dropped.
func portDrops(st map[string]uint64) uint64 {
	var n uint64
	for _, k := range []string{"ul_partial_dropped", "ul_send_failed", "dl_queue_full", "dl_write_timeouts",
		"pair_ul_dropped", "pair_ul_aborted", "pair_dl_too_large", "pair_dl_cut", "pair_dl_chain_stalled", "pair_dl_unreported"} {
		n += st[k]
	}
	return n
}

// printPorts prints `mhictl get DEV ports`.
func printPorts(w io.Writer, dev string, ports []genl.Port, asJSON bool) error {
	if asJSON {
		if ports == nil {
			ports = []genl.Port{}
		}
		return printJSON(w, ports)
	}
	if len(ports) == 0 {
		fmt.Fprintf(w, "%s has no control ports\n", dev)
		return nil
	}
	sort.Slice(ports, func(i, j int) bool { return ports[i].Name < ports[j].Name })
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PORT\tPATH\tPTY\tUL MSGS\tUL BYTES\tDL MSGS\tDL BYTES\tFRAMING ERRORS\tDROPS")
	for _, p := range ports {
		pty, err := os.Readlink(p.Path)
		if err != nil {
			pty = "-"
		}
		st := p.Stats
		// UL: from the port's clients to the modem; DL: from the modem.
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\n", p.Name, p.Path, pty,
			st["ul_messages"], st["ul_bytes"], st["dl_messages"], st["dl_bytes"], st["ul_framing_errors"], portDrops(st))
	}
	return tw.Flush()
}

// getControl answers `mhictl get DEV ports` and `mhictl get DEV session`.
func getControl(w io.Writer, c *genl.Client, dev, what string, asJSON bool) error {
	if what == "session" {
		s, err := c.Session(dev)
		if err != nil {
			return err
		}
		return printSession(w, s, asJSON)
	}
	ports, err := c.Ports(dev)
	if err != nil {
		return err
	}
	return printPorts(w, dev, ports, asJSON)
}
