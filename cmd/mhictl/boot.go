package main

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/gomhi/gomhi/internal/atomicfile"
	"github.com/gomhi/gomhi/mhi"
	"github.com/gomhi/gomhi/mhi/ep"
	"github.com/gomhi/gomhi/pcigeneric"
	"github.com/gomhi/gomhi/pcigeneric/mock"
	"github.com/gomhi/gomhi/pcigeneric/vfiouser"
	"github.com/gomhi/gomhi/pcigeneric/vfiouser/client"
	"github.com/gomhi/gomhi/sysfs/genl"
)

// bootFlags configure the mock modem's boot ROM ('mhictl modem serve',
// and the embedded mock of 'mhictl up' and 'mhictl dump').
type bootFlags struct {
	bootEE string
	sblSHA string
	rddm   bool
}

func (b *bootFlags) add(cmd *cobra.Command, withRDDM bool) {
	f := cmd.Flags()
	f.StringVar(&b.bootEE, "boot-ee", "amss", "execution environment the mock modem starts in: pbl (the host must download the boot loader over BHI, as Linux's fw image), sbl (boots on to AMSS by itself) or amss")
	f.StringVar(&b.sblSHA, "sbl-sha256", "", "with --boot-ee pbl: the SHA-256 (hex) the boot loader image must have; another image is refused (BHI error), \"\": any image")
	if withRDDM {
		f.BoolVar(&b.rddm, "rddm", false, "a crash (SYS_ERR) enters RDDM and serves a RAM dump over BHIe")
	}
}

// config returns the boot ROM configuration, logging every image as a
// "bhi_image" event to events.
func (b *bootFlags) config(events *slog.Logger) (ep.BootConfig, error) {
	start, err := ep.ParseBootStart(b.bootEE)
	if err != nil {
		return ep.BootConfig{}, fmt.Errorf("--boot-ee: %w", err)
	}
	bc := ep.BootConfig{Start: start, RDDM: b.rddm, OnImage: vfiouser.BootImageLogger(events)}
	if b.sblSHA != "" {
		sum, err := hex.DecodeString(b.sblSHA)
		if err != nil || len(sum) != sha256.Size {
			return ep.BootConfig{}, fmt.Errorf("--sbl-sha256 %q: want 64 hex digits", b.sblSHA)
		}
		bc.SBL.SHA256 = sum
	}
	return bc, nil
}

// newSuspendCmd and newResumeCmd move a device of a running 'mhictl up'
// to M3 and back through the control plane.
func newSuspendCmd() *cobra.Command {
	return newPMCmd("suspend", "Suspend a device of a running `mhictl up` (M0 to M3; needs root or CAP_NET_ADMIN)", genl.PMRequestSuspend)
}

func newResumeCmd() *cobra.Command {
	return newPMCmd("resume", "Resume a device of a running `mhictl up` (M3 to M0; needs root or CAP_NET_ADMIN)", genl.PMRequestResume)
}

