package tun

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhi/testenv/poll"
	"github.com/gomhi/gomhi/mhinet"
)

// The downlink queue between Receive and Run's writer: packets keep their
// order, a full queue makes Receive wait (the stack not reading holds the
// writer, which holds the queue) and loses nothing, stopWriter writes what
// is queued, and without a writer Receive writes at once.
func TestDownlinkWriterQueue(t *testing.T) {
	ct := NewChannelTUN()
	b := NewBridge(ct, BridgeConfig{})
	const n, per = 3000, 32
	pkt := func(seq int) mhinet.Packet {
		p := make([]byte, 24)
		p[0] = 0x45
		binary.BigEndian.PutUint32(p[20:], uint32(seq))
		return mhinet.Packet{Data: p}
	}
	b.startWriter()
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		batch := make([]mhinet.Packet, 0, per)
		for seq := 0; seq < n; {
			batch = batch[:0]
			for len(batch) < per && seq < n {
				batch = append(batch, pkt(seq))
				seq++
			}
			b.Receive(batch)
		}
	}()
	// Nobody reads the stack yet: ChannelQueue packets fill it, the
	// writer waits in Write, the queue fills, Receive waits.
	if !poll.Until(10*time.Second, func() bool { return b.Stats().DownlinkQueueFull != 0 }) {
		t.Fatalf("queue never full: %+v", b.Stats())
	}
	for want := range n {
		select {
		case p := <-ct.ToStack:
			if got := binary.BigEndian.Uint32(p[20:]); got != uint32(want) {
				t.Fatalf("packet %d is seq %d", want, got)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of %d packets written: %+v", want, n, b.Stats())
		}
	}
	<-sent
	b.stopWriter()
	s := b.Stats()
	if s.DownlinkPackets != n || s.WriteErrors != 0 || s.DownlinkBatches == 0 || s.DownlinkBatches >= n/per {
		t.Fatalf("stats %+v: want %d packets in fewer batches than Receive calls (%d)", s, n, n/per)
	}
	// No writer: Receive writes before it returns.
	b.Receive([]mhinet.Packet{pkt(n)})
	select {
	case <-ct.ToStack:
	default:
		t.Fatal("Receive without a writer did not write")
	}
	if s2 := b.Stats(); s2.DownlinkBatches != s.DownlinkBatches || s2.DownlinkPackets != n+1 {
		t.Fatalf("after the writer: %+v", s2)
	}
}
