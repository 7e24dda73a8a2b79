package tun

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhinet"
)

// stuckTX takes `room` packets, then answers ErrBusy forever (an uplink
// whose completions never come); fail makes it answer another error.
type stuckTX struct {
	room  int
	fail  error
	calls int
}

func (s *stuckTX) Transmit(pkts [][]byte) (int, error) {
	s.calls++
	if s.fail != nil {
		return 0, s.fail
	}
	n := min(s.room, len(pkts))
	s.room -= n
	if n < len(pkts) {
		return n, mhinet.ErrBusy
	}
	return n, nil
}

// TransmitReady never fires: the completions never come.
func (s *stuckTX) TransmitReady() <-chan struct{} { return nil }

// A device that stays busy: the bridge retries for BusyTimeout, then
// drops what is left and counts it; other transmit errors drop and count
// at once. Nothing is lost without a counter.
func TestTransmitBusyBound(t *testing.T) {
	b := NewBridge(NewChannelTUN(), BridgeConfig{BusyTimeout: 30 * time.Millisecond})
	tx := &stuckTX{room: 3}
	pkts := [][]byte{{0x45}, {0x45}, {0x45}, {0x45}, {0x45}}
	start := time.Now()
	b.transmit(context.Background(), tx, pkts)
	took := time.Since(start)
	s := b.Stats()
	if s.UplinkPackets != 3 || s.DropBusy != 2 || s.BusyRetries == 0 || int(s.BusyRetries) != tx.calls-1 {
		t.Fatalf("stats %+v after %d calls", s, tx.calls)
	}
	if took < 30*time.Millisecond || took > 2*time.Second {
		t.Fatalf("gave up after %v, bound 30ms", took)
	}

	// A cancelled context ends the retries at once.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	b.transmit(ctx, &stuckTX{}, pkts[:2])
	if s := b.Stats(); s.DropBusy != 4 {
		t.Fatalf("after cancel: %+v", s)
	}

	b.transmit(context.Background(), &stuckTX{fail: mhinet.ErrDown}, pkts)
	b.transmit(context.Background(), &stuckTX{fail: errors.New("boom")}, pkts[:1])
	if s := b.Stats(); s.DropDown != 5 || s.DropTxError != 1 || s.UplinkDropped() != 10 {
		t.Fatalf("after errors: %+v", s)
	}
}

// wokenTX answers ErrBusy until its completion comes (ready fires), then
// takes everything.
type wokenTX struct {
	ready chan struct{}
	done  atomic.Bool // the completion came
	calls atomic.Int32
}

func (w *wokenTX) Transmit(pkts [][]byte) (int, error) {
	w.calls.Add(1)
	if !w.done.Load() {
		return 0, mhinet.ErrBusy
	}
	return len(pkts), nil
}

func (w *wokenTX) TransmitReady() <-chan struct{} { return w.ready }

// A busy uplink sleeps until the device's completion wakes it, then
// retries at once: one call before the completion, one after, whatever
// the time between (no polling), and nothing dropped.
func TestTransmitWokenByCompletion(t *testing.T) {
	b := NewBridge(NewChannelTUN(), BridgeConfig{BusyTimeout: 10 * time.Second})
	tx := &wokenTX{ready: make(chan struct{}, 1)}
	pkts := [][]byte{{0x45}, {0x45}, {0x45}}
	const quiet = 100 * time.Millisecond
	var woke time.Time
	go func() {
		time.Sleep(quiet)
		tx.done.Store(true)
		woke = time.Now()
		tx.ready <- struct{}{}
	}()
	start := time.Now()
	b.transmit(context.Background(), tx, pkts)
	end := time.Now()
	s := b.Stats()
	if s.UplinkPackets != 3 || s.UplinkDropped() != 0 || s.BusyRetries != 1 || tx.calls.Load() != 2 {
		t.Fatalf("stats %+v after %d calls, want 3 packets, 1 retry, 2 calls", s, tx.calls.Load())
	}
	if end.Sub(start) < quiet || end.Sub(woke) > 2*time.Second {
		t.Fatalf("took %v, %v after the completion", end.Sub(start), end.Sub(woke))
	}
}
