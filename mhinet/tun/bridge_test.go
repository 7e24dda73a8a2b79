package tun_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhi"
	"github.com/gomhi/gomhi/mhi/ep/ipdata"
	"github.com/gomhi/gomhi/mhi/proto/framing"
	"github.com/gomhi/gomhi/mhi/testenv/poll"
	"github.com/gomhi/gomhi/mhinet"
	"github.com/gomhi/gomhi/mhinet/mhinettest"
	"github.com/gomhi/gomhi/mhinet/tun"
	"github.com/gomhi/gomhi/pcigeneric/mock"
)

// formats are the framings the bridge is tested in, each with a mock
// model to speak it on.
var formats = []struct {
	name  string
	model string
	f     framing.Format
}{
	{"raw", mock.DefaultModel, framing.RawIP},
	{"ntb16", "telit-fn990", framing.NTB16},
	{"qmap", "telit-fn990", framing.QMAP},
}

// rig is a bridge between a TUN Device and a device on the mock modem.
type rig struct {
	mock   *mock.Mock
	dev    *mhinet.Device
	bridge *tun.Bridge
	runErr chan error
}

// newRig builds mock modem → device → bridge on td and, with run, starts
// Run; the cleanups undo it all in reverse order.
func newRig(t testing.TB, td tun.Device, model string, ipd ipdata.Config, cfg mhinet.Config, bcfg tun.BridgeConfig, run bool) *rig {
	t.Helper()
	if bcfg.BusyTimeout == 0 {
		// The tests count every packet: a loaded machine (-race, -cpu 1)
		// must not turn a slow uplink into drops.
		bcfg.BusyTimeout = 10 * time.Second
	}
	var b *tun.Bridge
	mr := mhinettest.New(t, mhinettest.Options{Model: model, IPData: &ipd, Net: &cfg,
		Connect: func(ctrl *mhi.Controller, cfg mhinet.Config) (dev *mhinet.Device, err error) {
			b, dev, err = tun.Connect(td, ctrl, cfg, bcfg)
			return dev, err
		}})
	r := &rig{mock: mr.Mock, dev: mr.Net, bridge: b, runErr: make(chan error, 1)}
	if run {
		r.start(t)
	}
	return r
}

// start runs the bridge until the test ends.
func (r *rig) start(t testing.TB) {
	ctx, cancel := context.WithCancel(context.Background())
	go func() { r.runErr <- r.bridge.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-r.runErr:
			if !errors.Is(err, context.Canceled) {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Error("Run did not return after cancel")
		}
	})
}

// waitStats polls the bridge until ok or the deadline.
func (r *rig) waitStats(t testing.TB, what string, ok func(tun.BridgeStats) bool) tun.BridgeStats {
	t.Helper()
	var s tun.BridgeStats
	poll.Wait(t, 10*time.Second, func() bool { s = r.bridge.Stats(); return ok(s) }, func() string {
		return fmt.Sprintf("waiting for %s: bridge %+v device %+v", what, s, r.dev.Stats())
	})
	return s
}

// eventually polls ok until it holds or ten seconds pass.
func eventually(t testing.TB, what string, ok func() bool) {
	t.Helper()
	poll.Wait(t, 10*time.Second, ok, func() string { return "timed out waiting for " + what })
}

// ipv4 returns an IPv4/UDP-looking packet of n bytes (n ≥ 24) carrying seq.
func ipv4(n int, seq uint32) []byte {
	p := make([]byte, n)
	p[0] = 0x45
	binary.BigEndian.PutUint16(p[2:], uint16(n))
	p[8] = 64
	p[9] = 17
	copy(p[12:], []byte{198, 18, 0, 1, 198, 18, 0, 2})
	binary.BigEndian.PutUint32(p[20:], seq)
	return p
}

