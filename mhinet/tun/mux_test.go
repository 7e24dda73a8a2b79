package tun_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhi"
	"github.com/gomhi/gomhi/mhi/ep"
	"github.com/gomhi/gomhi/mhi/ep/ipdata"
	"github.com/gomhi/gomhi/mhi/proto/framing"
	"github.com/gomhi/gomhi/mhi/testenv/poll"
	"github.com/gomhi/gomhi/mhinet"
	"github.com/gomhi/gomhi/mhinet/mhinettest"
	"github.com/gomhi/gomhi/mhinet/tun"
)

// muxRx records the batches one session's receiver gets.
type muxRx struct {
	mu      sync.Mutex
	batches [][]uint32 // sequence numbers, per call
	foreign int        // packets of another session
	n       uint8
}

func (r *muxRx) Receive(pkts []mhinet.Packet) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b []uint32
	for _, p := range pkts {
		if p.Session != r.n {
			r.foreign++
		}
		b = append(b, binary.BigEndian.Uint32(p.Data[20:]))
	}
	r.batches = append(r.batches, b)
}

// pkt is a received packet of session n carrying seq.
func pkt(n uint8, seq uint32) mhinet.Packet {
	return mhinet.Packet{Data: ipv4(40, seq), Session: n, Mux: 112 + n}
}

// A mixed batch reaches each session's receiver in one call, in order;
// a session without a receiver gets nothing and is counted; a batch of
// one session passes whole.
func TestMuxRoutes(t *testing.T) {
	m := tun.NewMux()
	r0, r1 := &muxRx{n: 0}, &muxRx{n: 1}
	m.Set(0, r0)
	m.Set(1, r1)
	m.Receive([]mhinet.Packet{pkt(0, 1), pkt(1, 101), pkt(7, 701), pkt(0, 2), pkt(1, 102), pkt(0, 3), pkt(7, 702)})
	m.Receive([]mhinet.Packet{pkt(1, 103), pkt(1, 104)})
	if fmt.Sprint(r0.batches) != "[[1 2 3]]" || fmt.Sprint(r1.batches) != "[[101 102] [103 104]]" {
		t.Fatalf("session 0 got %v, session 1 got %v", r0.batches, r1.batches)
	}
	if r0.foreign+r1.foreign != 0 {
		t.Fatalf("foreign packets delivered: %d, %d", r0.foreign, r1.foreign)
	}
	if s := m.Stats(); s.UnknownSession != 2 || s.Batches != 2 || s.SplitBatches != 1 {
		t.Fatalf("stats %+v, want 2 unknown, 2 batches, 1 split", s)
	}
	if s, ok := m.SessionStats(7); !ok || s.RxDropped != 2 || s.RxPackets != 0 {
		t.Fatalf("session 7: %+v %v", s, ok)
	}
	if s, ok := m.SessionStats(1); !ok || s.RxPackets != 4 || s.RxBytes != 160 {
		t.Fatalf("session 1: %+v %v", s, ok)
	}
	if _, ok := m.SessionStats(9); ok {
		t.Fatal("session 9 known")
	}
	m.Remove(1)
	m.Receive([]mhinet.Packet{pkt(1, 105)})
	if len(r1.batches) != 2 || m.Stats().UnknownSession != 3 {
		t.Fatalf("after Remove: session 1 got %v, stats %+v", r1.batches, m.Stats())
	}
	if got := m.Sessions(nil); fmt.Sprint(got) != "[0]" {
		t.Fatalf("Sessions %v", got)
	}
}

// Routing a mixed batch allocates nothing once the scratch slices grew.
func TestMuxNoAlloc(t *testing.T) {
	m := tun.NewMux()
	drop := mhinet.ReceiverFunc(func([]mhinet.Packet) {})
	m.Set(0, drop)
	m.Set(1, drop)
	batch := make([]mhinet.Packet, 32)
	for i := range batch {
		batch[i] = pkt(uint8(i%3), uint32(i)) // sessions 0, 1 and unknown 2
	}
	m.Receive(batch)
	if a := testing.AllocsPerRun(100, func() { m.Receive(batch) }); a != 0 {
		t.Fatalf("%v allocations per batch", a)
	}
}

