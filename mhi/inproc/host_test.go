package inproc_test

import (
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhi"
	"github.com/gomhi/gomhi/mhi/ep"
	"github.com/gomhi/gomhi/mhi/inproc"
	"github.com/gomhi/gomhi/mhi/loopback"
	"github.com/gomhi/gomhi/mhi/testenv/poll"
	"github.com/gomhi/gomhi/mhi/wire"
	"github.com/gomhi/gomhi/mhinet/mhinettest"
	"github.com/gomhi/gomhi/pcigeneric"
)

// sdx55 is the SDX55 reference configuration from the device table
// (Linux's modem_qcom_v1) with the LOOPBACK pair the mock modem offers.
func sdx55() wire.ControllerConfig {
	info, ok := pcigeneric.Model("qcom-sdx55m")
	if !ok {
		panic("qcom-sdx55m missing from the device table")
	}
	cfg := info.Config.WithLoopback()
	cfg.Timeout = 2 * time.Second
	return cfg
}

type rig struct {
	t    *inproc.Transport
	dev  *ep.Device
	ctrl *mhi.Controller
}

func newRig(tb testing.TB, cfg wire.ControllerConfig, mod func(*ep.Config)) *rig {
	tb.Helper()
	return newRigWith(tb, cfg, mod, mhi.Options{Name: "mhi0", PollInterval: 20 * time.Millisecond})
}

// newRigOptions is newRig with the controller's options.
func newRigOptions(tb testing.TB, cfg wire.ControllerConfig, opts mhi.Options) *rig {
	tb.Helper()
	return newRigWith(tb, cfg, nil, opts)
}

// newRigWith builds a bare device offering cfg, adjusted by mod, and a
// controller with opts for it.
func newRigWith(tb testing.TB, cfg wire.ControllerConfig, mod func(*ep.Config), opts mhi.Options) *rig {
	tb.Helper()
	r := mhinettest.New(tb, mhinettest.Options{MHI: &cfg,
		Device: func(ec *ep.Config) {
			ec.SerialNumber = 0x1234abcd
			if mod != nil {
				mod(ec)
			}
		},
		Host: func(o *mhi.Options) { *o = opts }})
	return &rig{t: r.Transport, dev: r.Device, ctrl: r.Controller}
}

// waitGoroutines waits until at most want goroutines run.
func waitGoroutines(tb testing.TB, want int) {
	tb.Helper()
	poll.Wait(tb, 5*time.Second, func() bool { return runtime.NumGoroutine() <= want }, func() string {
		buf := make([]byte, 1<<16)
		n := runtime.Stack(buf, true)
		return fmt.Sprintf("goroutines: %d, want at most %d\n%s", runtime.NumGoroutine(), want, buf[:n])
	})
}

func TestPowerUpReachesM0InAMSS(t *testing.T) {
	r := newRig(t, sdx55(), nil)
	if err := r.ctrl.PowerUp(); err != nil {
		t.Fatal(err)
	}
	st, ee := r.ctrl.State()
	if st != wire.StateM0 || ee != wire.EEAMSS {
		t.Fatalf("state %s ee %s, want M0 AMSS", st, ee)
	}
	bhi, err := r.ctrl.ReadBHI()
	if err != nil {
		t.Fatal(err)
	}
	if bhi.SerialNumber != 0x1234abcd || bhi.ExecEnv != wire.EEAMSS {
		t.Fatalf("BHI %+v", bhi)
	}
	if s := r.ctrl.Stats(); s.DeviceErrors() != 0 {
		t.Fatalf("device errors on a healthy device: %+v", s)
	}
}

func TestNeverReadyTimesOut(t *testing.T) {
	cfg := sdx55()
	cfg.Timeout = 200 * time.Millisecond
	r := newRig(t, cfg, nil)
	r.dev.SetNeverReady(true)
	r.t.Reset()
	start := time.Now()
	err := r.ctrl.PowerUp()
	if !errors.Is(err, mhi.ErrTimeout) {
		t.Fatalf("PowerUp = %v, want ErrTimeout", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("timeout took %v", d)
	}
	t.Logf("error: %v", err)
}

func TestChannelStartStopReset(t *testing.T) {
	r := newRig(t, sdx55(), nil)
	if err := r.ctrl.PowerUp(); err != nil {
		t.Fatal(err)
	}
	ch, err := r.ctrl.Channel(14)
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name    string
		op      func() error
		state   string
		ctx     string
		wantErr error
	}{
		{"start", func() error { return ch.Start(nil) }, "ENABLED", "RUNNING", nil},
		{"start again", func() error { return ch.Start(nil) }, "ENABLED", "RUNNING", wire.ErrChannelState},
		{"stop", ch.Stop, "STOP", "STOP", nil},
		{"stop again", ch.Stop, "STOP", "STOP", wire.ErrChannelState},
		{"start from stop", func() error { return ch.Start(nil) }, "ENABLED", "RUNNING", nil},
		{"reset", ch.Reset, "DISABLED", "DISABLED", nil},
		{"reset again", ch.Reset, "DISABLED", "DISABLED", wire.ErrChannelState},
		{"start after reset", func() error { return ch.Start(nil) }, "ENABLED", "RUNNING", nil},
	}
	for _, s := range steps {
		err := s.op()
		if s.wantErr == nil && err != nil || s.wantErr != nil && !errors.Is(err, s.wantErr) {
			t.Fatalf("%s: err %v, want %v", s.name, err, s.wantErr)
		}
		got := ch.Status()
		if got.State != s.state || got.CtxState != s.ctx {
			t.Fatalf("%s: state %s ctx %s, want %s %s", s.name, got.State, got.CtxState, s.state, s.ctx)
		}
	}
	if c := r.ctrl.Stats().Commands; c != 5 {
		t.Fatalf("%d commands sent, want 5", c)
	}
}

