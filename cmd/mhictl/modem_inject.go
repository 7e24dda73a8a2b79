package main

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gomhi/gomhi/cmd/mhictl/internal/faultsock"
	"github.com/gomhi/gomhi/pcigeneric/mock"
	"github.com/gomhi/gomhi/pcigeneric/vfiouser"
)

// modemFaults are the faults the served modem takes (through its fault
// socket, package faultsock), with what each does.
var modemFaults = []struct{ name, help string }{
	{"sys-err", "the modem raises SYS_ERR (the host resets and recovers it); its cellular state is kept"},
	{"crash", "the baseband crashes: its cellular state restarts (sessions end), it raises SYS_ERR (with 'modem serve --rddm' it enters RAM-dump mode) and, rebooting, is not READY for 3 s after the host's reset"},
	{"surprise-removal", "the modem falls off the bus: the server exits at once, as if the device vanished (the client's accesses fail from then on)"},
	{"disconnect-session=N", "the network ends data session N alone: MBIM indicates CONNECT deactivated for SessionId N, QMI the packet service disconnected to that session's WDS clients; other sessions are untouched"},
}

// disconnectSessionFault is the prefix of the disconnect-session=N fault.
const disconnectSessionFault = "disconnect-session="

// errBadFault: a fault name or parameter that does not parse.
var errBadFault = errors.New("unknown fault")

// parseFault checks a fault request: a name of modemFaults, or
// disconnect-session=N with N in 0..255 (returned as session).
func parseFault(fault string) (name string, session uint8, err error) {
	if rest, ok := strings.CutPrefix(fault, disconnectSessionFault); ok {
		n, err := strconv.ParseUint(rest, 10, 8)
		if err != nil {
			return "", 0, fmt.Errorf("%w %q: the session number must be 0..255", errBadFault, fault)
		}
		return disconnectSessionFault, uint8(n), nil
	}
	if !slices.Contains(faultNames(), fault) || strings.HasSuffix(fault, "=N") {
		return "", 0, fmt.Errorf("%w %q (known: %s)", errBadFault, fault, strings.Join(faultNames(), ", "))
	}
	return fault, 0, nil
}

// faultNames returns the fault names.
func faultNames() []string {
	var out []string
	for _, f := range modemFaults {
		out = append(out, f.name)
	}
	return out
}

// crashReboot is how long a crashed modem stays in RESET after the host's
// reset, as a real modem rebooting its firmware (within the 8 s Linux and
// gomhi wait for READY). Coming back at once let the new ports race the
// old ones' removal in udev, which ModemManager 1.20.4 loses.
const crashReboot = 3 * time.Second

// errNoModemSession: a fault needs a client's session.
var errNoModemSession = errors.New("no client is connected: the modem has no session to fail")

// modemFaultApplier applies faults to the served device; exit ends the
// server for surprise-removal, after the answer is sent.
func modemFaultApplier(dev *vfiouser.ServerDevice, exit func()) faultsock.Apply {
	return func(fault string, reply func(string)) (string, error) {
		name, session, err := parseFault(fault)
		if err != nil {
			return "", err
		}
		switch name {
		case disconnectSessionFault:
			return disconnectSession(dev.Functions(), session)
		case "sys-err", "crash":
			m := dev.Modem()
			if m == nil {
				return "", errNoModemSession
			}
			if fault == "crash" {
				// The baseband restarts and, as a real modem's firmware
				// reboots, the modem is not READY for crashReboot after
				// the host's reset (docs/LAB.md).
				if f := dev.Functions(); f != nil && f.Modem != nil {
					f.Modem.Restart()
				}
				m.SetNeverReady(true)
				time.AfterFunc(crashReboot, func() { m.SetNeverReady(false) })
			}
			m.InjectSysErr()
			return "SYS_ERR raised", nil
		case "surprise-removal":
			reply("the server exits")
			exit()
			return "the server exits", nil
		}
		return "", fmt.Errorf("%w %q", errBadFault, fault)
	}
}

// errNoSuchSession: disconnect-session names a session that is not
// connected.
var errNoSuchSession = errors.New("no such session")

// disconnectSession is the disconnect-session=N fault on the served
// modem's functions f (nil between clients): the network ends session n
// alone (modem.Modem.NetworkDisconnect), which the control functions
// indicate to the host.
func disconnectSession(f *mock.Functions, n uint8) (string, error) {
	if f == nil || f.Modem == nil {
		return "", errNoModemSession
	}
	if !f.Modem.NetworkDisconnect(n) {
		return "", fmt.Errorf("%w: session %d is not connected", errNoSuchSession, n)
	}
	return fmt.Sprintf("the network ended session %d", n), nil
}

func newModemInjectCmd() *cobra.Command {
	var sock string
	var b strings.Builder
	for _, f := range modemFaults {
		fmt.Fprintf(&b, "  %-17s %s\n", f.name, f.help)
	}
	cmd := &cobra.Command{
		Use:   "inject --socket PATH FAULT",
		Short: "Make a served mock modem fail as a real one does (SYS_ERR, crash, surprise removal, a session the network ends)",
		Long: `Asks the modem 'mhictl modem serve --socket PATH' serves to fail now, through
its fault socket PATH` + faultsock.Suffix + ` (0600, like the device socket: root and the server's
user only). The faults:

` + b.String() + `
In 'mhictl lab', a script in the guest injects with lab-inject FAULT.`,
		Example: `  mhictl modem inject --socket /tmp/m.sock sys-err
  mhictl modem inject --socket /tmp/m.sock disconnect-session=1`,
		Args:      cobra.ExactArgs(1),
		ValidArgs: faultNames(),
		RunE: func(cmd *cobra.Command, args []string) error {
			if sock == "" {
				return errors.New("--socket is required")
			}
			if _, _, err := parseFault(args[0]); err != nil {
				return err
			}
			what, err := faultsock.Request(sock, args[0])
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: %s\n", args[0], what)
			return nil
		},
	}
	cmd.Flags().StringVar(&sock, "socket", "", "the served modem's vfio-user socket ('mhictl modem serve --socket')")
	return cmd
}
