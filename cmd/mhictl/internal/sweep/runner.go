package sweep

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/gomhi/gomhi/mhi/ep/ipdata"
	"github.com/gomhi/gomhi/mhinet"
)

// runner runs iterations on one open modem and device.
type runner struct {
	o   *Options
	t   *Target
	dev *mhinet.Device
	rx  *counter

	pkts [][]byte // loopback mode: the packets to transmit, reused
}

// delta is what one iteration (or a sum of them) did.
type delta struct {
	elapsed                  time.Duration
	sent, delivered, bytes   uint64
	elements, events, chains uint64
	overflows, transfers     uint64
	hostCPU                  time.Duration
	drops                    map[string]uint64
}

func (d *delta) add(o delta) {
	d.elapsed += o.elapsed
	d.sent += o.sent
	d.delivered += o.delivered
	d.bytes += o.bytes
	d.elements += o.elements
	d.events += o.events
	d.chains += o.chains
	d.overflows += o.overflows
	d.transfers += o.transfers
	d.hostCPU += o.hostCPU
	for k, v := range o.drops {
		if d.drops == nil {
			d.drops = map[string]uint64{}
		}
		d.drops[k] += v
	}
}

func (d *delta) fill(p *Point) {
	per := func(x uint64) float64 {
		if d.delivered == 0 {
			return 0
		}
		return float64(x) / float64(d.delivered)
	}
	p.ElementsPerPacket = per(d.elements)
	p.EventsPerPacket = per(d.events)
	p.ChainsPerPacket = per(d.chains)
	p.OverflowsPerPacket = per(d.overflows)
	if d.transfers > 0 {
		p.PacketsPerTransfer = float64(d.delivered) / float64(d.transfers)
	}
	p.Sent, p.Delivered = d.sent, d.delivered
	for _, v := range d.drops {
		p.Dropped += v
	}
	p.Drops = d.drops
	p.Conserved = p.Sent == p.Delivered+p.Dropped
}

// snapshot is every counter an iteration looks at.
type snapshot struct {
	host    mhinet.Stats
	modem   ipdata.Stats
	events  uint64
	rxPkts  uint64
	rxBytes uint64
}

func (r *runner) snap() snapshot {
	_, dl, _ := r.t.Controller.ChannelPair(r.t.Pair)
	s := snapshot{
		host:   r.dev.Stats(),
		events: dl.EventRingEvents(), rxPkts: r.rx.pkts.Load(), rxBytes: r.rx.bytes.Load(),
	}
	if r.t.IPData != nil {
		s.modem = r.t.IPData.Stats()
	}
	return s
}

// iteration pushes o.Packets packets of size bytes through and waits until
// every one is delivered or counted, or nothing moves for o.Stall.
func (r *runner) iteration(ctx context.Context, size int) (delta, error) {
	n := uint64(r.o.Packets)
	before := r.snap()
	start := time.Now()
	var sent uint64
	var err error
	switch r.o.Mode {
	case Generator:
		err = r.t.IPData.StartGenerator(ipdata.GeneratorConfig{Count: r.o.Packets, Sizes: []int{size}})
		sent = n
	case Loopback:
		sent, err = r.transmit(ctx, size, before.rxPkts)
	}
	if err != nil {
		return delta{}, err
	}
	// Wait for delivery: done when delivered + drops account for sent.
	last, lastMove := r.rx.pkts.Load(), time.Now()
	var now snapshot
	for {
		now = r.snap()
		got := now.rxPkts - before.rxPkts
		if got+dropsBetween(before, now).total() >= sent {
			break
		}
		if now.rxPkts != last {
			last, lastMove = now.rxPkts, time.Now()
		} else if time.Since(lastMove) > r.o.Stall {
			break // reported as not conserved
		}
		if ctx.Err() != nil {
			if r.o.Mode == Generator {
				r.t.IPData.StopGenerator()
			}
			return delta{}, ctx.Err()
		}
		time.Sleep(50 * time.Microsecond)
	}
	elapsed := time.Since(start)
	if r.o.Mode == Generator {
		wctx, cancel := context.WithTimeout(ctx, r.o.Stall)
		_, err := r.t.IPData.WaitGenerator(wctx)
		cancel()
		if err != nil {
			r.t.IPData.StopGenerator()
		}
	}
	d := between(before, now)
	d.elapsed, d.sent = elapsed, sent
	return d, nil
}

// between is what happened from snapshot a to snapshot b as the counters
// tell it: the packets and bytes delivered, the ring elements, events,
// overflow chains and completions and transfers they took, and the drops
// by counter. The time it took, the packets sent and the host's CPU are
// the caller's to fill in.
func between(a, b snapshot) delta {
	return delta{
		delivered: b.rxPkts - a.rxPkts,
		bytes:     b.rxBytes - a.rxBytes,
		elements:  b.host.RxElements - a.host.RxElements,
		events:    b.events - a.events,
		chains:    b.host.RxChains - a.host.RxChains,
		overflows: b.host.RxOverflows - a.host.RxOverflows,
		transfers: b.host.RxTransfers - a.host.RxTransfers,
		drops:     dropsBetween(a, b).nonZero(),
	}
}

// drops names every counter a packet can disappear into.
type drops map[string]uint64

func (d drops) total() uint64 {
	var t uint64
	for _, v := range d {
		t += v
	}
	return t
}

func (d drops) nonZero() map[string]uint64 {
	out := map[string]uint64{}
	for k, v := range d {
		if v != 0 {
			out[k] = v
		}
	}
	return out
}

func dropsBetween(a, b snapshot) drops {
	return drops{
		"host_rx_errors":     b.host.RxErrors - a.host.RxErrors,
		"host_tx_errors":     b.host.TxErrors - a.host.TxErrors,
		"host_tx_dropped":    b.host.TxDropped - a.host.TxDropped,
		"modem_dropped":      b.modem.Dropped() - a.modem.Dropped(),
		"modem_deagg_errors": b.modem.DeaggErrors() - a.modem.DeaggErrors(),
	}
}

// transmit sends the iteration's packets (loopback mode), retrying while
// the uplink is busy. Each packet carries its sequence number.
func (r *runner) transmit(ctx context.Context, size int, _ uint64) (uint64, error) {
	if len(r.pkts) == 0 || len(r.pkts[0]) != size {
		r.pkts = r.pkts[:0]
		for i := 0; i < 64; i++ {
			p := make([]byte, size)
			p[0] = 0x45
			binary.BigEndian.PutUint16(p[2:], uint16(size))
			p[8], p[9] = 64, 17
			r.pkts = append(r.pkts, p)
		}
	}
	total := r.o.Packets
	sent := 0
	lastMove := time.Now()
	for sent < total {
		batch := r.pkts[:min(len(r.pkts), total-sent)]
		n, err := r.dev.Transmit(batch)
		sent += n
		if n > 0 {
			lastMove = time.Now()
		}
		switch {
		case err == nil:
		case errors.Is(err, mhinet.ErrBusy):
			if time.Since(lastMove) > r.o.Stall {
				return uint64(sent), fmt.Errorf("transmit stalled after %d packets", sent)
			}
			time.Sleep(20 * time.Microsecond)
		default:
			return uint64(sent), err
		}
		if ctx.Err() != nil {
			return uint64(sent), ctx.Err()
		}
	}
	return uint64(sent), nil
}
