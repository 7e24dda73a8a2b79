package mhinet_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhi/ep/ipdata"
	"github.com/gomhi/gomhi/mhi/proto/framing"
	"github.com/gomhi/gomhi/mhi/testenv/poll"
	"github.com/gomhi/gomhi/mhinet"
	"github.com/gomhi/gomhi/mhinet/gso"
	"github.com/gomhi/gomhi/pcigeneric/mock"
)

// copyRx keeps a copy of every packet received.
type copyRx struct {
	mu   sync.Mutex
	pkts [][]byte
}

func (c *copyRx) Receive(pkts []mhinet.Packet) {
	c.mu.Lock()
	for _, p := range pkts {
		c.pkts = append(c.pkts, append([]byte(nil), p.Data...))
		p.Release()
	}
	c.mu.Unlock()
}

func (c *copyRx) snapshot() [][]byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([][]byte(nil), c.pkts...)
}

func (c *copyRx) wait(t *testing.T, n int) [][]byte {
	t.Helper()
	var got [][]byte
	if !poll.Until(10*time.Second, func() bool {
		got = c.snapshot()
		return len(got) >= n
	}) {
		t.Fatalf("received %d of %d packets", len(got), n)
	}
	return got
}

// inetSum is the ones' complement sum of b folded to 16 bits, from the
// RFC 1071 definition (independent of the gso package).
func inetSum(b []byte, acc uint32) uint16 {
	for len(b) >= 2 {
		acc += uint32(b[0])<<8 | uint32(b[1])
		b = b[2:]
	}
	if len(b) == 1 {
		acc += uint32(b[0]) << 8
	}
	for acc > 0xffff {
		acc = acc>>16 + acc&0xffff
	}
	return uint16(acc)
}

// pseudo returns the pseudo-header sum of an IPv4 or IPv6 packet for an
// L4 length.
func pseudo(p []byte, proto byte, l4len int) uint32 {
	var s uint32
	addrs := p[12:20]
	if p[0]>>4 == 6 {
		addrs = p[8:40]
	}
	for i := 0; i < len(addrs); i += 2 {
		s += uint32(addrs[i])<<8 | uint32(addrs[i+1])
	}
	return s + uint32(proto) + uint32(l4len)
}

// superTCP4 builds an IPv4/TCP super-packet with payload bytes of a
// pattern starting at seq, and its virtio_net_hdr with a partial checksum
// (as the kernel hands it over with TSO on).
func superTCP4(payload, mss int, seq uint32) gsoPkt {
	p := make([]byte, 40+payload)
	p[0] = 0x45
	binary.BigEndian.PutUint16(p[2:], uint16(len(p)))
	binary.BigEndian.PutUint16(p[4:], 100)
	p[6] = 0x40 // DF
	p[8], p[9] = 64, 6
	copy(p[12:], []byte{198, 18, 0, 1, 198, 18, 0, 2})
	binary.BigEndian.PutUint16(p[10:], ^inetSum(p[:20], 0))
	tcp := p[20:]
	binary.BigEndian.PutUint16(tcp[0:], 40000)
	binary.BigEndian.PutUint16(tcp[2:], 5001)
	binary.BigEndian.PutUint32(tcp[4:], seq)
	binary.BigEndian.PutUint32(tcp[8:], 777)
	tcp[12] = 5 << 4
	tcp[13] = 0x18 // PSH|ACK
	binary.BigEndian.PutUint16(tcp[14:], 512)
	for i := range payload {
		p[40+i] = byte(seq + uint32(i))
	}
	binary.BigEndian.PutUint16(tcp[16:], inetSum(nil, pseudo(p, 6, len(tcp))))
	return gsoPkt{gso.VirtioNetHdr{Flags: gso.FlagNeedsCsum, GSOType: gso.GSOTCPv4, HdrLen: 40, GSOSize: uint16(mss), CsumStart: 20, CsumOffset: 16}, p}
}

