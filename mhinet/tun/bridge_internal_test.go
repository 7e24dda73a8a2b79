package tun

import (
	"context"
	"errors"
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
