package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/gomhi/gomhi/cmd/mhictl/internal/faultsock"
	"github.com/gomhi/gomhi/cmd/mhictl/internal/soak"
	"github.com/gomhi/gomhi/mhi/ep"
	"github.com/gomhi/gomhi/mhi/ep/ipdata"
	"github.com/gomhi/gomhi/mhi/ep/modem"
	"github.com/gomhi/gomhi/mhi/loopback"
	"github.com/gomhi/gomhi/mhi/proto/framing"
	"github.com/gomhi/gomhi/pcigeneric"
	"github.com/gomhi/gomhi/pcigeneric/vfiouser"
)

// newModemCmd groups the commands that present the mock modem to another
// process over vfio-user, and a client for them.
func newModemCmd(g *globalFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "modem",
		Short: "Serve the mock modem as a vfio-user PCI device",
	}
	cmd.AddCommand(newModemServeCmd(g), newModemLoopbackCmd(), newModemInjectCmd(), newModemQuirksCmd())
	return cmd
}

// modemServeFlags are the flags of 'mhictl modem serve'.
type modemServeFlags struct {
	socket  string
	jsonLog bool
	vectors int
	ipd     servedIPData
	// requireConnect gates IP data on a connected session.
	requireConnect bool
	boot           bootFlags
	// transcript is the file the served modem's transcript goes to.
	transcript string
	quirks     quirkFlag
}

