package main

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/gomhi/gomhi/mhi"
	"github.com/gomhi/gomhi/mhi/loopback"
)

// loopbackFlags are the flags of 'mhictl loopback'.
type loopbackFlags struct {
	size, minSize, numTRE, maxTRE, count, dlBuf int
	jsonOut                                     bool
	timeout                                     time.Duration
	seed                                        uint64
	vfioUser                                    string
}

func newLoopbackCmd(g *globalFlags) *cobra.Command {
	var lf loopbackFlags
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
			if err := lf.validate(cmd); err != nil {
				return err
			}
			return lf.run(g, cmd.OutOrStdout())
		},
	}
	lf.register(cmd.Flags())
	return cmd
}

// register defines the flags on f.
func (lf *loopbackFlags) register(f *pflag.FlagSet) {
	f.IntVar(&lf.size, "size", 65536, "largest payload in bytes (1..65536)")
	f.IntVar(&lf.minSize, "min-size", 0, "smallest payload in bytes (default 1; equal to --size for a fixed size)")
	f.IntVar(&lf.numTRE, "num-tre", 0, "elements per transfer, chained (0: as few as the 65535-byte element limit allows)")
	f.IntVar(&lf.maxTRE, "max-tre", 0, "with --num-tre 0: a random number of chained elements per transfer, up to this many")
	f.IntVar(&lf.count, "count", 100, "number of payloads")
	f.IntVar(&lf.dlBuf, "dl-buffer", 32768, "size of each posted downlink buffer; longer echoes arrive over several elements")
	f.DurationVar(&lf.timeout, "timeout", 5*time.Second, "longest wait for one echo")
	f.Uint64Var(&lf.seed, "seed", 1, "payload generator seed")
	f.BoolVar(&lf.jsonOut, "json", false, "print the result as JSON")
	f.StringVar(&lf.vfioUser, "vfio-user", "", "use the mock modem another process serves on the vfio-user socket PATH instead of the embedded one")
}

// validate checks the flags before the modem is touched and fills in the
// --min-size default.
func (lf *loopbackFlags) validate(cmd *cobra.Command) error {
	if lf.minSize == 0 {
		lf.minSize = 1
	}
	if lf.dlBuf < 1 || lf.dlBuf > 0xFFFF {
		return fmt.Errorf("--dl-buffer %d: want 1..65535 bytes", lf.dlBuf)
	}
	if lf.count < 1 {
		return fmt.Errorf("--count %d: want at least 1", lf.count)
	}
	return checkModemSource(cmd, "", lf.vfioUser)
}

// run powers the modem up, runs the payloads through the LOOPBACK pair and
// prints the result to out.
func (lf *loopbackFlags) run(g *globalFlags, out io.Writer) error {
	ctrl, closeModem, err := lf.openModem(g)
	if err != nil {
		return err
	}
	defer closeModem()
	c, err := loopback.Open(ctrl, loopback.Options{DLBufferSize: lf.dlBuf, Timeout: lf.timeout, Seed: lf.seed})
	if err != nil {
		return err
	}
	defer c.Close()
	res, runErr := c.Run(loopback.RunOptions{Count: lf.count, MinSize: lf.minSize, MaxSize: lf.size, NumTRE: lf.numTRE, MaxTRE: lf.maxTRE})
	if err := lf.printResult(out, res); err != nil {
		return err
	}
	if runErr != nil {
		return runErr
	}
	if res.Mismatched > 0 || res.Received != res.Sent {
		return fmt.Errorf("loopback: %d of %d echoes mismatched, %d missing", res.Mismatched, res.Sent, res.Sent-res.Received)
	}
	return nil
}

// openModem opens the served modem (--vfio-user) or the embedded mock and
// returns its controller and the function that closes it.
func (lf *loopbackFlags) openModem(g *globalFlags) (*mhi.Controller, func(), error) {
	if lf.vfioUser != "" {
		log, err := g.logger()
		if err != nil {
			return nil, nil, err
		}
		r, err := openRemote(lf.vfioUser, "mhi0", log)
		if err != nil {
			return nil, nil, err
		}
		return r.Controller, func() { _ = r.Close() }, nil
	}
	m, err := g.openMock(true)
	if err != nil {
		return nil, nil, err
	}
	return m.Controller, func() { _ = m.Close() }, nil
}

// printResult prints res as JSON or as two lines of counts and rates.
func (lf *loopbackFlags) printResult(out io.Writer, res loopback.Result) error {
	if lf.jsonOut {
		return printJSON(out, res)
	}
	secs := res.Elapsed.Seconds()
	fmt.Fprintf(out, "sent %d, received %d, mismatched %d, timeouts %d, aborted %d\n", res.Sent, res.Received, res.Mismatched, res.Timeouts, res.Aborted)
	if secs > 0 {
		fmt.Fprintf(out, "%d bytes in %d elements, %.3f s: %.0f transfers/s, %.1f MB/s\n",
			res.Bytes, res.Elements, secs, float64(res.Received)/secs, float64(res.Bytes)/secs/1e6)
	}
	return nil
}