// Packets the fake stack sends come back to it through the bridge, the
// device and the modem's internal loopback, every one once and unchanged,
// in each framing; the counters on all three agree.
func TestBridgeChannelLoopback(t *testing.T) {
	for _, f := range formats {
		t.Run(f.name, func(t *testing.T) {
			ct := tun.NewChannelTUN()
			r := newRig(t, ct, f.model, ipdata.Config{Format: f.f}, mhinet.Config{Format: f.f, MRU: 4096}, tun.BridgeConfig{}, true)
			const n = 3000
			sent := make(map[uint32][]byte, n)
			go func() {
				for i := range n {
					p := ipv4(28+(i*53)%1472, uint32(i))
					ct.FromStack <- p
				}
			}()
			for i := range n {
				sent[uint32(i)] = ipv4(28+(i*53)%1472, uint32(i))
			}
			timeout := time.After(10 * time.Second)
			for got := 0; got < n; got++ {
				select {
				case p := <-ct.ToStack:
					seq := binary.BigEndian.Uint32(p[20:])
					want, ok := sent[seq]
					if !ok {
						t.Fatalf("packet seq %d unexpected or duplicated", seq)
					}
					if string(p) != string(want) {
						t.Fatalf("packet seq %d changed: %d bytes, want %d", seq, len(p), len(want))
					}
					delete(sent, seq)
				case <-timeout:
					t.Fatalf("%d of %d packets back; bridge %+v device %+v", got, n, r.bridge.Stats(), r.dev.Stats())
				}
			}
			// The counters follow the writes a moment later: the bridge
			// counts a batch after Transmit returns and a TUN write after
			// it returns, either of which may be after the packets came
			// back.
			s := r.waitStats(t, "uplink and downlink counters", func(s tun.BridgeStats) bool {
				return s.UplinkPackets == n && s.DownlinkPackets == n
			})
			ds := r.dev.Stats()
			if s.UplinkPackets != n || s.DownlinkPackets != n || s.UplinkDropped() != 0 || s.WriteErrors != 0 {
				t.Errorf("bridge %+v", s)
			}
			if ds.TxQueued != n || ds.RxPackets != n || ds.TxErrors+ds.TxDropped+ds.RxErrors+ds.RxDropped != 0 {
				t.Errorf("device %+v", ds)
			}
			// The modem counts an aggregate once its commit returns, which
			// can be after the host has delivered it.
			var ms ipdata.Stats
			if !poll.Until(10*time.Second, func() bool {
				ms = r.mock.IPData.Stats()
				return ms.ULPackets == n && ms.DLPackets == n
			}) {
				t.Errorf("modem %+v", ms)
			}
			if s.UplinkReads >= n {
				t.Logf("no read batching: %d reads for %d packets", s.UplinkReads, n)
			}
		})
	}
}

// A read batch larger than the uplink ring makes Transmit answer ErrBusy;
// the bridge retries and loses nothing.
func TestBridgeBusyRetries(t *testing.T) {
	ct := tun.NewChannelTUN()
	const n = tun.ChannelQueue
	for i := range n {
		ct.FromStack <- ipv4(1000, uint32(i))
	}
	r := newRig(t, ct, mock.DefaultModel, ipdata.Config{}, mhinet.Config{}, tun.BridgeConfig{Batch: n, BufSize: 2048}, true)
	got := 0
	timeout := time.After(10 * time.Second)
	for got < n {
		select {
		case <-ct.ToStack:
			got++
		case <-timeout:
			t.Fatalf("%d of %d back; bridge %+v", got, n, r.bridge.Stats())
		}
	}
	// The bridge counts a batch after Transmit returns, which may be
	// after its packets came back.
	s := r.waitStats(t, "uplink and downlink counters", func(s tun.BridgeStats) bool {
		return s.UplinkPackets == n && s.DownlinkPackets == n
	})
	if s.BusyRetries == 0 || s.DropBusy != 0 || s.UplinkPackets != n {
		t.Fatalf("bridge %+v", s)
	}
	if ds := r.dev.Stats(); ds.TxBusy == 0 {
		t.Errorf("device saw no busy: %+v", ds)
	}
}

