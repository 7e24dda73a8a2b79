package mhinet

import (
	"errors"
	"fmt"
	"time"

	"github.com/gomhi/gomhi/mhi"
)

// Resizing the transmit side for a new MTU (SetMTU): drain, reset the
// uplink, reallocate, restart.

// resize waits for the uplink to complete what it holds and reallocates
// the buffers for a new MTU. Transmit and TransmitZC return ErrBusy
// meanwhile. The uplink channel is reset around the reallocation, so the
// modem forgets the zero-copy lend region (and the release ring) before
// their memory is freed: the caller forwards the new ZeroCopyRegion.
func (t *txPath) resize(mem mhi.DMAMemory, mtu int) error {
	d := t.d
	if err := t.drain(); err != nil {
		return err
	}
	if err := d.ul.Reset(); err != nil {
		// The modem may still know the old region: keep the buffers
		// (the uplink is disabled on the host side now; Down and Up
		// bring it back).
		t.endResize()
		return fmt.Errorf("mhinet: MTU change: reset uplink: %w", err)
	}
	t.mu.Lock()
	old := t.mtu
	t.freeLocked()
	err := t.allocLocked(mem, mtu)
	if err != nil {
		if rerr := t.allocLocked(mem, old); rerr != nil {
			err = errors.Join(err, rerr)
		}
	}
	t.mu.Unlock()
	serr := d.ul.Start(nil)
	t.endResize()
	if err != nil || serr != nil {
		return fmt.Errorf("mhinet: MTU change: %w", errors.Join(err, serr))
	}
	return nil
}

// drain starts a resize: it sends the open aggregate and waits (up to 5
// s) until the device has completed every transmit buffer and released
// every zero-copy slot. When they do not come back the resize is over and
// the error wraps mhi.ErrTimeout.
func (t *txPath) drain() error {
	d := t.d
	t.mu.Lock()
	t.resizing = true
	deadline := time.Now().Add(5 * time.Second)
	for {
		if t.agg.open >= 0 && d.ul.Free() > 0 {
			_ = t.queueLocked(t.closeAgg(t.xfers[:0], &d.c.txAggClosedFlush))
		}
		t.zc.reapLocked()
		if t.agg.open < 0 && t.inFlight == 0 && t.zc.pending == 0 {
			break
		}
		if time.Now().After(deadline) {
			n, z := t.inFlight, t.zc.pending
			t.resizing = false
			t.mu.Unlock()
			t.zc.handBack()
			return fmt.Errorf("mhinet: MTU change: %d transmit buffers and %d zero-copy buffers still with the device: %w",
				n, z, mhi.ErrTimeout)
		}
		t.mu.Unlock()
		t.zc.handBack()
		time.Sleep(time.Millisecond)
		t.mu.Lock()
	}
	t.mu.Unlock()
	t.zc.handBack()
	return nil
}

// endResize lets Transmit and TransmitZC in again.
func (t *txPath) endResize() {
	t.mu.Lock()
	t.resizing = false
	t.mu.Unlock()
}
