package mhinet_test

import (
	"context"
	"encoding/binary"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhi/ep/ipdata"
	"github.com/gomhi/gomhi/mhi/proto/framing"
	"github.com/gomhi/gomhi/mhi/proto/ntb"
	"github.com/gomhi/gomhi/mhi/proto/qmap"
	"github.com/gomhi/gomhi/mhi/testenv/poll"
	"github.com/gomhi/gomhi/mhinet"
	"github.com/gomhi/gomhi/pcigeneric/mock"
)

// collector is a Receiver that checks and counts what it gets.
type collector struct {
	mu      sync.Mutex
	pkts    int
	bytes   int
	bad     int
	seqs    map[uint32]int
	keep    bool
	held    []mhinet.Packet
	arrived chan struct{}
}

func newCollector() *collector {
	return &collector{seqs: map[uint32]int{}, arrived: make(chan struct{}, 1)}
}

func (c *collector) Receive(pkts []mhinet.Packet) {
	c.mu.Lock()
	for _, p := range pkts {
		c.pkts++
		c.bytes += len(p.Data)
		if len(p.Data) < 24 || p.Data[0]>>4 != 4 || int(binary.BigEndian.Uint16(p.Data[2:])) != len(p.Data) {
			c.bad++
		} else {
			c.seqs[binary.BigEndian.Uint32(p.Data[20:])]++
		}
		if c.keep {
			c.held = append(c.held, p)
		} else {
			p.Release()
		}
	}
	c.mu.Unlock()
	select {
	case c.arrived <- struct{}{}:
	default:
	}
}

func (c *collector) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pkts
}

func (c *collector) waitFor(t *testing.T, n int) bool {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for c.count() < n {
		select {
		case <-c.arrived:
		case <-deadline:
			t.Errorf("received %d packets, want %d", c.count(), n)
			return false
		}
	}
	return true
}

// ipv4 returns a minimal IPv4 packet of n bytes (n ≥ 24) carrying seq.
func ipv4(n int, seq uint32) []byte {
	p := make([]byte, n)
	p[0] = 0x45
	binary.BigEndian.PutUint16(p[2:], uint16(n))
	p[9] = 17
	binary.BigEndian.PutUint32(p[20:], seq)
	return p
}

type rig struct {
	mock *mock.Mock
	dev  *mhinet.Device
	rx   *collector
}

func newRig(t *testing.T, cfg mhinet.Config) *rig {
	t.Helper()
	return newIPRig(t, mock.DefaultModel, ipdata.Config{}, cfg)
}

// pushDL makes the modem send one downlink transfer.
func (r *rig) pushDL(data []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return r.mock.Transport.Device().QueueDL(ctx, 101, data)
}

func (r *rig) dump(t *testing.T) {
	t.Helper()
	t.Logf("host: %+v", r.dev.Stats())
	t.Logf("modem: %+v", r.mock.Transport.Device().Stats())
	_, dl, _ := r.mock.Controller.ChannelPair(r.dev.Config().Pair)
	t.Logf("downlink: %+v", dl.Status())
	st := r.mock.Controller.Status()
	t.Logf("controller: %+v", st.Stats)
	for _, e := range st.EventRings {
		t.Logf("event ring: %+v", e)
	}

}

// aggregate builds downlink aggregates of the given format from pkts.
func aggregate(t *testing.T, f framing.Format, max int, pkts [][]byte) [][]byte {
	t.Helper()
	var out [][]byte
	for len(pkts) > 0 {
		buf := make([]byte, max)
		var n, used int
		switch f {
		case framing.NTB16:
			var w ntb.Writer
			if err := w.Reset(buf, ntb.Config{}); err != nil {
				t.Fatal(err)
			}
			for used < len(pkts) && w.Add(pkts[used]) == nil {
				used++
			}
			n = w.Finish()
		case framing.QMAP:
			var w qmap.Writer
			if err := w.Reset(buf, qmap.Config{}); err != nil {
				t.Fatal(err)
			}
			for used < len(pkts) && w.Add(pkts[used]) == nil {
				used++
			}
			n = w.Finish()
		default:
			out = append(out, pkts[0])
			pkts = pkts[1:]
			continue
		}
		if used == 0 {
			t.Fatalf("packet of %d bytes does not fit a %d-byte aggregate", len(pkts[0]), max)
		}
		out = append(out, buf[:n])
		pkts = pkts[used:]
	}
	return out
}