// superUDP6 builds an IPv6/UDP super-packet (UDP_SEGMENT) of n datagrams
// of size bytes each.
func superUDP6(n, size int) gsoPkt {
	pay := n * size
	p := make([]byte, 48+pay)
	p[0] = 0x60
	binary.BigEndian.PutUint16(p[4:], uint16(8+pay))
	p[6], p[7] = 17, 64
	p[8], p[23] = 0x20, 1
	p[24], p[39] = 0x20, 2
	binary.BigEndian.PutUint16(p[40:], 5000)
	binary.BigEndian.PutUint16(p[42:], 7)
	binary.BigEndian.PutUint16(p[44:], uint16(8+pay))
	for i := range pay {
		p[48+i] = byte(i / size)
	}
	binary.BigEndian.PutUint16(p[46:], inetSum(nil, pseudo(p, 17, 8+pay)))
	return gsoPkt{gso.VirtioNetHdr{Flags: gso.FlagNeedsCsum, GSOType: gso.GSOUDPL4, HdrLen: 48, GSOSize: uint16(size), CsumStart: 40, CsumOffset: 6}, p}
}

type gsoPkt struct {
	h gso.VirtioNetHdr
	p []byte
}

func (g gsoPkt) in() mhinet.GSOPacket { return mhinet.GSOPacket{Hdr: g.h, Data: g.p} }

// transmitGSOAll hands pkts to TransmitGSO until every one is taken and
// nothing is pending.
func transmitGSOAll(t testing.TB, d *mhinet.Device, pkts []mhinet.GSOPacket) (busy int) {
	t.Helper()
	// Not poll: a send loop, retried every 50 µs on ErrBusy.
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, err := d.TransmitGSO(pkts)
		pkts = pkts[n:]
		if err == nil && len(pkts) == 0 {
			return busy
		}
		if err != nil && !errors.Is(err, mhinet.ErrBusy) {
			t.Fatal(err)
		}
		busy++
		if time.Now().After(deadline) {
			t.Fatalf("TransmitGSO stuck with %d packets left: %+v", len(pkts), d.Stats())
		}
		time.Sleep(50 * time.Microsecond)
	}
}

