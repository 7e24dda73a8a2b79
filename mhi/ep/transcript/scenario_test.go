package transcript_test

import (
	"bytes"
	"encoding/binary"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhi"
	"github.com/gomhi/gomhi/mhi/ep"
	"github.com/gomhi/gomhi/mhi/ep/transcript"
	"github.com/gomhi/gomhi/mhi/testenv/poll"
	"github.com/gomhi/gomhi/mhi/wire"
	"github.com/gomhi/gomhi/mhinet"
	"github.com/gomhi/gomhi/pcigeneric"
	"github.com/gomhi/gomhi/pcigeneric/mock"
)

// dbModeCounter passes observations on to a recorder and counts the
// DB_MODE completions: the scenario waits for the uplink channel to give
// up polling after each packet, so that every run has the same shapes.
type dbModeCounter struct {
	ep.Observer
	n atomic.Int64
}

func (c *dbModeCounter) Observe(o ep.Observation) {
	if o.Kind == ep.ObserveEvent && o.Element.Type() == wire.PktTxEvent && o.Element.Code() == wire.CCDBMode {
		c.n.Add(1)
	}
	c.Observer.Observe(o)
}

// scenario is what recordScenario runs: gomhi's host on the in-process
// mock modem of model, its network device at mru.
type scenario struct {
	model   string
	mru     int
	packets int
	// suspend adds an M3 suspend and resume, sysErr a SYS_ERR and its
	// recovery, each followed by packets again.
	suspend, sysErr bool
}

// ipv4 returns a minimal IPv4 packet of n bytes carrying seq.
func ipv4(n int, seq uint32) []byte {
	p := make([]byte, n)
	p[0] = 0x45
	binary.BigEndian.PutUint16(p[2:], uint16(n))
	p[9] = 17
	binary.BigEndian.PutUint32(p[20:], seq)
	return p
}

// recordScenario records gomhi's host driving the mock modem through
// power-up, the data channels' start, sc.packets packets looped back one
// at a time, and shutdown, and returns the transcript as written.
func recordScenario(t *testing.T, sc scenario) []byte {
	t.Helper()
	var buf bytes.Buffer
	rec := transcript.New(&buf)
	obs := &dbModeCounter{Observer: rec}
	m, err := mock.Open(mock.Options{Model: sc.model, Device: func(c *ep.Config) { c.Observer = obs }})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			_ = m.Close()
		}
	}()
	if err := m.Controller.PowerUp(); err != nil {
		t.Fatal(err)
	}
	got := make(chan int, 64)
	n, err := mhinet.New(m.Controller, mhinet.Config{Pair: m.DataPair, Format: pcigeneric.PairFormat(m.DataPair), MRU: sc.mru}, mhinet.ReceiverFunc(func(p []mhinet.Packet) {
		for _, x := range p {
			x.Release()
		}
		got <- len(p)
	}))
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Up(); err != nil {
		t.Fatal(err)
	}
	traffic := func() {
		for i := range sc.packets {
			modes := obs.n.Load()
			if _, err := n.Transmit([][]byte{ipv4(100+i%3*500, uint32(i))}); err != nil {
				t.Fatal(err)
			}
			select {
			case <-got:
			case <-time.After(5 * time.Second):
				t.Fatalf("packet %d not looped back", i)
			}
			// The uplink burst channel gives up polling: a DB_MODE.
			if !poll.Until(10*time.Second, func() bool { return obs.n.Load() > modes }) {
				t.Fatalf("packet %d: no DB_MODE", i)
			}
		}
	}
	traffic()
	if sc.suspend {
		if err := m.Controller.Suspend(); err != nil {
			t.Fatal(err)
		}
		if err := m.Controller.Resume(); err != nil {
			t.Fatal(err)
		}
		traffic()
	}
	if sc.sysErr {
		recovered := make(chan struct{}, 1)
		defer m.Controller.OnStatus(func(ev mhi.StatusEvent) {
			if ev.Kind == mhi.StatusRecovered {
				recovered <- struct{}{}
			}
		})()
		m.Transport.Device().InjectSysErr()
		select {
		case <-recovered:
		case <-time.After(10 * time.Second):
			t.Fatal("no recovery from SYS_ERR")
		}
		traffic()
	}
	if err := n.Down(); err != nil {
		t.Fatal(err)
	}
	closed = true
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if err := rec.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// A scenario through suspend and resume and a SYS_ERR with its recovery:
// every phase is found, and two runs compare clean.
func TestPhasesSuspendSysErr(t *testing.T) {
	sc := scenario{model: "qcom-sdx55m", mru: 32768, packets: 3, suspend: true, sysErr: true}
	a := read(t, recordScenario(t, sc))
	seen := map[string]bool{}
	for _, p := range transcript.Phases(a) {
		seen[p] = true
	}
	for _, p := range []string{transcript.PhasePowerUp, transcript.PhaseChannelStart, transcript.PhaseData,
		transcript.PhaseSuspend, transcript.PhaseResume, transcript.PhaseSysErr,
		transcript.PhaseChannelStart + "#2", transcript.PhaseShutdown} {
		if !seen[p] {
			t.Errorf("no record in phase %s (phases %v)", p, seen)
		}
	}
	b := read(t, recordScenario(t, sc))
	if res := transcript.Diff(a, b, nil); len(res.Differences) != 0 {
		t.Fatalf("two runs differ:\n%s", report(res))
	}
}
