package mhinet

import (
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/gomhi/gomhi/mhi/proto/framing"
	"github.com/gomhi/gomhi/mhi/proto/ntb"
	"github.com/gomhi/gomhi/pcigeneric/mock"
)

// benchIPv4 returns an IPv4 packet of n bytes.
func benchIPv4(n int, seq uint32) []byte {
	p := make([]byte, n)
	p[0] = 0x45
	binary.BigEndian.PutUint16(p[2:], uint16(n))
	p[9] = 17
	binary.BigEndian.PutUint32(p[20:], seq)
	return p
}

// releasingRx releases every packet at once and counts them.
type releasingRx struct{ n int }

func (r *releasingRx) Receive(pkts []Packet) {
	for _, p := range pkts {
		p.Release()
	}
	r.n += len(pkts)
}

// BenchmarkRxDeliver measures the host's receive work for one transfer that
// the modem has written — parse, (copy,) hand to the receiver — with
// copy-on-receive off and on. One op is one transfer: a raw IP packet, or
// an MBIM NTB of 32 packets; ns/pkt divides by the packets. The transfers
// sit in the pool's free DMA buffers (127 × 64 KiB), visited in turn, so
// the data is not all in the cache. The receiver releases at once and
// reads nothing.
func BenchmarkRxDeliver(b *testing.B) {
	for _, f := range []struct {
		name   string
		format framing.Format
		pkts   int
	}{{"raw", framing.RawIP, 1}, {"mbim32", framing.NTB16, 32}} {
		for _, size := range []int{64, 1500} {
			for _, mode := range []RxCopyMode{RxCopyOff, RxCopyOn} {
				b.Run(fmt.Sprintf("%s/%dB/copy=%s", f.name, size, mode), func(b *testing.B) {
					benchDeliver(b, f.format, f.pkts, size, mode)
				})
			}
		}
	}
}

func benchDeliver(b *testing.B, format framing.Format, pkts, size int, mode RxCopyMode) {
	m, err := mock.Open(mock.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = m.Close() })
	if err := m.Controller.PowerUp(); err != nil {
		b.Fatal(err)
	}
	rx := &releasingRx{}
	d, err := New(m.Controller, Config{Pair: m.DataPair, Format: format, MRU: MaxMRU, RxCopy: mode}, rx)
	if err != nil {
		b.Fatal(err)
	}
	if err := d.Up(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = d.Down() })
	// The transfer the modem would write.
	var xfer []byte
	if format == framing.RawIP {
		xfer = benchIPv4(size, 0)
	} else {
		buf := make([]byte, MaxMRU)
		var w ntb.Writer
		if err := w.Reset(buf, ntb.Config{}); err != nil {
			b.Fatal(err)
		}
		for i := range pkts {
			if err := w.Add(benchIPv4(size, uint32(i))); err != nil {
				b.Fatal(err)
			}
		}
		xfer = buf[:w.Finish()]
	}
	// Take the pool's free buffers (the posted ones stay with the idle
	// modem) and write the transfer into each.
	var bufs []*rxBuffer
	for {
		buf := d.pool.get()
		if buf == nil {
			break
		}
		copy(buf.data, xfer)
		bufs = append(bufs, buf)
	}
	if len(bufs) == 0 {
		b.Fatal("no free receive buffer")
	}
	d.chainMu.Lock()
	defer d.chainMu.Unlock()
	b.SetBytes(int64(pkts * size))
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		buf := bufs[i]
		if i++; i == len(bufs) {
			i = 0
		}
		buf.refs.Add(1) // deliver drops one reference: the buffer stays ours
		d.deliver(buf, buf.data[:len(xfer)])
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*pkts), "ns/pkt")
	if rx.n != b.N*pkts {
		b.Fatalf("%d packets delivered, want %d", rx.n, b.N*pkts)
	}
	if s := d.Stats(); (mode == RxCopyOn) != (s.RxCopied == uint64(b.N)) {
		b.Fatalf("copy %s: %d transfers copied of %d", mode, s.RxCopied, b.N)
	}
}
