package ipdata

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhi/ep"
	"github.com/gomhi/gomhi/mhi/ep/eptest"
	"github.com/gomhi/gomhi/mhi/proto/framing"
	"github.com/gomhi/gomhi/mhi/proto/ntb"
	"github.com/gomhi/gomhi/mhi/proto/qmap"
	"github.com/gomhi/gomhi/mhi/wire"
)

// testPacket returns a valid IPv4/UDP packet of size bytes carrying seq.
func testPacket(size int, seq uint64) []byte {
	b := make([]byte, size)
	putGenPacket(b, seq, &GeneratorConfig{Src: [4]byte{192, 0, 2, 1}, Dst: [4]byte{192, 0, 2, 2}, SrcPort: 7, DstPort: 9})
	return b
}

// testPackets returns n packets with sizes taken in turn from sizes.
func testPackets(n int, sizes ...int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		out[i] = testPacket(sizes[i%len(sizes)], uint64(i))
	}
	return out
}

// encodeUL frames packets as the host's uplink would for cfg, perTransfer
// packets at most in one transfer of at most maxLen bytes.
func encodeUL(t *testing.T, cfg Config, pkts [][]byte, perTransfer, maxLen int) [][]byte {
	t.Helper()
	if cfg.UplinkRaw || cfg.Format == framing.RawIP {
		return pkts
	}
	var w framing.Writer
	var reset func(buf []byte) error
	switch cfg.Format {
	case framing.QMAP:
		qw := new(qmap.Writer)
		// The host's uplink: the negotiated checksum framing, as rmnet
		// sends it (CsumV4: the UL checksum header, no offload asked), on
		// session 0.
		qc := qmap.Config{Mux: cfg.QMAPMux, MaxPackets: perTransfer, Csum: cfg.QMAPCsum, Uplink: true}
		w, reset = qw, func(buf []byte) error { return qw.Reset(buf, qc) }
	default:
		nw := new(ntb.Writer)
		nc := ntb.Config{MaxDatagrams: perTransfer, Layout: ntb.NDPFirst, NTB32: cfg.Format == framing.NTB32}
		w, reset = nw, func(buf []byte) error { return nw.Reset(buf, nc) }
	}
	var out [][]byte
	buf := make([]byte, maxLen)
	if err := reset(buf); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < len(pkts); {
		err := w.Add(pkts[i])
		if err == nil {
			i++
			if i < len(pkts) {
				continue
			}
		} else if w.Count() == 0 {
			t.Fatalf("UL packet %d: %v", i, err)
		}
		out = append(out, bytes.Clone(buf[:w.Finish()]))
		if err := reset(buf); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// decodeDL splits the downlink transfers into packets, checking the
// framing fields cfg asks for; it also returns the packets per transfer.
func decodeDL(t *testing.T, cfg Config, transfers [][]byte) (pkts [][]byte, per []int) {
	t.Helper()
	var np ntb.Parser
	qp := qmap.Parser{Csum: cfg.QMAPCsum}
	for i, x := range transfers {
		before := len(pkts)
		var err error
		switch cfg.Format {
		case framing.RawIP:
			pkts = append(pkts, x)
		case framing.QMAP:
			_, err = qp.Parse(x, func(p qmap.Packet) {
				if p.Mux != cfg.QMAPMux || (cfg.QMAPCsum != qmap.CsumNone && p.Csum.Valid != cfg.QMAPCsumValid) {
					t.Errorf("DL transfer %d: mux %d csum %+v", i, p.Mux, p.Csum)
				}
				pkts = append(pkts, p.Data)
			})
		default:
			_, err = np.Parse(x, func(d []byte, sid uint8) {
				if sid != cfg.Session {
					t.Errorf("DL transfer %d: session %d, want %d", i, sid, cfg.Session)
				}
				pkts = append(pkts, d)
			})
			if cfg.Format == framing.NTB32 && ntb.SigNTH32 != le32(x) {
				t.Errorf("DL transfer %d is not an NTB32", i)
			}
		}
		if err != nil {
			t.Fatalf("DL transfer %d (%d bytes): %v", i, len(x), err)
		}
		if len(x) > max(cfg.MaxAggregate, 1) && cfg.Format != framing.RawIP {
			t.Errorf("DL transfer %d: %d bytes, more than MaxAggregate %d", i, len(x), cfg.MaxAggregate)
		}
		per = append(per, len(pkts)-before)
	}
	return pkts, per
}

func le32(b []byte) uint32 {
	if len(b) < 4 {
		return 0
	}
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
}

// checkConservation asserts that every packet in is out, pending or
// dropped under a name.
func checkConservation(t *testing.T, s Stats) {
	t.Helper()
	if in, out := s.ULPackets+s.GenPackets, s.DLPackets+s.Pending+s.Dropped(); in != out {
		t.Fatalf("conservation: %d packets in, %d out+pending+dropped (%+v)", in, out, s)
	}
}

// samePackets compares the packets that arrived with those sent.
func samePackets(t *testing.T, got, want [][]byte) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d packets arrived, %d sent", len(got), len(want))
	}
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("packet %d differs (%d bytes, want %d)", i, len(got[i]), len(want[i]))
		}
	}
}

