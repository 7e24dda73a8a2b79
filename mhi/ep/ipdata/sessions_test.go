package ipdata

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/gomhi/gomhi/mhi/ep"
	"github.com/gomhi/gomhi/mhi/ep/eptest"
	"github.com/gomhi/gomhi/mhi/proto/framing"
	"github.com/gomhi/gomhi/mhi/proto/ntb"
	"github.com/gomhi/gomhi/mhi/proto/qmap"
)

// wirePacket is a packet and the wire id (NDP session, QMAP mux id) it
// travels with.
type wirePacket struct {
	wire uint8
	data []byte
}

// encodeULWire frames packets as a host multiplexing sessions would: up to
// perTransfer packets of any wire ids in one transfer of at most maxLen
// bytes (one NDP per session, a mux id per QMAP frame).
func encodeULWire(t *testing.T, cfg Config, pkts []wirePacket, perTransfer, maxLen int) [][]byte {
	t.Helper()
	var nw ntb.Writer
	var qw qmap.Writer
	buf := make([]byte, maxLen)
	reset := func() {
		var err error
		if cfg.Format == framing.QMAP {
			err = qw.Reset(buf, qmap.Config{MaxPackets: perTransfer, Csum: cfg.QMAPCsum, Uplink: true})
		} else {
			err = nw.Reset(buf, ntb.Config{MaxDatagrams: perTransfer, NTB32: cfg.Format == framing.NTB32})
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	add := func(p wirePacket) error {
		if cfg.Format == framing.QMAP {
			return qw.AddPacket(p.data, p.wire, qmap.Csum{})
		}
		return nw.AddSession(p.data, p.wire)
	}
	var w framing.Writer = &nw
	if cfg.Format == framing.QMAP {
		w = &qw
	}
	var out [][]byte
	reset()
	for i := 0; i < len(pkts); {
		err := add(pkts[i])
		if err == nil {
			if i++; i < len(pkts) {
				continue
			}
		} else if w.Count() == 0 {
			t.Fatalf("UL packet %d: %v", i, err)
		}
		out = append(out, bytes.Clone(buf[:w.Finish()]))
		reset()
	}
	return out
}

// decodeDLWire splits the downlink transfers into packets with their wire
// ids, checking the aggregate limits; it returns the packets and, per
// transfer, how many sessions it carried.
func decodeDLWire(t *testing.T, cfg Config, transfers [][]byte) (pkts []wirePacket, sessions []int) {
	t.Helper()
	var np ntb.Parser
	qp := qmap.Parser{Csum: cfg.QMAPCsum}
	for i, x := range transfers {
		seen := map[uint8]bool{}
		n := 0
		var err error
		fn := func(wire uint8, d []byte) {
			pkts = append(pkts, wirePacket{wire, d})
			seen[wire] = true
			n++
		}
		if cfg.Format == framing.QMAP {
			_, err = qp.Parse(x, func(p qmap.Packet) { fn(p.Mux, p.Data) })
		} else {
			_, err = np.Parse(x, func(d []byte, sid uint8) { fn(sid, d) })
		}
		if err != nil {
			t.Fatalf("DL transfer %d: %v", i, err)
		}
		if n > cfg.MaxDatagrams || len(x) > cfg.MaxAggregate {
			t.Fatalf("DL transfer %d: %d packets, %d bytes (limits %d, %d)", i, n, len(x), cfg.MaxDatagrams, cfg.MaxAggregate)
		}
		sessions = append(sessions, len(seen))
	}
	return pkts, sessions
}

// perWire groups packets by wire id, in order.
func perWire(pkts []wirePacket) map[uint8][][]byte {
	m := map[uint8][][]byte{}
	for _, p := range pkts {
		m[p.wire] = append(m[p.wire], p.data)
	}
	return m
}

// checkSessionConservation asserts, for every session row, that every
// packet in is out, pending or dropped, and that the rows add up to the
// Function's totals.
func checkSessionConservation(t *testing.T, f *Function) []SessionStats {
	t.Helper()
	rows := f.SessionStats()
	s := f.Stats()
	var ul, dl, drop uint64
	for _, r := range rows {
		if in, out := r.ULPackets+r.GenPackets, r.DLPackets+r.Pending+r.Dropped; in != out {
			t.Fatalf("session %d: %d packets in, %d out+pending+dropped (%+v)", r.Session, in, out, r)
		}
		if r.Wire != f.base+r.Session {
			t.Fatalf("session %d on wire %d, base %d", r.Session, r.Wire, f.base)
		}
		ul, dl, drop = ul+r.ULPackets, dl+r.DLPackets, drop+r.Dropped
	}
	if ul != s.ULPackets || dl != s.DLPackets || drop != s.Dropped() {
		t.Fatalf("session rows sum to UL %d DL %d dropped %d; stats %+v", ul, dl, drop, s)
	}
	return rows
}

// rowOf returns session n's row.
func rowOf(t *testing.T, rows []SessionStats, n uint8) SessionStats {
	t.Helper()
	for _, r := range rows {
		if r.Session == n {
			return r
		}
	}
	t.Fatalf("no row for session %d in %+v", n, rows)
	return SessionStats{}
}

// interleave makes n packets per session, sessions round robin, sizes
// cycling through sizes; wire is base+session.
func interleave(k, n int, base uint8, sizes ...int) []wirePacket {
	var out []wirePacket
	for i := range n * k {
		out = append(out, wirePacket{base + uint8(i%k), testPacket(sizes[i%len(sizes)], uint64(i))})
	}
	return out
}

// TestIPDataSessionsInterleaved: two and three sessions interleaved in
// the uplink come back each on its own session, in order within the
// session, sharing downlink aggregates under the 32-packet and
// MaxAggregate limits; the per-session counters add up.
func TestIPDataSessionsInterleaved(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"ntb16", Config{Format: framing.NTB16}},
		{"ntb16 base 112", Config{Format: framing.NTB16, Session: 112}},
		{"ntb32 16K", Config{Format: framing.NTB32, MaxAggregate: 16384}},
		{"qmap", Config{Format: framing.QMAP}},
		{"qmap base 112 8K", Config{Format: framing.QMAP, QMAPMux: 112, MaxAggregate: 8192}},
	} {
		for _, k := range []int{2, 3} {
			t.Run(fmt.Sprintf("%s/%d sessions", tc.name, k), func(t *testing.T) {
				// Aggregates leave on their limits only (and the last
				// on Flush), so each holds packets of every session.
				tc.cfg.FlushTimer, tc.cfg.NoIdleFlush = -1, true
				r := newIPRig(t, ipRigConfig{ip: tc.cfg, dlBuffers: 12, ulSize: 65536 - 64, ring: 8})
				cfg := r.ipd.Config()
				base := wireBase(&cfg)
				pkts := interleave(k, 40, base, 64, 1500, 576, 40)
				// Two packets per session in each uplink transfer: an
				// NTB's NDPs group them by session, QMAP keeps them
				// interleaved.
				for _, x := range encodeULWire(t, cfg, pkts, 2*k, r.ulSize) {
					r.sendUL(x)
				}
				r.pumpUntil("uplink", func() bool { return r.ipd.Stats().ULPackets == uint64(len(pkts)) })
				r.ipd.Flush()
				s := r.waitAggregates(uint64(len(pkts)))
				got, sessions := decodeDLWire(t, cfg, r.transfers)
				want, have := perWire(pkts), perWire(got)
				for w, ps := range want {
					samePackets(t, have[w], ps)
				}
				if len(have) != k || s.Dropped() != 0 || s.FlushFull+s.FlushSize == 0 {
					t.Fatalf("%d wire ids came back, stats %+v", len(have), s)
				}
				if mixed := maxInt(sessions); mixed != k {
					t.Fatalf("no DL aggregate holds all %d sessions: %v", k, sessions)
				}
				// DLMixedAggregates counts what the decoding saw: the
				// aggregates holding more than one session.
				var mixedSeen uint64
				for _, n := range sessions {
					if n > 1 {
						mixedSeen++
					}
				}
				if s.DLMixedAggregates != mixedSeen || mixedSeen == 0 {
					t.Fatalf("DLMixedAggregates %d, %d aggregates seen holding several sessions (%v)", s.DLMixedAggregates, mixedSeen, sessions)
				}
				rows := checkSessionConservation(t, r.ipd)
				for n := range uint8(k) {
					row := rowOf(t, rows, n)
					if row.ULPackets != 40 || row.DLPackets != 40 || row.Wire != base+n || row.DLBytes != row.ULBytes {
						t.Fatalf("session %d: %+v", n, row)
					}
				}
				if len(rows) != k || len(s.Sessions) != k {
					t.Fatalf("%d session rows (%d in Stats) for %d sessions", len(rows), len(s.Sessions), k)
				}
			})
		}
	}
}

