package mhinet_test

import (
	"context"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhi/ep"
	"github.com/gomhi/gomhi/mhi/ep/ipdata"
	"github.com/gomhi/gomhi/mhi/proto/framing"
	"github.com/gomhi/gomhi/mhi/proto/ntb"
	"github.com/gomhi/gomhi/mhi/proto/qmap"
	"github.com/gomhi/gomhi/mhi/testenv/poll"
	"github.com/gomhi/gomhi/mhinet"
	"github.com/gomhi/gomhi/mhinet/mhinettest"
	"github.com/gomhi/gomhi/pcigeneric"
	"github.com/gomhi/gomhi/pcigeneric/mock"
)

// ulRecorder sits in front of the modem's IP data function and records
// every uplink transfer's length and packets (in order), then passes it
// on.
type ulRecorder struct {
	inner ep.Function
	qmap  bool
	mu    sync.Mutex
	xfers []ulXfer
	ntbp  ntb.Parser
	qmapp qmap.Parser
}

type ulXfer struct {
	n    int
	at   time.Time
	pkts []int // packet lengths
}

func (r *ulRecorder) Receive(ctx context.Context, p *ep.Pipe, transfer []byte) error {
	x := ulXfer{n: len(transfer), at: time.Now()}
	r.mu.Lock()
	if r.qmap {
		_, _ = r.qmapp.Parse(transfer, func(pk qmap.Packet) { x.pkts = append(x.pkts, len(pk.Data)) })
	} else {
		_, _ = r.ntbp.Parse(transfer, func(d []byte, _ uint8) { x.pkts = append(x.pkts, len(d)) })
	}
	r.xfers = append(r.xfers, x)
	r.mu.Unlock()
	return r.inner.Receive(ctx, p, transfer)
}

func (r *ulRecorder) Idle(p *ep.Pipe) {
	if i, ok := r.inner.(ep.Idler); ok {
		i.Idle(p)
	}
}

func (r *ulRecorder) Attach(p *ep.Pipe) {
	if a, ok := r.inner.(ep.PipeAttacher); ok {
		a.Attach(p)
	}
}

func (r *ulRecorder) snapshot() []ulXfer {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]ulXfer(nil), r.xfers...)
}

// newRecRig is newIPRig with a recorder in front of the modem's function.
func newRecRig(t *testing.T, model string, dev ipdata.Config, cfg mhinet.Config) (*rig, *ulRecorder) {
	t.Helper()
	rec := &ulRecorder{qmap: dev.Format == framing.QMAP}
	rx := newCollector()
	r := mhinettest.New(t, mhinettest.Options{Model: model, IPData: &dev, Net: &cfg, Receiver: rx, Device: func(c *ep.Config) {
		name := pcigeneric.DataPair(c.MHI) // not IP_SW0, which the mock also serves
		if fn, ok := c.Functions[name].(*ipdata.Function); ok {
			rec.inner = fn
			c.Functions[name] = rec
		}
	}})
	if rec.inner == nil {
		t.Fatal("no IP data function to record")
	}
	return &rig{mock: r.Mock, dev: r.Net, rx: rx}, rec
}

// waitStats polls until cond holds or 10 s pass.
func waitStats(t *testing.T, d *mhinet.Device, what string, cond func(mhinet.Stats) bool) mhinet.Stats {
	t.Helper()
	var s mhinet.Stats
	if !poll.Until(10*time.Second, func() bool { s = d.Stats(); return cond(s) }) {
		t.Fatalf("%s: stats %+v", what, s)
	}
	return s
}

// aggFormat is a framing with a mock model to speak it on.
type aggFormat struct {
	name  string
	model string
	f     framing.Format
}

var aggFormats = []aggFormat{
	{"mbim", "telit-fn990", framing.NTB16},
	{"qmap", mock.DefaultModel, framing.QMAP},
}

// fits reports whether pkts all fit one aggregate of max bytes and count.
func fits(f framing.Format, maxBytes, maxPkts int, pkts []int) bool {
	buf := make([]byte, maxBytes)
	var err error
	if f == framing.NTB16 {
		var w ntb.Writer
		if err = w.Reset(buf, ntb.Config{MaxDatagrams: maxPkts}); err != nil {
			return false
		}
		for _, n := range pkts {
			if err = w.Add(make([]byte, n)); err != nil {
				return false
			}
		}
		return true
	}
	var w qmap.Writer
	if err = w.Reset(buf, qmap.Config{MaxPackets: maxPkts}); err != nil {
		return false
	}
	for _, n := range pkts {
		if err = w.Add(make([]byte, n)); err != nil {
			return false
		}
	}
	return true
}