// waitAggregates pumps until the Function has sent every packet and the host
// has every transfer.
func (r *ipRig) waitAggregates(packets uint64) Stats {
	r.T.Helper()
	var s Stats
	r.pumpUntil("all packets", func() bool {
		s = r.ipd.Stats()
		return s.DLPackets+s.Dropped() >= packets && uint64(len(r.transfers)) == s.DLAggregates
	})
	return s
}

func TestIPDataRoundTrip(t *testing.T) {
	sizes := []int{64, 1500, 576, 40, 1263, 1262}
	tests := []struct {
		name        string
		cfg         Config
		perTransfer int // uplink packets per transfer
		mru         int
	}{
		{"raw", Config{Format: framing.RawIP}, 1, 0},
		{"ntb16 one datagram per uplink NTB", Config{Format: framing.NTB16, Session: 2}, 1, 0},
		{"ntb16 aggregated uplink", Config{Format: framing.NTB16}, 10, 0},
		{"ntb16 raw uplink", Config{Format: framing.NTB16, UplinkRaw: true}, 1, 0},
		{"ntb16 8-byte alignment", Config{Format: framing.NTB16, NTBDatagramAlign: 8}, 3, 0},
		{"ntb16 into 3500-byte buffers", Config{Format: framing.NTB16}, 4, 3500},
		{"ntb32", Config{Format: framing.NTB32, MaxAggregate: 48000}, 5, 0},
		{"qmap", Config{Format: framing.QMAP, QMAPMux: 3}, 4, 0},
		{"qmap checksum v4", Config{Format: framing.QMAP, QMAPCsum: qmap.CsumV4, QMAPCsumValid: true}, 1, 0},
		{"qmap checksum v5", Config{Format: framing.QMAP, QMAPCsum: qmap.CsumV5, QMAPCsumValid: true}, 3, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			mru := tc.mru
			if mru == 0 {
				mru = 65536 - 64
			}
			r := newIPRig(t, ipRigConfig{ip: tc.cfg, mru: mru, dlBuffers: 12, ulSize: 16384})
			cfg := r.ipd.Config()
			pkts := testPackets(240, sizes...)
			for _, x := range encodeUL(t, cfg, pkts, tc.perTransfer, r.ulSize) {
				r.sendUL(x)
			}
			s := r.waitAggregates(uint64(len(pkts)))
			got, per := decodeDL(t, cfg, r.transfers)
			samePackets(t, got, pkts)
			for i, n := range per {
				if n > cfg.MaxDatagrams || (cfg.Format == framing.RawIP && n != 1) {
					t.Fatalf("DL transfer %d holds %d packets", i, n)
				}
			}
			checkConservation(t, s)
			if s.Dropped() != 0 || s.DeaggErrors() != 0 || s.ULMalformed != 0 || s.ULPackets != uint64(len(pkts)) {
				t.Fatalf("stats %+v", s)
			}
			if tc.mru == 3500 && r.overflows == 0 {
				t.Fatalf("no OVERFLOW completions with 3500-byte buffers")
			}
			if d := r.Dev.Stats(); d.DLTransfers != s.DLAggregates || d.DLPartialDropped != 0 || d.DLDroppedOnReset != 0 {
				t.Fatalf("device stats %+v", d)
			}
		})
	}
}