func maxInt(v []int) int {
	m := 0
	for _, x := range v {
		m = max(m, x)
	}
	return m
}

// sessionGate is a SessionGate a test opens per session; its DataAllowed
// is open, so a Function that ignored SessionAllowed would let all through.
type sessionGate struct{ closed [NumSessions]atomic.Bool }

func (g *sessionGate) DataAllowed() bool           { return true }
func (g *sessionGate) SessionAllowed(n uint8) bool { return !g.closed[n].Load() }

// TestIPDataSessionGate: with session 1 disconnected its packets are
// dropped and counted on session 1, while session 0's flow; once it
// connects, both flow.
func TestIPDataSessionGate(t *testing.T) {
	for _, format := range []framing.Format{framing.NTB16, framing.QMAP} {
		t.Run(format.String(), func(t *testing.T) {
			var gate sessionGate
			gate.closed[1].Store(true)
			r := newIPRig(t, ipRigConfig{ip: Config{Format: format, Gate: &gate, Session: 112, QMAPMux: 112},
				ulSize: 65536 - 64})
			cfg := r.ipd.Config()
			pkts := interleave(2, 10, 112, 100, 1400)
			for _, x := range encodeULWire(t, cfg, pkts, 32, r.ulSize) {
				r.sendUL(x)
			}
			s := r.waitAggregates(uint64(len(pkts)))
			got := perWire(decodeDLWireAll(t, cfg, r.transfers))
			samePackets(t, got[112], perWire(pkts)[112])
			if len(got[113]) != 0 || s.DroppedGated != 10 {
				t.Fatalf("%d packets of the closed session came back; stats %+v", len(got[113]), s)
			}
			rows := checkSessionConservation(t, r.ipd)
			if r1 := rowOf(t, rows, 1); r1.DroppedGated != 10 || r1.Dropped != 10 || r1.ULPackets != 10 || r1.DLPackets != 0 {
				t.Fatalf("session 1: %+v", r1)
			}
			if r0 := rowOf(t, rows, 0); r0.DroppedGated != 0 || r0.DLPackets != 10 {
				t.Fatalf("session 0: %+v", r0)
			}
			gate.closed[1].Store(false) // session 1 connects
			for _, x := range encodeULWire(t, cfg, pkts, 32, r.ulSize) {
				r.sendUL(x)
			}
			r.waitAggregates(2 * uint64(len(pkts)))
			rows = checkSessionConservation(t, r.ipd)
			if r1 := rowOf(t, rows, 1); r1.DLPackets != 10 || r1.DroppedGated != 10 {
				t.Fatalf("session 1 after connecting: %+v", r1)
			}
		})
	}
}

