package sweep

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/gomhi/gomhi/mhi/ep/ipdata"
	"github.com/gomhi/gomhi/mhi/proto/framing"
	"github.com/gomhi/gomhi/pcigeneric/mock"
)

// openTarget opens a powered-up mock and returns it as a Target whose
// modem is out of reach (IPData nil), as a modem in another process is.
func openTarget(t *testing.T, ipd ipdata.Config) *Target {
	t.Helper()
	m, err := mock.Open(mock.Options{Model: "telit-fn990", IPData: &ipd})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	if err := m.Controller.PowerUp(); err != nil {
		t.Fatal(err)
	}
	return &Target{Controller: m.Controller, Pair: m.DataPair}
}

// TestRunTarget: a sweep on a Target probes it first, runs in loopback
// mode only, and conserves every packet.
func TestRunTarget(t *testing.T) {
	o := Options{
		Model: "telit-fn990", Mode: Loopback, Format: framing.NTB16,
		Sizes: []int{64, 1500}, MRUs: []int{3500, 32768}, Packets: 2000, Iterations: 2,
		Target: openTarget(t, ipdata.Config{Format: framing.NTB16}),
	}
	rep, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Points) != 4 || !rep.Conserved() {
		t.Fatalf("%+v", rep)
	}
	for _, p := range rep.Points {
		if p.Sent != 4000 || p.Delivered != 4000 {
			t.Errorf("MRU %d size %d: sent %d delivered %d", p.MRU, p.Size, p.Sent, p.Delivered)
		}
	}

	o.Mode = Generator
	if _, err := Run(context.Background(), o); !errors.Is(err, ErrNoGenerator) {
		t.Errorf("generator mode on a Target: %v, want ErrNoGenerator", err)
	}
}

// TestRunTargetMismatch: a Target that answers instead of looping back, or
// frames differently, fails at the probe.
func TestRunTargetMismatch(t *testing.T) {
	for _, tc := range []struct {
		name   string
		modem  ipdata.Config
		format framing.Format
		want   string
	}{
		{"responder", ipdata.Config{Format: framing.NTB16, Responder: true}, framing.NTB16, "responder"},
		{"qmap-into-mbim", ipdata.Config{Format: framing.NTB16}, framing.QMAP, "nothing came back"},
		{"raw-into-qmap", ipdata.Config{Format: framing.QMAP}, framing.RawIP, "nothing came back"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Run(context.Background(), Options{
				Model: "telit-fn990", Mode: Loopback, Format: tc.format,
				Sizes: []int{64}, MRUs: []int{3500}, Packets: 10, Iterations: 1,
				Target: openTarget(t, tc.modem),
			})
			if !errors.Is(err, ErrModemMismatch) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%v, want ErrModemMismatch saying %q", err, tc.want)
			}
		})
	}
}
