package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/gomhi/gomhi/pcigeneric/mock"
	"github.com/spf13/cobra"
)

// globalFlags are the flags every command shares.
type globalFlags struct {
	model     string
	logLevel  string
	logFormat string
}

func newRootCmd() *cobra.Command {
	g := &globalFlags{}
	root := &cobra.Command{
		Use:           "mhictl",
		Short:         "Drive MHI modems and gomhi's mock modem",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().StringVar(&g.model, "model", "qcom-sdx55m", "modem model the embedded mock impersonates (see 'mhictl models')")
	root.PersistentFlags().StringVar(&g.logLevel, "log-level", "warn", "log level: debug, info, warn, error")
	root.PersistentFlags().StringVar(&g.logFormat, "log-format", logText, "log format: text, json, or journal (each line prefixed with its syslog priority for systemd-journald, no timestamp)")
	root.AddCommand(
		newLoopbackCmd(g),
		newRegdumpCmd(g),
		newStatusCmd(g),
		newModelsCmd(),
		newUpCmd(g),
		newModemCmd(g),
		newSetMRUCmd(),
		newSetMTUCmd(),
		newGetCmd(),
		newStatsCmd(),
		newConnectCmd(),
		newDisconnectCmd(),
		newListCmd(),
		newBindCmd(),
		newUnbindCmd(),
		newBenchCmd(g),
		newModelCmd(),
		newSoakCmd(g),
		newDeployCmd(),
		newGenManCmd(),
		newDumpCmd(g),
		newSuspendCmd(),
		newResumeCmd(),
		newLabCmd(g),
		newTranscriptCmd(),
	)
	return root
}

func (g *globalFlags) logger() (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(g.logLevel)); err != nil {
		return nil, fmt.Errorf("--log-level %q: %w", g.logLevel, err)
	}
	h, err := newLogHandler(os.Stderr, g.logFormat, lvl)
	if err != nil {
		return nil, err
	}
	return slog.New(h), nil
}

// openMock starts the embedded mock modem and a host controller for it and,
// with powerUp, brings the modem to M0. The caller closes the mock.
func (g *globalFlags) openMock(powerUp bool) (*mock.Mock, error) {
	log, err := g.logger()
	if err != nil {
		return nil, err
	}
	m, err := mock.Open(mock.Options{Model: g.model, Logger: log})
	if err != nil {
		return nil, err
	}
	if powerUp {
		if err := m.Controller.PowerUp(); err != nil {
			m.Close()
			return nil, err
		}
	}
	return m, nil
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
