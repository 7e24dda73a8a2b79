package mhinet_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhi/ep/ipdata"
	"github.com/gomhi/gomhi/mhi/proto/framing"
	"github.com/gomhi/gomhi/mhi/proto/ntb"
	"github.com/gomhi/gomhi/mhi/proto/qmap"
	"github.com/gomhi/gomhi/mhi/testenv/poll"
	"github.com/gomhi/gomhi/mhinet"
	"github.com/gomhi/gomhi/mhinet/mhinettest"
	"github.com/gomhi/gomhi/mhinet/tun"
)

// Several data sessions over one data channel, on the host: the session
// base (Config.Session 112, as the SDX72 in MBIM mode), wire ids 112 and
// 113 as sessions 0 and 1, routed by a tun.Mux.

const testBase = 112

// sessRx collects what one session's receiver got: every packet's
// session, wire id and sequence number, in order.
type sessRx struct {
	mu    sync.Mutex
	got   []sessPkt
	calls int
}

type sessPkt struct {
	session, mux uint8
	seq          uint32
}

func (c *sessRx) Receive(pkts []mhinet.Packet) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls++
	for _, p := range pkts {
		c.got = append(c.got, sessPkt{p.Session, p.Mux, binary.BigEndian.Uint32(p.Data[20:])})
		p.Release()
	}
}

func (c *sessRx) snapshot() ([]sessPkt, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]sessPkt(nil), c.got...), c.calls
}

// check fails t unless c got exactly want (sequence numbers, in order),
// each on session n and wire id testBase+n.
func (c *sessRx) check(t *testing.T, n uint8, want []uint32) {
	t.Helper()
	got, _ := c.snapshot()
	if len(got) != len(want) {
		t.Fatalf("session %d: %d packets, want %d: %v", n, len(got), len(want), got)
	}
	for i, p := range got {
		if p.seq != want[i] || p.session != n || p.mux != testBase+n {
			t.Fatalf("session %d: packet %d is seq %d on session %d (wire %d), want seq %d on session %d (wire %d)",
				n, i, p.seq, p.session, p.mux, want[i], n, testBase+n)
		}
	}
}

// seqs returns first, first+1, … (n numbers).
func seqs(first uint32, n int) []uint32 {
	s := make([]uint32, n)
	for i := range s {
		s[i] = first + uint32(i)
	}
	return s
}

// transmitSession is transmitAll on session n.
func transmitSession(t *testing.T, d *mhinet.Device, n uint8, pkts [][]byte) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for sent := 0; sent < len(pkts); {
		k, err := d.TransmitSession(n, pkts[sent:])
		sent += k
		switch {
		case errors.Is(err, mhinet.ErrBusy):
			if time.Now().After(deadline) {
				t.Fatalf("session %d: transmit stuck after %d packets", n, sent)
			}
			time.Sleep(100 * time.Microsecond)
		case err != nil:
			t.Fatal(err)
		}
	}
}

// Packets sent on sessions 0 and 1 (interleaved, two per call, with and
// without transmit aggregation) leave on wire ids 112 and 113 and, echoed
// unchanged by the modem, come back to the receiver of their own session,
// in order. With aggregation the sessions share aggregates: an NDP per
// session in an NTB, a mux id per QMAP frame.
func TestSessionsEcho(t *testing.T) {
	for _, f := range []framing.Format{framing.NTB16, framing.QMAP} {
		for _, agg := range []bool{false, true} {
			t.Run(fmt.Sprintf("%v/agg=%v", f, agg), func(t *testing.T) {
				testSessionsEcho(t, f, agg)
			})
		}
	}
}