// Set and Remove while batches are routed (run with -race): every packet
// is delivered to its own session or counted unknown.
func TestMuxSetWhileReceiving(t *testing.T) {
	m := tun.NewMux()
	var got [2]atomic.Uint64
	var foreign atomic.Uint64
	rx := func(n uint8) mhinet.Receiver {
		return mhinet.ReceiverFunc(func(pkts []mhinet.Packet) {
			for _, p := range pkts {
				if p.Session != n {
					foreign.Add(1)
				}
			}
			got[n].Add(uint64(len(pkts)))
		})
	}
	m.Set(0, rx(0))
	batch := []mhinet.Packet{pkt(0, 1), pkt(1, 2), pkt(0, 3), pkt(1, 4)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 2000 {
			m.Set(1, rx(1))
			m.Remove(1)
		}
	}()
	const batches = 2000
	for range batches {
		m.Receive(batch)
	}
	<-done
	if foreign.Load() != 0 {
		t.Fatalf("%d packets delivered to another session", foreign.Load())
	}
	total := got[0].Load() + got[1].Load() + m.Stats().UnknownSession
	if got[0].Load() != 2*batches || total != 4*batches {
		t.Fatalf("session 0 %d, session 1 %d, unknown %d; want %d for session 0, %d in all",
			got[0].Load(), got[1].Load(), m.Stats().UnknownSession, 2*batches, 4*batches)
	}
}

// Two bridges, sessions 0 and 1 of base 112, each on its own TUN over one
// device (session 1's added while the device runs): what each fake stack
// sends comes back, echoed by the modem with its wire id, to its own TUN
// only; the Mux's per-session counters are the bridges'.
//
// "loopback" is the mock modem's internal loopback on base 112 (its
// ipdata Session / QMAPMux), which answers every packet on its own
// session, both sessions interleaved in its aggregates; "echo" sends the
// host's own aggregates back.
func TestMuxBridgesTwoSessions(t *testing.T) {
	for _, modem := range []string{"loopback", "echo"} {
		for _, f := range []framing.Format{framing.NTB16, framing.QMAP} {
			t.Run(modem+"/"+f.String(), func(t *testing.T) { testMuxBridges(t, f, modem == "echo") })
		}
	}
}

