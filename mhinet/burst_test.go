package mhinet_test

import (
	"errors"
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhi/ep/ipdata"
	"github.com/gomhi/gomhi/mhi/proto/framing"
	"github.com/gomhi/gomhi/mhi/testenv/poll"
	"github.com/gomhi/gomhi/mhinet"
)

// Regression: in burst mode a doorbell noticed in the middle of the
// modem's uplink work used to be consumed without starting its polling,
// so the uplink stalled once the host went on updating only the context
// write pointer. Many short runs catch the race.
func TestBurstModeNoStall(t *testing.T) {
	runs := 150
	if testing.Short() {
		runs = 20
	}
	for it := 0; it < runs; it++ {
		r := newIPRig(t, "telit-fn990", ipdata.Config{Format: framing.NTB16}, mhinet.Config{Format: framing.NTB16, MRU: 3500, TXAggregate: true})
		pkts := make([][]byte, 64)
		for i := range pkts {
			pkts[i] = ipv4(64, uint32(i))
		}
		for sent := 0; sent < 5000; {
			k, err := r.dev.Transmit(pkts[:min(64, 5000-sent)])
			sent += k
			if errors.Is(err, mhinet.ErrBusy) {
				time.Sleep(5 * time.Microsecond)
			}
		}
		poll.Until(3*time.Second, func() bool { return r.rx.count() >= 5000 })
		if r.rx.count() < 5000 {
			t.Logf("iteration %d: got %d", it, r.rx.count())
			r.dump(t)
			ul, _, _ := r.mock.Controller.ChannelPair(r.mock.DataPair)
			t.Logf("uplink: %+v", ul.Status())
			t.Logf("modem channels: %+v", r.mock.Transport.Device().Status().Channels)
			t.Logf("ipdata: %+v", r.mock.IPData.Stats())
			t.FailNow()
		}
	}
}