func testSessionsEcho(t *testing.T, f framing.Format, agg bool) {
	mux := tun.NewMux()
	rx0, rx1 := &sessRx{}, &sessRx{}
	mux.Set(0, rx0)
	mux.Set(1, rx1)
	echo := &mhinettest.Echo{}
	// The aggregate waits for more packets (a timer, not the end of each
	// call), so the two sessions' calls meet in it.
	cfg := mhinet.Config{Format: f, Session: testBase, TXAggregate: agg, TXAggTimeout: 20 * time.Millisecond}
	r := mhinettest.New(t, mhinettest.Options{Model: "telit-fn990", IPData: &ipdata.Config{Format: f},
		DataFunction: echo, Net: &cfg, Receiver: mux})
	const rounds = 50
	for i := range rounds {
		transmitSession(t, r.Net, 0, [][]byte{ipv4(100, uint32(2*i)), ipv4(120, uint32(2*i+1))})
		transmitSession(t, r.Net, 1, [][]byte{ipv4(140, 1000+uint32(2*i)), ipv4(160, 1000+uint32(2*i+1))})
	}
	poll.Wait(t, 10*time.Second, func() bool { return r.Net.Flush() == nil }, func() string { return "flush" })
	poll.Wait(t, 10*time.Second, func() bool {
		a, _ := rx0.snapshot()
		b, _ := rx1.snapshot()
		return len(a)+len(b) >= 4*rounds
	}, func() string { return fmt.Sprintf("mux %+v device %+v", mux.Stats(), r.Net.Stats()) })
	rx0.check(t, 0, seqs(0, 2*rounds))
	rx1.check(t, 1, seqs(1000, 2*rounds))
	st := r.Net.Stats()
	if ms := mux.Stats(); ms.UnknownSession != 0 {
		t.Errorf("unknown session: %d", ms.UnknownSession)
	}
	switch {
	case agg && f == framing.NTB16 && (st.NTB.NTBs >= 2*rounds || st.NTB.NDPs <= st.NTB.NTBs):
		// The sessions share NTBs, an NDP each.
		t.Errorf("%d NTBs with %d NDPs echoed for %d calls: the sessions did not share NTBs", st.NTB.NTBs, st.NTB.NDPs, 2*rounds)
	case agg && f == framing.QMAP && st.QMAP.Aggregates >= 2*rounds:
		t.Errorf("%d QMAP aggregates for %d calls: the sessions did not share aggregates", st.QMAP.Aggregates, 2*rounds)
	}
	for n, want := range []uint64{2 * rounds, 2 * rounds} {
		ss, ok := mux.SessionStats(uint8(n))
		if !ok || ss.RxPackets != want || ss.RxDropped != 0 {
			t.Errorf("session %d: %+v (known %v), want %d received, none dropped", n, ss, ok, want)
		}
	}
}

// A wire id past 255 (base 112 + 144) is refused, nothing taken; raw IP
// carries session 0 alone.
func TestTransmitSessionOutOfRange(t *testing.T) {
	cfg := mhinet.Config{Format: framing.QMAP, Session: testBase}
	r := mhinettest.New(t, mhinettest.Options{Model: "telit-fn990", IPData: &ipdata.Config{Format: framing.QMAP}, Net: &cfg})
	if n, err := r.Net.TransmitSession(144, [][]byte{ipv4(100, 1)}); n != 0 || !errors.Is(err, mhinet.ErrSession) {
		t.Errorf("session 144 on base 112: %d, %v; want 0, ErrSession", n, err)
	}
	if w, err := r.Net.SessionWire(143); w != 255 || err != nil {
		t.Errorf("SessionWire(143) = %d, %v; want 255", w, err)
	}
	rawCfg := mhinet.Config{}
	raw := mhinettest.New(t, mhinettest.Options{Net: &rawCfg})
	if n, err := raw.Net.TransmitSession(1, [][]byte{ipv4(100, 1)}); n != 0 || !errors.Is(err, mhinet.ErrSession) {
		t.Errorf("session 1 on raw IP: %d, %v; want 0, ErrSession", n, err)
	}
	if _, err := raw.Net.TransmitGSOSession(1, nil); !errors.Is(err, mhinet.ErrSession) {
		t.Errorf("GSO session 1 on raw IP: %v; want ErrSession", err)
	}
}

// ndpSpec is one NDP of a hand-built NTB: its wire id and datagrams.
type ndpSpec struct {
	sid  uint8
	pkts [][]byte
}

// multiNDP builds an NTB16 whose NDPs, chained by wNextNdpIndex in the
// order given, carry the datagrams of several sessions, as a modem that
// interleaves sessions in one aggregate does.
func multiNDP(seq uint16, ndps ...ndpSpec) []byte {
	le := binary.LittleEndian
	b := make([]byte, ntb.NTH16Len)
	align := func() {
		for len(b)%4 != 0 {
			b = append(b, 0)
		}
	}
	offs := make([][]int, len(ndps))
	for i, nd := range ndps {
		for _, p := range nd.pkts {
			align()
			offs[i] = append(offs[i], len(b))
			b = append(b, p...)
		}
	}
	var starts []int
	for i, nd := range ndps {
		align()
		start := len(b)
		starts = append(starts, start)
		b = append(b, make([]byte, ntb.NDP16HeaderLen+ntb.NDP16EntryLen*(len(nd.pkts)+1))...)
		le.PutUint32(b[start:], ntb.NDPSignature(false, ntb.IPS, nd.sid))
		le.PutUint16(b[start+4:], uint16(len(b)-start))
		for k, p := range nd.pkts {
			e := start + ntb.NDP16HeaderLen + k*ntb.NDP16EntryLen
			le.PutUint16(b[e:], uint16(offs[i][k]))
			le.PutUint16(b[e+2:], uint16(len(p)))
		}
		if i > 0 {
			le.PutUint16(b[starts[i-1]+6:], uint16(start))
		}
	}
	le.PutUint32(b, ntb.SigNTH16)
	le.PutUint16(b[4:], ntb.NTH16Len)
	le.PutUint16(b[6:], seq)
	le.PutUint16(b[8:], uint16(len(b)))
	le.PutUint16(b[10:], uint16(starts[0]))
	return b
}