// decodeDLWireAll is decodeDLWire's packets.
func decodeDLWireAll(t *testing.T, cfg Config, transfers [][]byte) []wirePacket {
	t.Helper()
	p, _ := decodeDLWire(t, cfg, transfers)
	return p
}

// TestIPDataSessionWireBelowBase: with base 112, an uplink wire id w
// below it is session w (answered on 112+w) unless StrictSession, which
// drops it (DroppedSession) and still takes wire ids from the base on.
func TestIPDataSessionWireBelowBase(t *testing.T) {
	for _, strict := range []bool{false, true} {
		t.Run(fmt.Sprintf("strict=%v", strict), func(t *testing.T) {
			r := newIPRig(t, ipRigConfig{ip: Config{Format: framing.NTB16, Session: 112, StrictSession: strict},
				ulSize: 65536 - 64})
			cfg := r.ipd.Config()
			pkts := []wirePacket{
				{0, testPacket(100, 1)}, {1, testPacket(100, 2)}, {113, testPacket(100, 3)}, {0, testPacket(100, 4)},
			}
			for _, x := range encodeULWire(t, cfg, pkts, 32, r.ulSize) {
				r.sendUL(x)
			}
			s := r.waitAggregates(uint64(len(pkts)))
			got := perWire(decodeDLWireAll(t, cfg, r.transfers))
			rows := checkSessionConservation(t, r.ipd)
			if !strict {
				samePackets(t, got[112], [][]byte{pkts[0].data, pkts[3].data})
				samePackets(t, got[113], [][]byte{pkts[1].data, pkts[2].data})
				if s.Dropped() != 0 || rowOf(t, rows, 1).ULPackets != 2 {
					t.Fatalf("stats %+v, rows %+v", s, rows)
				}
				return
			}
			samePackets(t, got[113], [][]byte{pkts[2].data})
			if len(got[112]) != 0 || s.DroppedSession != 3 || rowOf(t, rows, 0).Dropped != 2 {
				t.Fatalf("got %d on 112; stats %+v, rows %+v", len(got[112]), s, rows)
			}
		})
	}
}

