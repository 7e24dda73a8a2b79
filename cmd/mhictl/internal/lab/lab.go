// Package lab is `mhictl lab`: a hardware-free MHI test bench. It serves
// the mock modem ('mhictl modem serve', a process of its own, as a user
// would run it) to a QEMU guest as a vfio-user PCI device, boots a Linux
// kernel there (Debian's 6.1, 6.12 or 7.x from the cache `make test-deps`
// fills, or one the user built) whose own MHI drivers take the modem,
// runs the user's script inside and returns its exit status — so `git
// bisect run mhictl lab run …` bisects a kernel.
//
// The guest reports to the host on its console with lines that start
// with "LAB-" (booted, script started, exit status); every other line is
// the guest's console, streamed to the user.
package lab

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gomhi/gomhi/cmd/mhictl/internal/faultsock"
	"github.com/gomhi/gomhi/internal/labvm"
	"github.com/gomhi/gomhi/pcigeneric"
)

// MaxModems bounds Config.Modems.
const MaxModems = 4

// Exit statuses of the lab itself, as git bisect run and timeout(1) read
// them; any other status is the script's.
const (
	// ExitTimeout: --timeout passed before the script ended.
	ExitTimeout = 124
	// ExitLabFailed: the lab could not start or the guest never reached
	// the script (git bisect run's "skip": this commit cannot be tested).
	ExitLabFailed = 125
)

// Drivers and user lands the lab knows.
const (
	// DriverLinux: the guest kernel's own mhi_pci_generic and its client
	// drivers take the modem.
	DriverLinux = "linux"
	// DriverGomhi: the real-modem rehearsal — the guest's vfio-pci takes
	// the modem behind an emulated IOMMU and gomhi's own host drives it
	// ('mhictl bind' and 'mhictl up --device' in the guest), as on a real
	// modem.
	DriverGomhi = "gomhi"
	// UserlandMinimal: busybox only.
	UserlandMinimal = "minimal"
	// UserlandModemManager: the Debian root file system `make test-deps`
	// builds (bookworm's ModemManager, mbimcli, qmicli, udev, D-Bus), with
	// ModemManager running before the script starts.
	UserlandModemManager = "modemmanager"
)

// Config is one lab run.
type Config struct {
	// Kernel is a kernel of the cache by version ("6.1", "6.12", "7.3":
	// the cached kernel whose release starts with it) or Debian suite
	// ("bookworm", "trixie", "trixie-backports"), or the path of a kernel
	// image the user built, with Modules its lib/modules/<release>.
	Kernel, Modules string
	// Driver is DriverLinux (the default) or DriverGomhi.
	Driver string
	// UpArgs are more flags for 'mhictl up' in the guest (DriverGomhi).
	UpArgs []string
	// Userland is UserlandMinimal (the default) or UserlandModemManager
	// (with DriverLinux).
	Userland string
	// Model is the device-table model the mock impersonates.
	Model string
	// Modems is how many modems the guest has (1 to MaxModems; 0: 1),
	// each served by a process of its own.
	Modems int
	// ServeArgs are more flags for 'mhictl modem serve'.
	ServeArgs []string
	// Timeout bounds the whole run (0: 10 minutes).
	Timeout time.Duration
	// MemoryMB is the guest's memory (0: 256; 512 with DriverGomhi).
	MemoryMB int
	// Files maps guest paths to host files copied into the guest
	// (firmware, tools).
	Files map[string]string
	// Script is the shell script run in the guest, with Args.
	Script string
	Args   []string
	// Shell gives the guest's console to the terminal (an interactive
	// shell) instead of running Script.
	Shell bool
	// NoSetup: when the cache lacks something, fail (ExitLabFailed)
	// instead of filling it first (labvm.Setup).
	NoSetup bool
	// Mhictl is the mhictl executable that serves the modem and, when it
	// is statically linked, drives it in the guest (DriverGomhi); else
	// the lab builds one from gomhi's source tree.
	Mhictl string
	// Console receives the guest's console lines; Log the lab's own
	// messages.
	Console, Log io.Writer
}

