package main

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/spf13/cobra"

	"github.com/gomhi/gomhi/cmd/mhictl/internal/sweep"
	"github.com/gomhi/gomhi/mhi/ep"
	"github.com/gomhi/gomhi/mhi/ep/ipdata"
	"github.com/gomhi/gomhi/mhi/proto/framing"
	"github.com/gomhi/gomhi/mhi/proto/qmap"
	"github.com/gomhi/gomhi/mhinet"
	"github.com/gomhi/gomhi/pcigeneric"
	"github.com/gomhi/gomhi/pcigeneric/vfiouser/client"
)

// errExclusive: flags that pick, or configure, different modems were given
// together.
var errExclusive = errors.New("mutually exclusive flags")

// errNeedsQMAP refuses QMAP settings on another framing.
var errNeedsQMAP = errors.New("flag needs --format qmap")

// checkModemSource checks that at most one modem is chosen: the in-process
// mock (the default, --model picks what it impersonates), a real modem
// through VFIO (--device) or a mock modem served by another process
// (--vfio-user). mockOnly names flags that configure the in-process mock
// and so cannot go with the other two.
func checkModemSource(cmd *cobra.Command, device, vfioUser string, mockOnly ...string) error {
	if device != "" && vfioUser != "" {
		return fmt.Errorf("--device and --vfio-user: %w: one modem at a time", errExclusive)
	}
	other := ""
	switch {
	case device != "":
		other = "--device"
	case vfioUser != "":
		other = "--vfio-user"
	default:
		return nil
	}
	fl := cmd.Flags()
	if fl.Changed("model") {
		return fmt.Errorf("--model and %s: %w: --model picks the in-process mock's model; with %s the model is the one the modem's IDs name", other, errExclusive, other)
	}
	for _, name := range mockOnly {
		if fl.Changed(name) {
			hint := ""
			if vfioUser != "" {
				hint = " (configure the served modem with 'mhictl modem serve' flags)"
			}
			return fmt.Errorf("--%s and %s: %w: --%s configures the in-process mock%s", name, other, errExclusive, name, hint)
		}
	}
	return nil
}

// qmapCsumSetting checks a --qmap-csum value against the data framing:
// anything but none needs QMAP.
func qmapCsumSetting(value string, format framing.Format) (qmap.CsumMode, error) {
	mode, err := qmap.ParseCsumMode(value)
	if err != nil {
		return mode, fmt.Errorf("--qmap-csum: %w", err)
	}
	if mode != qmap.CsumNone && format != framing.QMAP {
		return mode, fmt.Errorf("--qmap-csum %s: %w (the data channel uses %s)", value, errNeedsQMAP, format)
	}
	return mode, nil
}

// openRemote connects to the modem served on the vfio-user socket path and
// powers it up; the caller closes it.
func openRemote(path, name string, log *slog.Logger) (*client.Remote, error) {
	r, err := client.Open(path, client.OpenOptions{Name: name, Logger: log})
	if err != nil {
		return nil, err
	}
	if err := r.Controller.PowerUp(); err != nil {
		_ = r.Close()
		return nil, err
	}
	return r, nil
}

// ipModes are the --ip-mode values of 'mhictl modem serve'.
var ipModes = []string{"responder", "loopback", "generator"}

// servedIPData is the IP data function configuration of 'mhictl modem
// serve'.
type servedIPData struct {
	mode, format, qmapCsum     string
	maxDatagrams, maxAggregate int
	genCount                   int
	genRate                    float64
	genSizes                   []int
}

// build validates the flags for model and returns the function's
// configuration, the host framing it matches, and, in generator mode, the
// generator run each session starts (nil otherwise).
func (s *servedIPData) build(model string) (ipdata.Config, framing.Format, *ipdata.GeneratorConfig, error) {
	info, ok := pcigeneric.Model(model)
	if !ok {
		return ipdata.Config{}, 0, nil, fmt.Errorf("--model %q: %w (see 'mhictl models')", model, pcigeneric.ErrUnknownModel)
	}
	pair := pcigeneric.DataPair(info.Config)
	format := pcigeneric.PairFormat(pair)
	if s.format != "" {
		var err error
		if format, err = framing.Parse(s.format); err != nil {
			return ipdata.Config{}, 0, nil, fmt.Errorf("--format: %w", err)
		}
	}
	csum, err := qmapCsumSetting(s.qmapCsum, format)
	if err != nil {
		return ipdata.Config{}, 0, nil, err
	}
	mode := strings.ToLower(s.mode)
	switch mode {
	case "responder", "loopback", "generator":
	default:
		return ipdata.Config{}, 0, nil, fmt.Errorf("--ip-mode %q: want %s", s.mode, strings.Join(ipModes, ", "))
	}
	if s.maxDatagrams < 0 || s.maxAggregate < 0 {
		return ipdata.Config{}, 0, nil, fmt.Errorf("--max-datagrams %d, --max-aggregate %d: want 0 (the modem's default) or more", s.maxDatagrams, s.maxAggregate)
	}
	cfg := ipdata.Config{
		// A generator returns to this mode when a --gen-count run ends:
		// answering, as a modem's network would, rather than looping the
		// host's own packets back.
		Format: format, QMAPCsum: csum, Responder: mode == "responder" || mode == "generator",
		MaxDatagrams: s.maxDatagrams, MaxAggregate: s.maxAggregate,
	}
	if _, err := ipdata.New(cfg); err != nil {
		return ipdata.Config{}, 0, nil, err
	}
	if mode != "generator" {
		return cfg, format, nil, nil
	}
	if s.genCount < 0 || s.genRate < 0 {
		return ipdata.Config{}, 0, nil, fmt.Errorf("--gen-count %d, --gen-rate %g: want 0 (unbounded) or more", s.genCount, s.genRate)
	}
	// Every size must fit one of the modem's aggregates; the sweep's
	// validation applies the same rule.
	check := sweep.Options{Model: info.Name, Format: format, Sizes: s.genSizes, MRUs: []int{mhinet.DefaultMRU}, MaxAggregate: s.maxAggregate}
	if err := check.Validate(); err != nil {
		return ipdata.Config{}, 0, nil, fmt.Errorf("--gen-size: %w", err)
	}
	return cfg, format, &ipdata.GeneratorConfig{Count: s.genCount, Rate: s.genRate, Sizes: s.genSizes}, nil
}

// generatorOnAttach is an IP data function that starts its generator as
// soon as the device attaches it: a served modem in generator mode sends
// downlink packets whenever its client posts buffers, for the whole
// session.
type generatorOnAttach struct {
	*ipdata.Function
	gen ipdata.GeneratorConfig
	log *slog.Logger
}

// Attach implements ep.PipeAttacher.
func (g generatorOnAttach) Attach(p *ep.Pipe) {
	g.Function.Attach(p)
	if err := g.StartGenerator(g.gen); err != nil {
		g.log.Error("error", "err", fmt.Sprintf("starting the generator: %v", err))
	}
}
