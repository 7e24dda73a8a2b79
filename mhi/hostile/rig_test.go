package hostile_test

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhi"
	"github.com/gomhi/gomhi/mhi/ep"
	"github.com/gomhi/gomhi/mhi/hostile"
	"github.com/gomhi/gomhi/mhi/inproc"
	"github.com/gomhi/gomhi/mhi/testenv/poll"
	"github.com/gomhi/gomhi/mhi/wire"
)

// mockRig is the project's mock modem behind a hostile Transport.
type mockRig struct {
	in   *inproc.Transport
	dev  *ep.Device
	h    *hostile.Transport
	ctrl *mhi.Controller
}

func newMockRig(tb testing.TB, opts mhi.Options) *mockRig {
	tb.Helper()
	cfg := hostile.Config()
	cfg.Timeout = 2 * time.Second // the mock's READY is timer driven: room for a loaded machine
	in, err := inproc.New(ep.Config{MHI: cfg, SerialNumber: 0x5eed}, inproc.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	h := hostile.Wrap(in, hostile.Options{})
	if opts.PollInterval == 0 {
		opts.PollInterval = 20 * time.Millisecond
	}
	ctrl, err := mhi.NewController(h, cfg, opts)
	if err != nil {
		tb.Fatal(err)
	}
	r := &mockRig{in: in, dev: in.Device(), h: h, ctrl: ctrl}
	tb.Cleanup(func() {
		_ = ctrl.PowerDown()
		if v := h.Drain(); len(v) > 0 {
			tb.Errorf("use of freed memory:\n%s", strings.Join(v, "\n"))
		}
		_ = in.Close()
	})
	return r
}

// settleGoroutines waits until at most base goroutines run, and fails the
// test with a dump when they do not within 3 s.
func settleGoroutines(tb testing.TB, base int) {
	tb.Helper()
	if !poll.Until(3*time.Second, func() bool { return runtime.NumGoroutine() <= base }) {
		buf := make([]byte, 1<<16)
		n := runtime.Stack(buf, true)
		tb.Fatalf("goroutine leak: %d running, %d before\n%s", runtime.NumGoroutine(), base, buf[:n])
	}
}

// scriptRig is the scripted hostile Device behind a hostile Transport.
type scriptRig struct {
	dev  *hostile.Device
	h    *hostile.Transport
	ctrl *mhi.Controller

	mu       sync.Mutex
	statuses []mhi.StatusEvent
	bufs     []mhi.DMABuffer
	ulDone   chan mhi.Completion // completions of sendUL's channel
}

// buf allocates an n-byte data buffer, freed by close.
func (r *scriptRig) buf(tb testing.TB, n int) mhi.DMABuffer {
	tb.Helper()
	b, err := r.h.Alloc(n, 64)
	if err != nil {
		tb.Fatal(err)
	}
	r.bufs = append(r.bufs, b)
	return b
}

// newScriptRig builds the rig; the controller is not powered up.
func newScriptRig(tb testing.TB, dc hostile.DeviceConfig, opts mhi.Options) *scriptRig {
	tb.Helper()
	dev := hostile.NewDevice(dc)
	h := hostile.Wrap(dev, hostile.Options{PassFree: true})
	if opts.PollInterval == 0 {
		opts.PollInterval = 20 * time.Millisecond
	}
	cfg := hostile.Config()
	if dc.MHI.MaxChannels != 0 {
		cfg = dc.MHI
	}
	ctrl, err := mhi.NewController(h, cfg, opts)
	if err != nil {
		tb.Fatal(err)
	}
	r := &scriptRig{dev: dev, h: h, ctrl: ctrl}
	ctrl.OnStatus(func(ev mhi.StatusEvent) {
		r.mu.Lock()
		r.statuses = append(r.statuses, ev)
		r.mu.Unlock()
	})
	return r
}

// statusKinds returns the status events seen so far.
func (r *scriptRig) statusEvents() []mhi.StatusEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]mhi.StatusEvent(nil), r.statuses...)
}

// close powers down (bounded), checks that nothing used freed memory and
// that the host left the device quiesced, and stops the device.
func (r *scriptRig) close(tb testing.TB) {
	tb.Helper()
	start := time.Now()
	if err := r.ctrl.PowerDown(); err != nil {
		tb.Logf("PowerDown: %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		tb.Errorf("PowerDown took %v", d)
	}
	if s := r.dev.State(); s == wire.StateM0 || s == wire.StateM3 {
		tb.Errorf("device in %s after power-down", s)
	}
	for _, b := range r.bufs {
		_ = r.h.Free(b)
	}
	r.bufs = nil
	v := append(r.h.Violations(), r.dev.Violations()...)
	if len(v) > 0 {
		tb.Errorf("use of freed memory:\n%s", strings.Join(v, "\n"))
	}
	if n := r.dev.Memory().InUse(); n != 0 {
		tb.Errorf("%d bytes of DMA memory still allocated after power-down", n)
	}
	_ = r.dev.Close()
}

// tracker checks completions: each must name a buffer that was queued and
// not yet completed.
type tracker struct {
	mu      sync.Mutex
	queued  map[uint64]bool
	errs    []string
	done    []mhi.Completion
	aborted int
}

func newTracker() *tracker { return &tracker{queued: map[uint64]bool{}} }

func (k *tracker) queue(cookies ...uint64) {
	k.mu.Lock()
	for _, c := range cookies {
		k.queued[c] = true
	}
	k.mu.Unlock()
}

func (k *tracker) handle(c mhi.Completion) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.queued[c.Cookie] {
		k.errs = append(k.errs, fmt.Sprintf("completion for cookie %d, which is not queued: %+v", c.Cookie, c))
		return
	}
	delete(k.queued, c.Cookie)
	if errors.Is(c.Err, wire.ErrAborted) {
		k.aborted++
		return
	}
	k.done = append(k.done, c)
}

func (k *tracker) completions() []mhi.Completion {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]mhi.Completion(nil), k.done...)
}

func (k *tracker) check(tb testing.TB) {
	tb.Helper()
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, e := range k.errs {
		tb.Error(e)
	}
}

func mustPowerUp(t *testing.T, r *scriptRig) {
	t.Helper()
	if err := r.ctrl.PowerUp(); err != nil {
		t.Fatalf("PowerUp: %v", err)
	}
}

// sendUL queues one uplink buffer on channel num and waits for its
// completion: the data path works.
func sendUL(t *testing.T, r *scriptRig, num uint8) {
	t.Helper()
	ch, err := r.ctrl.Channel(num)
	if err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	if r.ulDone == nil {
		r.ulDone = make(chan mhi.Completion, 16)
	}
	done := r.ulDone
	r.mu.Unlock()
	if ch.Status().State != "ENABLED" {
		if err := ch.Start(func(c mhi.Completion) {
			if c.Err == nil {
				done <- c
			}
		}); err != nil {
			t.Fatalf("start channel %d: %v", num, err)
		}
	}
	b := r.buf(t, 100)
	if err := ch.Queue([]mhi.Transfer{{IOVA: b.IOVA, Len: 100, Flags: mhi.FlagEOT, Cookie: 42}}); err != nil {
		t.Fatalf("queue: %v", err)
	}
	select {
	case c := <-done:
		if c.Err != nil || c.Cookie != 42 || c.Len != 100 {
			t.Fatalf("completion %+v", c)
		}
	case <-time.After(time.Second):
		t.Fatalf("no uplink completion on channel %d (stats %+v)", num, r.ctrl.Stats())
	}
}
