package hostile_test

import (
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhi"
	"github.com/gomhi/gomhi/mhi/ep"
	"github.com/gomhi/gomhi/mhi/hostile"
	"github.com/gomhi/gomhi/mhi/inproc"
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
	deadline := time.Now().Add(3 * time.Second)
	for runtime.NumGoroutine() > base {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			n := runtime.Stack(buf, true)
			tb.Fatalf("goroutine leak: %d running, %d before\n%s", runtime.NumGoroutine(), base, buf[:n])
		}
		time.Sleep(5 * time.Millisecond)
	}
}