// Random packets in random batches: every aggregate respects both limits
// exactly, and every one closed early was closed because the next packet
// would have passed the byte limit.
func TestTXAggregationLimitsExact(t *testing.T) {
	for _, f := range aggFormats {
		for _, lim := range []struct{ bytes, pkts int }{{4096, 16}, {2000, 5}, {16384, 64}} {
			t.Run(f.name+"-"+itoa(lim.bytes)+"-"+itoa(lim.pkts), func(t *testing.T) {
				r, rec := newRecRig(t, f.model, ipdata.Config{Format: f.f},
					mhinet.Config{Format: f.f, TXAggregate: true, TXAggMaxBytes: lim.bytes,
						TXAggMaxPackets: lim.pkts, TXAggTimeout: time.Hour})
				rng := rand.New(rand.NewPCG(1, uint64(lim.bytes)))
				const total = 600
				var pkts [][]byte
				var lens []int
				for i := range total {
					n := 28 + rng.IntN(1472)
					if i%7 == 0 {
						n = 28 + rng.IntN(100)
					}
					pkts = append(pkts, ipv4(n, uint32(i)))
					lens = append(lens, n)
				}
				for sent := 0; sent < total; {
					end := min(total, sent+1+rng.IntN(40))
					before := sent
					for sent < end {
						n, err := r.dev.Transmit(pkts[sent:end])
						sent += n
						if errors.Is(err, mhinet.ErrBusy) {
							time.Sleep(100 * time.Microsecond)
						} else if err != nil {
							t.Fatal(err)
						}
					}
					_ = before
				}
				if err := r.dev.Flush(); err != nil {
					t.Fatal(err)
				}
				s := waitStats(t, r.dev, "all transmitted", func(s mhinet.Stats) bool { return s.TxPackets == total })
				if !r.rx.waitFor(t, total) {
					t.FailNow()
				}
				xs := rec.snapshot()
				if uint64(len(xs)) != s.TxTransfers {
					t.Fatalf("modem saw %d transfers, host completed %d", len(xs), s.TxTransfers)
				}
				if s.TxAggClosedTimer != 0 || s.TxAggClosedFlush != 1 ||
					s.TxAggClosedBytes+s.TxAggClosedPackets+s.TxAggClosedFlush != s.TxTransfers {
					t.Fatalf("close reasons %+v", s)
				}
				next := 0
				var byBytes, byPkts uint64
				for i, x := range xs {
					if len(x.pkts) == 0 || len(x.pkts) > lim.pkts {
						t.Fatalf("aggregate %d holds %d packets (limit %d)", i, len(x.pkts), lim.pkts)
					}
					if x.n > lim.bytes && len(x.pkts) > 1 {
						t.Fatalf("aggregate %d is %d bytes with %d packets (limit %d)", i, x.n, len(x.pkts), lim.bytes)
					}
					for j, n := range x.pkts {
						if n != lens[next+j] {
							t.Fatalf("aggregate %d packet %d: %d bytes, sent %d", i, j, n, lens[next+j])
						}
					}
					next += len(x.pkts)
					switch {
					case i == len(xs)-1: // flushed
					case len(x.pkts) == lim.pkts:
						byPkts++
					default:
						byBytes++
						// Closed early: the next packet must not have fitted.
						if fits(f.f, lim.bytes, lim.pkts, append(append([]int(nil), x.pkts...), lens[next])) {
							t.Fatalf("aggregate %d (%d packets, %d bytes) closed although the next packet (%d bytes) fits",
								i, len(x.pkts), x.n, lens[next])
						}
					}
				}
				if next != total {
					t.Fatalf("%d packets in aggregates, sent %d", next, total)
				}
				if byBytes != s.TxAggClosedBytes || byPkts != s.TxAggClosedPackets {
					t.Fatalf("closed by bytes %d, by packets %d; counters %d, %d", byBytes, byPkts,
						s.TxAggClosedBytes, s.TxAggClosedPackets)
				}
				if byBytes == 0 || (lim.pkts <= 5 && byPkts == 0) {
					t.Fatalf("the test did not exercise both limits: bytes %d, packets %d", byBytes, byPkts)
				}
			})
		}
	}
}