func TestReceiveFormatsAndChaining(t *testing.T) {
	cases := []struct {
		name   string
		format framing.Format
		mru    int
		size   int
		chains bool
	}{
		{"raw fits", framing.RawIP, 32768, 1500, false},
		{"raw MRU below one packet", framing.RawIP, 1024, 1500, true},
		{"mbim 32K", framing.NTB16, 32768, 1500, false},
		{"mbim MRU 3500 below one aggregate", framing.NTB16, 3500, 1262, true},
		{"mbim MRU below one packet", framing.NTB16, 1024, 1500, true},
		{"qmap 16K", framing.QMAP, 16384, 1263, true},
		{"qmap small packets", framing.QMAP, 32768, 64, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, mhinet.Config{Format: tc.format, MRU: tc.mru})
			const n = 500
			var pkts [][]byte
			for i := 0; i < n; i++ {
				pkts = append(pkts, ipv4(tc.size, uint32(i)))
			}
			for _, a := range aggregate(t, tc.format, 32768, pkts) {
				if err := r.pushDL(a); err != nil {
					t.Fatal(err)
				}
			}
			if !r.rx.waitFor(t, n) {
				r.dump(t)
				t.FailNow()
			}
			s := r.dev.Stats()
			if r.rx.bad != 0 || len(r.rx.seqs) != n || s.RxPackets != n || s.RxErrors != 0 || s.RxDropped != 0 {
				t.Fatalf("bad %d distinct %d stats %+v", r.rx.bad, len(r.rx.seqs), s)
			}
			if (s.RxChains > 0) != tc.chains || (s.RxOverflows > 0) != tc.chains {
				t.Fatalf("chains %d overflows %d, want chaining %v", s.RxChains, s.RxOverflows, tc.chains)
			}
		})
	}
}

func TestInvalidMRURejected(t *testing.T) {
	r := newRig(t, mhinet.Config{})
	for _, v := range []int{0, -1, 1, mhinet.MinMRU - 1, mhinet.MaxMRU + 1, 1 << 20} {
		err := r.dev.SetMRU(v)
		if !errors.Is(err, mhinet.ErrInvalidMRU) || !strings.Contains(err.Error(), "256..65535") {
			t.Errorf("SetMRU(%d) = %v", v, err)
		}
	}
	if r.dev.MRU() != mhinet.DefaultMRU {
		t.Fatalf("MRU %d after rejected changes", r.dev.MRU())
	}
	if _, err := mhinet.New(r.mock.Controller, mhinet.Config{MRU: 70000}, r.rx); !errors.Is(err, mhinet.ErrInvalidMRU) {
		t.Fatalf("New with MRU 70000: %v", err)
	}
}

// Changing the MRU while the modem sends loses nothing: every packet pushed
// is delivered exactly once.
func TestMRUChangeUnderTraffic(t *testing.T) {
	r := newRig(t, mhinet.Config{Format: framing.NTB16, MRU: 32768})
	const n = 20000
	var pushed atomic.Int64
	aggs := aggregate(t, framing.NTB16, 32768, func() (p [][]byte) {
		for i := 0; i < n; i++ {
			p = append(p, ipv4(700, uint32(i)))
		}
		return p
	}())
	done := make(chan error, 1)
	go func() {
		for _, a := range aggs {
			if err := r.pushDL(a); err != nil {
				done <- err
				return
			}
			pushed.Add(int64(ntbCount(a)))
		}
		done <- nil
	}()
	mrus := []int{3500, 16384, 1024, 65535, 32768}
	for i := 0; pushed.Load() < n && i < 50; i++ {
		if err := r.dev.SetMRU(mrus[i%len(mrus)]); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Millisecond)
	}
	if err := <-done; err != nil {
		r.dump(t)
		t.Fatal(err)
	}
	if !r.rx.waitFor(t, n) {
		r.dump(t)
		t.FailNow()
	}
	time.Sleep(20 * time.Millisecond)
	s := r.dev.Stats()
	devStats := r.mock.Transport.Device().Stats()
	t.Logf("MRU changes %d, chains %d, stats %+v", s.MRUChanges, s.RxChains, s)
	t.Logf("device: %+v", devStats)
	if s.MRUChanges < 2 {
		t.Fatalf("only %d MRU changes happened during traffic", s.MRUChanges)
	}
	dups := 0
	for _, c := range r.rx.seqs {
		if c > 1 {
			dups++
		}
	}
	if r.rx.count() != n || len(r.rx.seqs) != n || dups != 0 || s.RxDropped != 0 || s.RxErrors != 0 {
		t.Fatalf("received %d (%d distinct, %d duplicated), dropped %d, errors %d; want %d", r.rx.count(), len(r.rx.seqs), dups, s.RxDropped, s.RxErrors, n)
	}
}