func TestIPDataAggregationLimits(t *testing.T) {
	ntbSizes := func(maxAgg, n, size int) []int {
		// What ntb.Fit says fits, aggregate by aggregate.
		var out []int
		lens := make([]int, n)
		for i := range lens {
			lens[i] = size
		}
		for len(lens) > 0 {
			k, _, err := ntb.Fit(ntb.Config{}, maxAgg, lens)
			if err != nil || k == 0 {
				t.Fatalf("Fit: %d, %v", k, err)
			}
			out = append(out, k)
			lens = lens[k:]
		}
		return out
	}
	tests := []struct {
		name      string
		cfg       Config
		n, size   int
		mru       int
		wantPer   []int
		wantFull  uint64
		wantSize  uint64
		wantTREs  int // DL completions, 0 = one per transfer
		perUplink int
	}{
		{"32 datagrams", Config{Format: framing.NTB16}, 40, 100, 0, []int{32, 8}, 1, 0, 0, 40},
		{"MaxDatagrams 5", Config{Format: framing.NTB16, MaxDatagrams: 5}, 12, 100, 0, []int{5, 5, 2}, 2, 0, 0, 12},
		{"qmap 32 frames", Config{Format: framing.QMAP}, 40, 100, 0, []int{32, 8}, 1, 0, 0, 40},
		{"MaxAggregate bytes", Config{Format: framing.NTB16, MaxAggregate: 4096}, 10, 1000, 0, ntbSizes(4096, 10, 1000), 0, 2, 0, 10},
		{"1263-byte cliff arithmetic", Config{Format: framing.NTB16, MaxAggregate: 32768, NTBDatagramAlign: 8}, 26, 1249, 0, []int{25, 1}, 0, 1, 0, 26},
		{"aggregate larger than one host TRE", Config{Format: framing.NTB16}, 21, 1500, 3500, []int{21}, 0, 0, 10, 21},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.FlushTimer = -1
			mru := tc.mru
			if mru == 0 {
				mru = 32768
			}
			r := newIPRig(t, ipRigConfig{ip: tc.cfg, mru: mru, dlBuffers: 12, ulSize: 65536 - 64, ring: 8})
			cfg := r.ipd.Config()
			pkts := testPackets(tc.n, tc.size)
			ul := encodeUL(t, cfg, pkts, tc.perUplink, r.ulSize)
			if len(ul) != 1 {
				t.Fatalf("uplink took %d transfers, want 1", len(ul))
			}
			r.sendUL(ul[0])
			s := r.waitAggregates(uint64(tc.n))
			got, per := decodeDL(t, cfg, r.transfers)
			samePackets(t, got, pkts)
			if len(per) != len(tc.wantPer) {
				t.Fatalf("packets per aggregate %v, want %v", per, tc.wantPer)
			}
			for i := range per {
				if per[i] != tc.wantPer[i] {
					t.Fatalf("packets per aggregate %v, want %v", per, tc.wantPer)
				}
			}
			// The tail leaves when the uplink goes idle.
			if s.FlushFull != tc.wantFull || s.FlushSize != tc.wantSize || s.FlushIdle != 1 || s.FlushTimer != 0 {
				t.Fatalf("flushes full %d size %d idle %d timer %d", s.FlushFull, s.FlushSize, s.FlushIdle, s.FlushTimer)
			}
			if s.DLPackets != uint64(tc.n) || s.DLAggregates != uint64(len(tc.wantPer)) {
				t.Fatalf("stats %+v", s)
			}
			if tc.wantTREs != 0 {
				if r.dlEvents != tc.wantTREs || r.overflows != tc.wantTREs-1 {
					t.Fatalf("%d DL completions (%d OVERFLOW), want %d (%d)", r.dlEvents, r.overflows, tc.wantTREs, tc.wantTREs-1)
				}
				if want := (len(r.transfers[0]) + mru - 1) / mru; want != tc.wantTREs {
					t.Fatalf("aggregate of %d bytes needs %d buffers of %d, test expects %d", len(r.transfers[0]), want, mru, tc.wantTREs)
				}
			}
			checkConservation(t, s)
		})
	}
}

