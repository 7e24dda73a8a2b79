package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/gomhi/gomhi/mhi"
	"github.com/gomhi/gomhi/mhi/ep"
	"github.com/gomhi/gomhi/mhinet"
	"github.com/gomhi/gomhi/mhinet/sweep"
	"github.com/gomhi/gomhi/mhinet/tun"
	"github.com/gomhi/gomhi/pcigeneric"
	"github.com/gomhi/gomhi/pcigeneric/vfiouser"
	"github.com/gomhi/gomhi/sysfs"
	"github.com/gomhi/gomhi/sysfs/fusefs"
	"github.com/gomhi/gomhi/sysfs/genl"
)

// upFlags are the flags of `mhictl up`.
type upFlags struct {
	name, mount, tunName, tunAddr, metrics, format, modemMode, device, sysfsRoot string
	port                                                                         uint32
	mru                                                                          int
	gso                                                                          bool // --gso: TUN with virtio_net_hdr and offloads
	gro                                                                          bool // --gro: merge downlink TCP segments (with --gso)
	// vfioUser is the socket of a modem served by another process.
	vfioUser string
	// rxCopy is --rx-copy: auto, on or off.
	rxCopy string
	// requireConnect gates the embedded mock's IP data on a session.
	requireConnect bool
	// runDir holds the control ports' links ("": defaultRunDir).
	runDir string
	// Firmware, power management and RAM dumps.
	firmware    string
	autosuspend time.Duration
	rddmSize    int
	boot        bootFlags
}

