package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/google/shlex"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/gomhi/gomhi/cmd/mhictl/internal/lab"
)

// labFlags are the flags 'mhictl lab run' and 'mhictl lab shell' share.
type labFlags struct {
	kernel, modules   string
	driver, userland  string
	serveArgs, upArgs string
	timeout           time.Duration
	memory            int
	modems            int
	noSetup           bool
	files             []string
	jsonOut           bool
	quirks            quirkFlag
}

func (lf *labFlags) register(f *pflag.FlagSet, withJSON bool) {
	f.StringVar(&lf.kernel, "kernel", "6.1", "guest kernel: 6.1, 6.12 or 7.3 (Debian's, from the cache 'make test-deps' fills), a Debian suite (bookworm, trixie, trixie-backports), or the path of a kernel image you built (with --modules)")
	f.StringVar(&lf.modules, "modules", "", "with --kernel PATH: the kernel's lib/modules/<release> folder (the MHI and WWAN modules are loaded from it; built-in ones are fine)")
	f.StringVar(&lf.driver, "driver", lab.DriverLinux, "who drives the modem in the guest: linux (mhi_pci_generic with mhi_net, mhi_wwan_mbim, mhi_wwan_ctrl) or gomhi (the real-modem rehearsal: the guest's vfio-pci behind an emulated IOMMU, 'mhictl bind' and 'mhictl up --device ADDR --tun mhi0' in the guest)")
	f.StringVar(&lf.upArgs, "up-args", "", `with --driver gomhi: more flags for 'mhictl up' in the guest, e.g. "--firmware /lib/firmware"`)
	f.StringVar(&lf.userland, "userland", lab.UserlandMinimal, "the guest's user space: minimal (busybox) or modemmanager (Debian's root file system from the cache, with ModemManager running, mmcli, mbimcli and qmicli; the script sees LAB_MM_MODEM, the modem's index for mmcli -m)")
	f.StringVar(&lf.serveArgs, "serve-args", "", `more flags for the served modem ('mhictl modem serve'), e.g. "--require-connect --vectors 1"`)
	f.DurationVar(&lf.timeout, "timeout", 10*time.Minute, "bound on the whole run; when it passes the guest is stopped and the exit status is 124")
	f.StringArrayVar(&lf.files, "file", nil, "copy a host file into the guest: SRC[:DST] (DST defaults to /lab/files/<base name of SRC>; repeatable), e.g. firmware for --up-args \"--firmware DIR\"")
	f.BoolVar(&lf.noSetup, "no-setup", false, "when the cache lacks QEMU, busybox or the kernel, fail (status 125) instead of preparing it first as 'make test-deps' does")
	f.IntVar(&lf.modems, "modems", 1, "modems in the guest (1 to 4), each served by its own 'mhictl modem serve'; with --driver gomhi each is driven by its own 'mhictl up --device ADDR --name mhiN --tun mhiN'; modem N's data interface has 192.0.2.16N+1 with the peer 192.0.2.16N+2 (LAB_NETDEVS lists them)")
	f.IntVar(&lf.memory, "memory", 0, "guest memory in MiB (0: 256, 512 with --driver gomhi)")
	lf.quirks.add(f, "the served modem (passed to 'mhictl modem serve')")
	if withJSON {
		f.BoolVar(&lf.jsonOut, "json", false, "print a JSON summary as the last line of standard output")
	}
}

// config builds the lab's configuration.
func (lf *labFlags) config(g *globalFlags, cmd *cobra.Command) (lab.Config, error) {
	serve, err := shlex.Split(lf.serveArgs)
	if err != nil {
		return lab.Config{}, fmt.Errorf("--serve-args: %w", err)
	}
	if err := lf.quirks.parse(); err != nil {
		return lab.Config{}, err
	}
	if len(lf.quirks.set) > 0 {
		serve = append(serve, "--quirk", lf.quirks.set.String())
	}
	up, err := shlex.Split(lf.upArgs)
	if err != nil {
		return lab.Config{}, fmt.Errorf("--up-args: %w", err)
	}
	files := map[string]string{}
	for _, spec := range lf.files {
		src, dst, ok := strings.Cut(spec, ":")
		if !ok || dst == "" {
			dst = "/lab/files/" + filepath.Base(src)
		}
		if _, err := os.Stat(src); err != nil {
			return lab.Config{}, fmt.Errorf("--file %s: %w", spec, err)
		}
		files[dst] = src
	}
	self, err := os.Executable()
	if err != nil {
		return lab.Config{}, fmt.Errorf("finding mhictl itself to serve the modem: %w", err)
	}
	return lab.Config{
		Kernel: lf.kernel, Modules: lf.modules, Driver: lf.driver, Userland: lf.userland,
		Model: g.model, ServeArgs: serve, UpArgs: up, Files: files, Modems: lf.modems, NoSetup: lf.noSetup, Timeout: lf.timeout, MemoryMB: lf.memory,
		Mhictl: self, Console: cmd.OutOrStdout(), Log: cmd.ErrOrStderr(),
	}, nil
}