func newPMCmd(use, short string, req uint32) *cobra.Command {
	d := &dialFlags{}
	var auto time.Duration
	cmd := &cobra.Command{
		Use:   use + " DEV",
		Short: short,
		Long: short + `.

The channels keep their state across M3; data queued meanwhile waits for
the resume. --autosuspend sets the idle time after which the host suspends
the device by itself and resumes it when a channel has work (0 turns it
off), as the attribute devices/DEV/autosuspend_ms does.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := d.dial(args[0])
			if err != nil {
				return err
			}
			defer c.Close()
			r := genl.SetRequest{PMRequest: &req}
			if cmd.Flags().Changed("autosuspend") {
				if auto < 0 || auto > time.Hour {
					return fmt.Errorf("--autosuspend %v: want 0..1h", auto)
				}
				ms := uint32(auto.Milliseconds())
				r.AutosuspendMs = &ms
			}
			dev, err := c.SetDevice(args[0], r)
			if err != nil {
				return err
			}
			if d.json {
				return printJSON(cmd.OutOrStdout(), dev)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: %s, ee %s, autosuspend %d ms\n", dev.Name, dev.State, dev.EE, dev.AutosuspendMs)
			return nil
		},
	}
	cmd.Flags().DurationVar(&auto, "autosuspend", 0, "also set the auto-suspend idle time (0: off)")
	d.add(cmd)
	return cmd
}

// dumpResult is what 'mhictl dump' reports.
type dumpResult struct {
	Device string `json:"device"`
	Model  string `json:"model"`
	File   string `json:"file"`
	Bytes  int    `json:"bytes"`
	SHA256 string `json:"sha256"`
}

// dumpFlags are the flags of 'mhictl dump'.
type dumpFlags struct {
	out, device, vfioUser, fwDir string
	size                         int
	timeout                      time.Duration
	jsonOut                      bool
	boot                         bootFlags
	running                      runningDumpFlags // dump_running.go
}

func newDumpCmd(g *globalFlags) *cobra.Command {
	var df dumpFlags
	cmd := &cobra.Command{
		Use:   "dump [DEV] --out FILE",
		Short: "Write a modem's RAM dump (RDDM) to a file: from a running stack (DEV), or after crashing a modem it powers up",
		Long: `With DEV, fetches the RAM dump of device DEV of a running 'mhictl up' (or
the service) over its netlink family: the last dump the stack collected
when the device crashed into RDDM (enabled by 'mhictl up --rddm-size'), or,
with --crash, a new one: the device (resumed first if suspended) is made
to crash into RDDM, the running stack collects the dump (waiting up to
--timeout) and recovers the device as after any crash. It needs root or
CAP_NET_ADMIN (a dump holds the modem's memory). The dump arrives in
chunks, is checked against the stack's size and SHA-256 and written to a
new file --out (mode 0600; an existing file is refused, never
overwritten); its size, SHA-256 and collection time are printed. --device, --vfio-user, --firmware, --size,
--boot-ee, --sbl-sha256 and --model do not apply.

Without DEV, powers the modem up (downloading its firmware from --firmware when it boots
in PBL), asks it to crash into RAM-dump mode (MHICTRL state SYS_ERR, as
Linux's mhi_force_rddm_mode), collects the dump it serves over BHIe into a
receive vector table of --size bytes, writes it to --out and prints its size
and SHA-256; the modem is then reset and recovered. The modem is the
embedded mock (--model, with RDDM enabled), a real one bound to vfio-pci
(--device ADDR) or one served over vfio-user (--vfio-user PATH, served with
'mhictl modem serve --rddm'). --out is written as by a plain write (created
0600, or truncated). --crash and --netlink-port do not apply.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if df.out == "" {
				return errors.New("--out is required")
			}
			if len(args) == 1 {
				return runDumpRunning(cmd, args[0], df.out, df.timeout, df.jsonOut, &df.running)
			}
			if err := df.validateLocal(cmd); err != nil {
				return err
			}
			return df.runLocal(g, cmd.OutOrStdout())
		},
	}
	df.register(cmd.Flags())
	df.boot.add(cmd, false)
	df.running.add(cmd)
	return cmd
}

// register defines the flags on f (the boot and running-stack flags are
// added by bootFlags and runningDumpFlags).
func (df *dumpFlags) register(f *pflag.FlagSet) {
	f.StringVar(&df.out, "out", "", "file to write the RAM dump to (created 0600; with DEV a new file only)")
	f.StringVar(&df.device, "device", "", "a real modem at PCI address ADDR, bound to vfio-pci")
	f.StringVar(&df.vfioUser, "vfio-user", "", "the mock modem served on the vfio-user socket PATH")
	f.StringVar(&df.fwDir, "firmware", "", "directory with the images the model's table entry names (qcom/sdx55m/sbl1.mbn…), for a modem booting in PBL")
	f.IntVar(&df.size, "size", 4<<20, "bytes of host memory offered for the dump")
	f.DurationVar(&df.timeout, "timeout", 20*time.Second, "longest wait for the dump")
	f.BoolVar(&df.jsonOut, "json", false, "print the result as JSON")
}

// validateLocal checks the flags of the form without DEV, which powers a
// modem up itself.
func (df *dumpFlags) validateLocal(cmd *cobra.Command) error {
	if err := checkDumpForm(cmd, false); err != nil {
		return err
	}
	return checkModemSource(cmd, df.device, df.vfioUser, "boot-ee", "sbl-sha256")
}

// runLocal powers the modem up, crashes it into RDDM, writes the dump it
// serves to --out and prints the result to out.
func (df *dumpFlags) runLocal(g *globalFlags, out io.Writer) error {
	log, err := g.logger()
	if err != nil {
		return err
	}
	ctrl, model, closeModem, err := df.openModem(g.model, log)
	if err != nil {
		return err
	}
	defer func() { _ = closeModem() }()
	if err := ctrl.PowerUp(); err != nil {
		return err
	}
	dump, err := ctrl.CollectDump(df.timeout)
	if err != nil {
		return err
	}
	// Replaces an existing --out (the form without DEV always has), but
	// only once the whole dump is on disk: never a truncated file.
	if err := atomicfile.WriteFile(df.out, dump, 0o600, atomicfile.ExactPerm); err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	sum := sha256.Sum256(dump)
	res := dumpResult{Device: ctrl.Name(), Model: model, File: df.out, Bytes: len(dump), SHA256: hex.EncodeToString(sum[:])}
	if df.jsonOut {
		return printJSON(out, res)
	}
	fmt.Fprintf(out, "%s (%s): RAM dump of %d bytes written to %s, sha256 %s\n", res.Device, res.Model, res.Bytes, res.File, res.SHA256)
	return nil
}

// openModem opens the modem the flags name, with a receive vector table
// of --size bytes for the dump: a real one (--device), a served one
// (--vfio-user) or the embedded mock of model with RDDM enabled. It
// returns the controller, the model's name and the function that closes
// the modem.
func (df *dumpFlags) openModem(model string, log *slog.Logger) (*mhi.Controller, string, func() error, error) {
	switch {
	case df.device != "":
		p, err := pcigeneric.OpenPassthrough(df.device, pcigeneric.PassthroughOptions{Name: "mhi0", Logger: log, FirmwareDir: df.fwDir, RDDMSize: df.size})
		if err != nil {
			return nil, "", nil, err
		}
		return p.Controller, p.Modem.Info.Name, p.Close, nil
	case df.vfioUser != "":
		r, err := client.Open(df.vfioUser, client.OpenOptions{Name: "mhi0", Logger: log, FirmwareDir: df.fwDir, RDDMSize: df.size})
		if err != nil {
			return nil, "", nil, err
		}
		return r.Controller, r.Info.Name, r.Close, nil
	default:
		df.boot.rddm = true
		bc, err := df.boot.config(log)
		if err != nil {
			return nil, "", nil, err
		}
		m, err := mock.Open(mock.Options{Model: model, Name: "mhi0", Logger: log,
			FirmwareDir: df.fwDir, RDDMSize: df.size, Device: func(c *ep.Config) { c.Boot = bc }})
		if err != nil {
			return nil, "", nil, err
		}
		return m.Controller, m.Info.Name, m.Close, nil
	}
}
