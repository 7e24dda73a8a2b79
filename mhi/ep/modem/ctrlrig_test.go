package modem

import (
	"io"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhi"
	"github.com/gomhi/gomhi/mhi/ctrlport"
	"github.com/gomhi/gomhi/mhi/ep"
	"github.com/gomhi/gomhi/mhi/inproc"
	"github.com/gomhi/gomhi/mhi/testenv/poll"
	"github.com/gomhi/gomhi/pcigeneric"
)

// waitTimeout bounds every wait of the tests; waits poll and return as soon
// as their condition holds.
const waitTimeout = 5 * time.Second

// ctrlBufSize is the size of the rig's downlink buffers: small enough that
// long answers come in OVERFLOW pieces, which the port joins.
const ctrlBufSize = 1024

// ctrlRig is a host driving a device's control channel pairs the way
// mhi_wwan_ctrl does: the host stack (mhi) over the in-process transport,
// each pair opened as a control port (mhi/ctrlport), each write one uplink
// transfer, each downlink transfer kept until the test reads it.
type ctrlRig struct {
	t     testing.TB
	dev   *ep.Device
	ctrl  *mhi.Controller
	pairs map[string]*ctrlPair
}

// ctrlPair is an open pair and the downlink transfers not read yet.
type ctrlPair struct {
	port *ctrlport.Pair
	mu   sync.Mutex
	rx   [][]byte
}

// testLogger writes Debug records to stderr when EP_TEST_LOG is set, and
// formats (then discards) them otherwise, so the logging paths run.
func testLogger() *slog.Logger {
	var w io.Writer = io.Discard
	if os.Getenv("EP_TEST_LOG") != "" {
		w = os.Stderr
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// newCtrlRig starts a device with model's channels and fns on its pairs,
// joins a host controller to it and powers it up; no pair is open yet.
func newCtrlRig(tb testing.TB, model string, fns map[string]ep.Function) *ctrlRig {
	tb.Helper()
	info, ok := pcigeneric.Model(model)
	if !ok {
		tb.Fatalf("no model %q", model)
	}
	tr, err := inproc.New(ep.Config{MHI: info.Config, Functions: fns, Logger: testLogger()}, inproc.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	ctrl, err := mhi.NewController(tr, info.Config, mhi.Options{Name: "mhi0"})
	if err != nil {
		_ = tr.Close()
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		_ = ctrl.PowerDown()
		_ = tr.Close()
	})
	if err := ctrl.PowerUp(); err != nil {
		tb.Fatal(err)
	}
	return &ctrlRig{t: tb, dev: tr.Device(), ctrl: ctrl, pairs: map[string]*ctrlPair{}}
}

// open starts a pair's channels and posts its downlink buffers (as opening
// /dev/wwan0qmi0 does).
func (r *ctrlRig) open(name string) {
	r.t.Helper()
	port, err := ctrlport.OpenPair(r.ctrl, name, ctrlport.PairOptions{DLBufferSize: ctrlBufSize})
	if err != nil {
		r.t.Fatalf("open %s: %v", name, err)
	}
	p := &ctrlPair{port: port}
	port.Subscribe(func(msg []byte) {
		p.mu.Lock()
		p.rx = append(p.rx, append([]byte(nil), msg...))
		p.mu.Unlock()
	})
	r.pairs[name] = p
}

// close resets a pair's channels (the last close of the port).
func (r *ctrlRig) close(name string) {
	r.t.Helper()
	if err := r.pairs[name].port.Close(); err != nil {
		r.t.Fatalf("close %s: %v", name, err)
	}
	delete(r.pairs, name)
}

// write sends data as one uplink transfer on a pair.
func (r *ctrlRig) write(name string, data []byte) {
	r.t.Helper()
	if err := r.pairs[name].port.Send(data); err != nil {
		r.t.Fatalf("write %s: %v", name, err)
	}
}

// take removes and returns the oldest downlink transfer not read yet.
func (p *ctrlPair) take() ([]byte, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.rx) == 0 {
		return nil, false
	}
	out := p.rx[0]
	p.rx = p.rx[1:]
	return out, true
}

// readDL returns the next downlink transfer of a pair.
func (r *ctrlRig) readDL(name string) []byte {
	r.t.Helper()
	p := r.pairs[name]
	var out []byte
	waitUntil(r.t, name+" downlink transfer", func() bool {
		var ok bool
		out, ok = p.take()
		return ok
	})
	return out
}

// quiet checks that no downlink transfer arrives on a pair for d.
func (r *ctrlRig) quiet(name string, d time.Duration) {
	r.t.Helper()
	time.Sleep(d)
	if msg, ok := r.pairs[name].take(); ok {
		r.t.Fatalf("%s: unexpected downlink %q", name, msg)
	}
}

// waitUntil polls cond until it holds, for up to waitTimeout.
func waitUntil(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	poll.Wait(tb, waitTimeout, cond, func() string { return "timed out waiting for " + what })
}
