package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/gomhi/gomhi/mhi"
	"github.com/gomhi/gomhi/mhi/ctrlport"
	"github.com/gomhi/gomhi/mhi/ep"
	"github.com/gomhi/gomhi/mhi/ep/ipdata"
	"github.com/gomhi/gomhi/mhi/ep/modem"
	"github.com/gomhi/gomhi/mhi/proto/framing"
	"github.com/gomhi/gomhi/mhi/proto/qmap"
	"github.com/gomhi/gomhi/mhinet"
	"github.com/gomhi/gomhi/mhinet/tun"
	"github.com/gomhi/gomhi/pcigeneric"
	"github.com/gomhi/gomhi/pcigeneric/mock"
	"github.com/gomhi/gomhi/pcigeneric/vfiouser/client"
	"github.com/gomhi/gomhi/pcigeneric/vfiouser/protocol"
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
	gro                                                                          bool // --gro: merge downlink TCP segments and UDP datagrams (with --gso)
	// vfioUser is the socket of a modem served by another process.
	vfioUser string
	// qmapCsum is --qmap-csum: none, v4 or v5.
	qmapCsum string
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
	// transcript is the file the embedded mock's transcript goes to.
	transcript string
	// quirks are the embedded mock's field failures (--quirk).
	quirks quirkFlag
	// readyTimeout is --ready-timeout (0: the model's).
	readyTimeout time.Duration
	// maxSessions is --max-sessions: the data sessions the host drives
	// (and the embedded mock takes).
	maxSessions int
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
PATH'), whose mode and framing are set there (--ip-mode, --format,
--qmap-csum): give up the same --format and --qmap-csum (both default to the
model's own framing). The model is
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
without an address until a session is connected. More sessions at once
(internet and IMS, several APNs): 'mhictl connect mhi0 --apn ims --session 1'
connects session 1 on an interface of its own, mhi0.1, removed again when
the session ends; --max-sessions bounds them.`,
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
	fl.BoolVar(&f.gso, "gso", true, "open the TUN with IFF_VNET_HDR and TSO/USO offloads: super-packets are segmented before the ring, downlink TCP segments and UDP datagrams merged unless --gro=false (--gso=false: plain packets; needs --tun)")
	fl.BoolVar(&f.gro, "gro", true, "merge runs of downlink TCP segments, and of UDP datagrams where the kernel accepted USO, into super-packets for the kernel (needs --tun and --gso)")
	fl.StringVar(&f.metrics, "metrics", "", "serve Prometheus metrics at ADDR (e.g. 127.0.0.1:9464)")
	fl.StringVar(&f.format, "format", "", "data channel framing: raw, mbim or qmap (default: mbim on IP_HW0_MBIM, raw on IP_HW0)")
	fl.StringVar(&f.qmapCsum, "qmap-csum", "none", "QMAP checksum framing, as rmnet's MAP checksum flags: none, v4 (downlink trailer, uplink checksum header) or v5 (MAPv5 header); the embedded mock uses the same (needs --format qmap)")
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
	fl.StringVar(&f.transcript, "transcript", "", "write what the embedded mock observes of the host to FILE, one JSON object per line, for 'mhictl transcript diff' (the served modem's: 'mhictl modem serve --transcript')")
	fl.DurationVar(&f.readyTimeout, "ready-timeout", 0, "how long to wait for the modem to become READY at power-up and after a reset (0: the model's table entry: its ready timeout or, without one, its timeout)")
	fl.IntVar(&f.maxSessions, "max-sessions", ctrlport.DefaultMaxSessions, "data sessions the host drives, 0..N-1 ('mhictl connect --session N'), and the embedded mock takes (1..256)")
	f.quirks.add(fl, "the embedded mock")
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

// cleanups undo what up made, in reverse order.
type cleanups []func()

func (c *cleanups) add(f func()) { *c = append(*c, f) }

// run calls every cleanup, the last added first. Its receiver is a
// pointer so that `defer c.run()` and the method value c.run see the
// cleanups added after them.
func (c *cleanups) run() {
	for i := len(*c) - 1; i >= 0; i-- {
		(*c)[i]()
	}
}

// upSettings are what up's flags say, checked before anything is opened.
type upSettings struct {
	prefix    netip.Prefix // --tun-addr (invalid: no address)
	rxCopy    mhinet.RxCopyMode
	responder bool // --modem-mode responder
}

// checkUpFlags checks the flags that need no modem to check.
func checkUpFlags(cmd *cobra.Command, f *upFlags) (upSettings, error) {
	var s upSettings
	if err := checkTUNFlags(cmd, f); err != nil {
		return s, err
	}
	if f.tunName != "" && f.tunAddr != "" {
		var err error
		if s.prefix, err = netip.ParsePrefix(f.tunAddr); err != nil {
			return s, fmt.Errorf("--tun-addr %q: %w", f.tunAddr, err)
		}
	}
	if err := checkModemSource(cmd, f.device, f.vfioUser, "modem-mode", "require-connect", "boot-ee", "sbl-sha256", "rddm", "transcript", "quirk"); err != nil {
		return s, err
	}
	if err := f.quirks.parse(); err != nil {
		return s, err
	}
	if f.maxSessions < 1 || f.maxSessions > 256 {
		return s, fmt.Errorf("--max-sessions %d: want 1..256", f.maxSessions)
	}
	if f.readyTimeout < 0 {
		return s, fmt.Errorf("--ready-timeout %v: want 0 (the model's) or more", f.readyTimeout)
	}
	var err error
	if s.rxCopy, err = mhinet.ParseRxCopyMode(f.rxCopy); err != nil {
		return s, fmt.Errorf("--rx-copy: %w", err)
	}
	switch f.modemMode {
	case "responder":
		s.responder = true
	case "loopback":
	default:
		return s, fmt.Errorf("--modem-mode %q: want responder or loopback", f.modemMode)
	}
	return s, nil
}

// runUp opens the modem, the network device and the control plane, each
// undone in reverse order when up stops or one of them fails, and waits
// for a signal or for a served modem to go away.
func runUp(ctx context.Context, cmd *cobra.Command, g *globalFlags, f *upFlags) error {
	out := upLog{cmd}
	log, err := g.logger()
	if err != nil {
		return err
	}
	s, err := checkUpFlags(cmd, f)
	if err != nil {
		return err
	}
	var undo cleanups
	defer undo.run()
	m, closeModem, err := openModem(g, f, s, log, out)
	if err != nil {
		return err
	}
	undo.add(closeModem)
	n, closeNet, err := openNetwork(ctx, f, s, m, log, out)
	if err != nil {
		return err
	}
	undo.add(closeNet)
	closeControl, err := openControl(ctx, f, s, m, n, log, out)
	if err != nil {
		return err
	}
	undo.add(closeControl)

	out.printf("ready (SIGINT or SIGTERM to stop)")
	_ = sdNotify("READY=1") // under systemd (Type=notify); else nothing
	select {
	case <-ctx.Done():
		out.printf("stopping")
		_ = sdNotify("STOPPING=1")
		return nil
	case <-m.gone:
		out.printf("the vfio-user server at %s went away: stopping", f.vfioUser)
		return fmt.Errorf("%s: %w", f.vfioUser, protocol.ErrClosed)
	}
}

// upData is the data channel up drives: the pair, its framing (with the
// QMAP checksum framing) and MRU.
type upData struct {
	pair     string
	format   framing.Format
	qmapCsum qmap.CsumMode
	mru      int
}

// dataSettings checks --format, --qmap-csum and --mru against the modem's
// model.
func dataSettings(info *pcigeneric.ModemInfo, f *upFlags) (upData, error) {
	d := upData{pair: pcigeneric.DataPair(info.Config)}
	if d.pair == "" {
		return d, fmt.Errorf("model %s has no IP data channel", info.Name)
	}
	d.format = pcigeneric.PairFormat(d.pair)
	if f.format != "" {
		var err error
		if d.format, err = framing.Parse(f.format); err != nil {
			return d, fmt.Errorf("--format: %w", err)
		}
	}
	var err error
	if d.qmapCsum, err = qmapCsumSetting(f.qmapCsum, d.format); err != nil {
		return d, err
	}
	d.mru = f.mru
	if d.mru == 0 {
		d.mru = info.MRUDefault
	}
	if d.mru == 0 {
		d.mru = mhinet.DefaultMRU
	}
	if err := mhinet.ValidateMRU(d.mru); err != nil {
		return d, fmt.Errorf("--mru: %w", err)
	}
	return d, nil
}

// upModem is the modem up drives, powered up.
type upModem struct {
	info *pcigeneric.ModemInfo
	ctrl *mhi.Controller
	data upData
	// embedded is the in-process mock (nil with --device or --vfio-user),
	// whose own counters the attribute tree shows.
	embedded *mock.Mock
	// gone is closed if a served modem goes away (nil: never).
	gone <-chan struct{}
}

// openModem opens the modem --device, --vfio-user or --model names, checks
// the data channel's settings against its model and powers it up. The
// cleanup closes it.
func openModem(g *globalFlags, f *upFlags, s upSettings, log *slog.Logger, out upLog) (_ *upModem, cleanup func(), err error) {
	var undo cleanups
	defer func() {
		if err != nil {
			undo.run()
		}
	}()
	m := &upModem{}
	switch {
	case f.device != "":
		p, err := pcigeneric.OpenPassthrough(f.device, pcigeneric.PassthroughOptions{SysfsRoot: f.sysfsRoot, Name: f.name, Logger: log,
			FirmwareDir: f.firmware, RDDMSize: f.rddmSize})
		if err != nil {
			return nil, nil, err
		}
		undo.add(func() { _ = p.Close() })
		m.info, m.ctrl = p.Modem.Info, p.Controller
		out.printf("%s: %s at %s through VFIO", f.name, m.info.Name, f.device)
	case f.vfioUser != "":
		r, err := client.Open(f.vfioUser, client.OpenOptions{Name: f.name, Logger: log, FirmwareDir: f.firmware, RDDMSize: f.rddmSize})
		if err != nil {
			return nil, nil, err
		}
		undo.add(func() { _ = r.Close() })
		m.info, m.ctrl, m.gone = r.Info, r.Controller, r.Transport.Done()
		out.printf("%s: %s (%s) served at %s over vfio-user", f.name, m.info.Name, r.Entry.Product, f.vfioUser)
	default:
		var ok bool
		if m.info, ok = pcigeneric.Model(g.model); !ok {
			return nil, nil, fmt.Errorf("--model %q: %w (see 'mhictl models')", g.model, pcigeneric.ErrUnknownModel)
		}
	}
	if m.data, err = dataSettings(m.info, f); err != nil {
		return nil, nil, err
	}
	if m.ctrl == nil {
		mm, closeMock, err := openMock(f, s, m.info, m.data, log)
		if err != nil {
			return nil, nil, err
		}
		undo.add(closeMock)
		m.ctrl, m.embedded = mm.Controller, mm
		if len(f.quirks.set) > 0 {
			out.printf("%s: the embedded mock reproduces the field failures %s (docs/QUIRKS.md)", f.name, f.quirks.set)
		}
	}
	if f.readyTimeout > 0 {
		if err := m.ctrl.SetReadyTimeout(f.readyTimeout); err != nil {
			return nil, nil, fmt.Errorf("--ready-timeout: %w", err)
		}
	}
	if err := m.ctrl.PowerUp(); err != nil {
		return nil, nil, err
	}
	undo.add(m.ctrl.OnStatus(reportStatus(m.ctrl, f.name, out)))
	if f.autosuspend != 0 {
		if err := m.ctrl.SetAutoSuspend(f.autosuspend); err != nil {
			return nil, nil, fmt.Errorf("--autosuspend: %w", err)
		}
	}
	st, ee := m.ctrl.State()
	out.printf("%s: %s (%s) in %s, EE %s", f.name, m.info.Name, m.data.pair, st, ee)
	if n := m.ctrl.Stats().SlowReadies; n > 0 {
		// No "ready" in lower case: tests and scripts wait for up's
		// "ready" line.
		out.printf("%s: the modem was slow to reach READY (waited within the READY timeout %v)", f.name, m.ctrl.ReadyTimeout())
	}
	return m, undo.run, nil
}

// reportStatus says what befalls the device as it happens: a crash and its
// recovery (the service's log is where a user looks first), and a device
// that falls off the bus, here and to systemd; the tree (pm_state
// LINK_DOWN), the metrics and the controller's own error log say it too,
// and SIGTERM still stops up at once.
func reportStatus(ctrl *mhi.Controller, name string, out upLog) func(mhi.StatusEvent) {
	return func(ev mhi.StatusEvent) {
		switch ev.Kind {
		case mhi.StatusSysErr:
			out.printf("%s: the modem raised SYS_ERR: recovering", name)
		case mhi.StatusRecovered:
			dump := ""
			if b, at := ctrl.LastDump(); len(b) > 0 && time.Since(at) < time.Minute {
				dump = fmt.Sprintf("; a RAM dump of %d bytes was collected at %s ('mhictl dump %s --out FILE' fetches it)", len(b), at.Format(time.RFC3339), name)
			}
			out.printf("%s: recovered from SYS_ERR: channels restarted%s", name, dump)
		case mhi.StatusRecoveryFailed:
			out.printf("%s: a recovery attempt failed: %v; another follows", name, ev.Err)
		case mhi.StatusFailed:
			out.printf("%s: %v: the modem is left alone", name, ev.Err)
			_ = sdNotify("STATUS=" + ev.Err.Error())
		case mhi.StatusLinkDown:
			out.printf("%v: its channels are stopped and it is left alone (pm_state %s); SIGTERM stops up", ev.Err, mhi.PMLinkDown)
			_ = sdNotify("STATUS=" + ev.Err.Error())
		}
	}
}

// openMock starts the in-process mock modem impersonating info, its IP
// data function in the framing the host uses (d), recording its transcript
// with --transcript. The cleanup closes it, then the transcript.
func openMock(f *upFlags, s upSettings, info *pcigeneric.ModemInfo, d upData, log *slog.Logger) (*mock.Mock, func(), error) {
	bc, err := f.boot.config(log.With("side", "modem"))
	if err != nil {
		return nil, nil, err
	}
	rec, record, err := openTranscript(f.transcript)
	if err != nil {
		return nil, nil, err
	}
	closeRec := func() {
		if rec != nil {
			if err := rec.Close(); err != nil {
				log.Error("transcript not written in full", "file", f.transcript, "err", err)
			}
		}
	}
	m, err := mock.Open(mock.Options{
		Model: info.Name, Name: f.name, Logger: log, Modem: modem.Config{RequireConnect: f.requireConnect, MaxSessions: f.maxSessions},
		IPData:      &ipdata.Config{Format: d.format, QMAPCsum: d.qmapCsum, Responder: s.responder},
		FirmwareDir: f.firmware, RDDMSize: f.rddmSize, Device: func(c *ep.Config) { c.Boot = bc; record(c) },
		Quirks: f.quirks.set,
	})
	if err != nil {
		closeRec()
		return nil, nil, err
	}
	return m, func() { _ = m.Close(); closeRec() }, nil
}

// upNet is up's network device, the Mux that hands its packets to the
// sessions' receivers and, with --tun, session 0's interface.
type upNet struct {
	dev    *mhinet.Device
	mux    *tun.Mux
	ifc    *tun.Interface  // nil without --tun
	setMTU func(int) error // nil without --tun
}

// openNetwork brings the network device up on the modem's data channel:
// bridged to a TUN interface with --tun, else delivering to nothing. The
// cleanup stops the bridge, takes the device down and removes the
// interface.
func openNetwork(ctx context.Context, f *upFlags, s upSettings, m *upModem, log *slog.Logger, out upLog) (_ *upNet, cleanup func(), err error) {
	var undo cleanups
	defer func() {
		if err != nil {
			undo.run()
		}
	}()
	// The wire id of session 0 is the model's base; the device follows
	// a modem that numbers its sessions otherwise (the sdx72-mux-112
	// quirk).
	devCfg := mhinet.Config{Pair: m.data.pair, Format: m.data.format, QMAPCsum: m.data.qmapCsum, MRU: m.data.mru, FollowSession: true,
		Session: m.info.MuxIDBase, Logger: log, RxCopy: s.rxCopy}
	n := &upNet{}
	var bridge *tun.Bridge
	if f.tunName != "" {
		var removeTUN func()
		bridge, n.ifc, n.dev, n.mux, removeTUN, err = openBridge(f, s, m.ctrl, devCfg, log, out)
		if err != nil {
			return nil, nil, err
		}
		undo.add(removeTUN)
		n.setMTU = bridge.SetMTU
	} else {
		// No interfaces: session 0's packets are counted and released;
		// those of other sessions are counted as for no session.
		n.mux = tun.NewMux()
		n.mux.Set(0, mhinet.ReceiverFunc(discard))
		if n.dev, err = mhinet.New(m.ctrl, devCfg, n.mux); err != nil {
			return nil, nil, err
		}
	}
	if err := n.dev.Up(); err != nil {
		return nil, nil, err
	}
	undo.add(func() { _ = n.dev.Down() })
	if bridge != nil {
		bctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			if err := bridge.Run(bctx); err != nil && !errors.Is(err, context.Canceled) {
				out.printf("bridge: %v", err)
			}
		}()
		undo.add(func() { cancel(); <-done })
	}
	modem := "modem " + f.modemMode
	if f.device != "" || f.vfioUser != "" {
		modem = "modem's own mode"
	}
	framing := m.data.format.String() + " framing"
	if m.data.qmapCsum != qmap.CsumNone {
		framing += " (MAP checksum " + m.data.qmapCsum.String() + ")"
	}
	out.printf("data channel %s: %s, MRU %d, %s", m.data.pair, framing, m.data.mru, modem)
	out.printf("receive copy %s (--rx-copy %s)", n.dev.Config().RxCopy, s.rxCopy)
	return n, undo.run, nil
}

// openBridge creates the TUN interface --tun names, configures it and
// joins it to a network device on ctrl; the cleanup removes the
// interface.
func openBridge(f *upFlags, s upSettings, ctrl *mhi.Controller, devCfg mhinet.Config, log *slog.Logger, out upLog) (
	_ *tun.Bridge, _ *tun.Interface, _ *mhinet.Device, _ *tun.Mux, cleanup func(), err error) {
	ifc, err := tun.OpenWith(f.tunName, tun.OpenOptions{GSO: f.gso})
	if err != nil {
		return nil, nil, nil, nil, nil, err
	}
	remove := func() {
		if err := ifc.Close(); err != nil {
			out.printf("removing %s: %v", ifc.Name(), err)
		}
	}
	defer func() {
		if err != nil {
			remove()
		}
	}()
	mtu := mhinet.DefaultMTU
	if err := ifc.Configure(tun.Config{MTU: mtu, Up: true, Addrs: tunAddrs(s.prefix)}); err != nil {
		return nil, nil, nil, nil, nil, err
	}
	mux, bridge, dev, err := tun.ConnectMux(ifc, ctrl, devCfg, tun.BridgeConfig{Logger: log, NoGRO: !f.gro, Session: 0})
	if err != nil {
		return nil, nil, nil, nil, nil, err
	}
	gro := "off"
	if f.gso && f.gro {
		gro = "on"
	}
	out.printf("interface %s up, %s, mtu %d, offloads %v, gro %s", ifc.Name(), addrText(s.prefix), mtu, ifc.Offloads(), gro)
	return bridge, ifc, dev, mux, remove, nil
}

// openControl starts the control plane: the control ports and the data
// session, the attribute tree served over generic netlink and, with
// --mount and --metrics, as files and as Prometheus metrics. The cleanup
// stops them all.
func openControl(ctx context.Context, f *upFlags, s upSettings, m *upModem, n *upNet, log *slog.Logger, out upLog) (cleanup func(), err error) {
	var undo cleanups
	defer func() {
		if err != nil {
			undo.run()
		}
	}()
	sn := &sessionNet{ctx: ctx, mux: n.mux, dev: n.dev, tunName: f.tunName, gso: f.gso, gro: f.gro, log: log, out: out}
	cp, err := startControl(f, m.info, m.ctrl, n.ifc, n.setMTU, s.prefix, sn, log, out)
	if err != nil {
		return nil, err
	}
	undo.add(cp.close)

	tree := sysfs.NewTree()
	data, own := muxCounters(n.mux)
	tree.AddDevice(f.name, sysfs.Device{Controller: m.ctrl, Net: n.dev, Model: m.info.Name, SetMTU: n.setMTU,
		Ports: cp.binds, Session: cp.session, Sessions: cp.sessions, Stats: mockStats(m.embedded),
		SessionData: data, SessionsStats: own, ModemSessions: modemSessions(m.embedded)})
	stopNetlink, err := serveNetlink(ctx, f, tree, log, out)
	if err != nil {
		return nil, err
	}
	undo.add(stopNetlink)
	if f.mount != "" {
		unmount, err := mountTree(f, tree, log, out)
		if err != nil {
			return nil, err
		}
		undo.add(unmount)
	}
	if f.metrics != "" {
		stopMetrics, err := serveMetrics(f.metrics, tree, out)
		if err != nil {
			return nil, err
		}
		undo.add(stopMetrics)
	}
	return undo.run, nil
}

// serveNetlink serves tree as the generic-netlink family "mhi" on
// --netlink-port; the cleanup stops the server.
func serveNetlink(ctx context.Context, f *upFlags, tree *sysfs.Tree, log *slog.Logger, out upLog) (stop func(), err error) {
	// On the default port the server advertises itself in a run file, so
	// that clients find it even when a squatter pushed it elsewhere.
	var runFile string
	if f.port == 0 {
		runFile = genl.DefaultRunFile()
	}
	srv, err := genl.NewServer(tree, genl.ServerOptions{Port: f.port, RunFile: runFile, Device: f.name, Logger: log})
	if err != nil {
		return nil, err
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
	if srv.Beside() {
		out.printf("netlink family %q for %s on port 0x%x beside another instance on 0x%x, advertised in %s", genl.FamilyName, f.name, srv.Port(), genl.DefaultPort, srv.RunFile())
	} else if runFile != "" {
		out.printf("netlink family %q on port 0x%x, advertised in %s", genl.FamilyName, srv.Port(), runFile)
	} else {
		out.printf("netlink family %q on port 0x%x", genl.FamilyName, srv.Port())
	}
	return func() { scancel(); _ = srv.Close(); <-sdone }, nil
}

// mountTree serves tree as files at --mount; the cleanup unmounts it.
func mountTree(f *upFlags, tree *sysfs.Tree, log *slog.Logger, out upLog) (unmount func(), err error) {
	if err := fusefs.CleanupStale(f.mount); err != nil {
		return nil, err
	}
	fs, err := fusefs.Mount(f.mount, tree, fusefs.Options{Logger: log})
	if err != nil {
		return nil, err
	}
	out.printf("attribute tree mounted at %s", fs.Dir())
	return func() {
		if err := fs.Close(); err != nil {
			out.printf("unmounting %s: %v", f.mount, err)
		}
	}, nil
}

// serveMetrics serves tree's Prometheus metrics over HTTP at addr; the
// cleanup shuts the server down.
func serveMetrics(addr string, tree *sysfs.Tree, out upLog) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", tree.MetricsHandler())
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	out.printf("metrics at http://%s/metrics", ln.Addr())
	return func() {
		sd, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = hs.Shutdown(sd)
	}, nil
}

// discard is the receiver of a device without an interface: packets are
// counted by the device (rx_packets) and released.
func discard(pkts []mhinet.Packet) {
	for _, p := range pkts {
		p.Release()
	}
}
