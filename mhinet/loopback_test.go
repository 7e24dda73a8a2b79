package mhinet_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhi"
	"github.com/gomhi/gomhi/mhi/ep/ipdata"
	"github.com/gomhi/gomhi/mhi/proto/framing"
	"github.com/gomhi/gomhi/mhinet"
	"github.com/gomhi/gomhi/mhinet/mhinettest"
)

// formats are the framings the host and the mock modem both speak.
var formats = []struct {
	name string
	f    framing.Format
}{
	{"raw", framing.RawIP},
	{"ntb16", framing.NTB16},
	{"ntb32", framing.NTB32},
	{"qmap", framing.QMAP},
}

// newIPRig builds the mock modem of model with dev as its IP data
// function, and a device with cfg on its data pair delivering to a
// collector.
func newIPRig(t *testing.T, model string, dev ipdata.Config, cfg mhinet.Config) *rig {
	t.Helper()
	rx := newCollector()
	r := mhinettest.New(t, mhinettest.Options{Model: model, IPData: &dev, Net: &cfg, Receiver: rx})
	return &rig{mock: r.Mock, dev: r.Net, rx: rx}
}

func transmitAll(t *testing.T, d *mhinet.Device, pkts [][]byte) {
	t.Helper()
	// Not poll: a send loop that makes progress each round; poll's pauses made the tests four times slower.
	deadline := time.Now().Add(10 * time.Second)
	for sent := 0; sent < len(pkts); {
		n, err := d.Transmit(pkts[sent:])
		sent += n
		if err != nil && !errors.Is(err, mhinet.ErrBusy) {
			t.Fatal(err)
		}
		if errors.Is(err, mhinet.ErrBusy) {
			if time.Now().After(deadline) {
				t.Fatalf("transmit stuck after %d packets", sent)
			}
			time.Sleep(100 * time.Microsecond)
		}
	}
}

// The whole path: host TX → modem internal loopback with aggregation →
// host RX over chained small buffers → packets, in every format; every
// packet arrives once and the counters agree on both sides.
func TestInternalLoopbackAllFormats(t *testing.T) {
	for _, f := range formats {
		for _, mru := range []int{1024, 3500, 32768} {
			for _, agg := range []bool{false, true} {
				if agg && f.f == framing.RawIP {
					continue
				}
				name := f.name
				if agg {
					name += "-txagg"
				}
				t.Run(name+"-"+itoa(mru), func(t *testing.T) {
					r := newIPRig(t, "telit-fn990", ipdata.Config{Format: f.f},
						mhinet.Config{Format: f.f, MRU: mru, TXAggregate: agg})
					const n = 3000
					var pkts [][]byte
					for i := 0; i < n; i++ {
						pkts = append(pkts, ipv4(40+(i*37)%1460, uint32(i)))
					}
					transmitAll(t, r.dev, pkts)
					if !r.rx.waitFor(t, n) {
						r.dump(t)
						t.FailNow()
					}
					s := r.dev.Stats()
					ds := r.mock.IPData.Stats()
					if len(r.rx.seqs) != n || r.rx.bad != 0 || s.RxErrors+s.RxDropped+s.TxErrors+s.TxDropped != 0 || ds.Dropped() != 0 || ds.DeaggErrors() != 0 {
						t.Fatalf("distinct %d bad %d host %+v modem %+v", len(r.rx.seqs), r.rx.bad, s, ds)
					}
					if f.f != framing.RawIP && ds.AvgDatagrams() < 2 {
						t.Errorf("modem aggregated only %.1f packets per transfer", ds.AvgDatagrams())
					}
					if mru < 1500 && s.RxChains == 0 {
						t.Errorf("no chained receive with MRU %d", mru)
					}
				})
			}
		}
	}
}

// The generator: N packets, all delivered, per format.
func TestGenerator(t *testing.T) {
	for _, f := range formats {
		t.Run(f.name, func(t *testing.T) {
			r := newIPRig(t, "telit-fn990", ipdata.Config{Format: f.f}, mhinet.Config{Format: f.f, MRU: 3500})
			const n = 20000
			if err := r.mock.IPData.StartGenerator(ipdata.GeneratorConfig{Count: n, Sizes: []int{64, 1263, 1500}}); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if sent, err := r.mock.IPData.WaitGenerator(ctx); err != nil || sent != n {
				t.Fatalf("generator sent %d: %v", sent, err)
			}
			if !r.rx.waitFor(t, n) {
				r.dump(t)
				t.FailNow()
			}
			if s := r.dev.Stats(); s.RxPackets != n || s.RxErrors != 0 {
				t.Fatalf("%+v", s)
			}
		})
	}
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}

// After SYS_ERR the device refills its ring once the controller recovered,
// and traffic flows again; what was in flight is counted, not lost silently.
func TestRecoversFromSysErr(t *testing.T) {
	r := newIPRig(t, "telit-fn990", ipdata.Config{Format: framing.NTB16}, mhinet.Config{Format: framing.NTB16, MRU: 3500})
	recovered := make(chan struct{}, 1)
	r.mock.Controller.OnStatus(func(ev mhi.StatusEvent) {
		if ev.Kind == mhi.StatusRecovered {
			recovered <- struct{}{}
		}
	})
	run := func(n int) {
		t.Helper()
		base := r.rx.count()
		if err := r.mock.IPData.StartGenerator(ipdata.GeneratorConfig{Count: n, Sizes: []int{700}}); err != nil {
			t.Fatal(err)
		}
		if !r.rx.waitFor(t, base+n) {
			r.dump(t)
			t.FailNow()
		}
	}
	run(2000)
	r.mock.Transport.Device().InjectSysErr()
	select {
	case <-recovered:
	case <-time.After(5 * time.Second):
		t.Fatal("no recovery")
	}
	run(2000)
	if s := r.dev.Stats(); s.Recoveries != 1 || s.RxErrors != 0 {
		t.Fatalf("%+v", s)
	}
}