func TestUnknownChannelCommandFails(t *testing.T) {
	cfg := sdx55()
	r := newRig(t, cfg, func(ec *ep.Config) {
		// The device does not offer QMI: its START must fail cleanly.
		var chs []wire.ChannelConfig
		for _, c := range ec.MHI.Channels {
			if c.Name != "QMI" {
				chs = append(chs, c)
			}
		}
		ec.MHI.Channels = chs
	})
	if err := r.ctrl.PowerUp(); err != nil {
		t.Fatal(err)
	}
	ch, _ := r.ctrl.Channel(14)
	if err := ch.Start(nil); !errors.Is(err, mhi.ErrCommandFailed) {
		t.Fatalf("start of a channel the device lacks: %v, want ErrCommandFailed", err)
	}
}

func openLoopback(t testing.TB, r *rig, opts loopback.Options) *loopback.Client {
	t.Helper()
	if err := r.ctrl.PowerUp(); err != nil {
		t.Fatal(err)
	}
	c, err := loopback.Open(r.ctrl, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func checkRun(t *testing.T, res loopback.Result, err error, want int) {
	t.Helper()
	if err != nil {
		t.Fatalf("run: %v (%+v)", err, res)
	}
	if res.Sent != want || res.Received != want || res.Mismatched != 0 || res.Timeouts != 0 {
		t.Fatalf("result %+v, want %d sent and received, none mismatched", res, want)
	}
}

func TestLoopbackRandomPayloads(t *testing.T) {
	r := newRig(t, sdx55(), nil)
	c := openLoopback(t, r, loopback.Options{DLBufferSize: 16384, Seed: 7})
	n := 10000
	if testing.Short() {
		n = 2000
	}
	res, err := c.Run(loopback.RunOptions{Count: n, MinSize: 1, MaxSize: loopback.MaxPayload, MaxTRE: 4})
	checkRun(t, res, err, n)
	if res.Elements < n*3/2 {
		t.Fatalf("%d elements for %d payloads: too few chained transfers exercised", res.Elements, n)
	}
	if s := r.ctrl.Stats(); s.DeviceErrors() != 0 {
		t.Fatalf("device errors: %+v", s)
	}
}

func TestLoopbackChainedElements(t *testing.T) {
	r := newRig(t, sdx55(), nil)
	c := openLoopback(t, r, loopback.Options{DLBufferSize: 1000})
	for _, tc := range []struct{ size, tre int }{{1, 1}, {7, 7}, {3000, 3}, {65536, 2}, {65536, 15}, {4096, 1}} {
		res, err := c.Run(loopback.RunOptions{Count: 20, MinSize: tc.size, MaxSize: tc.size, NumTRE: tc.tre})
		checkRun(t, res, err, 20)
	}
}

// Ring wrap-around: enough traffic to wrap every ring the loopback uses
// (transfer rings of 32, command ring, event ring 0 of 64) many times, at
// several window sizes so the wrap happens at different offsets.
func TestRingWrapAround(t *testing.T) {
	for _, w := range []int{1, 3, 15} {
		r := newRig(t, sdx55(), nil)
		c := openLoopback(t, r, loopback.Options{Window: w, DLBufferSize: 512})
		res, err := c.Run(loopback.RunOptions{Count: 500, MinSize: 1, MaxSize: 1500})
		checkRun(t, res, err, 500)
		st := r.ctrl.Status()
		if st.EventRings[0].HostRP == st.EventRings[0].RingBase && st.Stats.Events < 64 {
			t.Fatalf("event ring 0 did not wrap: %+v", st.EventRings[0])
		}
	}
}

func TestSuspendResumeKeepsChannels(t *testing.T) {
	r := newRig(t, sdx55(), nil)
	c := openLoopback(t, r, loopback.Options{})
	res, err := c.Run(loopback.RunOptions{Count: 50, MinSize: 1, MaxSize: 4000})
	checkRun(t, res, err, 50)
	ul, dl, _ := r.ctrl.ChannelPair("LOOPBACK")
	before := [2]mhi.ChannelStatus{ul.Status(), dl.Status()}
	cmds := r.ctrl.Stats().Commands
	if err := r.ctrl.Suspend(); err != nil {
		t.Fatal(err)
	}
	if st, _ := r.ctrl.State(); st != wire.StateM3 {
		t.Fatalf("state %s after suspend", st)
	}
	if err := r.ctrl.Resume(); err != nil {
		t.Fatal(err)
	}
	after := [2]mhi.ChannelStatus{ul.Status(), dl.Status()}
	for i := range before {
		// The downlink write pointer may move (buffers are re-posted as
		// echoes arrive); the states and the ring must not.
		if before[i].State != after[i].State || before[i].CtxState != after[i].CtxState || before[i].RingBase != after[i].RingBase {
			t.Fatalf("channel changed over M3: %+v -> %+v", before[i], after[i])
		}
	}
	if got := r.ctrl.Stats().Commands; got != cmds {
		t.Fatalf("%d channel commands sent over M3/M0", got-cmds)
	}
	res, err = c.Run(loopback.RunOptions{Count: 50, MinSize: 1, MaxSize: 4000})
	checkRun(t, res, err, 50)
}

func TestSysErrRecovery(t *testing.T) {
	base := runtime.NumGoroutine()
	func() {
		r := newRig(t, sdx55(), nil)
		c := openLoopback(t, r, loopback.Options{})
		recovered := make(chan struct{}, 1)
		r.ctrl.OnStatus(func(ev mhi.StatusEvent) {
			if ev.Kind == mhi.StatusRecovered {
				recovered <- struct{}{}
			}
		})
		// Traffic, SYS_ERR in the middle of it, and the run ends one way or another.
		done := make(chan error, 1)
		go func() {
			_, err := c.Run(loopback.RunOptions{Count: 100000, MinSize: 1, MaxSize: 8000})
			done <- err
		}()
		time.Sleep(20 * time.Millisecond)
		r.dev.InjectSysErr()
		select {
		case <-recovered:
		case <-time.After(5 * time.Second):
			t.Fatal("no recovery within 5s")
		}
		// The run ends at the SYS_ERR, its transfers in flight lost.
		if err := <-done; !errors.Is(err, loopback.ErrInterrupted) {
			t.Fatalf("run across SYS_ERR: %v, want ErrInterrupted", err)
		}
		if st, ee := r.ctrl.State(); st != wire.StateM0 || ee != wire.EEAMSS {
			t.Fatalf("after recovery: %s %s", st, ee)
		}
		res, err := c.Run(loopback.RunOptions{Count: 200, MinSize: 1, MaxSize: 8000})
		checkRun(t, res, err, 200)
		if s := r.ctrl.Stats(); s.SysErrs != 1 || s.Recoveries != 1 {
			t.Fatalf("sys_errs %d recoveries %d", s.SysErrs, s.Recoveries)
		}
		c.Close()
		_ = r.ctrl.PowerDown()
		_ = r.t.Close()
	}()
	waitGoroutines(t, base)
}

func TestDroppedInterruptIsRecoveredByPolling(t *testing.T) {
	r := newRig(t, sdx55(), nil)
	c := openLoopback(t, r, loopback.Options{})
	r.dev.DropInterrupts(3)
	res, err := c.Run(loopback.RunOptions{Count: 20, MinSize: 100, MaxSize: 100})
	checkRun(t, res, err, 20)
}

func TestPowerDownReturnsBuffers(t *testing.T) {
	base := runtime.NumGoroutine()
	r := newRig(t, sdx55(), nil)
	if err := r.ctrl.PowerUp(); err != nil {
		t.Fatal(err)
	}
	_, dl, _ := r.ctrl.ChannelPair("LOOPBACK")
	aborted := 0
	if err := dl.Start(func(c mhi.Completion) {
		if errors.Is(c.Err, wire.ErrAborted) {
			aborted++
		}
	}); err != nil {
		t.Fatal(err)
	}
	buf, err := r.t.Alloc(4096, 64)
	if err != nil {
		t.Fatal(err)
	}
	xs := make([]mhi.Transfer, 10)
	for i := range xs {
		xs[i] = mhi.Transfer{IOVA: buf.IOVA, Len: 4096, Flags: mhi.FlagEOT, Cookie: uint64(i)}
	}
	if err := dl.Queue(xs); err != nil {
		t.Fatal(err)
	}
	if err := r.ctrl.PowerDown(); err != nil {
		t.Fatal(err)
	}
	if aborted != 10 {
		t.Fatalf("%d buffers returned aborted, want 10", aborted)
	}
	_ = r.t.Free(buf)
	if err := r.t.Close(); err != nil {
		t.Fatal(err)
	}
	if n := r.t.Slab().InUse(); n != 0 {
		t.Fatalf("%d bytes of DMA memory still allocated after power-down", n)
	}
	waitGoroutines(t, base)
}
