package mhinet_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhi/ep/ipdata"
	"github.com/gomhi/gomhi/mhi/proto/framing"
	"github.com/gomhi/gomhi/mhi/testenv/poll"
	"github.com/gomhi/gomhi/mhinet"
	"github.com/gomhi/gomhi/mhinet/mhinettest"
	"github.com/gomhi/gomhi/pcigeneric/mock"
)

// Flows of the zero-copy tests: the modem shapes shapedPort.
const (
	shapedPort = 9
	freePort   = 10
)

// udpCollector checks and counts the looped UDP packets per port.
type udpCollector struct {
	mu      sync.Mutex
	byPort  map[uint16]int
	bad     int
	seen    map[uint32]bool
	dups    int
	total   int
	last    map[uint16]time.Time
	arrived chan struct{}
}

func newUDPCollector() *udpCollector {
	return &udpCollector{byPort: map[uint16]int{}, seen: map[uint32]bool{}, last: map[uint16]time.Time{},
		arrived: make(chan struct{}, 1)}
}

func (c *udpCollector) Receive(pkts []mhinet.Packet) {
	c.mu.Lock()
	for _, p := range pkts {
		c.total++
		seq, port, ok := udpIntact(p.Data)
		switch {
		case !ok:
			c.bad++
		case c.seen[seq]:
			c.dups++
		default:
			c.seen[seq] = true
			c.byPort[port]++
			c.last[port] = time.Now()
		}
		p.Release()
	}
	c.mu.Unlock()
	select {
	case c.arrived <- struct{}{}:
	default:
	}
}

func (c *udpCollector) counts() (total, bad, dups int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.total, c.bad, c.dups
}

type zcRig struct {
	mock *mock.Mock
	dev  *mhinet.Device
	rx   *udpCollector
	elem int // uplink ring elements
}

// newZCRig opens a raw-IP mock modem in loopback that shapes shapedPort,
// a zero-copy device on it, and forwards the lend region to the modem.
func newZCRig(t testing.TB, shape ipdata.ShapeConfig, cfg mhinet.Config) *zcRig {
	t.Helper()
	rx := newUDPCollector()
	cfg.TXZeroCopy = true
	r := mhinettest.New(t, mhinettest.Options{IPData: &ipdata.Config{Format: framing.RawIP, Shape: shape}, Net: &cfg, Receiver: rx})
	m, d := r.Mock, r.Net
	reg, err := d.ZeroCopyRegion()
	if err != nil {
		t.Fatal(err)
	}
	if err := m.IPData.SetLendRegion(reg); err != nil {
		t.Fatal(err)
	}
	ul, _, err := m.Controller.ChannelPair(m.DataPair)
	if err != nil {
		t.Fatal(err)
	}
	return &zcRig{mock: m, dev: d, rx: rx, elem: ul.Config().Elements}
}

// The fallback starts at exactly half the ring: with a modem that holds
// every slot of the shaped flow, the first Elements/2 packets go
// zero-copy and every later one is copied. Without the fallback the slots
// run out instead.
func TestZeroCopyFallbackThreshold(t *testing.T) {
	never := ipdata.ShapeConfig{UDPPort: shapedPort, Rate: 0.001}
	t.Run("fallback", func(t *testing.T) {
		r := newZCRig(t, never, mhinet.Config{})
		half := r.elem / 2
		for i := range r.elem + 10 {
			b, err := r.dev.TXBuffer()
			if err != nil {
				t.Fatalf("packet %d: %v", i, err)
			}
			b.SetLen(len(udp4(b.Bytes(), 200, shapedPort, uint32(i))))
			transmitZC(t, r.dev, b)
			s := r.dev.Stats()
			zc := uint64(min(i+1, half))
			if s.TxZeroCopy != zc || s.TxZeroCopyFallback != uint64(i+1)-zc || s.TxZCPending != zc {
				t.Fatalf("after packet %d (half ring %d): zerocopy %d, fallback %d, pending %d", i, half,
					s.TxZeroCopy, s.TxZeroCopyFallback, s.TxZCPending)
			}
		}
		s := waitStats(t, r.dev, "modem holds half the ring", func(s mhinet.Stats) bool {
			return r.mock.IPData.Stats().LentHeld == uint64(half) && s.TxPackets == uint64(r.elem+10)
		})
		if s.TxZCPendingHigh != uint64(half) || s.TxCopied != uint64(r.elem+10-half) {
			t.Fatalf("stats %+v", s)
		}
	})
	t.Run("no-fallback", func(t *testing.T) {
		r := newZCRig(t, never, mhinet.Config{TXZeroCopyNoFallback: true})
		for i := range r.elem - 1 {
			b, err := r.dev.TXBuffer()
			if err != nil {
				t.Fatalf("packet %d: %v", i, err)
			}
			b.SetLen(len(udp4(b.Bytes(), 200, shapedPort, uint32(i))))
			transmitZC(t, r.dev, b)
		}
		if _, err := r.dev.TXBuffer(); !errors.Is(err, mhinet.ErrBusy) {
			t.Fatalf("TXBuffer with every slot held: %v", err)
		}
		s := r.dev.Stats()
		if s.TxZeroCopy != uint64(r.elem-1) || s.TxZeroCopyFallback != 0 || s.TxZCBusy != 1 || s.TxZCPendingHigh != uint64(r.elem-1) {
			t.Fatalf("stats %+v", s)
		}
	})
}