// Packets held by the receiver keep their buffer; the pool starves, and
// refills resume when they are released.
func TestHeldPacketsStarveAndResume(t *testing.T) {
	r := newRig(t, mhinet.Config{Format: framing.RawIP, MRU: 2048, PoolBuffers: 200})
	r.rx.keep = true
	const n = 400
	go func() {
		for i := 0; i < n; i++ {
			if r.pushDL(ipv4(100, uint32(i))) != nil {
				return
			}
		}
	}()
	r.rx.waitFor(t, 200)
	time.Sleep(20 * time.Millisecond)
	if got := r.rx.count(); got != 200 {
		t.Fatalf("%d packets delivered with every buffer held, want 200", got)
	}
	if s := r.dev.Stats(); s.RefillStarved == 0 || s.PoolFree != 0 {
		t.Fatalf("no starvation recorded: %+v", s)
	}
	r.rx.mu.Lock()
	held := r.rx.held
	r.rx.held, r.rx.keep = nil, false
	r.rx.mu.Unlock()
	for _, p := range held {
		p.Release()
	}
	r.rx.waitFor(t, n)
}

func TestTransmit(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  mhinet.Config
	}{
		{"raw", mhinet.Config{Format: framing.RawIP}},
		{"mbim", mhinet.Config{Format: framing.NTB16}},
		{"qmap", mhinet.Config{Format: framing.QMAP}},
		{"mbim aggregated", mhinet.Config{Format: framing.NTB16, TXAggregate: true}},
		{"qmap aggregated", mhinet.Config{Format: framing.QMAP, TXAggregate: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, tc.cfg)
			var pkts [][]byte
			for i := 0; i < 300; i++ {
				pkts = append(pkts, ipv4(64+i%1400, uint32(i)))
			}
			pkts = append(pkts, nil, make([]byte, 9000)) // an empty and an oversized one
			sent := 0
			// Not poll: a send loop that makes progress each round, retried at once on ErrBusy.
			deadline := time.Now().Add(10 * time.Second)
			for sent < len(pkts) && time.Now().Before(deadline) {
				n, err := r.dev.Transmit(pkts[sent:])
				sent += n
				if err != nil && !errors.Is(err, mhinet.ErrBusy) {
					t.Fatal(err)
				}
				if errors.Is(err, mhinet.ErrBusy) {
					time.Sleep(time.Millisecond)
				}
			}
			var s mhinet.Stats
			poll.Until(10*time.Second, func() bool { s = r.dev.Stats(); return s.TxPackets == 300 })
			if s.TxPackets != 300 || s.TxEmpty != 1 || s.TxTooLong != 1 || s.TxErrors != 2 {
				t.Fatalf("stats %+v", s)
			}
			if tc.cfg.TXAggregate && s.TxTransfers >= 300 {
				t.Fatalf("aggregation used %d transfers for 300 packets", s.TxTransfers)
			}
			if !tc.cfg.TXAggregate && s.TxTransfers != 300 {
				t.Fatalf("%d transfers for 300 packets", s.TxTransfers)
			}
		})
	}
}

// ntbCount returns the number of datagrams in an NTB built by aggregate.
func ntbCount(b []byte) int {
	var p ntb.Parser
	n, _ := p.Parse(b, func([]byte, uint8) {})
	return n
}