// Summary is what a run reports (mhictl lab run --json).
type Summary struct {
	// ExitStatus is the script's, or ExitTimeout, or ExitLabFailed.
	ExitStatus int `json:"exit_status"`
	// Reason says why the lab, not the script, set ExitStatus.
	Reason string `json:"reason,omitempty"`
	// Kernel is the guest kernel's release.
	Kernel   string `json:"kernel"`
	Model    string `json:"model"`
	Driver   string `json:"driver"`
	Userland string `json:"userland"`
	// DurationS is the run's wall time; BootS the time from QEMU's start
	// to the script's first line (0 if it never started).
	DurationS float64 `json:"duration_s"`
	BootS     float64 `json:"boot_s"`
	// Injected lists the faults the script injected (lab-inject) and
	// what the modem said.
	Injected []string `json:"injected,omitempty"`
	// Modem is what the served modem reported (modem 0).
	Modem ModemReport `json:"modem"`
	// Modems is what every served modem reported, with several.
	Modems []ModemReport `json:"modems,omitempty"`
}

// ModemReport is the served modem's account of the run, from its JSON
// event log.
type ModemReport struct {
	// Sessions, Messages, Malformed, DMAFaults and Interrupts are the
	// server's counters at exit.
	Sessions   int64 `json:"sessions"`
	Messages   int64 `json:"messages"`
	Malformed  int64 `json:"malformed"`
	DMAFaults  int64 `json:"dma_faults"`
	Interrupts int64 `json:"interrupts"`
	// VFIOUserErrors counts the server's "error" and "refuse" events;
	// Errors holds their text.
	VFIOUserErrors int      `json:"vfio_user_errors"`
	Errors         []string `json:"errors,omitempty"`
	// IPData is the IP data function's counters of the last session.
	IPData map[string]any `json:"ip_data,omitempty"`
	// IPSessions are the IP data function's counters per data session
	// (MBIM session id, QMAP mux id) of the last session, one row per
	// data session that saw traffic, by session number.
	IPSessions []SessionReport `json:"ip_sessions,omitempty"`
}

// SessionReport is one data session's counters as the served modem
// logged them (ipdata.SessionStats, in ip_data_final's "sessions").
type SessionReport struct {
	// Session is the session number N (MBIM SessionId, wwan link id);
	// Wire the id the data path carries (the model's mux-id base + N).
	Session uint8 `json:"session"`
	Wire    uint8 `json:"wire"`
	// ULPackets and ULBytes count what the host sent on the session
	// (IP bytes), GenPackets what the modem's generator made for it,
	// DLPackets and DLBytes what the modem sent on it (IP bytes, framing
	// excluded); Pending is still queued.
	ULPackets  uint64 `json:"ul_packets"`
	ULBytes    uint64 `json:"ul_bytes"`
	GenPackets uint64 `json:"gen_packets"`
	DLPackets  uint64 `json:"dl_packets"`
	DLBytes    uint64 `json:"dl_bytes"`
	Pending    uint64 `json:"pending"`
	// Dropped counts the session's packets dropped for any reason,
	// DroppedGated the part dropped because the session was not
	// connected (--require-connect).
	Dropped      uint64 `json:"dropped"`
	DroppedGated uint64 `json:"dropped_gated"`
}

// kernelModule is a module the guest loads, with the kernel option that
// builds it; an optional one is loaded where the kernel has it.
type kernelModule struct {
	path, option string
	optional     bool
}

// linuxModules are Linux's MHI and WWAN modules in insmod order.
var linuxModules = []kernelModule{
	{"kernel/drivers/bus/mhi/host/mhi.ko", "CONFIG_MHI_BUS", false},
	{"kernel/drivers/net/wwan/wwan.ko", "CONFIG_WWAN", false},
	{"kernel/drivers/bus/mhi/host/mhi_pci_generic.ko", "CONFIG_MHI_BUS_PCI_GENERIC", false},
	{"kernel/drivers/net/mhi_net.ko", "CONFIG_MHI_NET", false},
	{"kernel/drivers/net/wwan/mhi_wwan_ctrl.ko", "CONFIG_MHI_WWAN_CTRL", false},
	{"kernel/drivers/net/wwan/mhi_wwan_mbim.ko", "CONFIG_MHI_WWAN_MBIM", false},
}