// A slot is never handed back before the modem is done with it: the test
// poisons every buffer the moment it is released, while the modem reads
// the shaped flow's slots long after their elements completed; every
// looped packet must arrive intact. Run with -race: a release that came
// too early is also a data race between the poison write and the modem's
// read.
func TestZeroCopyNoReuseBeforeRelease(t *testing.T) {
	for _, nofb := range []bool{false, true} {
		name := "fallback"
		if nofb {
			name = "zerocopy-only"
		}
		t.Run(name, func(t *testing.T) {
			r := newZCRig(t, ipdata.ShapeConfig{UDPPort: shapedPort, Rate: 4000},
				mhinet.Config{TXZeroCopyNotify: true, TXZeroCopyNoFallback: nofb})
			const total = 1200
			released := r.dev.TXReleased()
			poison := func(b *mhinet.ZCBuffer) {
				buf := b.Bytes()
				for i := range buf {
					buf[i] = 0xA5
				}
			}
			var owned []*mhinet.ZCBuffer
			// Not poll: the send loop below waits for released slots on a channel, up to this deadline, which the receive wait shares.
			deadline := time.Now().Add(20 * time.Second)
			for i := 0; i < total; {
				var b *mhinet.ZCBuffer
				select {
				case b = <-released:
					poison(b)
				default:
					var err error
					if b, err = r.dev.TXBuffer(); errors.Is(err, mhinet.ErrBusy) {
						select {
						case b = <-released:
							poison(b)
						case <-time.After(time.Until(deadline)):
							t.Fatalf("no buffer came back after %d packets: %+v", i, r.dev.Stats())
						}
					} else if err != nil {
						t.Fatal(err)
					}
				}
				port := uint16(freePort)
				if i%2 == 0 {
					port = shapedPort
				}
				b.SetLen(len(udp4(b.Bytes(), 64+(i*37)%1400, port, uint32(i))))
				if n, err := r.dev.TransmitZC([]*mhinet.ZCBuffer{b}); err != nil || n != 1 {
					if !errors.Is(err, mhinet.ErrBusy) {
						t.Fatal(err)
					}
					owned = append(owned, b) // kept by us; try again with another
					continue
				}
				i++
			}
			poll.Until(time.Until(deadline), func() bool { got, _, _ := r.rx.counts(); return got == total })
			got, bad, dups := r.rx.counts()
			s, ms := r.dev.Stats(), r.mock.IPData.Stats()
			if got != total || bad != 0 || dups != 0 {
				t.Fatalf("received %d of %d, %d corrupt, %d twice; host %+v; modem %+v", got, total, bad, dups, s, ms)
			}
			if s.TxZeroCopy == 0 || ms.ShapedSent != total/2 || ms.LentReleased == 0 {
				t.Fatalf("the test did not exercise held zero-copy slots: host %+v; modem %+v", s, ms)
			}
			if !nofb && s.TxZeroCopyFallback == 0 {
				t.Fatalf("no fallback: %+v", s)
			}
			if s.TxZCBadRelease != 0 || ms.LendErrors != 0 {
				t.Fatalf("bad releases: host %+v; modem %+v", s, ms)
			}
			t.Logf("zerocopy %d, fallback %d, pending high %d, released %d", s.TxZeroCopy, s.TxZeroCopyFallback,
				s.TxZCPendingHigh, s.TxZCReleased)
		})
	}
}