func testMuxBridges(t *testing.T, f framing.Format, echo bool) {
	td0, td1 := tun.NewChannelTUN(), tun.NewChannelTUN()
	var mux *tun.Mux
	var b0 *tun.Bridge
	cfg := mhinet.Config{Format: f, Session: 112, TXAggregate: true}
	var fn ep.Function
	if echo {
		fn = &mhinettest.Echo{}
	}
	r := mhinettest.New(t, mhinettest.Options{Model: "telit-fn990", IPData: &ipdata.Config{Format: f, Session: 112, QMAPMux: 112},
		DataFunction: fn, Net: &cfg,
		Connect: func(ctrl *mhi.Controller, cfg mhinet.Config) (dev *mhinet.Device, err error) {
			mux, b0, dev, err = tun.ConnectMux(td0, ctrl, cfg, tun.BridgeConfig{BusyTimeout: 10 * time.Second})
			return dev, err
		}})
	b1, err := tun.AddSession(mux, r.Net, td1, tun.BridgeConfig{Session: 1, BusyTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tun.AddSession(mux, r.Net, tun.NewChannelTUN(), tun.BridgeConfig{Session: 1}); !errors.Is(err, tun.ErrSessionTaken) {
		t.Fatalf("second bridge on session 1: %v", err)
	}
	for _, b := range []*tun.Bridge{b0, b1} {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- b.Run(ctx) }()
		t.Cleanup(func() { cancel(); <-done })
	}
	const n = 300
	go func() {
		for i := range uint32(n) {
			td0.FromStack <- ipv4(100+int(i%50), i)
			td1.FromStack <- ipv4(100+int(i%50), 100000+i)
		}
	}()
	for k, td := range []*tun.ChannelTUN{td0, td1} {
		for i := range uint32(n) {
			select {
			case p := <-td.ToStack:
				if seq := binary.BigEndian.Uint32(p[20:]); seq != uint32(k)*100000+i {
					t.Fatalf("TUN %d: packet %d is seq %d", k, i, seq)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("TUN %d: %d of %d packets; mux %+v device %+v", k, i, n, mux.Stats(), r.Net.Stats())
			}
		}
	}
	for s := range uint8(2) {
		var ss tun.SessionStats
		poll.Wait(t, 5*time.Second, func() bool {
			ss, _ = mux.SessionStats(s)
			return ss.TxPackets == n && ss.RxPackets == n
		}, func() string { return fmt.Sprintf("session %d: %+v", s, ss) })
		if ss.RxDropped+ss.TxDropped != 0 {
			t.Errorf("session %d: %+v", s, ss)
		}
	}
	if ms := mux.Stats(); ms.UnknownSession != 0 {
		t.Errorf("mux %+v", ms)
	}
	if echo {
		return
	}
	// The host's per-session counters are the modem's, once the modem
	// has settled its tally of the last aggregate (it commits the
	// aggregate first, so the host may hold the packets a moment before).
	for s := range uint8(2) {
		poll.Until(5*time.Second, func() bool { return r.IPData.SessionStatsOf(s).Pending == 0 })
		ms := r.IPData.SessionStatsOf(s)
		hs, _ := mux.SessionStats(s)
		if ms.Wire != 112+s || ms.ULPackets != hs.TxPackets || ms.DLPackets != hs.RxPackets || ms.ULBytes != hs.TxBytes || ms.DLBytes != hs.RxBytes {
			t.Errorf("session %d: modem %+v, host %+v", s, ms, hs)
		}
	}
}

// to is a received packet of session n addressed to dst.
func to(n uint8, dst netip.Addr, seq uint32) mhinet.Packet {
	p := pkt(n, seq)
	if dst.Is4() {
		a := dst.As4()
		copy(p.Data[16:20], a[:])
		return p
	}
	d := make([]byte, 48)
	d[0] = 0x60
	a := dst.As16()
	copy(d[24:40], a[:])
	binary.BigEndian.PutUint32(d[40:], seq)
	p.Data = d
	return p
}

// A device that puts one session's packet in another's NDP: once the
// sessions have prefixes, a packet of session 0 addressed into session
// 1's (and not 0's) is dropped and counted, not delivered through
// session 0's interface; a packet to an address no session claims
// passes; with one session's prefixes only, nothing is checked.
func TestMuxSessionMismatch(t *testing.T) {
	m := tun.NewMux()
	r0, r1 := &muxRx{n: 0}, &muxRx{n: 1}
	m.Set(0, r0)
	m.Set(1, r1)
	s0, s1 := netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.18.1.1")
	s1v6 := netip.MustParseAddr("fd00:6d68:6900:1::1")
	out := netip.MustParseAddr("203.0.113.9")
	m.SetPrefixes(0, []netip.Prefix{netip.MustParsePrefix("198.18.0.1/24"), netip.MustParsePrefix("fd00:6d68:6900::1/64")})
	m.Receive([]mhinet.Packet{to(0, s1, 1)}) // one session's prefixes: no check
	if len(r0.batches) != 1 {
		t.Fatalf("with one session's prefixes, session 0 got %v", r0.batches)
	}
	m.SetPrefixes(1, []netip.Prefix{netip.MustParsePrefix("198.18.1.1/24"), netip.MustParsePrefix("fd00:6d68:6900:1::1/64")})
	m.Receive([]mhinet.Packet{to(0, s0, 2), to(0, s1, 3), to(0, out, 4), to(0, s1v6, 5), to(1, s1, 6)})
	m.Receive([]mhinet.Packet{to(1, s0, 7)})
	if fmt.Sprint(r0.batches) != "[[1] [2 4]]" || fmt.Sprint(r1.batches) != "[[6]]" {
		t.Fatalf("session 0 got %v, session 1 got %v", r0.batches, r1.batches)
	}
	if st := m.Stats(); st.SessionMismatch != 3 || st.UnknownSession != 0 {
		t.Fatalf("stats %+v, want 3 mismatched", st)
	}
	if s, _ := m.SessionStats(0); s.RxDropped != 2 || s.RxPackets != 3 {
		t.Fatalf("session 0: %+v", s)
	}
	m.SetPrefixes(1, nil) // session 1 disconnected: no check again
	m.Receive([]mhinet.Packet{to(0, s1, 8)})
	if fmt.Sprint(r0.batches) != "[[1] [2 4] [8]]" {
		t.Fatalf("after session 1's prefixes went, session 0 got %v", r0.batches)
	}
	m.SetPrefixes(1, []netip.Prefix{netip.MustParsePrefix("198.18.1.1/24")})
	drop := mhinet.ReceiverFunc(func([]mhinet.Packet) {})
	m.Set(0, drop)
	m.Set(1, drop)
	batch := []mhinet.Packet{to(0, s0, 9), to(1, s1, 10), to(0, s1, 11)}
	if a := testing.AllocsPerRun(100, func() { m.Receive(batch) }); a != 0 {
		t.Fatalf("%v allocations per batch with the guard on", a)
	}
}