func TestIPDataFlushPolicy(t *testing.T) {
	tests := []struct {
		name      string
		cfg       Config
		wantIdle  uint64
		wantTimer uint64
		minDelay  time.Duration
	}{
		{"idle flush answers a ping at once", Config{Format: framing.NTB16, FlushTimer: -1}, 1, 0, 0},
		{"timer flush without idle flush", Config{Format: framing.NTB16, NoIdleFlush: true, FlushTimer: 5 * time.Millisecond}, 0, 1, 5 * time.Millisecond},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newIPRig(t, ipRigConfig{ip: tc.cfg})
			ping := testPacket(84, 1)
			start := time.Now()
			r.sendUL(encodeUL(t, r.ipd.Config(), [][]byte{ping}, 1, r.ulSize)[0])
			s := r.waitAggregates(1)
			delay := time.Since(start)
			if delay < tc.minDelay || delay > time.Second {
				t.Fatalf("reply after %v, want %v..1s", delay, tc.minDelay)
			}
			got, _ := decodeDL(t, r.ipd.Config(), r.transfers)
			samePackets(t, got, [][]byte{ping})
			if s.FlushIdle != tc.wantIdle || s.FlushTimer != tc.wantTimer || s.DLAggregates != 1 {
				t.Fatalf("stats %+v", s)
			}
		})
	}

	t.Run("no idle flush and no timer: waits for Flush", func(t *testing.T) {
		r := newIPRig(t, ipRigConfig{ip: Config{Format: framing.NTB16, NoIdleFlush: true, FlushTimer: -1}})
		r.sendUL(encodeUL(t, r.ipd.Config(), testPackets(3, 100), 1, r.ulSize)[0])
		r.pumpUntil("packet taken", func() bool { return r.ipd.Stats().Pending == 1 })
		r.pumpFor(20 * time.Millisecond)
		if s := r.ipd.Stats(); s.Pending != 1 || s.DLAggregates != 0 || len(r.transfers) != 0 {
			t.Fatalf("aggregate left early: %+v", s)
		}
		r.ipd.Flush()
		s := r.waitAggregates(1)
		checkConservation(t, s)
	})
}