// Conservation: every packet offered, zero-copy or copied, is transmitted
// or counted in a named error or drop counter on the host, and the modem
// accounts for every one it received; the looped ones all arrive.
func TestZeroCopyConservation(t *testing.T) {
	r := newZCRig(t, ipdata.ShapeConfig{UDPPort: shapedPort, Rate: 2000, Queue: 8}, mhinet.Config{})
	const total = 900
	var offered, rejected uint64
	copyBuf := make([]byte, 2000)
	// Not poll: send loops, each send retried every 50 µs on ErrBusy, all within this deadline.
	deadline := time.Now().Add(20 * time.Second)
	for i := 0; i < total; i++ {
		port := uint16(freePort)
		if i%3 != 0 {
			port = shapedPort
		}
		if i%5 == 4 {
			// The copy path, with an empty and a too-long packet now and then.
			p := udp4(copyBuf, 64+i%900, port, uint32(i))
			switch i % 100 {
			case 9:
				p, rejected = nil, rejected+1
			case 19:
				p, rejected = make([]byte, 1600), rejected+1
			}
			for {
				n, err := r.dev.Transmit([][]byte{p})
				if n == 1 {
					break
				}
				if !errors.Is(err, mhinet.ErrBusy) || time.Now().After(deadline) {
					t.Fatal(err)
				}
				time.Sleep(50 * time.Microsecond)
			}
			offered++
			continue
		}
		var b *mhinet.ZCBuffer
		for {
			var err error
			if b, err = r.dev.TXBuffer(); err == nil {
				break
			}
			if !errors.Is(err, mhinet.ErrBusy) || time.Now().After(deadline) {
				t.Fatal(err)
			}
			time.Sleep(50 * time.Microsecond)
		}
		b.SetLen(len(udp4(b.Bytes(), 64+i%900, port, uint32(i))))
		if i%100 == 29 {
			b.SetLen(0)
			rejected++
		}
		for {
			n, err := r.dev.TransmitZC([]*mhinet.ZCBuffer{b})
			if n == 1 {
				break
			}
			if !errors.Is(err, mhinet.ErrBusy) || time.Now().After(deadline) {
				t.Fatal(err)
			}
			time.Sleep(50 * time.Microsecond)
		}
		offered++
	}
	// The modem takes an aggregate off Pending before it commits it and
	// counts it in DLPackets after: wait for its counters to agree too.
	s := waitStats(t, r.dev, "quiescent (host done, nothing queued or pending in the modem, its counters agreeing)", func(s mhinet.Stats) bool {
		ms := r.mock.IPData.Stats()
		return s.TxPackets+s.TxErrors+s.TxDropped == offered && ms.ShapedQueued == 0 && ms.Pending == 0 &&
			s.TxZCPending == 0 && ms.ULPackets == s.TxPackets && ms.ULPackets == ms.DLPackets+ms.Dropped()
	})
	ms := r.mock.IPData.Stats()
	if s.TxErrors != rejected || s.TxQueued != s.TxPackets || s.TxZeroCopy+s.TxCopied != s.TxPackets {
		t.Fatalf("host %+v (offered %d, rejected %d)", s, offered, rejected)
	}
	if ms.ULPackets != s.TxPackets || ms.ULPackets != ms.DLPackets+ms.Dropped() || ms.DroppedShaped == 0 {
		t.Fatalf("modem %+v; host %+v", ms, s)
	}
	poll.Until(10*time.Second, func() bool { got, _, _ := r.rx.counts(); return uint64(got) == ms.DLPackets })
	if got, bad, dups := r.rx.counts(); uint64(got) != ms.DLPackets || bad != 0 || dups != 0 {
		t.Fatalf("received %d (%d bad, %d twice), modem sent %d", got, bad, dups, ms.DLPackets)
	}
}