// A partly filled aggregate waits for the next call and leaves when the
// timer expires, never earlier, counting from its first packet. The second
// call must come before the timer; on a machine so loaded that it does
// not, the check runs again with a longer timer.
func TestTXAggregationTimer(t *testing.T) {
	for _, f := range aggFormats {
		t.Run(f.name, func(t *testing.T) {
			for wait := 150 * time.Millisecond; !checkTXAggregationTimer(t, f, wait); wait *= 4 {
				if wait >= 2*time.Second {
					t.Fatalf("the second call never came within the %v timer", wait)
				}
				t.Logf("the second call came after the %v timer (a loaded machine): again with a longer one", wait)
			}
		})
	}
}

// checkTXAggregationTimer is one try of TestTXAggregationTimer; it reports
// false, having checked nothing, when the second call came too late.
func checkTXAggregationTimer(t *testing.T, f aggFormat, wait time.Duration) bool {
	t.Helper()
	r, rec := newRecRig(t, f.model, ipdata.Config{Format: f.f},
		mhinet.Config{Format: f.f, TXAggregate: true, TXAggTimeout: wait})
	start := time.Now()
	if n, err := r.dev.Transmit([][]byte{ipv4(100, 1), ipv4(100, 2)}); n != 2 || err != nil {
		t.Fatal(n, err)
	}
	if s := r.dev.Stats(); s.TxQueued != 0 || s.TxAggPending != 2 {
		t.Fatalf("after the first call: %+v", s)
	}
	time.Sleep(wait / 3)
	if time.Since(start) > wait*2/3 {
		return false
	}
	if n, err := r.dev.Transmit([][]byte{ipv4(100, 3)}); n != 1 || err != nil {
		t.Fatal(n, err)
	}
	if time.Since(start) >= wait {
		return false
	}
	s := waitStats(t, r.dev, "timer flush", func(s mhinet.Stats) bool { return s.TxPackets == 3 })
	xs := rec.snapshot()
	if len(xs) != 1 || len(xs[0].pkts) != 3 {
		t.Fatalf("transfers %+v", xs)
	}
	if el := xs[0].at.Sub(start); el < wait {
		t.Fatalf("aggregate left after %v, before the %v timer", el, wait)
	} else if el > wait+2*time.Second {
		t.Fatalf("aggregate left after %v (timer %v)", el, wait)
	}
	if s.TxAggClosedTimer != 1 || s.TxAggClosedBytes+s.TxAggClosedPackets+s.TxAggClosedFlush != 0 || s.TxAggPending != 0 {
		t.Fatalf("close reasons %+v", s)
	}
	r.rx.waitFor(t, 3)
	return true
}

// The packet limit closes an aggregate as soon as it is reached; Flush
// sends the rest; a negative timeout closes at the end of each call.
func TestTXAggregationPacketsAndFlush(t *testing.T) {
	for _, f := range aggFormats {
		t.Run(f.name, func(t *testing.T) {
			r, rec := newRecRig(t, f.model, ipdata.Config{Format: f.f},
				mhinet.Config{Format: f.f, TXAggregate: true, TXAggMaxPackets: 5, TXAggTimeout: time.Hour})
			var pkts [][]byte
			for i := range 23 {
				pkts = append(pkts, ipv4(100, uint32(i)))
			}
			transmitAll(t, r.dev, pkts)
			s := waitStats(t, r.dev, "four aggregates", func(s mhinet.Stats) bool { return s.TxPackets == 20 })
			if s.TxAggClosedPackets != 4 || s.TxAggPending != 3 || s.TxQueued != 20 {
				t.Fatalf("stats %+v", s)
			}
			if err := r.dev.Flush(); err != nil {
				t.Fatal(err)
			}
			s = waitStats(t, r.dev, "flush", func(s mhinet.Stats) bool { return s.TxPackets == 23 })
			if s.TxAggClosedFlush != 1 || s.TxAggPending != 0 {
				t.Fatalf("stats %+v", s)
			}
			if xs := rec.snapshot(); len(xs) != 5 || len(xs[4].pkts) != 3 {
				t.Fatalf("transfers %+v", xs)
			}
			r.rx.waitFor(t, 23)
		})
	}
	t.Run("no-wait", func(t *testing.T) {
		r, rec := newRecRig(t, "telit-fn990", ipdata.Config{Format: framing.NTB16},
			mhinet.Config{Format: framing.NTB16, TXAggregate: true, TXAggTimeout: -1})
		for i := range 3 {
			transmitAll(t, r.dev, [][]byte{ipv4(100, uint32(2*i)), ipv4(100, uint32(2*i+1))})
		}
		s := waitStats(t, r.dev, "no wait", func(s mhinet.Stats) bool { return s.TxPackets == 6 })
		if s.TxAggClosedFlush != 3 || len(rec.snapshot()) != 3 {
			t.Fatalf("stats %+v, %d transfers", s, len(rec.snapshot()))
		}
	})
}