// vfioModules are what gomhi's host needs in the guest: VFIO for PCI
// behind the IOMMU, and TUN (vfio_virqfd is a module of its own before
// 6.2; their dependencies, irqbypass and iommufd, come with them).
var vfioModules = []kernelModule{
	{"kernel/drivers/vfio/vfio.ko", "CONFIG_VFIO", false},
	{"kernel/drivers/vfio/vfio_iommu_type1.ko", "CONFIG_VFIO_IOMMU_TYPE1", false},
	{"kernel/drivers/vfio/vfio_virqfd.ko", "CONFIG_VFIO_VIRQFD", true},
	{"kernel/drivers/vfio/pci/vfio-pci-core.ko", "CONFIG_VFIO_PCI_CORE", false},
	{"kernel/drivers/vfio/pci/vfio-pci.ko", "CONFIG_VFIO_PCI", false},
	{"kernel/drivers/net/tun.ko", "CONFIG_TUN", false},
}

// Addresses the guest's data interface gets: LAB_ADDR on the guest,
// LAB_PEER beyond the modem (the mock answers pings and UDP echo for any
// destination).
const (
	labAddr = "192.0.2.1"
	labPeer = "192.0.2.2"
)

// labError is a failure of the lab itself (ExitLabFailed).
type labError struct{ err error }

func (e labError) Error() string { return e.err.Error() }
func (e labError) Unwrap() error { return e.err }

// failed wraps err as a failure of the lab.
func failed(format string, a ...any) error { return labError{fmt.Errorf(format, a...)} }

// IsLabFailure reports whether err is a failure of the lab itself (exit
// status ExitLabFailed), not of the script.
func IsLabFailure(err error) bool {
	var le labError
	return errors.As(err, &le)
}

