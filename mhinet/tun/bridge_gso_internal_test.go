package tun

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhinet"
	"github.com/gomhi/gomhi/mhinet/gso"
)

// stuckGSO takes `room` packets, leaving `pending` segments behind, then
// answers ErrBusy forever; fail makes it answer another error.
type stuckGSO struct {
	room, pending int
	fail          error
	dropped       int
}

func (s *stuckGSO) TransmitGSO(pkts []mhinet.GSOPacket) (int, error) {
	if s.fail != nil {
		return 0, s.fail
	}
	n := min(s.room, len(pkts))
	s.room -= n
	return n, mhinet.ErrBusy // segments stay pending
}

// TransmitReady never fires: the completions never come.
func (s *stuckGSO) TransmitReady() <-chan struct{} { return nil }

func (s *stuckGSO) DropGSOPending() int {
	n := s.pending
	s.pending, s.dropped = 0, s.dropped+n
	return n
}

// The GSO uplink with a device that stays busy: the bridge retries for
// BusyTimeout, then drops the packets not taken and the segments still
// pending, each counted; ErrBusy with everything taken still waits for
// the pending segments. Other errors drop and count at once.
func TestTransmitGSOBusyBound(t *testing.T) {
	b := NewBridge(NewChannelTUN(), BridgeConfig{BusyTimeout: 30 * time.Millisecond})
	super := mhinet.GSOPacket{Hdr: gso.VirtioNetHdr{GSOType: gso.GSOTCPv4, GSOSize: 1000}, Data: []byte{0x45, 1, 2}}
	plain := mhinet.GSOPacket{Data: []byte{0x45}}
	pkts := []mhinet.GSOPacket{super, plain, super, plain, plain}
	tx := &stuckGSO{room: 3, pending: 7}
	start := time.Now()
	b.transmitGSO(context.Background(), tx, pkts)
	took := time.Since(start)
	s := b.Stats()
	if s.UplinkPackets != 3 || s.UplinkSuperPackets != 2 || s.UplinkBytes != 7 || s.DropBusy != 2 || s.DropBusySegments != 7 || s.BusyRetries == 0 || tx.dropped != 7 {
		t.Fatalf("stats %+v, dropped %d", s, tx.dropped)
	}
	if took < 30*time.Millisecond || took > 2*time.Second {
		t.Fatalf("gave up after %v, bound 30ms", took)
	}

	// Everything taken but segments pending: still bounded, still counted.
	b.transmitGSO(context.Background(), &stuckGSO{room: 2, pending: 4}, pkts[:2])
	if s := b.Stats(); s.UplinkPackets != 5 || s.DropBusy != 2 || s.DropBusySegments != 11 {
		t.Fatalf("all taken, segments pending: %+v", s)
	}

	b.transmitGSO(context.Background(), &stuckGSO{fail: mhinet.ErrDown}, pkts)
	b.transmitGSO(context.Background(), &stuckGSO{fail: errors.New("boom")}, pkts[:1])
	if s := b.Stats(); s.DropDown != 5 || s.DropTxError != 1 || s.UplinkDropped() != 8 {
		t.Fatalf("after errors: %+v", s)
	}
}
