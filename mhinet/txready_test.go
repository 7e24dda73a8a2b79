package mhinet_test

import (
	"errors"
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhi/testenv/poll"
	"github.com/gomhi/gomhi/mhinet"
)

// A sender that waits only on TransmitReady after ErrBusy (no sleeps, no
// polling) gets every packet out: the completions wake it. Down wakes it
// too.
func TestTransmitReady(t *testing.T) {
	r := newRig(t, mhinet.Config{})
	ready := r.dev.TransmitReady()
	const n = 1000 // far more than the 127-element uplink ring holds
	pkts := make([][]byte, n)
	for i := range pkts {
		pkts[i] = ipv4(200, uint32(i))
	}
	busy := 0
	for sent := 0; sent < n; {
		k, err := r.dev.Transmit(pkts[sent:])
		sent += k
		switch {
		case err == nil:
		case errors.Is(err, mhinet.ErrBusy):
			busy++
			select {
			case <-ready:
			case <-time.After(5 * time.Second):
				t.Fatalf("ErrBusy after %d packets and no TransmitReady within 5 s: %+v", sent, r.dev.Stats())
			}
		default:
			t.Fatal(err)
		}
	}
	if busy == 0 {
		t.Fatalf("the ring never filled: %d packets without ErrBusy", n)
	}
	if !r.rx.waitFor(t, n) {
		t.Fatalf("%d of %d packets looped back", r.rx.count(), n)
	}
	// Every uplink completion in (they may follow the looped-back
	// packets), then take the value they left.
	if !poll.Until(5*time.Second, func() bool { return r.dev.Stats().TxPackets == n }) {
		t.Fatalf("uplink completions: %+v", r.dev.Stats())
	}
	select {
	case <-ready:
	default:
	}
	if err := r.dev.Down(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ready:
	case <-time.After(5 * time.Second):
		t.Fatal("Down did not wake a waiting sender")
	}
	if _, err := r.dev.Transmit(pkts[:1]); !errors.Is(err, mhinet.ErrDown) {
		t.Fatalf("Transmit after Down: %v", err)
	}
}
