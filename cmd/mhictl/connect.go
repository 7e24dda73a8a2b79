package main

import (
	"cmp"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/gomhi/gomhi/mhi/ctrlport"
	"github.com/gomhi/gomhi/sysfs/genl"
)

// sessionFlag is --session N: a session number, 0..255 (the device's
// limit, 8 by default, is checked by `mhictl up`).
type sessionFlag struct{ s string }

func (f *sessionFlag) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.s, "session", "0", "session number: 0 is the session on the --tun interface; N > 0 an extra PDN session with its own interface (the device takes 0 to its limit less one, 8 sessions by default)")
}

// number parses --session.
func (f *sessionFlag) number() (uint8, error) {
	n, err := strconv.ParseUint(f.s, 10, 8)
	if err != nil {
		return 0, fmt.Errorf("--session %q: want a session number 0..255", f.s)
	}
	return uint8(n), nil
}

// newConnectCmd builds `mhictl connect DEV --apn APN`.
func newConnectCmd() *cobra.Command {
	d := &dialFlags{}
	var apn, ipType, iface string
	var sess sessionFlag
	cmd := &cobra.Command{
		Use:   "connect DEV --apn APN [--session N] [--interface NAME] [--ip-type ipv4|ipv6|ipv4v6]",
		Short: "Connect a data session of a device of a running `mhictl up` and configure its interface (needs root or CAP_NET_ADMIN)",
		Long: `Asks the running 'mhictl up' to connect one of the modem's data sessions over
its MBIM control channel (attach the packet service, CONNECT with the
session number, APN and IP type, read IP_CONFIGURATION) or, on a model
without MBIM, its QMI one (WDS START_NETWORK per IP family,
GET_CURRENT_SETTINGS; a session N > 0 binds its WDS clients to mux id
base + N first, WDS BIND_MUX_DATA_PORT), then give the session's TUN
interface the addresses, a route to a gateway outside their prefix, and
the MTU the modem assigned. It prints what was configured.

Session 0 (the default) is configured on up's --tun interface. A session
N > 0 gets its own TUN interface, <tun>.<N> (e.g. mhi0.1) unless
--interface names it, made before the modem is asked and removed again
on disconnect, by the user or by the network; its packets go out with
its own MBIM session id or QMAP mux id. Without --tun sessions connect
all the same, with no interface. A modem started with --require-connect
(or a real one) passes IP data on a session only while it is connected.`,
		Example: `  mhictl connect mhi0 --apn internet
  mhictl connect mhi0 --apn internet --ip-type ipv4v6 --json
  mhictl connect mhi0 --apn ims --session 1          # interface mhi0.1
  mhictl connect mhi0 --apn iot --session 2 --interface iot0`,
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
			n, err := sess.number()
			if err != nil {
				return err
			}
			if iface != "" {
				if err := ctrlport.ValidInterfaceName(iface); err != nil {
					return fmt.Errorf("--interface: %w", err)
				}
			}
			c, err := d.dial(args[0])
			if err != nil {
				return err
			}
			defer c.Close()
			s, err := c.ConnectSession(args[0], genl.ConnectRequest{Session: n, APN: apn, IPType: ipType, Interface: iface})
			if err != nil {
				return err
			}
			return printSession(cmd.OutOrStdout(), s, d.json)
		},
	}
	d.add(cmd)
	sess.add(cmd)
	cmd.Flags().StringVar(&apn, "apn", "", "access point name (required)")
	cmd.Flags().StringVar(&ipType, "ip-type", "ipv4", "IP type of the session: ipv4, ipv6 or ipv4v6")
	cmd.Flags().StringVar(&iface, "interface", "", "name of the TUN interface a session N > 0 gets (default <tun>.<N>; session 0 uses --tun)")
	return cmd
}

// newDisconnectCmd builds `mhictl disconnect DEV`.
func newDisconnectCmd() *cobra.Command {
	d := &dialFlags{}
	var sess sessionFlag
	cmd := &cobra.Command{
		Use:   "disconnect DEV [--session N]",
		Short: "Disconnect a data session of a device of a running `mhictl up` and remove its addresses (needs root or CAP_NET_ADMIN)",
		Long: `Asks the running 'mhictl up' to deactivate a data session and remove what
it configured: session 0's addresses and routes on the --tun interface (a
static --tun-addr stays), or a session N > 0's own TUN interface. The other
sessions go on. Session 0 is deactivated on the modem whoever connected
it; a session N > 0 that is not connected is an error.`,
		Example: `  mhictl disconnect mhi0
  mhictl disconnect mhi0 --session 1`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			n, err := sess.number()
			if err != nil {
				return err
			}
			c, err := d.dial(args[0])
			if err != nil {
				return err
			}
			defer c.Close()
			s, err := c.DisconnectSession(args[0], n)
			if err != nil {
				return err
			}
			return printSession(cmd.OutOrStdout(), s, d.json)
		},
	}
	d.add(cmd)
	sess.add(cmd)
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
	fmt.Fprintf(tw, "session\t%d\n", s.Session)
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

// printSessions prints `mhictl get DEV sessions`: a table of every
// session, or a JSON array.
func printSessions(w io.Writer, ss []genl.Session, asJSON bool) error {
	if asJSON {
		out := make([]genl.Session, len(ss))
		for i, s := range ss {
			if s.DNS4 == nil {
				s.DNS4 = []string{}
			}
			if s.DNS6 == nil {
				s.DNS6 = []string{}
			}
			out[i] = s
		}
		return printJSON(w, out)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SESSION\tSTATE\tPROTOCOL\tAPN\tINTERFACE\tIPV4\tIPV6\tMTU")
	dash := func(v string) string { return cmp.Or(v, "-") }
	for _, s := range ss {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%d\n", s.Session, s.State, s.Protocol, dash(s.APN), dash(s.Interface),
			dash(s.IPv4), dash(s.IPv6), s.MTU)
	}
	return tw.Flush()
}

// getControl answers `mhictl get DEV ports`, `mhictl get DEV session`
// and `mhictl get DEV sessions`.
func getControl(w io.Writer, c *genl.Client, dev, what string, asJSON bool) error {
	switch what {
	case "session":
		s, err := c.Session(dev)
		if err != nil {
			return err
		}
		return printSession(w, s, asJSON)
	case "sessions":
		ss, err := c.Sessions(dev)
		if err != nil {
			return err
		}
		return printSessions(w, ss, asJSON)
	}
	ports, err := c.Ports(dev)
	if err != nil {
		return err
	}
	return printPorts(w, dev, ports, asJSON)
}