// Super-packets go through TransmitGSO and the modem's internal loopback
// and come back as MTU-sized packets with valid headers and checksums
// (checked here from the RFCs, not with the gso package) whose payloads
// put together are the original; plain packets pass, partial checksums
// are finished, malformed ones are counted by reason.
func TestTransmitGSOThroughLoopback(t *testing.T) {
	rx := &copyRx{}
	d := rawLoopbackDevice(t, rx)
	if err := d.Up(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Down() })

	tcp := superTCP4(60000, 1460, 1000) // 42 segments
	udp := superUDP6(30, 1200)          // 30 segments
	plain := superTCP4(100, 1460, 5)    // fits: one packet, partial checksum
	plain.h.GSOType = gso.GSONone
	raw := superTCP4(50, 1460, 9) // a complete packet, no header
	binary.BigEndian.PutUint16(raw.p[36:], 0)
	binary.BigEndian.PutUint16(raw.p[36:], ^inetSum(raw.p[20:], pseudo(raw.p, 6, len(raw.p)-20)))
	raw.h = gso.VirtioNetHdr{}
	ufo := superTCP4(3000, 1000, 0)
	ufo.h.GSOType = gso.GSOUDP
	bad := superTCP4(3000, 1000, 0)
	bad.h.GSOSize = 0
	short := superTCP4(3000, 1000, 0)
	short.p = short.p[:30]
	short.h.HdrLen = 0
	tooLong := superTCP4(6000, 2000, 0)     // 2040-byte segments, MTU 1500
	huge := gsoPkt{p: make([]byte, 300000)} // plain, larger than the scratch
	huge.p[0] = 0x45
	big := gsoPkt{p: make([]byte, 1600)} // plain, over the MTU
	big.p[0] = 0x45

	in := []mhinet.GSOPacket{tcp.in(), ufo.in(), udp.in(), plain.in(), bad.in(), raw.in(), short.in(), tooLong.in(), huge.in(), big.in()}
	transmitGSOAll(t, d, in)
	got := rx.wait(t, 42+30+2)
	time.Sleep(20 * time.Millisecond)
	if got = rx.snapshot(); len(got) != 42+30+2 {
		t.Fatalf("received %d packets, want 74", len(got))
	}

	var tcpPay, udpPay []byte
	seq := uint32(1000)
	nTCP, nUDP := 0, 0
	for i, p := range got {
		switch p[0] >> 4 {
		case 4:
			if inetSum(p[:20], 0) != 0xffff {
				t.Fatalf("packet %d: bad IPv4 header checksum", i)
			}
			if int(binary.BigEndian.Uint16(p[2:])) != len(p) || len(p) > 1500 {
				t.Fatalf("packet %d: total length %d, %d bytes", i, binary.BigEndian.Uint16(p[2:]), len(p))
			}
			if inetSum(p[20:], pseudo(p, 6, len(p)-20)) != 0xffff {
				t.Fatalf("packet %d: bad TCP checksum", i)
			}
			s := binary.BigEndian.Uint32(p[24:])
			switch s {
			case 5, 9: // the plain ones
				if !bytes.Equal(p[40:], map[uint32][]byte{5: plain.p[40:], 9: raw.p[40:]}[s]) {
					t.Fatalf("plain packet seq %d: payload differs", s)
				}
				continue
			}
			if s != seq {
				t.Fatalf("TCP segment %d: seq %d, want %d", nTCP, s, seq)
			}
			if id := binary.BigEndian.Uint16(p[4:]); id != uint16(100+nTCP) {
				t.Fatalf("TCP segment %d: IP id %d", nTCP, id)
			}
			last := len(tcpPay)+len(p)-40 == 60000
			if psh := p[33]&0x08 != 0; psh != last {
				t.Fatalf("TCP segment %d: PSH %v", nTCP, psh)
			}
			tcpPay = append(tcpPay, p[40:]...)
			seq += uint32(len(p) - 40)
			nTCP++
		case 6:
			if len(p) != 48+1200 || int(binary.BigEndian.Uint16(p[4:])) != 8+1200 || int(binary.BigEndian.Uint16(p[44:])) != 8+1200 {
				t.Fatalf("UDP segment %d: lengths %d", nUDP, len(p))
			}
			if inetSum(p[40:], pseudo(p, 17, len(p)-40)) != 0xffff {
				t.Fatalf("UDP segment %d: bad checksum", nUDP)
			}
			udpPay = append(udpPay, p[48:]...)
			nUDP++
		}
	}
	if nTCP != 42 || !bytes.Equal(tcpPay, tcp.p[40:]) {
		t.Fatalf("TCP: %d segments, payload equal %v", nTCP, bytes.Equal(tcpPay, tcp.p[40:]))
	}
	if nUDP != 30 || !bytes.Equal(udpPay, udp.p[48:]) {
		t.Fatalf("UDP: %d segments, payload equal %v", nUDP, bytes.Equal(udpPay, udp.p[48:]))
	}
	s := d.Stats().GSO
	want := mhinet.GSOStats{SuperPackets: 2, Segments: 72, Plain: 2, Checksummed: 1, ErrShort: 1, ErrBadHeader: 1, ErrUnsupported: 1, ErrSegmentTooLong: 3}
	if s != want {
		t.Fatalf("GSO stats %+v, want %+v", s, want)
	}
}