// The release ring is written by the modem and not trusted: entries for
// unknown slots, slots the modem does not hold, stale tags and an index
// that runs past the ring are counted and ignored.
func TestZeroCopyBogusReleases(t *testing.T) {
	r := newZCRig(t, ipdata.ShapeConfig{UDPPort: shapedPort, Rate: 0.001}, mhinet.Config{})
	reg, _ := r.dev.ZeroCopyRegion()
	// Three slots of the shaped flow, which the modem holds.
	var held []*mhinet.ZCBuffer
	for i := range 3 {
		b, err := r.dev.TXBuffer()
		if err != nil {
			t.Fatal(err)
		}
		b.SetLen(len(udp4(b.Bytes(), 100, shapedPort, uint32(i))))
		if n, err := r.dev.TransmitZC([]*mhinet.ZCBuffer{b}); n != 1 || err != nil {
			t.Fatal(n, err)
		}
		held = append(held, b)
	}
	waitStats(t, r.dev, "held", func(s mhinet.Stats) bool {
		return s.TxPackets == 3 && r.mock.IPData.Stats().LentHeld == 3
	})
	// From now on the test writes the release ring, not the modem.
	r.mock.IPData.ClearLendRegion()
	mem := r.mock.Transport.Slab()
	prod, err := mem.Load32(reg.ProdIOVA)
	if err != nil {
		t.Fatal(err)
	}
	write := func(e uint32) {
		if err := mem.Store32(reg.RingIOVA+4*uint64(prod%uint32(reg.RingEntries)), e); err != nil {
			t.Fatal(err)
		}
		prod++
	}
	write(60000)                 // no such slot
	write(uint32(reg.Slots - 1)) // a free slot (tag 0)
	write(1<<16 | 0xFFF0)        // out of range slot, with a tag
	if err := mem.Store32(reg.ProdIOVA, prod); err != nil {
		t.Fatal(err)
	}
	// A completion reaps the ring: send one packet (the modem no longer
	// releases anything, so its slot stays pending too).
	b, _ := r.dev.TXBuffer()
	b.SetLen(len(udp4(b.Bytes(), 100, freePort, 99)))
	if n, err := r.dev.TransmitZC([]*mhinet.ZCBuffer{b}); n != 1 || err != nil {
		t.Fatal(n, err)
	}
	s := waitStats(t, r.dev, "bogus counted", func(s mhinet.Stats) bool { return s.TxZCBadRelease >= 3 })
	if s.TxZCPending != 4 || s.TxZCBadRelease != 3 {
		t.Fatalf("stats %+v", s)
	}
	// An index far past the ring.
	if err := mem.Store32(reg.ProdIOVA, prod+1<<20); err != nil {
		t.Fatal(err)
	}
	b, _ = r.dev.TXBuffer()
	b.SetLen(len(udp4(b.Bytes(), 100, freePort, 100)))
	if n, err := r.dev.TransmitZC([]*mhinet.ZCBuffer{b}); n != 1 || err != nil {
		t.Fatal(n, err)
	}
	s = waitStats(t, r.dev, "overrun counted", func(s mhinet.Stats) bool { return s.TxZCBadRelease > 3 })
	if s.TxZCPending != 5 {
		t.Fatalf("held slots released by garbage: %+v", s)
	}
	if err := r.dev.PutTXBuffer(held[0]); !errors.Is(err, mhinet.ErrNotOwner) {
		t.Fatalf("Free of a slot the modem holds: %v", err)
	}
}

// transmitZC hands b over, retrying while the ring is full.
func transmitZC(t testing.TB, d *mhinet.Device, b *mhinet.ZCBuffer) {
	t.Helper()
	var n int
	var err error
	if !poll.Until(10*time.Second, func() bool {
		n, err = d.TransmitZC([]*mhinet.ZCBuffer{b})
		return n == 1 || !errors.Is(err, mhinet.ErrBusy)
	}) || n != 1 {
		t.Fatalf("TransmitZC: %d, %v", n, err)
	}
}

// The modem's shaper holds one flow to its rate while the other flow
// passes at once: 40 shaped packets at 200/s take at least 200 ms (the
// first leaves one interval after the shaper starts); the free packets
// sent after them arrive long before.
func TestShapedFlowRate(t *testing.T) {
	r := newZCRig(t, ipdata.ShapeConfig{UDPPort: shapedPort, Rate: 200}, mhinet.Config{})
	buf := make([]byte, 200)
	start := time.Now()
	for i := range 40 {
		transmitAll2(t, r.dev, udp4(buf, 200, shapedPort, uint32(i)))
	}
	for i := range 200 {
		transmitAll2(t, r.dev, udp4(buf, 200, freePort, uint32(1000+i)))
	}
	poll.Until(10*time.Second, func() bool { got, _, _ := r.rx.counts(); return got >= 240 })
	r.rx.mu.Lock()
	defer r.rx.mu.Unlock()
	if r.rx.byPort[shapedPort] != 40 || r.rx.byPort[freePort] != 200 || r.rx.bad != 0 {
		t.Fatalf("received %v (%d bad)", r.rx.byPort, r.rx.bad)
	}
	shaped, free := r.rx.last[shapedPort].Sub(start), r.rx.last[freePort].Sub(start)
	if shaped < 200*time.Millisecond {
		t.Fatalf("40 packets at 200/s took %v", shaped)
	}
	if free >= shaped {
		t.Fatalf("free flow done after %v, shaped after %v: the free flow waited", free, shaped)
	}
	t.Logf("shaped flow done after %v, free flow after %v", shaped, free)
	if ms := r.mock.IPData.Stats(); ms.ShapedSent != 40 || ms.DroppedShaped != 0 {
		t.Fatalf("modem %+v", ms)
	}
}

func transmitAll2(t *testing.T, d *mhinet.Device, p []byte) {
	t.Helper()
	transmitAll(t, d, [][]byte{p})
}
