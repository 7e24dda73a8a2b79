package sweep

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/gomhi/gomhi/mhi/ep/ipdata"
	"github.com/gomhi/gomhi/mhinet"
)

// ProbeTimeout bounds the wait for the probe packet's echo.
const ProbeTimeout = 2 * time.Second

// probePacket is an IPv4/UDP datagram from 198.18.0.1:40000 to the echo
// port of 198.18.0.2, so that a modem answering as a network (responder)
// is told apart from one looping back: the answer has its addresses and
// ports swapped.
func probePacket() []byte {
	payload := []byte("gomhi sweep probe: loop me back")
	p := make([]byte, 28+len(payload))
	be := binary.BigEndian
	p[0], p[8], p[9] = 0x45, 64, 17
	be.PutUint16(p[2:], uint16(len(p)))
	copy(p[12:], []byte{198, 18, 0, 1})
	copy(p[16:], []byte{198, 18, 0, 2})
	var sum uint32
	for i := 0; i < 20; i += 2 {
		sum += uint32(be.Uint16(p[i:]))
	}
	for sum > 0xFFFF {
		sum = sum&0xFFFF + sum>>16
	}
	be.PutUint16(p[10:], ^uint16(sum))
	be.PutUint16(p[20:], 40000)
	be.PutUint16(p[22:], ipdata.EchoPort)
	be.PutUint16(p[24:], uint16(8+len(payload)))
	copy(p[28:], payload)
	return p
}

// probe sends one packet and checks that the modem loops it back
// unchanged in the sweep's format, before a sweep on a modem whose
// counters are out of reach: a mismatch there would otherwise show only as
// every packet lost.
func (r *runner) probe(ctx context.Context) error {
	pkt := probePacket()
	got := make(chan []byte, 1)
	inspect := func(b []byte) {
		select {
		case got <- bytes.Clone(b):
		default:
		}
	}
	r.rx.inspect.Store(&inspect)
	defer r.rx.inspect.Store(nil)
	before := r.dev.Stats()
	deadline := time.Now().Add(ProbeTimeout)
	for {
		n, err := r.dev.Transmit([][]byte{pkt})
		if n == 1 {
			break
		}
		if err != nil && !errors.Is(err, mhinet.ErrBusy) {
			return fmt.Errorf("sweep: probe: %w", err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("sweep: probe: uplink busy for %v", ProbeTimeout)
		}
		time.Sleep(time.Millisecond)
	}
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	select {
	case b := <-got:
		switch {
		case bytes.Equal(b, pkt):
			return nil
		case len(b) == len(pkt) && bytes.Equal(b[12:16], pkt[16:20]) && bytes.Equal(b[16:20], pkt[12:16]):
			return fmt.Errorf("%w: the probe came back answered, not looped (the modem is a responder)", ErrModemMismatch)
		default:
			return fmt.Errorf("%w: a %d-byte packet that is not the probe came back (the modem generates packets?)", ErrModemMismatch, len(b))
		}
	case <-timer.C:
		after := r.dev.Stats()
		return fmt.Errorf("%w: nothing came back within %v (host rx_errors +%d): does the modem loop back, and in %s framing?",
			ErrModemMismatch, ProbeTimeout, after.RxErrors-before.RxErrors, r.o.Format)
	case <-ctx.Done():
		return ctx.Err()
	}
}