func newModemServeCmd(g *globalFlags) *cobra.Command {
	var sf modemServeFlags
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve the mock modem (--model) on a vfio-user unix socket",
		Long: `Listens on --socket and presents the mock modem impersonating --model as a
PCI function to vfio-user clients (QEMU's vfio-user-pci, or 'mhictl modem
loopback'), one client at a time; a new client may connect after the last one
disconnects. Runs in the foreground until SIGINT or SIGTERM. Events (connect,
version, dma_map, dma_unmap, irq_setup, reset, disconnect, error) are logged to
stderr, or as one JSON object per line on stdout with --json-log.

The modem's IP data function (IP_HW0_MBIM or IP_HW0, channels 100/101) answers
pings and UDP echo (port 7) as a modem's network would (--ip-mode responder,
the default), loops every uplink packet back aggregated (loopback: for
'mhictl bench --vfio-user'), or generates downlink packets for the whole
session (generator: --gen-count, --gen-rate, --gen-size; uplink packets meanwhile
are consumed, and after a --gen-count run the modem answers as a responder).
Each session's data counters are logged at disconnect (ip_data). --format is its
framing, by default the model's own: mbim on IP_HW0_MBIM, raw on IP_HW0; the
client's framing must match ('mhictl up --format', 'mhictl bench --format').
The LOOPBACK channels (0/1) always loop back. SIGUSR1 logs the current
session's IP data counters in full (ip_data_stats, every field of the
modem's counters: what 'mhictl soak --transport vfio-user' accounts with),
and the server logs those of its last session once more when it exits
(ip_data_final, after the session's modem stopped). Both carry, beside the
counters (stats), one row per data session that had traffic (sessions:
MBIM session id or QMAP mux id, its wire id, packets and bytes each way,
drops), which 'mhictl lab run --json' reports as modem.ip_sessions.

The modem answers MBIM on its MBIM channels (12/13) with the identity of the
device-table entry it impersonates; with --require-connect it passes no IP
data until the client connects a session ('mhictl connect' against 'mhictl
up --vfio-user'), as a real modem, and counts what it drops (dropped_gated in
the ip_data line; the control line at disconnect counts connects and MBIM
messages).

With --boot-ee pbl each session's modem starts in the primary boot loader
and waits for the client to download its boot loader over BHI (Linux's
mhi_pci_generic loads the fw image its table names, qcom/sdx55m/sbl1.mbn for
the SDX55, from the guest's /lib/firmware; 'mhictl up --vfio-user PATH
--firmware DIR' from DIR); each image is logged as a bhi_image event with its
stage, size and SHA-256, and --sbl-sha256 makes the modem refuse any other
image. With --rddm a crash enters RAM-dump mode and serves a RAM dump over
BHIe ('mhictl dump --vfio-user PATH').

With --quirk NAME[,NAME…] the modem reproduces field failures ('mhictl modem
quirks' lists them, docs/QUIRKS.md).

Beside --socket the server listens on PATH.faults, where 'mhictl modem inject'
makes the modem fail as a real one does (SYS_ERR, a crash, surprise removal).`,
		Example: `  mhictl modem serve --socket /run/mhi/vu.sock
  mhictl modem serve --socket /tmp/m.sock --model telit-fn990 --ip-mode loopback
  mhictl modem serve --socket /tmp/m.sock --ip-mode generator --gen-rate 10000 --gen-size 64,1500`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := sf.validate(); err != nil {
				return err
			}
			return sf.run(cmd.Context(), g, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	sf.register(cmd.Flags())
	sf.boot.add(cmd, true)
	return cmd
}

// register defines the flags on f (the boot flags are added by bootFlags).
func (sf *modemServeFlags) register(f *pflag.FlagSet) {
	f.StringVar(&sf.socket, "socket", "", "unix socket path to listen on: created 0600 (only root and this user may connect; others are refused and logged); a stale socket there is replaced, anything else is refused")
	f.BoolVar(&sf.jsonLog, "json-log", false, "log events as JSON lines on stdout")
	f.IntVar(&sf.vectors, "vectors", vfiouser.DefaultVectors, "MSI vectors offered (power of two, 1..32)")
	f.StringVar(&sf.ipd.mode, "ip-mode", "responder", "what the IP data function does: responder (answers ping and UDP echo), loopback or generator")
	f.StringVar(&sf.ipd.format, "format", "", "IP data framing: mbim, qmap or raw (default: mbim on IP_HW0_MBIM models, raw on IP_HW0)")
	f.StringVar(&sf.ipd.qmapCsum, "qmap-csum", "none", "QMAP checksum framing: none, v4 (downlink trailer, uplink checksum header, checksums computed when a frame asks) or v5 (MAPv5 header); give 'mhictl up' the same (needs --format qmap)")
	f.IntVar(&sf.ipd.maxDatagrams, "max-datagrams", 0, "aggregation limit in packets per downlink transfer (0: the modem's default, 32)")
	f.IntVar(&sf.ipd.maxAggregate, "max-aggregate", 0, "aggregation limit in bytes per downlink transfer (0: the modem's default, 32768)")
	f.IntVar(&sf.ipd.genCount, "gen-count", 0, "generator: packets per session (0: until the client disconnects)")
	f.Float64Var(&sf.ipd.genRate, "gen-rate", 0, "generator: packets per second (0: as fast as the client takes them)")
	f.IntSliceVar(&sf.ipd.genSizes, "gen-size", []int{ipdata.DefaultGenPacket}, "generator: IP packet sizes, used in turn")
	f.BoolVar(&sf.requireConnect, "require-connect", false, "pass no IP data until a session is connected over MBIM (as a real modem); dropped packets are counted")
	f.StringVar(&sf.transcript, "transcript", "", "write what the modem observes of its clients to FILE, one JSON object per line, every session in turn, for 'mhictl transcript diff'")
	sf.quirks.add(f, "the served modem")
}

// validate checks the flags that need no modem model.
func (sf *modemServeFlags) validate() error {
	if sf.socket == "" {
		return errors.New("--socket is required")
	}
	return sf.quirks.parse()
}

// run builds the mock modem, listens on --socket and serves one client
// at a time until ctx ends, SIGINT or SIGTERM; events go to out as JSON
// lines (--json-log) or to errOut as text.
func (sf *modemServeFlags) run(ctx context.Context, g *globalFlags, out, errOut io.Writer) error {
	mlog, err := g.logger()
	if err != nil {
		return err
	}
	var events *slog.Logger
	if sf.jsonLog {
		events = slog.New(slog.NewJSONHandler(out, nil))
	} else {
		events = slog.New(slog.NewTextHandler(errOut, nil))
	}
	rec, record, err := openTranscript(sf.transcript)
	if err != nil {
		return err
	}
	if rec != nil {
		defer func() {
			if err := rec.Close(); err != nil {
				events.Error("transcript", "file", sf.transcript, "err", err)
			}
		}()
	}
	dev, format, served, err := sf.newDevice(g.model, mlog, events, record)
	if err != nil {
		return err
	}
	logIPData := func(msg string) {
		if f := served.Load(); f != nil {
			events.Info(msg, "stats", f.Stats(), "sessions", f.SessionStats())
		}
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	defer signal.Stop(usr1)
	go func() {
		for {
			select {
			case <-usr1:
				logIPData(soak.MsgIPDataStats)
			case <-ctx.Done():
				return
			}
		}
	}()
	ln, err := vfiouser.Listen(sf.socket)
	if err != nil {
		return err
	}
	faults := faultsock.Path(sf.socket)
	stopFaults, err := faultsock.Serve(ctx, faults, modemFaultApplier(dev, func() {
		// The device vanishes: no goodbye to the client, no cleanup.
		events.Warn("surprise_removal")
		os.Exit(0)
	}), events)
	if err != nil {
		return err
	}
	defer stopFaults()
	// Announced once the socket exists: clients wait for this line.
	p := dev.PCI
	events.Info("listen", "socket", sf.socket, "model", dev.Entry.Info.Name,
		"ids", fmt.Sprintf("%04x:%04x %04x:%04x", p.Vendor, p.Device, p.SubVendor, p.SubDevice),
		"bar0", p.BARSize, "vectors", p.Vectors, "faults", faults, "ip_mode", strings.ToLower(sf.ipd.mode), "format", format.String(),
		"quirks", sf.quirks.set.String())
	err = ln.Serve(ctx, dev)
	logIPData(soak.MsgIPDataFinal)
	st := dev.Stats()
	events.Info("exit", "sessions", st.Sessions, "messages", st.Messages, "malformed", st.Malformed,
		"dma_faults", st.DMAFaults, "interrupts", st.Interrupts)
	return err
}

// newDevice builds the served mock modem impersonating model, with the IP
// data function, generator and boot ROM the flags ask for, and record
// applied to each session's device configuration; it returns the IP data
// framing too.
func (sf *modemServeFlags) newDevice(model string, mlog, events *slog.Logger, record func(*ep.Config)) (*vfiouser.ServerDevice, framing.Format, *atomic.Pointer[ipdata.Function], error) {
	ipc, format, gen, err := sf.ipd.build(model)
	if err != nil {
		return nil, format, nil, err
	}
	bc, err := sf.boot.config(events)
	if err != nil {
		return nil, format, nil, err
	}
	opts := vfiouser.DeviceOptions{
		Model: model, Vectors: sf.vectors, Logger: events, ModemLogger: mlog.With("side", "modem"),
		IPData: &ipc, Modem: modem.Config{RequireConnect: sf.requireConnect}, Quirks: sf.quirks.set,
	}
	// The IP data function of the main data pair in the current (or
	// last) session: its counters judge a soak's phases.
	served := new(atomic.Pointer[ipdata.Function])
	opts.Device = func(ec *ep.Config) {
		ec.Boot = bc
		record(ec)
		// The generator runs on the main data pair only (IP_SW0, where
		// the model has it, keeps its responder).
		name := pcigeneric.DataPair(ec.MHI)
		if f, ok := ec.Functions[name].(*ipdata.Function); ok {
			served.Store(f)
			if gen != nil {
				ec.Functions[name] = generatorOnAttach{Function: f, gen: *gen, log: events}
			}
		}
	}
	dev, err := vfiouser.NewServerDevice(opts)
	return dev, format, served, err
}

func newModemLoopbackCmd() *cobra.Command {
	var (
		socket  string
		count   int
		size    int
		jsonOut bool
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "loopback",
		Short: "Connect to a vfio-user modem, power it up and run a loopback",
		Long: `Connects gomhi's host stack to the vfio-user server on --socket, looks the
model up in the device table by the IDs in its config space, powers it up to
M0 and sends --count random payloads of 1..--size bytes over LOOPBACK.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if socket == "" {
				return errors.New("--socket is required")
			}
			r, err := openRemote(socket, "mhi0", nil)
			if err != nil {
				return err
			}
			defer r.Close()
			e := r.Entry
			c, err := loopback.Open(r.Controller, loopback.Options{Timeout: timeout})
			if err != nil {
				return err
			}
			defer c.Close()
			res, runErr := c.Run(loopback.RunOptions{Count: count, MinSize: 1, MaxSize: size})
			out := cmd.OutOrStdout()
			if jsonOut {
				if err := printJSON(out, res); err != nil {
					return err
				}
			} else {
				printModemResult(out, e, res)
			}
			if runErr != nil {
				return runErr
			}
			if res.Mismatched > 0 || res.Received != res.Sent {
				return fmt.Errorf("loopback: %d of %d echoes mismatched, %d missing", res.Mismatched, res.Sent, res.Sent-res.Received)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&socket, "socket", "", "unix socket of the vfio-user server")
	f.IntVar(&count, "count", 100, "number of payloads")
	f.IntVar(&size, "size", 65536, "largest payload in bytes (1..65536)")
	f.DurationVar(&timeout, "timeout", 5*time.Second, "longest wait for one echo")
	f.BoolVar(&jsonOut, "json", false, "print the result as JSON")
	return cmd
}

func printModemResult(w io.Writer, e pcigeneric.Entry, res loopback.Result) {
	fmt.Fprintf(w, "%s (%s, %s)\n", e.Info.Name, e.Product, e.Match)
	fmt.Fprintf(w, "sent %d, received %d, mismatched %d, timeouts %d, %d bytes in %.3f s\n",
		res.Sent, res.Received, res.Mismatched, res.Timeouts, res.Bytes, res.Elapsed.Seconds())
}