// demuxRig is a hostile modem whose downlink a test writes by hand, with
// sessions 0 and 1 of base 112 routed by a Mux.
type demuxRig struct {
	*hostileRig
	mux      *tun.Mux
	rx0, rx1 *sessRx
}

func newDemuxRig(t *testing.T, f framing.Format) *demuxRig {
	d := &demuxRig{mux: tun.NewMux(), rx0: &sessRx{}, rx1: &sessRx{}}
	d.mux.Set(0, d.rx0)
	d.mux.Set(1, d.rx1)
	d.hostileRig = newHostileRigRx(t, "telit-fn990", ipdata.Config{Format: f}, mhinet.Config{Format: f, Session: testBase, MRU: 8192}, d.mux)
	return d
}

// A modem that interleaves the NDPs of sessions 0 and 1 in one NTB: each
// datagram reaches its NDP's session, in order, each receiver once per
// NTB. An NDP of an invented session id (200 = session 88, and 5, below
// the base = session 5) reaches no one: released, counted in
// rx_session_unknown and the session's rx_dropped. A datagram of
// "session 1's" (seq 1xxx) in session 0's NDP goes to session 0: the host
// trusts the NDP, the only session id there is.
func TestSessionsDemuxNTB(t *testing.T) {
	d := newDemuxRig(t, framing.NTB16)
	var ntbs [][]byte
	for i := range uint32(10) {
		ntbs = append(ntbs, multiNDP(uint16(i),
			ndpSpec{testBase, [][]byte{ipv4(200, 10*i), ipv4(300, 10*i+1)}},
			ndpSpec{testBase + 1, [][]byte{ipv4(220, 1000+10*i), ipv4(320, 1000+10*i+1)}},
			ndpSpec{200, [][]byte{ipv4(100, 5000+i)}},
			ndpSpec{testBase, [][]byte{ipv4(240, 10*i+2), ipv4(180, 1000+10*i+9)}},
			ndpSpec{5, [][]byte{ipv4(100, 6000+i), ipv4(100, 7000+i)}},
		))
	}
	d.pushAll(t, ntbs...)
	s := d.quiesce(t)
	var want0, want1 []uint32
	for i := range uint32(10) {
		want0 = append(want0, 10*i, 10*i+1, 10*i+2, 1000+10*i+9)
		want1 = append(want1, 1000+10*i, 1000+10*i+1)
	}
	d.rx0.check(t, 0, want0)
	d.rx1.check(t, 1, want1)
	if _, calls := d.rx0.snapshot(); calls != 10 {
		t.Errorf("session 0's receiver called %d times for 10 NTBs, want 10", calls)
	}
	ms := d.mux.Stats()
	if ms.UnknownSession != 30 || ms.SplitBatches != 10 {
		t.Errorf("mux %+v, want 30 unknown-session packets, 10 split batches", ms)
	}
	for n, want := range map[uint8]uint64{88: 10, 5: 20} {
		ss, ok := d.mux.SessionStats(n)
		if !ok || ss.RxDropped != want || ss.RxPackets != 0 {
			t.Errorf("session %d: %+v (known %v), want %d dropped, none received", n, ss, ok, want)
		}
	}
	if s.RxPackets != 90 || s.NTB.Errors() != 0 {
		t.Errorf("device: rx %d packets (want 90), NTB errors %+v", s.RxPackets, s.NTB)
	}
	checkPoolWhole(t, d.dev.Stats())
}

// The QMAP counterpart: one aggregate holds frames of mux ids 112, 113,
// 112 and an invented 7 (below the base: session 7, no receiver).
func TestSessionsDemuxQMAP(t *testing.T) {
	d := newDemuxRig(t, framing.QMAP)
	var aggs [][]byte
	for i := range uint32(10) {
		buf := make([]byte, 4096)
		var w qmap.Writer
		if err := w.Reset(buf, qmap.Config{}); err != nil {
			t.Fatal(err)
		}
		for _, fr := range []struct {
			mux uint8
			seq uint32
		}{{testBase, 10 * i}, {testBase + 1, 1000 + 10*i}, {7, 7000 + i}, {testBase, 10*i + 1}, {testBase + 1, 1000 + 10*i + 1}} {
			if err := w.AddPacket(ipv4(200, fr.seq), fr.mux, qmap.Csum{}); err != nil {
				t.Fatal(err)
			}
		}
		aggs = append(aggs, buf[:w.Finish()])
	}
	d.pushAll(t, aggs...)
	d.quiesce(t)
	d.rx0.check(t, 0, []uint32{0, 1, 10, 11, 20, 21, 30, 31, 40, 41, 50, 51, 60, 61, 70, 71, 80, 81, 90, 91})
	var want1 []uint32
	for i := range uint32(10) {
		want1 = append(want1, 1000+10*i, 1000+10*i+1)
	}
	d.rx1.check(t, 1, want1)
	if ms := d.mux.Stats(); ms.UnknownSession != 10 {
		t.Errorf("mux %+v, want 10 unknown-session packets", ms)
	}
	checkPoolWhole(t, d.dev.Stats())
}

