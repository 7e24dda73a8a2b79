package mhinet

import (
	"testing"

	"github.com/gomhi/gomhi/mhi"
	"github.com/gomhi/gomhi/pcigeneric/mock"
)

type discard struct{}

func (discard) Receive(pkts []Packet) {
	for _, p := range pkts {
		p.Release()
	}
}

// An uplink completion whose cookie names no transmit buffer is counted
// as a transmit stale completion, not a receive one.
func TestTXStaleCompletionCounted(t *testing.T) {
	m, err := mock.Open(mock.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	if err := m.Controller.PowerUp(); err != nil {
		t.Fatal(err)
	}
	d, err := New(m.Controller, Config{Pair: m.DataPair}, discard{})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Up(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Down() })
	d.tx.onComplete(mhi.Completion{Cookie: 1 << 20})
	if s := d.Stats(); s.TxStale != 1 || s.RxStale != 0 {
		t.Fatalf("TxStale %d, RxStale %d (want 1, 0)", s.TxStale, s.RxStale)
	}
}
