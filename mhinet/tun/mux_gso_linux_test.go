package tun_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhi"
	"github.com/gomhi/gomhi/mhi/ep/ipdata"
	"github.com/gomhi/gomhi/mhi/proto/framing"
	"github.com/gomhi/gomhi/mhi/testenv/poll"
	"github.com/gomhi/gomhi/mhinet"
	"github.com/gomhi/gomhi/mhinet/mhinettest"
	"github.com/gomhi/gomhi/mhinet/tun"
)

// Session 1's bridge on a TUN with virtio_net_hdr: its TCP super-packet
// is cut (TransmitGSOSession) and goes out on session 1, and its 42
// segments come back to session 1 only, while session 0's plain packets
// stay on session 0.
func TestMuxBridgeGSOSession(t *testing.T) {
	td0, td1 := tun.NewChannelTUN(), tun.NewChannelTUN()
	td1.VnetHdr = true
	var mux *tun.Mux
	var b0 *tun.Bridge
	cfg := mhinet.Config{Format: framing.NTB16, Session: 112, TXAggregate: true}
	r := mhinettest.New(t, mhinettest.Options{Model: "telit-fn990", IPData: &ipdata.Config{Format: framing.NTB16},
		DataFunction: &mhinettest.Echo{}, Net: &cfg,
		Connect: func(ctrl *mhi.Controller, cfg mhinet.Config) (dev *mhinet.Device, err error) {
			mux, b0, dev, err = tun.ConnectMux(td0, ctrl, cfg, tun.BridgeConfig{BusyTimeout: 10 * time.Second})
			return dev, err
		}})
	b1, err := tun.AddSession(mux, r.Net, td1, tun.BridgeConfig{Session: 1, BusyTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range []*tun.Bridge{b0, b1} {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- b.Run(ctx) }()
		t.Cleanup(func() { cancel(); <-done })
	}
	payload := make([]byte, 60000)
	td1.FromStack <- tcpSuperFrame(payload, 1460, 1000)
	for i := range uint32(10) {
		td0.FromStack <- ipv4(200, i)
	}
	const segs = 42
	var s0, s1 tun.SessionStats
	poll.Wait(t, 10*time.Second, func() bool {
		s0, _ = mux.SessionStats(0)
		s1, _ = mux.SessionStats(1)
		return s0.RxPackets >= 10 && s1.RxPackets >= segs
	}, func() string { return fmt.Sprintf("session 0 %+v, session 1 %+v, mux %+v", s0, s1, mux.Stats()) })
	if s0.RxPackets != 10 || s1.RxPackets != segs || s1.TxPackets != 1 || s0.TxPackets != 10 || mux.Stats().UnknownSession != 0 {
		t.Fatalf("session 0 %+v, session 1 %+v, mux %+v", s0, s1, mux.Stats())
	}
}