func TestIPDataMalformedUplink(t *testing.T) {
	good := testPackets(6, 200)
	ntbOf := func(pkts ...[]byte) []byte {
		var w ntb.Writer
		buf := make([]byte, 4096)
		if err := w.Reset(buf, ntb.Config{}); err != nil {
			t.Fatal(err)
		}
		for _, p := range pkts {
			if err := w.Add(p); err != nil {
				t.Fatal(err)
			}
		}
		return buf[:w.Finish()]
	}
	// An NTB whose second entry points past the block.
	badEntry := ntbOf(good[1], good[2], good[3])
	ndp := int(badEntry[10]) | int(badEntry[11])<<8
	badEntry[ndp+8+4] = 0xF0
	badEntry[ndp+8+5] = 0xFF
	notIP := bytes.Clone(good[4])
	notIP[0] = 0x25

	t.Run("ntb", func(t *testing.T) {
		r := newIPRig(t, ipRigConfig{ip: Config{Format: framing.NTB16}})
		r.sendUL([]byte("this is not an NTB at all, just some bytes......"))
		r.sendUL(ntbOf(good[0]))
		r.sendUL(badEntry)
		r.sendUL(ntbOf(notIP, good[4]))
		r.sendUL(badEntry[:16]) // too short
		r.sendUL(ntbOf(good[5]))
		want := [][]byte{good[0], good[1], good[3], good[4], good[5]}
		s := r.waitAggregates(uint64(len(want)))
		r.pumpUntil("uplink consumed", func() bool { return r.ipd.Stats().ULTransfers == 6 })
		s = r.ipd.Stats()
		got, _ := decodeDL(t, r.ipd.Config(), r.transfers)
		samePackets(t, got, want)
		if s.ULMalformed != 4 || s.NTB.BadSignature != 1 || s.NTB.DatagramOutOfBounds != 1 ||
			s.NTB.BadIPVersion != 1 || s.NTB.Short != 1 || s.DeaggErrors() != 4 {
			t.Fatalf("stats %+v", s)
		}
		if s.Dropped() != 0 || s.ULPackets != uint64(len(want)) {
			t.Fatalf("stats %+v", s)
		}
		checkConservation(t, s)
		if errs := s.NTB.Get(ntb.ErrDatagramOutOfBounds); errs != 1 {
			t.Fatalf("reason counter %d", errs)
		}
	})

	t.Run("qmap", func(t *testing.T) {
		cfg := Config{Format: framing.QMAP}
		r := newIPRig(t, ipRigConfig{ip: cfg})
		ul := encodeUL(t, r.ipd.Config(), good[:3], 3, r.ulSize)[0]
		r.sendUL(ul[:len(ul)-10]) // last frame truncated
		zero := encodeUL(t, r.ipd.Config(), good[3:5], 2, r.ulSize)[0]
		zero[2], zero[3] = 0, 0 // zero length ends the aggregate at once
		r.sendUL(zero)
		r.sendUL(encodeUL(t, r.ipd.Config(), good[5:], 1, r.ulSize)[0])
		want := [][]byte{good[0], good[1], good[5]}
		r.waitAggregates(uint64(len(want)))
		r.pumpUntil("uplink consumed", func() bool { return r.ipd.Stats().ULTransfers == 3 })
		s := r.ipd.Stats()
		got, _ := decodeDL(t, r.ipd.Config(), r.transfers)
		samePackets(t, got, want)
		if s.ULMalformed != 2 || s.QMAP.Truncated != 1 || s.QMAP.ZeroLength != 1 || s.Dropped() != 0 {
			t.Fatalf("stats %+v", s)
		}
		checkConservation(t, s)
	})

	t.Run("raw empty transfer", func(t *testing.T) {
		r := newIPRig(t, ipRigConfig{ip: Config{Format: framing.RawIP}})
		r.sendUL(nil)
		r.sendUL(good[0])
		s := r.waitAggregates(2)
		if s.DroppedEmpty != 1 || s.DLPackets != 1 {
			t.Fatalf("stats %+v", s)
		}
		checkConservation(t, s)
	})
}