// The QMAP uplink with checksum framing — the MAPv4 UL checksum header or
// the MAPv5 header, as rmnet's egress writes them: the modem, configured
// the same way, parses what the host sends, copied, aggregated or lent
// (zero-copy), and loops every packet back intact.
func TestTXQMAPChecksumFramingLoopback(t *testing.T) {
	for _, mode := range []qmap.CsumMode{qmap.CsumV4, qmap.CsumV5} {
		for _, path := range []string{"copy", "aggregated", "zero-copy"} {
			cfg := mhinet.Config{Format: framing.QMAP, QMAPCsum: mode, TXAggTimeout: -1,
				TXAggregate: path == "aggregated", TXZeroCopy: path == "zero-copy"}
			r := newIPRig(t, mock.DefaultModel, ipdata.Config{Format: framing.QMAP, QMAPCsum: mode}, cfg)
			var pkts [][]byte
			for i := range 50 {
				pkts = append(pkts, ipv4(40+i*13, uint32(i)))
			}
			if path == "zero-copy" {
				transmitAllZC(t, r.dev, pkts)
			} else {
				transmitAll(t, r.dev, pkts)
			}
			if !r.rx.waitFor(t, 50) {
				t.Fatalf("%v %s: modem %+v", mode, path, r.mock.IPData.Stats())
			}
			// The modem counts an uplink packet after looping it back,
			// which may be after the host delivered the echo.
			waitStats(t, r.dev, "the modem to count the 50 uplink packets", func(mhinet.Stats) bool {
				return r.mock.IPData.Stats().ULPackets >= 50
			})
			s := r.mock.IPData.Stats()
			if s.ULPackets != 50 || s.DeaggErrors() != 0 || r.rx.bad != 0 || s.ULCsumComputed+s.ULCsumBad != 0 {
				t.Fatalf("%v %s: modem %+v", mode, path, s)
			}
			if hs := r.dev.Stats(); path == "zero-copy" && hs.TxZeroCopy == 0 {
				t.Fatalf("%v %s: nothing went zero-copy: %+v", mode, path, hs)
			}
		}
	}
}

// transmitAllZC sends pkts through zero-copy slots, one TransmitZC each,
// taking slots back from TXReleased when none is free.
func transmitAllZC(t *testing.T, d *mhinet.Device, pkts [][]byte) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for _, p := range pkts {
		b, err := d.TXBuffer()
		for errors.Is(err, mhinet.ErrBusy) {
			select {
			case b = <-d.TXReleased():
				err = nil
			case <-deadline:
				t.Fatalf("no zero-copy slot came back: %+v", d.Stats())
			}
		}
		if err != nil {
			t.Fatal(err)
		}
		b.SetLen(copy(b.Bytes(), p))
		if n, err := d.TransmitZC([]*mhinet.ZCBuffer{b}); n != 1 || err != nil {
			t.Fatalf("TransmitZC: %d, %v", n, err)
		}
	}
}

// udp4 returns an IPv4/UDP packet of n bytes (n ≥ 32) to port dport whose
// payload is a pattern derived from seq (at offset 28).
func udp4(buf []byte, n int, dport uint16, seq uint32) []byte {
	p := buf[:n]
	clear(p[:28])
	p[0] = 0x45
	binary.BigEndian.PutUint16(p[2:], uint16(n))
	p[8] = 64
	p[9] = 17
	copy(p[12:], []byte{10, 0, 0, 1, 10, 0, 0, 2})
	binary.BigEndian.PutUint16(p[20:], 4000)
	binary.BigEndian.PutUint16(p[22:], dport)
	binary.BigEndian.PutUint16(p[24:], uint16(n-20))
	binary.BigEndian.PutUint32(p[28:], seq)
	for i := 32; i < n; i++ {
		p[i] = byte(seq) + byte(i)
	}
	return p
}

// udpIntact checks a packet built by udp4 and returns its seq and port.
func udpIntact(p []byte) (seq uint32, dport uint16, ok bool) {
	if len(p) < 32 || p[0] != 0x45 || int(binary.BigEndian.Uint16(p[2:])) != len(p) || p[9] != 17 {
		return 0, 0, false
	}
	seq = binary.BigEndian.Uint32(p[28:])
	for i := 32; i < len(p); i++ {
		if p[i] != byte(seq)+byte(i) {
			return seq, 0, false
		}
	}
	return seq, binary.BigEndian.Uint16(p[22:]), true
}
