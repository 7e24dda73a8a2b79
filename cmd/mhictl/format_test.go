package main

import (
	"strings"
	"testing"

	"github.com/gomhi/gomhi/mhi/proto/framing"
	"github.com/gomhi/gomhi/pcigeneric"
)

// TestFormatFlag: every --format spelling gives 'mhictl up' and 'mhictl
// modem serve' the same framing for the host and the mock modem; without
// --format both take the data pair's own.
func TestFormatFlag(t *testing.T) {
	for _, c := range []struct {
		model, flag string
		want        framing.Format
	}{
		{"telit-fn990", "", framing.NTB16},
		{"qcom-sdx55m", "", framing.RawIP},
		{"telit-fn990", "raw", framing.RawIP},
		{"qcom-sdx55m", "RawIP", framing.RawIP},
		{"qcom-sdx55m", "ip", framing.RawIP},
		{"qcom-sdx55m", "mbim", framing.NTB16},
		{"telit-fn990", "ntb", framing.NTB16},
		{"telit-fn990", "ntb16", framing.NTB16},
		{"telit-fn990", "ntb32", framing.NTB32},
		{"qcom-sdx55m", "qmap", framing.QMAP},
		{"qcom-sdx55m", "rmnet", framing.QMAP},
	} {
		info, ok := pcigeneric.Model(c.model)
		if !ok {
			t.Fatalf("model %s", c.model)
		}
		d, err := dataSettings(info, &upFlags{format: c.flag, qmapCsum: "none"})
		if err != nil || d.format != c.want {
			t.Errorf("up --model %s --format %q: %v, %v; want %v", c.model, c.flag, d.format, err, c.want)
		}
		s := servedIPData{mode: "loopback", format: c.flag, qmapCsum: "none"}
		cfg, host, _, err := s.build(c.model)
		if err != nil || host != c.want || cfg.Format != c.want {
			t.Errorf("modem serve --model %s --format %q: host %v, modem %v, %v; want %v", c.model, c.flag, host, cfg.Format, err, c.want)
		}
	}
	info, _ := pcigeneric.Model("telit-fn990")
	if _, err := dataSettings(info, &upFlags{format: "ppp", qmapCsum: "none"}); err == nil || !strings.Contains(err.Error(), `--format: framing: unknown format "ppp"`) {
		t.Errorf("up --format ppp: %v", err)
	}
}
