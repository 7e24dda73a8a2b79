package tun

import (
	"errors"
	"os"
	"sync"

	"github.com/gomhi/gomhi/mhinet"
)

// The downlink: what the device delivers goes to the TUN. While Run runs,
// Receive only queues the packets and a writer goroutine of Run's writes
// them in batches, so the controller's event goroutine goes back to its
// event ring at once instead of making one write(2) per packet; outside
// Run, Receive writes them itself.

// downlinkQueueLen is how many packets the downlink queue holds before
// Receive waits for the writer (the receive pool, not this, bounds the
// packets in flight: each pins its receive buffer until written).
const downlinkQueueLen = 1024

// downlink is the queue between Receive and the writer goroutine. The
// packets and the two slices are the bridge's: no allocation per packet.
type downlink struct {
	mu      sync.Mutex
	work    sync.Cond // the writer waits for packets or the stop
	room    sync.Cond // Receive waits for room or the writer's end
	queue   []mhinet.Packet
	spare   []mhinet.Packet // the writer's previous batch, emptied
	active  bool            // a writer runs; Receive queues
	stop    bool            // the writer should finish the queue and end
	stopped chan struct{}   // closed when the writer ends
}

func (q *downlink) init() {
	q.work.L, q.room.L = &q.mu, &q.mu
	q.queue = make([]mhinet.Packet, 0, downlinkQueueLen)
	q.spare = make([]mhinet.Packet, 0, downlinkQueueLen)
}

// startWriter starts the writer goroutine; stopWriter ends it once it
// has written every queued packet. One writer at a time (Run's).
func (b *Bridge) startWriter() {
	q := &b.dl
	q.mu.Lock()
	q.active, q.stop = true, false
	q.stopped = make(chan struct{})
	q.mu.Unlock()
	go b.writer()
}

func (b *Bridge) stopWriter() {
	q := &b.dl
	q.mu.Lock()
	q.stop = true
	done := q.stopped
	q.work.Signal()
	q.mu.Unlock()
	<-done
}

// writer writes the queued packets to the TUN, in batches of up to
// BridgeConfig.Batch, until stopWriter; then it writes what is left and
// hands the downlink back to Receive.
func (b *Bridge) writer() {
	q := &b.dl
	q.mu.Lock()
	for {
		for len(q.queue) == 0 && !q.stop {
			q.work.Wait()
		}
		if len(q.queue) == 0 {
			q.active = false
			q.room.Broadcast()
			close(q.stopped)
			q.mu.Unlock()
			return
		}
		batch := q.queue
		q.queue = q.spare
		q.room.Broadcast()
		q.mu.Unlock()
		b.c.downBatches.Add(1)
		for i := 0; i < len(batch); i += b.cfg.Batch {
			b.deliver(batch[i:min(i+b.cfg.Batch, len(batch))])
		}
		clear(batch) // drop the references into receive buffers
		q.mu.Lock()
		q.spare = batch[:0]
	}
}

// Receive takes the packets the device delivers (it implements
// mhinet.Receiver): while Run runs they are queued for its writer
// goroutine (Receive waits while the queue is full), otherwise written to
// the TUN at once. Each packet is released exactly once, after its write;
// failed writes are counted in WriteErrors.
func (b *Bridge) Receive(pkts []mhinet.Packet) {
	q := &b.dl
	q.mu.Lock()
	for len(pkts) > 0 && q.active {
		room := cap(q.queue) - len(q.queue)
		if room == 0 {
			b.c.downQueueFull.Add(1)
			q.room.Wait()
			continue
		}
		k := min(room, len(pkts))
		q.queue = append(q.queue, pkts[:k]...)
		pkts = pkts[k:]
		q.work.Signal()
	}
	q.mu.Unlock()
	if len(pkts) > 0 {
		b.deliver(pkts)
	}
}

// deliver writes packets to the TUN and releases them.
func (b *Bridge) deliver(pkts []mhinet.Packet) {
	if b.vnet > 0 {
		b.receiveVnet(pkts)
		return
	}
	b.rxMu.Lock()
	all := b.rxBufs[:0]
	for _, p := range pkts {
		all = append(all, p.Data)
	}
	bufs := all
	for len(bufs) > 0 {
		n, err := b.tun.Write(bufs)
		b.c.downFrames.Add(uint64(n))
		if n > 0 {
			countBatch(&b.c.downPackets, &b.c.downBytes, bufs[:n])
		}
		if err == nil {
			break
		}
		if errors.Is(err, ErrClosed) || errors.Is(err, os.ErrClosed) {
			b.c.writeErrors.Add(uint64(len(bufs) - n))
			break
		}
		b.c.writeErrors.Add(1)
		b.log.Debug("TUN write failed", "err", err)
		bufs = bufs[n+1:]
	}
	clear(all) // drop the references into receive buffers
	b.rxBufs = all[:0]
	b.rxMu.Unlock()
	for _, p := range pkts {
		p.Release()
	}
}