func TestIPDataGeneratorRate(t *testing.T) {
	const (
		count = 300
		rate  = 3000.0
	)
	r := newIPRig(t, ipRigConfig{ip: Config{Format: framing.NTB16}, mru: 4096, dlBuffers: 24})
	sizes, weights := []int{64, 1500, 576}, []int{2, 1, 1}
	start := time.Now()
	if err := r.ipd.StartGenerator(GeneratorConfig{Count: count, Rate: rate, Sizes: sizes, Weights: weights}); err != nil {
		t.Fatal(err)
	}
	if r.ipd.Mode() != ModeGenerator {
		t.Fatalf("mode %s", r.ipd.Mode())
	}
	r.pumpUntil("generator done", func() bool {
		select {
		case <-r.ipd.GeneratorDone():
			return true
		default:
			return false
		}
	})
	elapsed := time.Since(start)
	s := r.waitAggregates(count)
	perPacket := float64(time.Second) / rate
	want := time.Duration(perPacket * (count - 1))
	// The pacing must hold the rate (never faster); slower is what a loaded
	// machine does to any wall-clock test, so only a gross overrun fails.
	if elapsed < want*8/10 || elapsed > want*5 {
		t.Fatalf("%d packets at %g/s took %v, want at least %v (the rate) and not grossly more", count, rate, elapsed, want*8/10)
	}
	sent, err := r.ipd.WaitGenerator(context.Background())
	if err != nil || sent != count || r.ipd.GeneratorSent() != count || s.GenPackets != count {
		t.Fatalf("sent %d (%v), stats %+v", sent, err, s)
	}
	got, _ := decodeDL(t, r.ipd.Config(), r.transfers)
	if len(got) != count {
		t.Fatalf("%d packets arrived", len(got))
	}
	bySize := map[int]int{}
	for i, p := range got {
		seq, ok := GeneratedSeq(p)
		if !ok || seq != uint64(i) {
			t.Fatalf("packet %d: seq %d ok %v", i, seq, ok)
		}
		bySize[len(p)]++
	}
	if bySize[64] != count/2 || bySize[1500] != count/4 || bySize[576] != count/4 {
		t.Fatalf("size mix %v, want 2:1:1", bySize)
	}
	if s.Dropped() != 0 {
		t.Fatalf("stats %+v", s)
	}
	checkConservation(t, s)
	if r.ipd.Mode() != ModeLoopback {
		t.Fatalf("mode %s after the run", r.ipd.Mode())
	}
}

func TestIPDataGeneratorBackpressure(t *testing.T) {
	const count = 400
	// No flush timer: on a loaded machine it could send part-filled
	// aggregates before the queue fills, and the count below would differ.
	r := newIPRig(t, ipRigConfig{mru: 32768, dlBuffers: 8, post: -1, ip: Config{Format: framing.NTB16, FlushTimer: -1}})
	if err := r.ipd.StartGenerator(GeneratorConfig{Count: count, Sizes: []int{1500, 64}}); err != nil {
		t.Fatal(err)
	}
	// No host buffers: the queue fills and the generator waits.
	// Four full aggregates of 32 packets (16 of each size fit 32 KiB).
	const held = ep.DefaultDLQueueDepth * DefaultMaxDatagrams
	r.WaitFor("generator blocked", func() bool {
		return r.PendingDL(dlChan) == ep.DefaultDLQueueDepth && r.ipd.GeneratorSent() == held
	})
	r.StayFor(20*time.Millisecond, "generator waits", func() bool { return r.ipd.GeneratorSent() == held })
	// A ping on the uplink meanwhile is consumed, counted, not looped.
	r.sendUL(encodeUL(t, r.ipd.Config(), testPackets(1, 64), 1, r.ulSize)[0])
	r.pumpUntil("uplink sunk", func() bool { return r.ipd.Stats().DroppedSunk == 1 })
	r.post(8)
	s := r.waitAggregates(count + 1)
	got, _ := decodeDL(t, r.ipd.Config(), r.transfers)
	if len(got) != count {
		t.Fatalf("%d packets arrived, want %d", len(got), count)
	}
	for i, p := range got {
		if seq, ok := GeneratedSeq(p); !ok || seq != uint64(i) {
			t.Fatalf("packet %d: seq %d ok %v", i, seq, ok)
		}
	}
	if s.GenPackets != count || s.Dropped() != 1 || s.DroppedSunk != 1 {
		t.Fatalf("stats %+v", s)
	}
	checkConservation(t, s)
}