func newUpCmd(g *globalFlags) *cobra.Command {
	f := &upFlags{}
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Run the stack in the foreground: modem, network device, control plane (netlink, FUSE), optional TUN",
		Long: `Runs in the foreground until SIGINT or SIGTERM, then removes what it made
(FUSE mount, TUN interface) and exits. By default the modem is the embedded
mock (--model picks which real modem it impersonates); its IP data channel
answers pings and UDP echo (port 7) as a modem's network would
(--modem-mode responder), or loops every packet back (loopback). With
--device the modem is a real one bound to vfio-pci; with --vfio-user PATH it
is the mock modem another process serves ('mhictl modem serve --socket
PATH'), whose mode and framing are set there (--ip-mode, --format): give up
the same --format (both default to the model's own framing). The model is
then the one the modem's PCI IDs name, so --model and --modem-mode do not
apply.

The control plane is the generic-netlink family "mhi" (used by set-mru,
set-mtu, get, stats, connect and disconnect) and, with --mount, the
attribute tree as files.

Every control channel pair of the model (MBIM, QMI, DUN/DUN2 for AT) is
exposed as a raw pseudo-terminal with a stable link in the run directory,
named as Linux names its wwan ports (wwan0mbim0, wwan0qmi0, wwan0at0…):
'mbimcli -d /run/gomhi/mhi0/wwan0mbim0 --query-device-caps' works as on
/dev/wwan0mbim0. 'mhictl connect mhi0 --apn APN' connects the data session
over MBIM and configures the TUN interface with what the modem assigned;
'mhictl disconnect mhi0' ends it. Give --tun-addr "" to leave the interface
without an address until a session is connected.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runUp(ctx, cmd, g, f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.name, "name", "mhi0", "device name in the attribute tree and netlink")
	fl.StringVar(&f.mount, "mount", "", "serve the attribute tree as a FUSE file tree at DIR (needs root)")
	fl.StringVar(&f.tunName, "tun", "", "create a TUN interface NAME for the data channel (needs root)")
	fl.StringVar(&f.tunAddr, "tun-addr", "198.18.0.1/24", "static address of the TUN interface, kept when a session disconnects (\"\": none until 'mhictl connect' assigns one; needs --tun)")
	fl.BoolVar(&f.gso, "gso", true, "open the TUN with IFF_VNET_HDR and TSO/USO offloads: super-packets are segmented before the ring, downlink TCP segments merged unless --gro=false (--gso=false: plain packets; needs --tun)")
	fl.BoolVar(&f.gro, "gro", true, "merge runs of downlink TCP segments into super-packets for the kernel (needs --tun and --gso)")
	fl.StringVar(&f.metrics, "metrics", "", "serve Prometheus metrics at ADDR (e.g. 127.0.0.1:9464)")
	fl.StringVar(&f.format, "format", "", "data channel framing: raw, mbim or qmap (default: mbim on IP_HW0_MBIM, raw on IP_HW0)")
	fl.StringVar(&f.modemMode, "modem-mode", "responder", "what the mock modem does with uplink packets: responder or loopback")
	fl.Uint32Var(&f.port, "netlink-port", 0, "netlink port of the control plane (default: 0x4d4849, or a kernel-assigned port, advertised in the run file, if another user's process holds it)")
	fl.IntVar(&f.mru, "mru", 0, "initial MRU (default: the model's MRU default, or 32768)")
	fl.StringVar(&f.sysfsRoot, "sysfs-root", pcigeneric.DefaultRoot, "sysfs mount to find --device in")
	fl.StringVar(&f.device, "device", "", "drive the real modem at PCI address ADDR through VFIO instead of the mock (bind it first: mhictl bind ADDR)")
	fl.StringVar(&f.rxCopy, "rx-copy", "auto", "copy received packets out of DMA memory before delivery: on, off (zero-copy: the modem can change bytes the host holds) or auto (on with --device and --vfio-user, whose modem is not trusted; off for the in-process mock)")
	fl.StringVar(&f.vfioUser, "vfio-user", "", "drive the mock modem another process serves on the vfio-user socket PATH ('mhictl modem serve --socket PATH') instead of the in-process mock")
	fl.BoolVar(&f.requireConnect, "require-connect", false, "the embedded mock passes no IP data until a session is connected ('mhictl connect'), as a real modem (with --device or --vfio-user the modem decides: 'mhictl modem serve --require-connect')")
	fl.StringVar(&f.runDir, "run-dir", "", "directory for the control ports' links (default /run/gomhi/NAME as root, else $XDG_RUNTIME_DIR/gomhi/NAME)")
	fl.StringVar(&f.firmware, "firmware", "", "directory with the images the model's table entry names (Linux's fw and edl: qcom/sdx55m/sbl1.mbn…), downloaded when the modem boots in PBL or EDL")
	fl.DurationVar(&f.autosuspend, "autosuspend", 0, "suspend the modem (M3) after this long without traffic and resume it on demand (0: off; attribute autosuspend_ms)")
	fl.IntVar(&f.rddmSize, "rddm-size", 0, "bytes of host memory kept for a RAM dump: a modem that crashes into RDDM has its dump collected before recovery (0: off; attribute rddm)")
	f.boot.add(cmd, true)
	return cmd
}

// errNeedsTUN: a flag that configures the TUN interface without --tun.
var errNeedsTUN = errors.New("flag needs --tun")

// checkTUNFlags refuses the TUN's flags without --tun, where they would be
// silently ignored, and --gro without --gso (the merged packets need the
// TUN's virtio_net_hdr).
func checkTUNFlags(cmd *cobra.Command, f *upFlags) error {
	fl := cmd.Flags()
	if f.tunName == "" {
		for _, name := range []string{"gso", "gro", "tun-addr"} {
			if fl.Changed(name) {
				return fmt.Errorf("--%s: %w NAME (it configures the TUN interface; without --tun there is none)", name, errNeedsTUN)
			}
		}
		return nil
	}
	if !f.gso && f.gro && fl.Changed("gro") {
		return fmt.Errorf("--gro with --gso=false: %w: merged segments go to the kernel as GSO packets, which needs the TUN's virtio_net_hdr (--gso)", errExclusive)
	}
	return nil
}

// upLog writes one line per step to stderr.
type upLog struct{ cmd *cobra.Command }

func (u upLog) printf(format string, args ...any) {
	fmt.Fprintf(u.cmd.ErrOrStderr(), "mhictl up: "+format+"\n", args...)
}

func runUp(ctx context.Context, cmd *cobra.Command, g *globalFlags, f *upFlags) (err error) {
	out := upLog{cmd}
	log, err := g.logger()
	if err != nil {
		return err
	}
	var ctrl *mhi.Controller
	var prefix netip.Prefix
	if err := checkTUNFlags(cmd, f); err != nil {
		return err
	}
	if f.tunName != "" && f.tunAddr != "" {
		if prefix, err = netip.ParsePrefix(f.tunAddr); err != nil {
			return fmt.Errorf("--tun-addr %q: %w", f.tunAddr, err)
		}
	}
	if err := checkModemSource(cmd, f.device, f.vfioUser, "modem-mode", "require-connect", "boot-ee", "sbl-sha256", "rddm"); err != nil {
		return err
	}
	rxCopy, err := mhinet.ParseRxCopyMode(f.rxCopy)
	if err != nil {
		return fmt.Errorf("--rx-copy: %w", err)
	}
	responder := false
	switch f.modemMode {
	case "responder":
		responder = true
	case "loopback":
	default:
		return fmt.Errorf("--modem-mode %q: want responder or loopback", f.modemMode)
	}
	// Everything made is undone in reverse order, whatever happens.
	var undo []func()
	defer func() {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
	}()

	var info *pcigeneric.ModemInfo
	var gone <-chan struct{} // closed if a served modem goes away
	if f.device != "" {
		p, err := pcigeneric.OpenPassthrough(f.device, pcigeneric.PassthroughOptions{SysfsRoot: f.sysfsRoot, Name: f.name, Logger: log,
			FirmwareDir: f.firmware, RDDMSize: f.rddmSize})
		if err != nil {
			return err
		}
		info = p.Modem.Info
		undo = append(undo, func() { _ = p.Close() })
		ctrl = p.Controller
		out.printf("%s: %s at %s through VFIO", f.name, info.Name, f.device)
	} else if f.vfioUser != "" {
		r, err := vfiouser.Open(f.vfioUser, vfiouser.OpenOptions{Name: f.name, Logger: log, FirmwareDir: f.firmware, RDDMSize: f.rddmSize})
		if err != nil {
			return err
		}
		info = r.Info
		undo = append(undo, func() { _ = r.Close() })
		ctrl = r.Controller
		gone = r.Transport.Done()
		out.printf("%s: %s (%s) served at %s over vfio-user", f.name, info.Name, r.Entry.Product, f.vfioUser)
	} else {
		var ok bool
		if info, ok = pcigeneric.Model(g.model); !ok {
			return fmt.Errorf("--model %q: %w (see 'mhictl models')", g.model, pcigeneric.ErrUnknownModel)
		}
	}
	pair := pcigeneric.DataPair(info.Config)
	if pair == "" {
		return fmt.Errorf("model %s has no IP data channel", info.Name)
	}
	format := mhinet.FormatRawIP
	if pair == ep.IPDataMBIMName {
		format = mhinet.FormatMBIM
	}
	if f.format != "" {
		if format, err = mhinet.ParseFormat(f.format); err != nil {
			return fmt.Errorf("--format: %w", err)
		}
	}
	mru := f.mru
	if mru == 0 {
		mru = info.MRUDefault
	}
	if mru == 0 {
		mru = mhinet.DefaultMRU
	}
	if err := mhinet.ValidateMRU(mru); err != nil {
		return fmt.Errorf("--mru: %w", err)
	}
	var mock *pcigeneric.Mock
	if ctrl == nil {
		bc, err := f.boot.config(log.With("side", "modem"))
		if err != nil {
			return err
		}
		m, err := pcigeneric.OpenMock(pcigeneric.MockOptions{
			Model: info.Name, Name: f.name, Logger: log, RequireConnect: f.requireConnect,
			IPData:      ep.IPDataConfig{Format: sweep.ModemFormat(format), Responder: responder},
			FirmwareDir: f.firmware, RDDMSize: f.rddmSize, Device: func(c *ep.Config) { c.Boot = bc },
		})
		if err != nil {
			return err
		}
		undo = append(undo, func() { _ = m.Close() })
		ctrl, mock = m.Controller, m
	}
	if err := ctrl.PowerUp(); err != nil {
		return err
	}
	if f.autosuspend != 0 {
		if err := ctrl.SetAutoSuspend(f.autosuspend); err != nil {
			return fmt.Errorf("--autosuspend: %w", err)
		}
	}
	st, ee := ctrl.State()
	out.printf("%s: %s (%s) in %s, EE %s", f.name, info.Name, pair, st, ee)

	devCfg := mhinet.Config{Pair: pair, Format: format, MRU: mru, Logger: log, RxCopy: rxCopy}
	var net_ *mhinet.Device
	var bridge *tun.Bridge
	var tunIfc *tun.Interface
	var setMTU func(int) error
	if f.tunName != "" {
		ifc, err := tun.OpenWith(f.tunName, tun.OpenOptions{GSO: f.gso})
		if err != nil {
			return err
		}
		undo = append(undo, func() {
			if err := ifc.Close(); err != nil {
				out.printf("removing %s: %v", ifc.Name(), err)
			}
		})
		tunIfc = ifc
		mtu := mhinet.DefaultMTU
		if err := ifc.Configure(tun.Config{MTU: mtu, Up: true, Addrs: tunAddrs(prefix)}); err != nil {
			return err
		}
		bridge, net_, err = tun.Connect(ifc, ctrl, devCfg, tun.BridgeConfig{Logger: log, NoGRO: !f.gro})
		if err != nil {
			return err
		}
		setMTU = bridge.SetMTU
		gro := "off"
		if f.gso && f.gro {
			gro = "on"
		}
		out.printf("interface %s up, %s, mtu %d, offloads %v, gro %s", ifc.Name(), addrText(prefix), mtu, ifc.Offloads(), gro)
	} else {
		net_, err = mhinet.New(ctrl, devCfg, mhinet.ReceiverFunc(discard))
		if err != nil {
			return err
		}
	}
	if err := net_.Up(); err != nil {
		return err
	}
	undo = append(undo, func() { _ = net_.Down() })
	if bridge != nil {
		bctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			if err := bridge.Run(bctx); err != nil && !errors.Is(err, context.Canceled) {
				out.printf("bridge: %v", err)
			}
		}()
		undo = append(undo, func() { cancel(); <-done })
	}
	modem := "modem " + f.modemMode
	if f.device != "" || f.vfioUser != "" {
		modem = "modem's own mode"
	}
	out.printf("data channel %s: %s framing, MRU %d, %s", pair, format, mru, modem)
	out.printf("receive copy %s (--rx-copy %s)", net_.Config().RxCopy, rxCopy)

	cp, err := startControl(f, info, ctrl, tunIfc, setMTU, prefix, log, out)
	if err != nil {
		return err
	}
	undo = append(undo, cp.close)

	tree := sysfs.NewTree()
	tree.AddDevice(f.name, sysfs.Device{Controller: ctrl, Net: net_, Model: info.Name, SetMTU: setMTU,
		Ports: cp.binds, Session: cp.session, Stats: mockStats(mock)})

	// On the default port the server advertises itself in a run file, so
	// that clients find it even when a squatter pushed it elsewhere.
	var runFile string
	if f.port == 0 {
		runFile = genl.DefaultRunFile()
	}
	srv, err := genl.NewServer(tree, genl.ServerOptions{Port: f.port, RunFile: runFile, Logger: log})
	if err != nil {
		return err
	}
	if holders, squatted := srv.Squatted(); squatted {
		out.printf("netlink port 0x%x is held by %s, not by root or this user: another local user may be squatting it; serving on port 0x%x instead (clients find it in %s)",
			genl.DefaultPort, genl.DescribePeers(holders), srv.Port(), runFile)
	}
	sctx, scancel := context.WithCancel(ctx)
	sdone := make(chan struct{})
	go func() {
		defer close(sdone)
		if err := srv.Serve(sctx); err != nil {
			out.printf("netlink: %v", err)
		}
	}()
	undo = append(undo, func() { scancel(); _ = srv.Close(); <-sdone })
	if runFile != "" {
		out.printf("netlink family %q on port 0x%x, advertised in %s", genl.FamilyName, srv.Port(), runFile)
	} else {
		out.printf("netlink family %q on port 0x%x", genl.FamilyName, srv.Port())
	}

	if f.mount != "" {
		if err := fusefs.CleanupStale(f.mount); err != nil {
			return err
		}
		fs, err := fusefs.Mount(f.mount, tree, fusefs.Options{Logger: log})
		if err != nil {
			return err
		}
		undo = append(undo, func() {
			if err := fs.Close(); err != nil {
				out.printf("unmounting %s: %v", f.mount, err)
			}
		})
		out.printf("attribute tree mounted at %s", fs.Dir())
	}

	if f.metrics != "" {
		ln, err := net.Listen("tcp", f.metrics)
		if err != nil {
			return fmt.Errorf("--metrics: %w", err)
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", tree.MetricsHandler())
		hs := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = hs.Serve(ln) }()
		undo = append(undo, func() {
			sd, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_ = hs.Shutdown(sd)
		})
		out.printf("metrics at http://%s/metrics", ln.Addr())
	}

	out.printf("ready (SIGINT or SIGTERM to stop)")
	_ = sdNotify("READY=1") // under systemd (Type=notify); else nothing
	select {
	case <-ctx.Done():
		out.printf("stopping")
		_ = sdNotify("STOPPING=1")
		return nil
	case <-gone:
		out.printf("the vfio-user server at %s went away: stopping", f.vfioUser)
		return fmt.Errorf("%s: %w", f.vfioUser, vfiouser.ErrClosed)
	}
}

// discard is the receiver of a device without an interface: packets are
// counted by the device (rx_packets) and released.
func discard(pkts []mhinet.Packet) {
	for _, p := range pkts {
		p.Release()
	}
}