// defaults fills in the zero fields.
func (c *Config) defaults() {
	if c.Kernel == "" {
		c.Kernel = "6.1"
	}
	if c.Driver == "" {
		c.Driver = DriverLinux
	}
	if c.Userland == "" {
		c.Userland = UserlandMinimal
	}
	if c.Model == "" {
		c.Model = "qcom-sdx55m"
	}
	if c.Modems == 0 {
		c.Modems = 1
	}
	if c.Timeout == 0 {
		c.Timeout = 10 * time.Minute
	}
	if c.MemoryMB == 0 {
		c.MemoryMB = 256
		if c.Driver == DriverGomhi || c.Userland == UserlandModemManager {
			c.MemoryMB = 512
		}
	}
	if c.Console == nil {
		c.Console = io.Discard
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
}

// check refuses a configuration the lab cannot run.
func (c *Config) check() error {
	if c.Driver != DriverLinux && c.Driver != DriverGomhi {
		return failed("--driver %q: linux or gomhi", c.Driver)
	}
	if len(c.UpArgs) > 0 && c.Driver != DriverGomhi {
		return failed("--up-args are for --driver gomhi ('mhictl up' in the guest)")
	}
	switch c.Userland {
	case UserlandMinimal:
	case UserlandModemManager:
		if c.Driver != DriverLinux {
			return failed("--userland modemmanager goes with --driver linux (ModemManager drives the ports Linux's drivers create)")
		}
	default:
		return failed("--userland %q: minimal or modemmanager", c.Userland)
	}
	if c.Modems < 1 || c.Modems > MaxModems {
		return failed("--modems %d: 1 to %d", c.Modems, MaxModems)
	}
	if _, ok := pcigeneric.Model(c.Model); !ok {
		return failed("--model %q: no such model (see 'mhictl models')", c.Model)
	}
	if !c.Shell {
		if c.Script == "" {
			return failed("no script to run")
		}
		if fi, err := os.Stat(c.Script); err != nil {
			return failed("script: %w", err)
		} else if !fi.Mode().IsRegular() {
			return failed("script %s is not a file", c.Script)
		}
	}
	if c.Mhictl == "" {
		return failed("no mhictl executable to serve the modem")
	}
	return nil
}

// kernelOptions turns --kernel and --modules into labvm options.
func (c *Config) kernelOptions() (labvm.Options, error) {
	opts := labvm.Options{VFIOUser: true}
	if strings.ContainsRune(c.Kernel, os.PathSeparator) || fileExists(c.Kernel) {
		if c.Modules == "" {
			return opts, failed("--kernel %s is a kernel image: --modules must name its lib/modules/<release> folder", c.Kernel)
		}
		opts.KernelImage, opts.ModulesDir = c.Kernel, c.Modules
		return opts, nil
	}
	if c.Modules != "" {
		return opts, failed("--modules goes with --kernel PATH (a kernel image), not with the cached kernel %q", c.Kernel)
	}
	var known []string
	for _, k := range labvm.Kernels() {
		release := labvm.Release(k.Dir)
		if release != "" {
			known = append(known, release)
		}
		if k.Name == c.Kernel || (release != "" && strings.HasPrefix(release, c.Kernel+".")) ||
			(release != "" && strings.HasPrefix(release, c.Kernel+"-")) {
			if release == "" {
				return opts, failed("kernel %s (%s) is not in the cache at %s (run: %s): %w", c.Kernel, k.Name, k.Dir, labvm.SetupCommand, labvm.ErrMissing)
			}
			opts.KernelDir = k.Dir
			return opts, nil
		}
	}
	err := failed("--kernel %q: no cached kernel of that version or suite (cached: %s; run %s to fetch 6.1, 6.12 and 7.x, or give a kernel image with --modules)",
		c.Kernel, strings.Join(known, ", "), labvm.SetupCommand)
	if len(known) == 0 {
		// Nothing cached yet: preparing the cache may bring it.
		err = failed("%w: %w", err, labvm.ErrMissing)
	}
	return opts, err
}

func fileExists(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}

// modules returns the modules the driver needs (with their dependencies)
// from the kernel's modules folder; one built into the kernel
// (modules.builtin) needs no loading, one that is neither is an error
// naming its kernel option.
func modules(e *labvm.Env, driver string) ([]string, error) {
	builtin, _ := e.BuiltinModules()
	want := linuxModules
	if driver == DriverGomhi {
		want = vfioModules
	}
	var load []string
	for _, m := range want {
		switch {
		case e.HasModule(m.path):
			load = append(load, m.path)
		case builtin[m.path] || m.optional:
		default:
			return nil, failed("kernel %s has no %s: build it with %s=m or =y", e.Release, filepath.Base(m.path), m.option)
		}
	}
	deps, err := e.WithDependencies(load)
	if err != nil {
		return nil, failed("%w", err)
	}
	return deps, nil
}

// dataNetdevs are the prefixes of the names Linux gives the main data
// interfaces of a model by its data channel pair: mhi_net's mhi_hwipN on
// IP_HW0, mhi_wwan_mbim's wwanN on IP_HW0_MBIM.
func dataNetdevs(model string) []string {
	info, _ := pcigeneric.Model(model)
	switch pcigeneric.DataPair(info.Config) {
	case "IP_HW0_MBIM":
		return []string{"wwan"}
	case "IP_HW0":
		return []string{"mhi_hwip"}
	}
	return []string{"mhi_hwip", "wwan"}
}

// ctlPorts names the control channels the model has that Linux's
// mhi_wwan_ctrl exposes (for the script's information).
func ctlPorts(model string) []string {
	info, _ := pcigeneric.Model(model)
	return pcigeneric.ControlPairs(info.Config)
}

// shellQuote quotes s for sh.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// Run runs the lab: it serves the modem, boots the guest, runs the script
// and returns the summary. err is non-nil only when the lab itself failed
// (IsLabFailure) or ctx ended; the script's failure is ExitStatus.
func Run(ctx context.Context, cfg Config) (sum Summary, err error) {
	cfg.defaults()
	sum = Summary{Model: cfg.Model, Driver: cfg.Driver, Userland: cfg.Userland, ExitStatus: ExitLabFailed}
	start := time.Now()
	defer func() { sum.DurationS = time.Since(start).Seconds() }()
	if err := cfg.check(); err != nil {
		return sum, err
	}
	env, err := cfg.findGuest(ctx)
	if err != nil {
		return sum, err
	}
	sum.Kernel = env.Release
	mods, err := modules(env, cfg.Driver)
	if err != nil {
		return sum, err
	}
	var linuxMods []string
	if cfg.Driver == DriverGomhi {
		// Packed, not loaded: a script hands the modem to Linux's
		// driver after 'mhictl unbind' (LAB_LINUX_MODULES).
		if linuxMods, err = modules(env, DriverLinux); err != nil {
			return sum, err
		}
	}
	rootfs, err := cfg.findRootFS(ctx)
	if err != nil {
		return sum, err
	}
	dir, err := os.MkdirTemp("", "mhictl-lab-")
	if err != nil {
		return sum, failed("%w", err)
	}
	defer os.RemoveAll(dir)
	socks := make([]string, cfg.Modems)
	for i := range socks {
		socks[i] = filepath.Join(dir, fmt.Sprintf("modem%d.sock", i))
	}
	initrd, err := cfg.buildInitramfs(env, dir, mods, linuxMods, faultsock.Path(socks[0]))
	if err != nil {
		return sum, err
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	srvs, err := serveModems(ctx, cfg, socks)
	defer func() { sum.Modem, sum.Modems = stopModems(srvs) }()
	if err != nil {
		return sum, err
	}
	boot := labvm.Boot{Args: cfg.qemuArgs(socks), Initrd: initrd, Timeout: cfg.Timeout}
	if rootfs != "" {
		boot.Args = append(boot.Args, labvm.DiskArgs(rootfs)...)
	}
	if cfg.Driver == DriverGomhi {
		boot.Append = "intel_iommu=on"
	}
	if cfg.Shell {
		fmt.Fprintf(cfg.Log, "lab: %s on %s, the mock modem %s served by %s; busybox poweroff -f (or Ctrl-A X) ends the guest\n",
			cfg.Driver, env.Release, cfg.Model, cfg.Mhictl)
		if err := env.RunInteractive(ctx, boot); err != nil && ctx.Err() == nil {
			return sum, failed("qemu: %w", err)
		}
		sum.ExitStatus = 0
		return sum, ctx.Err()
	}
	gc := &guestConsole{cfg: &cfg, socks: socks, status: -1, start: time.Now()}
	boot.OnLine = gc.line
	res := env.Run(ctx, boot)
	return gc.verdict(ctx, res, sum)
}

// withSetup runs find; when what it looks for is missing from the cache
// (labvm.ErrMissing) and cfg allows, it fills the cache first (as make
// test-deps does: first use) and runs find again.
func (cfg *Config) withSetup(ctx context.Context, rootFS bool, find func() error) error {
	err := find()
	if !errors.Is(err, labvm.ErrMissing) || cfg.NoSetup {
		return err
	}
	fmt.Fprintf(cfg.Log, "lab: %v\nlab: preparing the cache %s (first use: downloads QEMU, busybox and Debian's kernels, no root needed)\n", err, labvm.CacheDir())
	if serr := labvm.Setup(ctx, cfg.Log, rootFS); serr != nil {
		return failed("%w", serr)
	}
	return find()
}

// findGuest finds QEMU, busybox and the kernel --kernel names, filling the
// cache first when it lacks them.
func (cfg *Config) findGuest(ctx context.Context) (*labvm.Env, error) {
	rootFS := cfg.Userland == UserlandModemManager
	var opts labvm.Options
	err := cfg.withSetup(ctx, rootFS, func() (err error) {
		opts, err = cfg.kernelOptions()
		return err
	})
	if err != nil {
		return nil, err
	}
	var env *labvm.Env
	err = cfg.withSetup(ctx, rootFS, func() (err error) {
		env, err = labvm.Find(opts)
		return err
	})
	if err != nil {
		return nil, failed("%w", err)
	}
	return env, nil
}

// findRootFS returns the Debian root file system the ModemManager user
// land boots ("" for the minimal one), building it first when missing.
func (cfg *Config) findRootFS(ctx context.Context) (string, error) {
	if cfg.Userland != UserlandModemManager {
		return "", nil
	}
	var rootfs string
	err := cfg.withSetup(ctx, true, func() (err error) {
		rootfs, err = labvm.FindRootFS()
		return err
	})
	if err != nil {
		return "", failed("%w", err)
	}
	return rootfs, nil
}

// serveModems starts one served modem per socket; on an error the ones
// started are returned too, for stopModems.
func serveModems(ctx context.Context, cfg Config, socks []string) ([]*server, error) {
	var srvs []*server
	for _, sock := range socks {
		srv, err := startServer(ctx, cfg, sock)
		if err != nil {
			return srvs, err
		}
		srvs = append(srvs, srv)
	}
	return srvs, nil
}

// stopModems stops the served modems and returns modem 0's report and,
// with several, every modem's.
func stopModems(srvs []*server) (first ModemReport, all []ModemReport) {
	for i, srv := range srvs {
		r := srv.stop()
		if i == 0 {
			first = r
		}
		all = append(all, r)
	}
	if len(all) < 2 {
		all = nil
	}
	return first, all
}

// guestConsole follows the guest's console: lines starting with "LAB-"
// are the guest's reports to the lab, every other line goes to
// cfg.Console.
type guestConsole struct {
	cfg   *Config
	socks []string
	start time.Time

	mu       sync.Mutex
	started  bool // LAB-START: the script began
	status   int  // LAB-EXIT's status, -1 before
	bootS    float64
	injected []string
}

// line handles one console line.
func (g *guestConsole) line(line string) {
	rest, ok := strings.CutPrefix(line, "LAB-")
	if !ok {
		fmt.Fprintln(g.cfg.Console, line)
		return
	}
	word, arg, _ := strings.Cut(rest, " ")
	g.mu.Lock()
	defer g.mu.Unlock()
	switch word {
	case "START":
		g.started = true
		g.bootS = time.Since(g.start).Seconds()
	case "EXIT":
		if n, err := strconv.Atoi(strings.TrimSpace(arg)); err == nil {
			g.status = n
		}
	case "WARN":
		fmt.Fprintf(g.cfg.Log, "lab: %s\n", arg)
	case "INJECT":
		g.inject(strings.TrimSpace(arg))
	}
}

// inject relays "FAULT [MODEM]" to the served modem's fault socket.
func (g *guestConsole) inject(arg string) {
	fault, which, _ := strings.Cut(arg, " ")
	what := ""
	if i, err := strconv.Atoi(which); which != "" && (err != nil || i < 0 || i >= len(g.socks)) {
		what = fmt.Sprintf("refused: no modem %q (the guest has %d)", which, len(g.socks))
	} else if what, err = faultsock.Request(g.socks[i], fault); err != nil {
		what = "refused: " + err.Error()
	}
	fmt.Fprintf(g.cfg.Log, "lab: inject %s into modem %s: %s\n", fault, cmp.Or(which, "0"), what)
	g.injected = append(g.injected, fault+": "+what)
}

// verdict turns QEMU's result and what the guest reported into the
// summary's exit status (and the lab's error, if the guest never reached
// the script).
func (g *guestConsole) verdict(ctx context.Context, res labvm.Result, sum Summary) (Summary, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	sum.BootS, sum.Injected = g.bootS, g.injected
	switch {
	case g.status >= 0:
		sum.ExitStatus = g.status
	case errors.Is(res.Err, context.DeadlineExceeded):
		sum.ExitStatus = ExitTimeout
		sum.Reason = fmt.Sprintf("--timeout %v passed", g.cfg.Timeout)
	case ctx.Err() != nil:
		return sum, ctx.Err()
	case !g.started:
		sum.Reason = fmt.Sprintf("the guest ended before the script started (qemu: %v)", errText(res.Err))
		return sum, failed("%s\n%s", sum.Reason, lastLines(res.Stderr, 5))
	default:
		// The script started but the guest ended without its status:
		// a kernel panic or a power-off under the script.
		sum.ExitStatus = 1
		sum.Reason = fmt.Sprintf("the guest ended while the script ran, without its exit status (qemu: %v)", errText(res.Err))
	}
	return sum, nil
}

func errText(err error) string {
	if err == nil {
		return "exit 0"
	}
	return err.Error()
}

// lastLines returns the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// qemuArgs are QEMU's arguments: a q35 machine whose memory is a shared
// memfd (the served modem maps it), the modem as vfio-user-pci on sock
// and, for DriverGomhi, an emulated Intel IOMMU (caching-mode: QEMU
// follows the guest's mappings; Debian's kernels have no VFIO no-IOMMU
// mode).
func (cfg *Config) qemuArgs(socks []string) []string {
	machine := "q35,memory-backend=mem"
	var iommu []string
	if cfg.Driver == DriverGomhi {
		machine = "q35,kernel-irqchip=split,memory-backend=mem"
		iommu = []string{"-device", "intel-iommu,intremap=on,caching-mode=on"}
	}
	args := []string{"-machine", machine, "-accel", "tcg",
		"-object", fmt.Sprintf("memory-backend-memfd,id=mem,size=%dM,share=on", cfg.MemoryMB), "-m", strconv.Itoa(cfg.MemoryMB), "-smp", "1"}
	args = append(args, iommu...)
	for i, sock := range socks {
		args = append(args, "-device", fmt.Sprintf(`{"driver":"vfio-user-pci","id":"mhi%d","socket":{"type":"unix","path":%q}}`, i, sock))
	}
	return args
}

// buildInitramfs packs the guest: busybox, the MHI modules, the lab's
// /init and the user's script with its arguments and environment.
func (cfg *Config) buildInitramfs(env *labvm.Env, dir string, mods, linuxMods []string, faults string) (string, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "LAB_MODEMS=%d\n", cfg.Modems)
	fmt.Fprintf(&b, "LAB_MODEL=%s\nLAB_DRIVER=%s\nLAB_KERNEL=%s\nLAB_ADDR=%s\nLAB_PEER=%s\nLAB_NETDEV_CANDIDATES=%s\nLAB_CONTROL_CHANNELS=%s\n",
		shellQuote(cfg.Model), shellQuote(cfg.Driver), shellQuote(env.Release), labAddr, labPeer,
		shellQuote(strings.Join(dataNetdevs(cfg.Model), " ")), shellQuote(strings.Join(ctlPorts(cfg.Model), " ")))
	var names []string
	for _, m := range mods {
		names = append(names, labvm.GuestModule(m))
	}
	var linuxNames []string
	for _, m := range linuxMods {
		linuxNames = append(linuxNames, "/lib/modules/"+labvm.GuestModule(m))
	}
	fmt.Fprintf(&b, "LAB_MODULES=%s\nLAB_LINUX_MODULES=%s\nLAB_MODEM_CTL=%s\n", shellQuote(strings.Join(names, " ")),
		shellQuote(strings.Join(linuxNames, " ")), shellQuote(faults))
	up := make([]string, len(cfg.UpArgs))
	for i, a := range cfg.UpArgs {
		up[i] = shellQuote(a)
	}
	fmt.Fprintf(&b, "LAB_UP_ARGS=%s\n", shellQuote(strings.Join(up, " ")))
	envFile := filepath.Join(dir, "lab.env")
	if err := os.WriteFile(envFile, []byte(b.String()), 0o644); err != nil {
		return "", failed("%w", err)
	}
	quoted := make([]string, len(cfg.Args))
	for i, a := range cfg.Args {
		quoted[i] = shellQuote(a)
	}
	argsFile := filepath.Join(dir, "lab.args")
	if err := os.WriteFile(argsFile, []byte("set -- "+strings.Join(quoted, " ")+"\n"), 0o644); err != nil {
		return "", failed("%w", err)
	}
	inject := filepath.Join(dir, "lab-inject")
	if err := os.WriteFile(inject, []byte(guestInject), 0o755); err != nil {
		return "", failed("%w", err)
	}
	files := map[string]string{"lab/env": envFile, "lab/args": argsFile, "bin/lab-inject": inject}
	if !cfg.Shell {
		files["lab/script"] = cfg.Script
	}
	for dst, src := range cfg.Files {
		files[strings.TrimPrefix(dst, "/")] = src
	}
	var programs map[string]string
	if cfg.Driver == DriverGomhi {
		if labvm.IsStatic(cfg.Mhictl) {
			files["bin/mhictl"] = cfg.Mhictl
		} else if env.ModRoot != "" {
			programs = map[string]string{"bin/mhictl": "./cmd/mhictl"}
		} else {
			return "", failed("--driver gomhi runs mhictl in the guest, which has no libc: %s is dynamically linked (build mhictl with CGO_ENABLED=0)", cfg.Mhictl)
		}
	}
	init, initramfsInit := cfg.initScripts()
	modules := append(mods, linuxMods...)
	if initramfsInit != "" {
		// The Debian root: the initramfs switches to it and runs
		// /lab/init there.
		p := filepath.Join(dir, "lab-init")
		if err := os.WriteFile(p, []byte(init), 0o755); err != nil {
			return "", failed("%w", err)
		}
		files["lab/init"] = p
		init = initramfsInit
		virtio, err := env.VirtioBlkModules()
		if err != nil {
			return "", failed("%w", err)
		}
		modules = append(modules, virtio...)
	}
	initrd, err := env.Build(filepath.Join(dir, "initramfs"), labvm.Initramfs{Init: init, Modules: modules, Files: files, Programs: programs})
	if err != nil {
		return "", failed("%w", err)
	}
	return initrd, nil
}

// initScripts returns the script that brings the modem up and runs the
// user's (guestInit filled in for the driver and the user land) and, for
// the ModemManager user land, the initramfs's /init that switches to the
// Debian root first ("" for the minimal one, whose /init is the former).
func (cfg *Config) initScripts() (init, initramfsInit string) {
	driver := guestLinux
	if cfg.Driver == DriverGomhi {
		driver = guestGomhi
	}
	run := guestScript
	if cfg.Shell {
		run = guestShell
	}
	head, userland, poweroff := guestHeadMinimal, "", "poweroff -f"
	if cfg.Userland == UserlandModemManager {
		head, userland, poweroff = guestHeadDebian, guestModemManager, "/lab/bin/busybox poweroff -f"
		var copies []string
		for dst := range cfg.Files {
			dst = "/" + strings.TrimPrefix(dst, "/")
			copies = append(copies, fmt.Sprintf("mkdir -p %s && cp -a %s %s", shellQuote(filepath.Dir("/newroot"+dst)), shellQuote(dst), shellQuote("/newroot"+dst)))
		}
		slices.Sort(copies)
		initramfsInit = strings.Replace(guestSwitchRoot, "#COPYFILES#", strings.Join(copies, "\n"), 1)
	}
	init = strings.NewReplacer("#HEAD#", head, "#DRIVER#", driver, "#USERLAND#", userland, "#RUN#", run, "#POWEROFF#", poweroff).Replace(guestInit)
	return init, initramfsInit
}

// server is the served modem: 'mhictl modem serve --json-log' and what its
// event log said.
type server struct {
	cmd    *exec.Cmd
	done   chan struct{}
	mu     sync.Mutex
	report ModemReport
	log    io.Writer
}

// startServer starts 'mhictl modem serve' on sock and waits until it
// listens.
func startServer(ctx context.Context, cfg Config, sock string) (*server, error) {
	args := append([]string{"--model", cfg.Model, "modem", "serve", "--socket", sock, "--json-log"}, cfg.ServeArgs...)
	cmd := exec.Command(cfg.Mhictl, args...)
	cmd.Stderr = cfg.Log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, failed("%w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, failed("mhictl modem serve: %w", err)
	}
	s := &server{cmd: cmd, done: make(chan struct{}), log: cfg.Log}
	listening := make(chan struct{})
	go s.read(out, listening)
	select {
	case <-listening:
		return s, nil
	case <-s.done:
		err := cmd.Wait()
		return nil, failed("mhictl modem serve %s: exited before listening (%v)", strings.Join(cfg.ServeArgs, " "), err)
	case <-ctx.Done():
		s.stop()
		return nil, failed("mhictl modem serve: not listening: %w", ctx.Err())
	case <-time.After(30 * time.Second):
		s.stop()
		return nil, failed("mhictl modem serve: not listening after 30 s")
	}
}

// read follows the server's JSON event log.
func (s *server) read(r io.Reader, listening chan struct{}) {
	defer close(s.done)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var ev map[string]any
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			continue
		}
		msg, _ := ev["msg"].(string)
		s.mu.Lock()
		switch msg {
		case "listen":
			if listening != nil {
				close(listening)
				listening = nil
			}
		case "error", "refuse":
			s.report.VFIOUserErrors++
			s.report.Errors = append(s.report.Errors, strings.TrimSpace(sc.Text()))
			fmt.Fprintf(s.log, "lab: the served modem logged: %s\n", sc.Text())
		case "ip_data_final":
			if st, ok := ev["stats"].(map[string]any); ok {
				s.report.IPData = st
			}
			s.report.IPSessions = sessionRows(sc.Bytes(), s.log)
		case "exit":
			for k, p := range map[string]*int64{"sessions": &s.report.Sessions, "messages": &s.report.Messages,
				"malformed": &s.report.Malformed, "dma_faults": &s.report.DMAFaults, "interrupts": &s.report.Interrupts} {
				if v, ok := ev[k].(float64); ok {
					*p = int64(v)
				}
			}
		}
		s.mu.Unlock()
	}
}

// sessionRows returns the per-session rows of an ip_data_final event
// ("sessions"), sorted by session number; a malformed list is reported
// on log and yields none.
func sessionRows(line []byte, log io.Writer) []SessionReport {
	var ev struct {
		Sessions []SessionReport `json:"sessions"`
	}
	if err := json.Unmarshal(line, &ev); err != nil {
		fmt.Fprintf(log, "lab: the served modem's per-session counters: %v\n", err)
		return nil
	}
	slices.SortFunc(ev.Sessions, func(a, b SessionReport) int { return cmp.Compare(a.Session, b.Session) })
	return ev.Sessions
}

// stop ends the server (SIGTERM, then SIGKILL after 10 s) and returns its
// report.
func (s *server) stop() ModemReport {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
	_ = s.cmd.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.report
	r.Errors = slices.Clone(r.Errors)
	r.IPSessions = slices.Clone(r.IPSessions)
	return r
}