// exitStatusError makes mhictl exit with status after printing err (if
// any).
type exitStatusError struct {
	status int
	err    error
}

func (e *exitStatusError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.status)
	}
	return e.err.Error()
}

func (e *exitStatusError) Unwrap() error { return e.err }

func newLabCmd(g *globalFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "lab",
		Short: "Boot Linux against the mock modem in QEMU and run a script there",
		Long: `A hardware-free MHI test bench: the mock modem, served over vfio-user
('mhictl modem serve' in a process of its own), is a PCI device of a QEMU
guest whose Linux kernel drives it with its own MHI drivers. 'lab run' runs a
script in the guest and exits with its status; 'lab shell' gives the guest's
console to the terminal. See docs/LAB.md.`,
	}
	cmd.AddCommand(newLabRunCmd(g), newLabShellCmd(g))
	return cmd
}

func newLabRunCmd(g *globalFlags) *cobra.Command {
	var lf labFlags
	cmd := &cobra.Command{
		Use:   "run [flags] SCRIPT [ARGS...]",
		Short: "Run a shell script in a guest whose kernel drives the mock modem; exit with its status",
		Long: `Serves the mock modem (--model) to a QEMU guest, boots --kernel there with
Linux's MHI drivers (or, with --driver gomhi, gomhi's own host through the
guest's VFIO, as on a real modem), and runs SCRIPT (a shell script, copied in; busybox sh)
with ARGS once the modem's data interface is up. The guest's console is
streamed to standard output; the lab's own messages go to standard error.

The script sees LAB_NETDEV (the data interface, up with LAB_ADDR and the
peer LAB_PEER, an address the modem answers: ping and UDP echo on port 7),
LAB_PORTS (the control ports Linux created, /dev/wwan0mbim0…), LAB_MODEL,
LAB_DRIVER and LAB_KERNEL (the guest kernel's release); with --driver gomhi
also LAB_DEVICE (the modem's PCI address), LAB_UP_PID and LAB_UP_LOG ('mhictl
up' in the guest and its log), and LAB_PORTS are the control ports' links in
/run/gomhi/mhi0.

The exit status is the script's; 124 when --timeout passed; 125 when the
lab could not start or the guest never reached the script (git bisect run's
"skip"), so that

  git bisect run mhictl lab run --kernel arch/x86/boot/bzImage --modules DIR test.sh

bisects a kernel. Flags go before SCRIPT: what follows it is the script's.`,
		Example: `  mhictl lab run ping.sh
  mhictl lab run --kernel 6.12 --model telit-fn990 --json check.sh
  mhictl lab run --serve-args "--vectors 1" --timeout 5m test.sh arg1`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := lf.config(g, cmd)
			if err != nil {
				return &exitStatusError{lab.ExitLabFailed, err}
			}
			cfg.Script, cfg.Args = args[0], args[1:]
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			sum, err := lab.Run(ctx, cfg)
			if lf.jsonOut {
				if jerr := printLabSummary(cmd.OutOrStdout(), sum); jerr != nil && err == nil {
					err = jerr
				}
			} else if sum.Reason != "" && err == nil {
				fmt.Fprintf(cmd.ErrOrStderr(), "lab: %s\n", sum.Reason)
			}
			if err != nil {
				return &exitStatusError{lab.ExitLabFailed, fmt.Errorf("lab: %w", err)}
			}
			if sum.ExitStatus != 0 {
				return &exitStatusError{status: sum.ExitStatus}
			}
			return nil
		},
	}
	cmd.Flags().SetInterspersed(false)
	lf.register(cmd.Flags(), true)
	return cmd
}

func newLabShellCmd(g *globalFlags) *cobra.Command {
	var lf labFlags
	cmd := &cobra.Command{
		Use:   "shell [flags]",
		Short: "Boot the lab's guest with an interactive shell on the terminal",
		Long: `Boots the same guest as 'lab run' (the served mock modem, --kernel with
Linux's MHI drivers, the data interface up) and gives its console to the
terminal: a shell with LAB_NETDEV, LAB_ADDR, LAB_PEER, LAB_PORTS set. exit (or
busybox poweroff -f, or Ctrl-A X) ends the guest.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := lf.config(g, cmd)
			if err != nil {
				return &exitStatusError{lab.ExitLabFailed, err}
			}
			cfg.Shell = true
			if _, err := lab.Run(cmd.Context(), cfg); err != nil {
				return &exitStatusError{lab.ExitLabFailed, fmt.Errorf("lab: %w", err)}
			}
			return nil
		},
	}
	lf.register(cmd.Flags(), false)
	return cmd
}

// printLabSummary prints the run's summary as one JSON line.
func printLabSummary(w io.Writer, sum lab.Summary) error {
	b, err := json.Marshal(sum)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}