// TestIPDataSessionResponder: the responder answers each session's
// gateway (198.18.N.2, fd00:6d68:6900:N::2) on that session.
func TestIPDataSessionResponder(t *testing.T) {
	r := newIPRig(t, ipRigConfig{ip: Config{Format: framing.QMAP, QMAPMux: 112, Responder: true}, ulSize: 65536 - 64})
	cfg := r.ipd.Config()
	var pkts []wirePacket
	for n := range uint8(3) {
		v4 := icmp4(8, "ping")
		copy(v4[12:], []byte{198, 18, n, 1})
		copy(v4[16:], []byte{198, 18, n, 2})
		be.PutUint16(v4[10:], 0)
		be.PutUint16(v4[10:], checksum(0, v4[:20]))
		echo := make([]byte, 8+4)
		echo[0] = 128
		copy(echo[8:], "pong")
		v6 := ip6(58, echo)
		addr6 := func(b []byte, host byte) {
			copy(b, []byte{0xfd, 0x00, 0x6d, 0x68, 0x69, 0x00, 0, n, 0, 0, 0, 0, 0, 0, 0, host})
		}
		addr6(v6[8:24], 1)
		addr6(v6[24:40], 2)
		be.PutUint16(v6[42:], 0)
		be.PutUint16(v6[42:], checksum(pseudo6(v6[8:24], v6[24:40], 58, len(echo)), v6[40:]))
		// The v4 question carries 4 bytes past its IP length, which
		// its answer leaves out: the session's UL bytes count them.
		v4 = append(v4, 0, 0, 0, 0)
		pkts = append(pkts, wirePacket{112 + n, v4}, wirePacket{112 + n, v6})
	}
	for _, x := range encodeULWire(t, cfg, pkts, 32, r.ulSize) {
		r.sendUL(x)
	}
	s := r.waitAggregates(uint64(len(pkts)))
	got := decodeDLWireAll(t, cfg, r.transfers)
	if s.Answered != 6 || len(got) != 6 {
		t.Fatalf("%d answers; stats %+v", len(got), s)
	}
	for _, p := range got {
		n := p.wire - 112
		switch p.data[0] >> 4 {
		case 4:
			if !bytes.Equal(p.data[12:16], []byte{198, 18, n, 2}) || p.data[20] != 0 {
				t.Fatalf("v4 answer on wire %d from %v type %d", p.wire, p.data[12:16], p.data[20])
			}
		case 6:
			if p.data[24+7] != n || p.data[23] != 2 || p.data[40] != 129 {
				t.Fatalf("v6 answer on wire %d: %x", p.wire, p.data[8:41])
			}
		}
	}
	rows := checkSessionConservation(t, r.ipd)
	for n := range uint8(3) {
		ul := uint64(len(pkts[2*n].data) + len(pkts[2*n+1].data))
		if row := rowOf(t, rows, n); row.ULPackets != 2 || row.DLPackets != 2 || row.ULBytes != ul || row.DLBytes != ul-4 {
			t.Fatalf("session %d: %+v (UL bytes %d)", n, row, ul)
		}
	}
}