// What the bridge does not pass on is counted by reason: non-IP packets,
// IPv6 with IPv4Only, packets beyond the read buffer, and everything while
// the device is down.
func TestBridgeDrops(t *testing.T) {
	ct := tun.NewChannelTUN()
	r := newRig(t, ct, mock.DefaultModel, ipdata.Config{}, mhinet.Config{}, tun.BridgeConfig{IPv4Only: true, BufSize: 1600}, true)
	v6 := make([]byte, 48)
	v6[0] = 0x60
	ct.FromStack <- []byte{0x00, 1, 2, 3} // not IP
	ct.FromStack <- []byte{}              // empty
	ct.FromStack <- v6
	ct.FromStack <- make([]byte, 1601) // too big for the buffer
	ct.FromStack <- ipv4(100, 1)
	select {
	case p := <-ct.ToStack:
		if binary.BigEndian.Uint32(p[20:]) != 1 {
			t.Fatalf("unexpected packet % x", p[:24])
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the IPv4 packet did not come back: %+v", r.bridge.Stats())
	}
	// The bridge counts the packet it passed on after Transmit returns,
	// which may be after it came back.
	s := r.waitStats(t, "drop counters and one packet each way", func(s tun.BridgeStats) bool {
		return s.DropTooBig == 1 && s.DropNotIP == 2 && s.DropIPv6 == 1 && s.UplinkPackets == 1 && s.DownlinkPackets == 1
	})
	if s.DropNotIP != 2 || s.DropIPv6 != 1 || s.UplinkPackets != 1 || s.DownlinkPackets != 1 {
		t.Fatalf("bridge %+v", s)
	}

	if err := r.dev.Down(); err != nil {
		t.Fatal(err)
	}
	ct.FromStack <- ipv4(100, 2)
	ct.FromStack <- ipv4(100, 3)
	s = r.waitStats(t, "DropDown", func(s tun.BridgeStats) bool { return s.DropDown == 2 })
	if s.UplinkPackets != 1 {
		t.Fatalf("bridge %+v", s)
	}
}

// Receive writes to the TUN, releases every packet, and counts the writes
// that fail (here: after the TUN is closed) instead of losing them
// silently.
func TestBridgeWriteErrors(t *testing.T) {
	ct := tun.NewChannelTUN()
	r := newRig(t, ct, mock.DefaultModel, ipdata.Config{}, mhinet.Config{}, tun.BridgeConfig{}, false)
	// Transmit directly; the modem loops the packets back to Receive.
	if _, err := r.dev.Transmit([][]byte{ipv4(200, 1)}); err != nil {
		t.Fatal(err)
	}
	r.waitStats(t, "one downlink packet", func(s tun.BridgeStats) bool { return s.DownlinkPackets == 1 })
	<-ct.ToStack
	_ = ct.Close()
	if _, err := r.dev.Transmit([][]byte{ipv4(200, 2), ipv4(300, 3)}); err != nil {
		t.Fatal(err)
	}
	s := r.waitStats(t, "write errors", func(s tun.BridgeStats) bool { return s.WriteErrors == 2 })
	if s.DownlinkPackets != 1 {
		t.Fatalf("bridge %+v", s)
	}
	// Every packet was released: the whole pool is back (less the ring).
	var ds mhinet.Stats
	poll.Wait(t, 5*time.Second, func() bool {
		ds = r.dev.Stats()
		return ds.PoolFree+ds.RxPosted == ds.PoolBuffers
	}, func() string { return fmt.Sprintf("receive buffers held: %+v", ds) })
}

// Run's contract: it needs an attached device, runs once at a time, ends
// with ctx.Err() on cancel and with ErrClosed when the TUN closes.
func TestBridgeRunLifecycle(t *testing.T) {
	ct := tun.NewChannelTUN()
	if err := tun.NewBridge(ct, tun.BridgeConfig{}).Run(context.Background()); !errors.Is(err, tun.ErrNotAttached) {
		t.Fatalf("Run without device: %v", err)
	}
	r := newRig(t, ct, mock.DefaultModel, ipdata.Config{}, mhinet.Config{}, tun.BridgeConfig{}, false)
	for round := range 2 { // a second Run after a cancelled one works
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() { errc <- r.bridge.Run(ctx) }()
		ct.FromStack <- ipv4(64, uint32(round))
		select {
		case <-ct.ToStack:
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: no packet back", round)
		}
		if err := r.bridge.Run(ctx); !errors.Is(err, tun.ErrRunning) {
			t.Fatalf("second Run: %v", err)
		}
		cancel()
		select {
		case err := <-errc:
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("Run after cancel: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Run did not return after cancel")
		}
	}
	errc := make(chan error, 1)
	go func() { errc <- r.bridge.Run(context.Background()) }()
	time.Sleep(10 * time.Millisecond)
	_ = ct.Close()
	select {
	case err := <-errc:
		if !errors.Is(err, tun.ErrClosed) {
			t.Fatalf("Run after Close: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after Close")
	}
}

// SetMTU moves the TUN and the device together, in both directions, and
// rejects what the device cannot take, leaving both unchanged.
func TestBridgeSetMTU(t *testing.T) {
	ct := tun.NewChannelTUN()
	r := newRig(t, ct, mock.DefaultModel, ipdata.Config{}, mhinet.Config{}, tun.BridgeConfig{}, false)
	for _, n := range []int{1280, 9000, 1500} {
		if err := r.bridge.SetMTU(n); err != nil {
			t.Fatal(err)
		}
		if ct.MTU() != n || r.dev.MTU() != n || r.bridge.MTU() != n {
			t.Fatalf("SetMTU(%d): tun %d device %d", n, ct.MTU(), r.dev.MTU())
		}
	}
	for _, n := range []int{0, 67, 65535} {
		if err := r.bridge.SetMTU(n); !errors.Is(err, mhinet.ErrInvalidMTU) {
			t.Fatalf("SetMTU(%d): %v", n, err)
		}
	}
	if ct.MTU() != 1500 || r.dev.MTU() != 1500 {
		t.Fatalf("after rejected changes: tun %d device %d", ct.MTU(), r.dev.MTU())
	}
}

// ChannelTUN on its own: batching, deadlines, buffer limits, Close.
func TestChannelTUN(t *testing.T) {
	ct := tun.NewChannelTUN()
	bufs := [][]byte{make([]byte, 100), make([]byte, 100), make([]byte, 100)}
	sizes := make([]int, 3)

	// A deadline ends a pending read; a later change wakes it too.
	_ = ct.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	if _, err := ct.Read(bufs, sizes); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past deadline: %v", err)
	}
	_ = ct.SetReadDeadline(time.Time{})
	done := make(chan error, 1)
	go func() {
		_, err := ct.Read(bufs, sizes)
		done <- err
	}()
	time.Sleep(10 * time.Millisecond)
	_ = ct.SetReadDeadline(time.Unix(1, 0))
	select {
	case err := <-done:
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("read woken by deadline: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("SetReadDeadline did not wake the read")
	}
	_ = ct.SetReadDeadline(time.Time{})

	// Batching: everything queued comes in one read, up to the buffers.
	for i := range 4 {
		ct.FromStack <- []byte{byte(i), 1, 2}
	}
	n, err := ct.Read(bufs, sizes)
	if n != 3 || err != nil || sizes[0] != 3 || bufs[2][0] != 2 {
		t.Fatalf("batch read: %d %v %v", n, err, sizes)
	}
	n, err = ct.Read(bufs, sizes)
	if n != 1 || err != nil || bufs[0][0] != 3 {
		t.Fatalf("rest: %d %v", n, err)
	}

	// A packet larger than its buffer is reported after the ones before.
	ct.FromStack <- []byte{1}
	ct.FromStack <- make([]byte, 101)
	n, err = ct.Read(bufs, sizes)
	if n != 1 || !errors.Is(err, tun.ErrTooBig) {
		t.Fatalf("too big: %d %v", n, err)
	}

	// Writes are copies.
	p := []byte{9, 9}
	if n, err := ct.Write([][]byte{p}); n != 1 || err != nil {
		t.Fatal(n, err)
	}
	p[0] = 0
	if q := <-ct.ToStack; q[0] != 9 {
		t.Fatal("Write did not copy")
	}

	if err := ct.SetMTU(10); !errors.Is(err, tun.ErrInvalidConfig) {
		t.Fatalf("SetMTU(10): %v", err)
	}

	// Close wakes a reader and fails later calls.
	go func() {
		_, err := ct.Read(bufs, sizes)
		done <- err
	}()
	time.Sleep(10 * time.Millisecond)
	_ = ct.Close()
	if err := <-done; !errors.Is(err, tun.ErrClosed) {
		t.Fatalf("read after close: %v", err)
	}
	if _, err := ct.Write([][]byte{p}); !errors.Is(err, tun.ErrClosed) {
		t.Fatalf("write after close: %v", err)
	}
}
