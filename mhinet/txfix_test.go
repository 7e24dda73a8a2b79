package mhinet_test

import (
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhi/ep/ipdata"
	"github.com/gomhi/gomhi/mhi/proto/framing"
	"github.com/gomhi/gomhi/mhi/wire"
	"github.com/gomhi/gomhi/mhinet"
	"github.com/gomhi/gomhi/pcigeneric/mock"
)

// With TXAggTimeout < 0 no timer runs: the aggregate leaves at the end of
// each call. That holds for TransmitZC's copy fallback too, not only for
// Transmit.
func TestZCFallbackAggregateLeavesWithNegativeTimeout(t *testing.T) {
	m, err := mock.Open(mock.Options{Model: mock.DefaultModel,
		IPData: &ipdata.Config{Format: framing.QMAP, Shape: ipdata.ShapeConfig{UDPPort: shapedPort, Rate: 0.001}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	if err := m.Controller.PowerUp(); err != nil {
		t.Fatal(err)
	}
	d, err := mhinet.New(m.Controller, mhinet.Config{Pair: m.DataPair, Format: framing.QMAP, TXAggregate: true,
		TXAggTimeout: -1, TXZeroCopy: true}, newUDPCollector())
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Up(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Down() })
	reg, err := d.ZeroCopyRegion()
	if err != nil {
		t.Fatal(err)
	}
	if err := m.IPData.SetLendRegion(reg); err != nil {
		t.Fatal(err)
	}
	ul, _, _ := m.Controller.ChannelPair(m.DataPair)
	half := ul.Config().Elements / 2
	// The modem holds every shaped slot: the first half ring goes
	// zero-copy, the next packet is copied into an aggregate.
	for i := range half + 1 {
		b, err := d.TXBuffer()
		if err != nil {
			t.Fatal(err)
		}
		b.SetLen(len(udp4(b.Bytes(), 200, shapedPort, uint32(i))))
		transmitZC(t, d, b)
	}
	s := d.Stats()
	if s.TxZeroCopyFallback != 1 || s.TxAggPending != 0 || s.TxQueued != uint64(half+1) {
		t.Fatalf("after the call: fallback %d, aggregate pending %d, queued %d (want 1, 0, %d)",
			s.TxZeroCopyFallback, s.TxAggPending, s.TxQueued, half+1)
	}
	waitStats(t, d, "every packet consumed", func(s mhinet.Stats) bool { return s.TxPackets == uint64(half+1) })
}

// Transmit checks a packet against the MTU its buffers were allocated for:
// while SetMTU shrinks and grows the MTU, no packet valid for the old MTU
// is truncated into a smaller buffer, and an up device never answers
// ErrDown (ErrBusy while the buffers are rebuilt).
func TestSetMTUUnderLoadNeverTruncates(t *testing.T) {
	r := newZCRig(t, ipdata.ShapeConfig{}, mhinet.Config{})
	var stop atomic.Bool
	var downs, sent, attempts atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		buf := make([]byte, 1500)
		for i := 0; !stop.Load(); i++ {
			p := udp4(buf, 1500, freePort, uint32(i))
			n, err := r.dev.Transmit([][]byte{p})
			sent.Add(int64(n))
			if errors.Is(err, mhinet.ErrDown) {
				downs.Add(1)
			}
			attempts.Add(1)
		}
	}()
	// At least 2 s, and on until both MTUs have been exercised, 20 s at
	// most. Until the sender has met an MTU, it starts an attempt after
	// each change to it before the next: a loop of changes alone could
	// starve it (with -cpu 1 it sent 128 packets in 20 s and never one at
	// the small MTU).
	deadline, hard := time.Now().Add(2*time.Second), time.Now().Add(20*time.Second)
	exercised := func() bool { s := r.dev.Stats(); return s.TxTooLong > 0 && s.TxPackets > 0 }
	met := func(mtu int) bool {
		s := r.dev.Stats()
		return (mtu < 1500 && s.TxTooLong > 0) || (mtu == 1500 && s.TxPackets > 0)
	}
	changes := 0
	for time.Now().Before(hard) && (time.Now().Before(deadline) || !exercised()) {
		for _, mtu := range []int{600, 1500} {
			if err := r.dev.SetMTU(mtu); err != nil {
				t.Errorf("SetMTU(%d): %v", mtu, err)
			}
			changes++
			for a := attempts.Load(); !met(mtu) && attempts.Load() < a+2 && time.Now().Before(hard); {
				runtime.Gosched()
			}
		}
	}
	stop.Store(true)
	wg.Wait()
	s := waitStats(t, r.dev, "uplink idle", func(s mhinet.Stats) bool {
		return s.TxPackets+s.TxTooLong+s.TxDropped == uint64(sent.Load())
	})
	time.Sleep(50 * time.Millisecond)
	got, bad, _ := r.rx.counts()
	t.Logf("%d MTU changes; sent %d, received %d, corrupt %d; TxTooLong %d, TxPackets %d", changes, sent.Load(), got, bad,
		s.TxTooLong, s.TxPackets)
	if bad > 0 {
		t.Errorf("%d truncated packets delivered", bad)
	}
	if n := downs.Load(); n > 0 {
		t.Errorf("Transmit returned ErrDown %d times on an up device", n)
	}
	if s.TxTooLong == 0 || s.TxPackets == 0 {
		t.Errorf("the test did not exercise both MTUs: TxTooLong %d, TxPackets %d", s.TxTooLong, s.TxPackets)
	}
}

// Released zero-copy buffers of an earlier allocation (before Down/Up or
// SetMTU) do not take the notify channel's room: every later release
// reaches the caller.
func TestZCNotifyChannelDrainedOnRealloc(t *testing.T) {
	r := newZCRig(t, ipdata.ShapeConfig{}, mhinet.Config{TXZeroCopyNotify: true})
	// takeAll hands every slot over empty: each is released at once,
	// onto the notify channel, which nobody reads.
	takeAll := func() int {
		n := 0
		for {
			b, err := r.dev.TXBuffer()
			if err != nil {
				return n
			}
			b.SetLen(0)
			if k, err := r.dev.TransmitZC([]*mhinet.ZCBuffer{b}); k != 1 {
				t.Fatal(k, err)
			}
			n++
		}
	}
	slots := takeAll()
	if slots == 0 || len(r.dev.TXReleased()) != slots {
		t.Fatalf("%d slots, %d on the channel", slots, len(r.dev.TXReleased()))
	}
	for _, step := range []struct {
		name string
		fn   func() error
	}{
		{"Down/Up", func() error { return errors.Join(r.dev.Down(), r.dev.Up()) }},
		{"SetMTU", func() error { return r.dev.SetMTU(1400) }},
	} {
		if err := step.fn(); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		if n := len(r.dev.TXReleased()); n != 0 {
			t.Fatalf("%s: %d stale buffers left on the channel", step.name, n)
		}
		if n := takeAll(); n != slots {
			t.Fatalf("%s: %d slots, want %d", step.name, n, slots)
		}
		if s := r.dev.Stats(); s.TxZCBadRelease != 0 || len(r.dev.TXReleased()) != slots {
			t.Fatalf("%s: %d releases lost, %d on the channel", step.name, s.TxZCBadRelease, len(r.dev.TXReleased()))
		}
	}
	// Buffers from the channel are the caller's: they go back to the
	// device.
	for range slots {
		if err := r.dev.PutTXBuffer(<-r.dev.TXReleased()); err != nil {
			t.Fatal(err)
		}
	}
}

// SetMTU reallocates the zero-copy slots and the release ring; the modem
// must not keep the old lend region (and write releases into freed
// memory). Once the new region is forwarded, zero-copy works again.
func TestSetMTUModemForgetsLendRegion(t *testing.T) {
	r := newZCRig(t, ipdata.ShapeConfig{}, mhinet.Config{})
	send := func(n, seq int) {
		for i := range n {
			b, err := r.dev.TXBuffer()
			if err != nil {
				t.Fatal(err)
			}
			b.SetLen(len(udp4(b.Bytes(), 200, freePort, uint32(seq+i))))
			transmitZC(t, r.dev, b)
		}
	}
	send(5, 0)
	waitStats(t, r.dev, "lent slots released", func(s mhinet.Stats) bool { return s.TxPackets == 5 && s.TxZCPending == 0 })
	rel0 := r.mock.IPData.Stats().LentReleased
	if err := r.dev.SetMTU(1400); err != nil {
		t.Fatal(err)
	}
	// Not forwarded yet: the modem treats the new slots as ordinary
	// buffers and writes no release anywhere (these slots stay lent:
	// the documented cost of not forwarding the region).
	// Enough slots that some lie inside the old region's address range.
	send(30, 100)
	waitStats(t, r.dev, "sent", func(s mhinet.Stats) bool { return s.TxPackets == 35 })
	time.Sleep(20 * time.Millisecond)
	if ms := r.mock.IPData.Stats(); ms.LentReleased != rel0 || ms.LendErrors != 0 {
		t.Fatalf("modem used the stale lend region after SetMTU: LentReleased %d -> %d, LendErrors %d",
			rel0, ms.LentReleased, ms.LendErrors)
	}
	reg, err := r.dev.ZeroCopyRegion()
	if err != nil {
		t.Fatal(err)
	}
	if err := r.mock.IPData.SetLendRegion(reg); err != nil {
		t.Fatal(err)
	}
	send(20, 200)
	s := waitStats(t, r.dev, "released through the new ring", func(s mhinet.Stats) bool {
		return s.TxPackets == 55 && s.TxZCReleased == 25 && s.TxZCPending == 30
	})
	if s.TxZCBadRelease != 0 {
		t.Fatalf("stats %+v", s)
	}
	if got, bad, _ := r.rx.counts(); bad != 0 {
		t.Fatalf("received %d, %d corrupt", got, bad)
	}
}

// Down forgets every zero-copy slot; TxZCPending says so.
func TestZCPendingZeroAfterDown(t *testing.T) {
	r := newZCRig(t, ipdata.ShapeConfig{UDPPort: shapedPort, Rate: 0.001}, mhinet.Config{})
	for i := range 4 {
		b, err := r.dev.TXBuffer()
		if err != nil {
			t.Fatal(err)
		}
		b.SetLen(len(udp4(b.Bytes(), 200, shapedPort, uint32(i))))
		transmitZC(t, r.dev, b)
	}
	waitStats(t, r.dev, "modem holds the slots", func(s mhinet.Stats) bool { return s.TxPackets == 4 && s.TxZCPending == 4 })
	if err := r.dev.Down(); err != nil {
		t.Fatal(err)
	}
	if s := r.dev.Stats(); s.TxZCPending != 0 {
		t.Fatalf("TxZCPending %d after Down", s.TxZCPending)
	}
}

// A TXBufferSize too small for an MTU-sized packet with its framing, or
// for TXAggMaxBytes, is a configuration error, found by New (and SetMTU),
// not by packets failing later.
func TestTXBufferSizeValidated(t *testing.T) {
	m, err := mock.Open(mock.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	for _, tc := range []struct {
		name string
		cfg  mhinet.Config
		ok   bool
	}{
		{"raw fits", mhinet.Config{MTU: 1500, TXBufferSize: 1500}, true},
		{"raw short", mhinet.Config{MTU: 1500, TXBufferSize: 1000}, false},
		{"mbim without header room", mhinet.Config{Format: framing.NTB16, MTU: 1500, TXBufferSize: 1500}, false},
		{"mbim with header room", mhinet.Config{Format: framing.NTB16, MTU: 1500, TXBufferSize: 1528}, true},
		{"qmap without header room", mhinet.Config{Format: framing.QMAP, MTU: 1500, TXBufferSize: 1502}, false},
		{"aggregate over buffer", mhinet.Config{Format: framing.NTB16, TXAggregate: true, TXAggMaxBytes: 8192,
			TXBufferSize: 4096}, false},
		{"aggregate within buffer", mhinet.Config{Format: framing.NTB16, TXAggregate: true, TXAggMaxBytes: 4096,
			TXBufferSize: 4096}, true},
		{"negative", mhinet.Config{TXBufferSize: -1}, false},
		{"over a TRE", mhinet.Config{TXBufferSize: wire.MaxTRELength + 1}, false},
	} {
		tc.cfg.Pair = m.DataPair
		d, err := mhinet.New(m.Controller, tc.cfg, newUDPCollector())
		if tc.ok && err != nil {
			t.Errorf("%s: %v", tc.name, err)
		}
		if !tc.ok && !errors.Is(err, wire.ErrConfig) {
			t.Errorf("%s: New: %v, want mhi.ErrConfig", tc.name, err)
		}
		if tc.name == "raw fits" && d != nil {
			if err := d.SetMTU(1501); !errors.Is(err, wire.ErrConfig) {
				t.Errorf("SetMTU past a fixed TXBufferSize: %v, want mhi.ErrConfig", err)
			}
			if d.MTU() != 1500 {
				t.Errorf("MTU %d after a refused SetMTU", d.MTU())
			}
		}
	}
}