// FollowSession learns the base from the downlink (wire 112 on a base of
// 0 moves it to 112) and then takes 113 as session 1 of that base, not as
// a new base.
func TestFollowSessionKeepsBase(t *testing.T) {
	mux := tun.NewMux()
	rx0, rx1 := &sessRx{}, &sessRx{}
	mux.Set(0, rx0)
	mux.Set(1, rx1)
	r := newHostileRigRx(t, "telit-fn990", ipdata.Config{Format: framing.NTB16},
		mhinet.Config{Format: framing.NTB16, FollowSession: true, MRU: 8192}, mux)
	r.pushAll(t, multiNDP(0, ndpSpec{testBase, [][]byte{ipv4(200, 0)}}),
		multiNDP(1, ndpSpec{testBase + 1, [][]byte{ipv4(200, 1000)}}, ndpSpec{testBase, [][]byte{ipv4(200, 1)}}))
	s := r.quiesce(t)
	rx0.check(t, 0, []uint32{0, 1})
	rx1.check(t, 1, []uint32{1000})
	if s.TxSession != testBase || s.TxSessionFollows != 1 {
		t.Errorf("tx_session %d, follows %d; want %d, 1", s.TxSession, s.TxSessionFollows, testBase)
	}
}

// Every session's TransmitReadySession channel is woken by a completion,
// not only one of them (two bridges wait on one device).
func TestTransmitReadySessionWakesEverySession(t *testing.T) {
	cfg := mhinet.Config{Format: framing.QMAP, Session: testBase}
	r := mhinettest.New(t, mhinettest.Options{Model: "telit-fn990", IPData: &ipdata.Config{Format: framing.QMAP}, Net: &cfg})
	ready := []<-chan struct{}{r.Net.TransmitReadySession(0), r.Net.TransmitReadySession(1), r.Net.TransmitReadySession(5)}
	if r.Net.TransmitReadySession(1) != ready[1] {
		t.Fatal("a second call for session 1 made another channel")
	}
	for _, c := range ready { // forget wakes from bring-up
		select {
		case <-c:
		default:
		}
	}
	transmitSession(t, r.Net, 1, [][]byte{ipv4(100, 1)})
	for n, c := range ready {
		select {
		case <-c:
		case <-time.After(5 * time.Second):
			t.Fatalf("channel %d not woken by the completion", n)
		}
	}
}

// Twenty sessions' packets in one call: an NTB holds at most
// ntb.MaxWriterNDPs NDPs, so the 17th session closes it and opens the
// next; every packet still reaches its own session.
func TestSessionsMoreThanMaxNDPs(t *testing.T) {
	const sessions = 20
	mux := tun.NewMux()
	rx := make([]*sessRx, sessions)
	for n := range rx {
		rx[n] = &sessRx{}
		mux.Set(uint8(n), rx[n])
	}
	cfg := mhinet.Config{Format: framing.NTB16, Session: testBase, TXAggregate: true, TXAggMaxPackets: 32, TXAggMaxBytes: 8192, TXAggTimeout: time.Second}
	r := mhinettest.New(t, mhinettest.Options{Model: "telit-fn990", IPData: &ipdata.Config{Format: framing.NTB16},
		DataFunction: &mhinettest.Echo{}, Net: &cfg, Receiver: mux})
	for n := range uint8(sessions) {
		transmitSession(t, r.Net, n, [][]byte{ipv4(100, 100*uint32(n))})
	}
	poll.Wait(t, 10*time.Second, func() bool { return r.Net.Flush() == nil }, func() string { return "flush" })
	poll.Wait(t, 10*time.Second, func() bool { return r.Net.Stats().RxPackets >= sessions },
		func() string { return fmt.Sprintf("device %+v", r.Net.Stats()) })
	for n := range uint8(sessions) {
		rx[n].check(t, n, []uint32{100 * uint32(n)})
	}
	if s := r.Net.Stats(); s.NTB.NTBs != 2 || s.NTB.NDPs != sessions || s.TxAggClosedPackets != 1 {
		t.Errorf("%d NTBs with %d NDPs, %d closed at the limit; want 2 NTBs, %d NDPs, 1", s.NTB.NTBs, s.NTB.NDPs, s.TxAggClosedPackets, sessions)
	}
}
