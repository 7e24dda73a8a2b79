package main

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/gomhi/gomhi/internal/atomicfile"
	"github.com/gomhi/gomhi/sysfs/genl"
)

// 'mhictl dump DEV --out FILE' fetches the RAM dump of a device that a
// running 'mhictl up' (or the service) drives, over the netlink family's
// get-dump command; 'mhictl dump --out FILE' without DEV powers a modem up
// itself (boot.go).

// runningDumpFlags are the flags of the DEV form only.
type runningDumpFlags struct {
	crash bool
	port  uint32
}

// localOnlyDumpFlags configure the modem the form without DEV powers up;
// runningOnlyDumpFlags ask the running stack.
var (
	localOnlyDumpFlags   = []string{"device", "vfio-user", "firmware", "size", "boot-ee", "sbl-sha256", "model"}
	runningOnlyDumpFlags = []string{"crash", "netlink-port"}
)

func (f *runningDumpFlags) add(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.BoolVar(&f.crash, "crash", false, "with DEV: first make the device crash into RDDM and wait (--timeout) for the dump the running stack collects before it recovers the device; without --crash the last dump collected is fetched")
	fl.Uint32Var(&f.port, "netlink-port", 0, "with DEV: netlink port of the running `mhictl up` (default: the one its run file names, else 0x4d4849)")
}

// checkDumpForm refuses the flags of the other form: with DEV (running)
// the flags that configure a modem to power up, without it --crash and
// --netlink-port.
func checkDumpForm(cmd *cobra.Command, running bool) error {
	fl := cmd.Flags()
	if running {
		for _, name := range localOnlyDumpFlags {
			if fl.Changed(name) {
				return fmt.Errorf("--%s applies only without DEV, to a modem 'mhictl dump' powers up itself; with DEV the dump comes from the running stack that drives it", name)
			}
		}
		return nil
	}
	for _, name := range runningOnlyDumpFlags {
		if fl.Changed(name) {
			return fmt.Errorf("--%s applies only with DEV, a device of a running `mhictl up`; without DEV 'mhictl dump' powers a modem up and always crashes it", name)
		}
	}
	return nil
}

// runningDumpResult is what 'mhictl dump DEV' reports.
type runningDumpResult struct {
	Device string `json:"device"`
	File   string `json:"file"`
	Bytes  uint64 `json:"bytes"`
	SHA256 string `json:"sha256"`
	// Time is when the running stack collected the dump.
	Time time.Time `json:"time"`
	// Crashed: this command forced the crash the dump comes from.
	Crashed bool `json:"crashed"`
	Chunks  int  `json:"chunks"`
}

// runDumpRunning fetches dev's RAM dump from the running stack, checks it
// against the server's size and digest (the client does, and again here
// on the bytes written) and writes it to a new file out, mode 0600.
func runDumpRunning(cmd *cobra.Command, dev, out string, timeout time.Duration, jsonOut bool, f *runningDumpFlags) error {
	if err := checkDumpForm(cmd, true); err != nil {
		return err
	}
	if f.crash && (timeout <= 0 || timeout > genl.MaxDumpWaitMs*time.Millisecond) {
		return fmt.Errorf("--timeout %v: want 1ms..%v", timeout, genl.MaxDumpWaitMs*time.Millisecond)
	}
	// Refuse an existing file before the device is crashed for nothing.
	if _, err := os.Lstat(out); err == nil {
		return fmt.Errorf("--out %s: the file exists; 'mhictl dump DEV' writes a new file only (remove it or name another)", out)
	}
	c, err := genl.Dial(genl.ClientOptions{Port: f.port, Device: dev})
	if err != nil {
		return err
	}
	defer c.Close()
	d, err := c.Dump(dev, genl.DumpOptions{Crash: f.crash, Wait: timeout})
	if err != nil {
		if errors.Is(err, genl.ErrNoDump) && !f.crash {
			return fmt.Errorf("%w\n(--crash makes the device crash into RDDM and fetches the new dump)", err)
		}
		return err
	}
	if err := writeNewFile(out, d.Data); err != nil {
		return err
	}
	sum := sha256.Sum256(d.Data)
	if sum != d.SHA256 { // the client checked; this guards the code in between
		_ = os.Remove(out)
		return fmt.Errorf("%s: the dump's SHA-256 %x differs from the server's %x; %s removed", dev, sum, d.SHA256, out)
	}
	res := runningDumpResult{Device: dev, File: out, Bytes: d.Size, SHA256: hex.EncodeToString(sum[:]),
		Time: d.Time.UTC(), Crashed: d.Crashed, Chunks: d.Chunks}
	if jsonOut {
		return printJSON(cmd.OutOrStdout(), res)
	}
	how := "last dump"
	if d.Crashed {
		how = "dump after a forced crash into RDDM"
	}
	fmt.Fprintf(cmd.OutOrStdout(), "%s: %s of %d bytes, collected %s, written to %s, sha256 %s (matches the server's)\n",
		dev, how, res.Bytes, res.Time.Format(time.RFC3339Nano), out, res.SHA256)
	return nil
}

// writeNewFile writes b to a new file at path, mode 0600 whatever the
// umask: it refuses a path that exists (a symbolic link included, never
// followed), and the file appears under path only complete and synced
// (atomicfile, NoReplace); on failure nothing is left.
func writeNewFile(path string, b []byte) error {
	if err := atomicfile.WriteFile(path, b, 0o600, atomicfile.NoReplace|atomicfile.ExactPerm); err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	return nil
}