// BenchmarkIPDataSessions is the loopback with one and with two sessions
// interleaved in every uplink NTB or QMAP buffer (32 packets of 1400
// bytes): no allocation either way.
func BenchmarkIPDataSessions(b *testing.B) {
	for _, format := range []framing.Format{framing.NTB16, framing.QMAP} {
		for _, k := range []int{1, 2} {
			b.Run(fmt.Sprintf("%v/sessions=%d", format, k), func(b *testing.B) {
				cfg := Config{Format: format}
				ipd, err := New(cfg)
				if err != nil {
					b.Fatal(err)
				}
				p, drain := benchPipe(b, ipd)
				pkts := interleave(k, 32/k, 0, 1400)
				t := &testing.T{}
				ul := encodeULWire(t, ipd.Config(), pkts, 32, 65535)
				if len(ul) != 1 {
					b.Fatalf("%d uplink transfers", len(ul))
				}
				ctx := context.Background()
				b.SetBytes(32 * 1400)
				b.ReportAllocs()
				for b.Loop() {
					if err := ipd.Receive(ctx, p, ul[0]); err != nil {
						b.Fatal(err)
					}
					drain()
				}
				b.StopTimer()
				ipd.Flush()
				if s := ipd.Stats(); s.Dropped() != 0 {
					b.Fatalf("dropped: %+v", s)
				}
				if rows := ipd.SessionStats(); len(rows) != k {
					b.Fatalf("%d session rows", len(rows))
				}
			})
		}
	}
}

// TestSessionStatsJSON: the per-session counters carry snake_case JSON
// names.
func TestSessionStatsJSON(t *testing.T) {
	b, err := json.Marshal(SessionStats{Session: 1, Wire: 113, ULPackets: 2, DroppedGated: 3})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{`"session":1`, `"wire":113`, `"ul_packets":2`, `"ul_bytes":0`, `"dl_packets":0`,
		`"dl_bytes":0`, `"dropped_gated":3`} {
		if !strings.Contains(string(b), k) {
			t.Fatalf("%s lacks %s", b, k)
		}
	}
}

