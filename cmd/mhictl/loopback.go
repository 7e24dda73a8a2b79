package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/gomhi/gomhi/mhi"
	"github.com/gomhi/gomhi/mhi/loopback"
)

func newLoopbackCmd(g *globalFlags) *cobra.Command {
	var (
		size, minSize, numTRE, maxTRE, count, dlBuf int
		jsonOut                                     bool
		timeout                                     time.Duration
		seed                                        uint64
		vfioUser                                    string
	)
	cmd := &cobra.Command{
		Use:   "loopback",
		Short: "Send payloads over the LOOPBACK channels and compare the echoes",
		Long: `Powers up the modem, starts the LOOPBACK channel pair (0/1) and sends
--count payloads of random bytes, each echoed back by the modem and compared
byte for byte. Payload sizes are random in [--min-size, --size] (default: 1
to --size). Exits non-zero on any mismatch or timeout.

The modem is the embedded mock (--model), or with --vfio-user the mock modem
another process serves ('mhictl modem serve --socket PATH').`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if minSize == 0 {
				minSize = 1
			}
			if dlBuf < 1 || dlBuf > 0xFFFF {
				return fmt.Errorf("--dl-buffer %d: want 1..65535 bytes", dlBuf)
			}
			if count < 1 {
				return fmt.Errorf("--count %d: want at least 1", count)
			}
			if err := checkModemSource(cmd, "", vfioUser); err != nil {
				return err
			}
			var ctrl *mhi.Controller
			if vfioUser != "" {
				log, err := g.logger()
				if err != nil {
					return err
				}
				r, err := openRemote(vfioUser, "mhi0", log)
				if err != nil {
					return err
				}
				defer r.Close()
				ctrl = r.Controller
			} else {
				m, err := g.openMock(true)
				if err != nil {
					return err
				}
				defer m.Close()
				ctrl = m.Controller
			}
			c, err := loopback.Open(ctrl, loopback.Options{DLBufferSize: dlBuf, Timeout: timeout, Seed: seed})
			if err != nil {
				return err
			}
			defer c.Close()
			res, runErr := c.Run(loopback.RunOptions{Count: count, MinSize: minSize, MaxSize: size, NumTRE: numTRE, MaxTRE: maxTRE})
			out := cmd.OutOrStdout()
			if jsonOut {
				if err := printJSON(out, res); err != nil {
					return err
				}
			} else {
				secs := res.Elapsed.Seconds()
				fmt.Fprintf(out, "sent %d, received %d, mismatched %d, timeouts %d, aborted %d\n", res.Sent, res.Received, res.Mismatched, res.Timeouts, res.Aborted)
				if secs > 0 {
					fmt.Fprintf(out, "%d bytes in %d elements, %.3f s: %.0f transfers/s, %.1f MB/s\n",
						res.Bytes, res.Elements, secs, float64(res.Received)/secs, float64(res.Bytes)/secs/1e6)
				}
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
	f.IntVar(&size, "size", 65536, "largest payload in bytes (1..65536)")
	f.IntVar(&minSize, "min-size", 0, "smallest payload in bytes (default 1; equal to --size for a fixed size)")
	f.IntVar(&numTRE, "num-tre", 0, "elements per transfer, chained (0: as few as the 65535-byte element limit allows)")
	f.IntVar(&maxTRE, "max-tre", 0, "with --num-tre 0: a random number of chained elements per transfer, up to this many")
	f.IntVar(&count, "count", 100, "number of payloads")
	f.IntVar(&dlBuf, "dl-buffer", 32768, "size of each posted downlink buffer; longer echoes arrive over several elements")
	f.DurationVar(&timeout, "timeout", 5*time.Second, "longest wait for one echo")
	f.Uint64Var(&seed, "seed", 1, "payload generator seed")
	f.BoolVar(&jsonOut, "json", false, "print the result as JSON")
	f.StringVar(&vfioUser, "vfio-user", "", "use the mock modem another process serves on the vfio-user socket PATH instead of the embedded one")
	return cmd
}