func TestIPDataGeneratorControl(t *testing.T) {
	ipd, err := New(Config{Format: framing.NTB16, MaxAggregate: 2048})
	if err != nil {
		t.Fatal(err)
	}
	if err := ipd.StartGenerator(GeneratorConfig{}); !errors.Is(err, ErrNotAttached) {
		t.Fatalf("StartGenerator unattached = %v", err)
	}
	if n, err := ipd.WaitGenerator(context.Background()); n != 0 || err != nil || ipd.GeneratorDone() != nil {
		t.Fatalf("WaitGenerator without a run = %d, %v", n, err)
	}
	h := eptest.NewHost(t, func(c *ep.Config) { c.Functions = map[string]ep.Function{Name: ipd} })
	bad := []GeneratorConfig{
		{Count: -1},
		{Sizes: []int{20}},
		{Sizes: []int{4000}}, // larger than a 2048-byte aggregate
		{Sizes: []int{100, 200}, Weights: []int{1}},
		{Sizes: []int{100}, Weights: []int{0}},
	}
	for _, g := range bad {
		if err := ipd.StartGenerator(g); !errors.Is(err, wire.ErrConfig) {
			t.Fatalf("StartGenerator(%+v) = %v", g, err)
		}
	}
	// The channel is not started: the generator waits, and can be stopped.
	if err := ipd.StartGenerator(GeneratorConfig{}); err != nil {
		t.Fatal(err)
	}
	if err := ipd.StartGenerator(GeneratorConfig{}); !errors.Is(err, ErrGeneratorRunning) {
		t.Fatalf("second StartGenerator = %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
	defer cancel()
	if _, err := ipd.WaitGenerator(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitGenerator = %v", err)
	}
	ipd.StopGenerator()
	if ipd.GeneratorSent() != 0 || ipd.Mode() != ModeLoopback {
		t.Fatalf("sent %d mode %s", ipd.GeneratorSent(), ipd.Mode())
	}
	// Close ends a running generator too.
	if err := ipd.StartGenerator(GeneratorConfig{}); err != nil {
		t.Fatal(err)
	}
	_ = h.Dev.Close()
	select {
	case <-ipd.GeneratorDone():
	case <-time.After(eptest.WaitTimeout):
		t.Fatal("generator survives Close")
	}
}

func TestNewIPDataRejectsBadConfig(t *testing.T) {
	bad := []Config{
		{Format: 9},
		{Format: framing.NTB16, MaxDatagrams: -1},
		{Format: framing.NTB16, MaxAggregate: 70000},
		{Format: framing.NTB32, MaxAggregate: MaxAggregate + 1},
		{Format: framing.NTB16, MaxAggregate: 10},
		{Format: framing.NTB16, NTBDatagramAlign: 3},
		{Format: framing.QMAP, QMAPCsum: 7},
	}
	for _, cfg := range bad {
		if _, err := New(cfg); !errors.Is(err, wire.ErrConfig) {
			t.Errorf("New(%+v) = %v", cfg, err)
		}
	}
	ipd, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	if c := ipd.Config(); c.Format != framing.RawIP || c.MaxDatagrams != 32 || c.MaxAggregate != 32768 || c.FlushTimer != time.Millisecond {
		t.Fatalf("defaults %+v", c)
	}
}

func TestGeneratedPacket(t *testing.T) {
	for _, n := range []int{GenMinPacket, 64, 1500, GenMaxPacket} {
		p := testPacket(n, 77)
		if seq, ok := GeneratedSeq(p); !ok || seq != 77 {
			t.Fatalf("size %d: %d %v", n, seq, ok)
		}
		p[n-1] ^= 1
		if _, ok := GeneratedSeq(p); ok && n > GenMinPacket {
			t.Fatalf("size %d: corrupted payload accepted", n)
		}
	}
	p := testPacket(100, 1)
	p[12]++ // source address: header checksum no longer matches
	if _, ok := GeneratedSeq(p); ok {
		t.Fatal("bad header checksum accepted")
	}
}