// TestIPDataGeneratorSessions: GeneratorConfig.Sessions spreads the
// generated packets round robin over sessions, each gated on its own
// (session 2 closed: its packets counted as gated on session 2), the
// others sharing aggregates; Sessions with a Link is refused.
func TestIPDataGeneratorSessions(t *testing.T) {
	const count = 90
	var gate sessionGate
	gate.closed[2].Store(true)
	r := newIPRig(t, ipRigConfig{ip: Config{Format: framing.QMAP, QMAPMux: 112, Gate: &gate, FlushTimer: -1}, dlBuffers: 12})
	if err := r.ipd.StartGenerator(GeneratorConfig{Count: count, Sizes: []int{200}, Sessions: 3}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.ipd.WaitGenerator(context.Background()); err != nil {
		t.Fatal(err)
	}
	s := r.waitAggregates(count)
	got, sessions := decodeDLWire(t, r.ipd.Config(), r.transfers)
	byWire := perWire(got)
	if len(byWire[112]) != count/3 || len(byWire[113]) != count/3 || len(byWire[114]) != 0 || maxInt(sessions) != 2 {
		t.Fatalf("per wire %d/%d/%d, sessions per aggregate %v", len(byWire[112]), len(byWire[113]), len(byWire[114]), sessions)
	}
	for w, ps := range byWire {
		for i, p := range ps {
			if seq, ok := GeneratedSeq(p); !ok || seq != uint64(3*i)+uint64(w-112) {
				t.Fatalf("wire %d packet %d: seq %d", w, i, seq)
			}
		}
	}
	rows := checkSessionConservation(t, r.ipd)
	if r2 := rowOf(t, rows, 2); r2.GenPackets != count/3 || r2.DroppedGated != count/3 || s.DroppedGated != count/3 {
		t.Fatalf("session 2: %+v", r2)
	}
	for _, bad := range []GeneratorConfig{{Sessions: -1}, {Sessions: NumSessions + 1}, {Sessions: 2, Link: &Link{BitsPerSecond: 1e9}}} {
		if err := r.ipd.StartGenerator(bad); err == nil || !strings.Contains(err.Error(), "sessions") {
			t.Fatalf("StartGenerator(%+v) = %v", bad, err)
		}
	}
}

// TestIPDataSessionStatsOpenAggregate: the packets of the aggregate still
// open are in their sessions' ULPackets, ULBytes and Pending (not yet in
// DLPackets), and move to DLPackets and DLBytes when it leaves.
func TestIPDataSessionStatsOpenAggregate(t *testing.T) {
	for _, format := range []framing.Format{framing.NTB16, framing.QMAP} {
		t.Run(format.String(), func(t *testing.T) {
			r := newIPRig(t, ipRigConfig{ip: Config{Format: format, FlushTimer: -1, NoIdleFlush: true},
				dlBuffers: 12, ulSize: 65536 - 64, ring: 8})
			cfg := r.ipd.Config()
			pkts := []wirePacket{
				{0, testPacket(100, 1)}, {1, testPacket(200, 2)}, {0, testPacket(300, 3)},
				{1, testPacket(40, 4)}, {0, testPacket(60, 5)},
			}
			for _, x := range encodeULWire(t, cfg, pkts, 8, r.ulSize) {
				r.sendUL(x)
			}
			r.pumpUntil("uplink", func() bool { return r.ipd.Stats().ULPackets == uint64(len(pkts)) })
			want := map[uint8][2]uint64{0: {3, 460}, 1: {2, 240}} // packets, bytes
			rows := checkSessionConservation(t, r.ipd)
			for n, w := range want {
				row := rowOf(t, rows, n)
				if row.ULPackets != w[0] || row.ULBytes != w[1] || row.Pending != w[0] || row.DLPackets != 0 || row.DLBytes != 0 {
					t.Fatalf("open aggregate, session %d: %+v", n, row)
				}
			}
			r.ipd.Flush()
			r.waitAggregates(uint64(len(pkts)))
			rows = checkSessionConservation(t, r.ipd)
			for n, w := range want {
				row := rowOf(t, rows, n)
				if row.ULPackets != w[0] || row.ULBytes != w[1] || row.Pending != 0 || row.DLPackets != w[0] || row.DLBytes != w[1] {
					t.Fatalf("flushed, session %d: %+v", n, row)
				}
			}
			if len(rows) != 2 {
				t.Fatalf("%d session rows", len(rows))
			}
		})
	}
}

// TestIPDataSessionULDroppedInAggregator: an uplink packet the aggregator
// refuses (empty, too large for an aggregate) is in its session's
// ULPackets and ULBytes and in its Dropped.
func TestIPDataSessionULDroppedInAggregator(t *testing.T) {
	ipd, err := New(Config{Format: framing.NTB16, UplinkRaw: true, MaxAggregate: 1024})
	if err != nil {
		t.Fatal(err)
	}
	h := eptest.NewHost(t, func(c *ep.Config) { c.Functions = map[string]ep.Function{Name: ipd} })
	p, _ := h.Dev.Pipe(Name)
	drain := p.RunDLWithoutHost()
	ctx := context.Background()
	for _, pkt := range [][]byte{{}, testPacket(1500, 1), testPacket(100, 2)} {
		if err := ipd.Receive(ctx, p, pkt); err != nil {
			t.Fatal(err)
		}
		drain()
	}
	ipd.Flush()
	drain()
	s := ipd.Stats()
	rows := checkSessionConservation(t, ipd)
	row := rowOf(t, rows, 0)
	if s.DroppedEmpty != 1 || s.DroppedTooLarge != 1 || row.ULPackets != 3 || row.ULBytes != 1600 ||
		row.Dropped != 2 || row.DLPackets != 1 || row.DLBytes != 100 {
		t.Fatalf("session 0: %+v; stats %+v", row, s)
	}
}
