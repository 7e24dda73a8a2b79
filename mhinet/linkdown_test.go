package mhinet_test

import (
	"errors"
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhi"
	"github.com/gomhi/gomhi/mhi/ep/ipdata"
	"github.com/gomhi/gomhi/mhi/testenv/poll"
	"github.com/gomhi/gomhi/mhinet"
	"github.com/gomhi/gomhi/pcigeneric/mock"
)

// TestDownAfterLinkDown: the network device on a modem that falls off the
// bus while it carries traffic goes down at once — no command, drain or
// refill waits for a device that cannot answer (the controller's timeout is
// a minute here, so any such wait would show) — and transmitting after the
// link went down fails instead of blocking.
func TestDownAfterLinkDown(t *testing.T) {
	m, err := mock.Open(mock.Options{IPData: &ipdata.Config{},
		Host: func(o *mhi.Options) { o.HealthInterval = 10 * time.Millisecond }})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := m.Controller.PowerUp(); err != nil {
		t.Fatal(err)
	}
	if err := m.Controller.SetTimeout(time.Minute); err != nil {
		t.Fatal(err)
	}
	rx := newCollector()
	d, err := mhinet.New(m.Controller, mhinet.Config{Pair: m.DataPair}, rx)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Up(); err != nil {
		t.Fatal(err)
	}
	pkts := make([][]byte, 64)
	for i := range pkts {
		pkts[i] = ipv4(200, uint32(i))
	}
	transmitAll(t, d, pkts)
	if !rx.waitFor(t, len(pkts)) {
		t.FailNow()
	}

	m.Transport.Unplug(nil)
	if !poll.Until(20*time.Second, func() bool { return m.Controller.PMState() == mhi.PMLinkDown }) {
		t.Fatalf("host state %s 20 s after the modem fell off the bus", m.Controller.PMState())
	}
	// Writes before the host noticed (a refill's doorbell) went nowhere;
	// none may follow.
	_, writes := m.Transport.Unplugged()
	if _, err := d.Transmit(pkts[:4]); err == nil {
		t.Errorf("Transmit on a modem off the bus succeeded")
	} else {
		t.Logf("Transmit: %v", err)
	}
	down := make(chan error, 1)
	go func() { down <- d.Down() }()
	select {
	case err := <-down:
		if err != nil && !errors.Is(err, mhi.ErrLinkDown) {
			t.Errorf("Down: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("Down still running 20 s after the link went down: it waits for the device")
	}
	if _, w := m.Transport.Unplugged(); w != writes {
		t.Errorf("%d register writes after the host saw the link down", w-writes)
	}
	t.Logf("host: %+v", d.Stats())
}