// Many super-packets at once overrun the uplink ring: TransmitGSO takes
// what fits, says ErrBusy, keeps the cut segments pending and sends them
// on the next call; nothing is lost or sent twice. DropGSOPending gives
// up on the pending ones, counted.
func TestTransmitGSOBusy(t *testing.T) {
	rx := &copyRx{}
	d := rawLoopbackDevice(t, rx)
	if _, err := d.TransmitGSO([]mhinet.GSOPacket{superTCP4(3000, 1000, 0).in()}); !errors.Is(err, mhinet.ErrDown) {
		t.Fatalf("TransmitGSO on a down device: %v", err)
	}
	if s := d.Stats().GSO; s.DroppedSegments != 3 {
		t.Fatalf("segments cut for a down device: %+v", s)
	}
	if err := d.Up(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Down() })
	const supers = 40
	in := make([]mhinet.GSOPacket, supers)
	for i := range in {
		in[i] = superTCP4(43800, 1460, uint32(i)*100000).in() // 30 segments each
	}
	busy := transmitGSOAll(t, d, in)
	got := rx.wait(t, supers*30)
	time.Sleep(20 * time.Millisecond)
	if len(rx.snapshot()) != supers*30 {
		t.Fatalf("received %d, want %d", len(rx.snapshot()), supers*30)
	}
	seen := map[uint32]bool{}
	for _, p := range got {
		s := binary.BigEndian.Uint32(p[24:])
		if seen[s] {
			t.Fatalf("segment seq %d twice", s)
		}
		seen[s] = true
	}
	t.Logf("%d segments with %d busy returns", len(got), busy)
	if busy == 0 {
		t.Fatal("the ring never filled: the test does not exercise ErrBusy")
	}
	// The super-packet cut while the device was down counts too.
	if s := d.Stats(); s.GSO.SuperPackets != supers+1 || s.GSO.Segments != supers*30+3 || s.GSO.DroppedSegments != 3 {
		t.Fatalf("stats %+v", s.GSO)
	}

	// With the uplink idle, one call cuts more segments than the ring has
	// elements (the scratch holds five of these super-packets, 150
	// segments; the ring 127): ErrBusy with segments pending, which
	// DropGSOPending drops and counts.
	var s mhinet.Stats
	if !poll.Until(10*time.Second, func() bool { s = d.Stats(); return s.TxPackets == s.TxQueued }) {
		t.Fatalf("uplink never idle: %+v", s)
	}
	n, err := d.TransmitGSO(in)
	if !errors.Is(err, mhinet.ErrBusy) || n == 0 || n == len(in) {
		t.Fatalf("TransmitGSO of %d super-packets: took %d, %v", len(in), n, err)
	}
	dropped := d.DropGSOPending()
	if dropped == 0 {
		t.Fatal("ErrBusy without pending segments")
	}
	if s := d.Stats().GSO; s.DroppedSegments != uint64(3+dropped) || s.Segments != uint64((supers+n)*30+3) {
		t.Fatalf("took %d, dropped %d, stats %+v", n, dropped, s)
	}
	if d.DropGSOPending() != 0 {
		t.Fatal("pending segments after DropGSOPending")
	}
}

// BenchmarkTransmitGSO: a 64 KiB TCP super-packet per op through
// segmentation, Transmit and the modem's loopback; reports segments per
// second and allocations (the mock modem's goroutines allocate; a memory
// profile shows none in mhinet's transmit path).
func BenchmarkTransmitGSO(b *testing.B) {
	rx := &countingRx{}
	d := rawLoopbackDevice(b, rx)
	if err := d.Up(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = d.Down() })
	in := []mhinet.GSOPacket{superTCP4(64000, 1460, 0).in()}
	transmitGSOAll(b, d, in) // first call allocates the scratch
	segs := 44
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		pkts := in
		for {
			n, err := d.TransmitGSO(pkts)
			pkts = pkts[n:]
			if err == nil {
				break
			}
			if !errors.Is(err, mhinet.ErrBusy) {
				b.Fatal(err)
			}
			runtime.Gosched() // let the modem complete
		}
	}
	waitCount(b, &rx.n, uint64((b.N+1)*segs))
	b.StopTimer()
	b.ReportMetric(float64(b.N*segs)/b.Elapsed().Seconds(), "segments/s")
}

// rawLoopbackDevice powers up the default model's mock modem (raw IP data
// function in loopback) and returns a raw IP device on it with MTU 1500,
// still down; the modem is closed when tb ends.
func rawLoopbackDevice(tb testing.TB, rx mhinet.Receiver) *mhinet.Device {
	tb.Helper()
	m, err := mock.Open(mock.Options{Model: mock.DefaultModel, IPData: &ipdata.Config{Format: framing.RawIP}})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = m.Close() })
	if err := m.Controller.PowerUp(); err != nil {
		tb.Fatal(err)
	}
	d, err := mhinet.New(m.Controller, mhinet.Config{Pair: m.DataPair, MTU: 1500}, rx)
	if err != nil {
		tb.Fatal(err)
	}
	return d
}
