package inproc_test

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhi"
	"github.com/gomhi/gomhi/mhi/ep"
	"github.com/gomhi/gomhi/mhi/inproc"
	"github.com/gomhi/gomhi/mhi/loopback"
	"github.com/gomhi/gomhi/mhi/testenv/poll"
	"github.com/gomhi/gomhi/mhi/wire"
)

// TestChannelReadDuringRecovery reads a started channel's ring (Free,
// Pending, as a network device refilling its ring does when the
// application releases packets) while SYS_ERR recoveries reset the rings.
// Under -race it fails if the recovery resets a ring without the channel's
// lock.
func TestChannelReadDuringRecovery(t *testing.T) {
	r := newRig(t, sdx55(), nil)
	if err := r.ctrl.PowerUp(); err != nil {
		t.Fatal(err)
	}
	_, dl, _ := r.ctrl.ChannelPair("LOOPBACK")
	if err := dl.Start(func(mhi.Completion) {}); err != nil {
		t.Fatal(err)
	}
	recovered := make(chan error, 4)
	r.ctrl.OnStatus(func(ev mhi.StatusEvent) {
		switch ev.Kind {
		case mhi.StatusRecovered:
			recovered <- nil
		case mhi.StatusRecoveryFailed:
			recovered <- ev.Err
		}
	})
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			_ = dl.Free()
			_ = dl.Pending()
		}
	}()
	for i := range 5 {
		r.dev.InjectSysErr()
		select {
		case err := <-recovered:
			if err != nil {
				t.Fatalf("recovery %d: %v", i, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("recovery %d: none within 5s", i)
		}
	}
	close(stop)
	<-done
}

// TestChannelRestartDuringRecovery restarts a channel (Reset, then Start,
// as a network device changing its MRU does) in a loop while SYS_ERR
// recoveries run back to back: a stress test of the channel gate. Every
// recovery must succeed, every client error must be ErrRecovering (or an
// abort or a channel-state error caused by a recovery), no client command
// may reach the device while it is in SYS_ERR, and the loopback must work
// at the end. (The deterministic regression test of the gate is
// TestClientStartWaitsForRecovery; this one passes by luck of timing
// without it most of the time.)
func TestChannelRestartDuringRecovery(t *testing.T) {
	// SYS_ERR back to back: no recovery limit (the default gives up after
	// five within ten seconds, as it should for a device that keeps
	// crashing).
	r := newRigOptions(t, sdx55(), mhi.Options{Name: "mhi0", PollInterval: 20 * time.Millisecond,
		RecoveryLimit: -1, RecoveryBackoff: time.Millisecond, RecoveryBackoffMax: 2 * time.Millisecond})
	if err := r.ctrl.PowerUp(); err != nil {
		t.Fatal(err)
	}
	_, dl, err := r.ctrl.ChannelPair("LOOPBACK")
	if err != nil {
		t.Fatal(err)
	}
	h := func(mhi.Completion) {}
	if err := dl.Start(h); err != nil {
		t.Fatal(err)
	}
	results := make(chan error, 64)
	r.ctrl.OnStatus(func(ev mhi.StatusEvent) {
		switch ev.Kind {
		case mhi.StatusRecovered:
			results <- nil
		case mhi.StatusRecoveryFailed:
			results <- ev.Err
		}
	})
	stop := make(chan struct{})
	done := make(chan error, 1)
	var refused int
	go func() {
		for {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			for _, op := range []func() error{dl.Reset, func() error { return dl.Start(h) }} {
				err := op()
				switch {
				case err == nil:
				case errors.Is(err, mhi.ErrRecovering):
					refused++
					time.Sleep(100 * time.Microsecond) // as a client waiting for StatusRecovered would
				case errors.Is(err, wire.ErrChannelState), errors.Is(err, wire.ErrAborted),
					errors.Is(err, mhi.ErrSysErr), errors.Is(err, mhi.ErrTimeout):
					// The channel was reset by the recovery, or the
					// command met the SYS_ERR before it was refused.
				default:
					done <- err
					return
				}
			}
		}
	}()
	const rounds = 30
	for i := range rounds {
		r.dev.InjectSysErr()
		select {
		case err := <-results:
			if err != nil {
				close(stop)
				t.Fatalf("recovery %d failed: %v", i, err)
			}
		case err := <-done:
			t.Fatalf("client: %v", err)
		case <-time.After(10 * time.Second):
			close(stop)
			t.Fatalf("recovery %d: none within 10s", i)
		}
	}
	close(stop)
	if err := <-done; err != nil {
		t.Fatalf("client: %v", err)
	}
	t.Logf("%d recoveries, %d client commands refused while recovering", rounds, refused)
	// No client command reached the device while it was in SYS_ERR or
	// being reset: the device completed every command it executed.
	if st := r.dev.Stats(); st.CommandErrors != 0 {
		t.Fatalf("the device completed %d of %d commands with an error: client commands reached it during recovery",
			st.CommandErrors, st.Commands)
	}
	// The channel ends in a usable state: make sure it is started, then
	// run traffic through the pair.
	_ = dl.Reset()
	if err := dl.Start(h); err != nil {
		t.Fatalf("start after the storm: %v", err)
	}
	_ = dl.Reset()
	c, err := loopback.Open(r.ctrl, loopback.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	res, err := c.Run(loopback.RunOptions{Count: 100, MinSize: 1, MaxSize: 4000})
	checkRun(t, res, err, 100)
}

// TestClientStartWaitsForRecovery calls Start on a channel while a
// recovery waits for the device to come back from its reset (a slow
// READY). The client must not slip a command in: before the channel gate,
// its START went to the device in reset, held the command ring until it
// timed out (2 s here) and delayed the recovery's own restart by as much.
// Now it is refused (ErrRecovering) or waits for the recovery and finds
// the channel already restarted (ErrChannelState), and the recovery ends
// as soon as the device is READY.
func TestClientStartWaitsForRecovery(t *testing.T) {
	const ready = 300 * time.Millisecond
	r := newRigWith(t, sdx55(), func(c *ep.Config) { c.ReadyDelay = ready },
		mhi.Options{Name: "mhi0", PollInterval: 20 * time.Millisecond})
	if err := r.ctrl.PowerUp(); err != nil {
		t.Fatal(err)
	}
	_, dl, err := r.ctrl.ChannelPair("LOOPBACK")
	if err != nil {
		t.Fatal(err)
	}
	h := func(mhi.Completion) {}
	if err := dl.Start(h); err != nil {
		t.Fatal(err)
	}
	result := make(chan error, 4)
	r.ctrl.OnStatus(func(ev mhi.StatusEvent) {
		switch ev.Kind {
		case mhi.StatusRecovered:
			result <- nil
		case mhi.StatusRecoveryFailed:
			result <- ev.Err
		}
	})
	start := time.Now()
	r.dev.InjectSysErr()
	// Wait until the recovery has begun, then ask for the channel.
	poll.Until(time.Second, func() bool { return r.ctrl.PMState() != "M0" })
	clientErr := dl.Start(h)
	select {
	case err := <-result:
		if err != nil {
			t.Fatalf("recovery failed: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no recovery within 5s")
	}
	if took := time.Since(start); took > ready+time.Second {
		t.Errorf("recovery took %v with a %v READY delay: something held it up", took, ready)
	}
	if clientErr != nil && !errors.Is(clientErr, mhi.ErrRecovering) && !errors.Is(clientErr, wire.ErrChannelState) {
		t.Errorf("client Start during recovery: %v, want ErrRecovering or ErrChannelState", clientErr)
	}
	if st := dl.Status(); st.State != "ENABLED" {
		t.Errorf("channel %s after the recovery, want ENABLED", st.State)
	}
}

// TestSoCResetsDoNotExhaustRecovery asks for more SoC resets in a row than
// the recovery limit allows device crashes (five within ten seconds, the
// defaults): each is the host's own request, not the device failing, so
// each recovers and the controller never gives up.
func TestSoCResetsDoNotExhaustRecovery(t *testing.T) {
	r := newRig(t, sdx55(), nil)
	if err := r.ctrl.PowerUp(); err != nil {
		t.Fatal(err)
	}
	result := make(chan error, 16)
	r.ctrl.OnStatus(func(ev mhi.StatusEvent) {
		switch ev.Kind {
		case mhi.StatusRecovered:
			result <- nil
		case mhi.StatusRecoveryFailed, mhi.StatusFailed:
			result <- fmt.Errorf("%v: %w", ev.Kind, ev.Err)
		}
	})
	for i := range 8 {
		if err := r.ctrl.SoCReset(); err != nil {
			t.Fatalf("SoC reset %d: %v", i, err)
		}
		select {
		case err := <-result:
			if err != nil {
				t.Fatalf("SoC reset %d: %v", i, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("SoC reset %d: no recovery within 5s (pm %s)", i, r.ctrl.PMState())
		}
	}
	if rec := r.ctrl.Recovery(); rec.Failed || rec.Consecutive > 1 {
		t.Fatalf("after 8 SoC resets: %+v", rec)
	}
}

// socResetWriteFails is a transport whose next write of SOC_RESET_REQ
// fails, as a link that went away would.
type socResetWriteFails struct {
	mhi.Transport
	fail atomic.Bool
}

func (t *socResetWriteFails) Write32(off, v uint32) error {
	if off == wire.RegSOCRESETREQ && t.fail.CompareAndSwap(true, false) {
		return fmt.Errorf("write of SOC_RESET_REQ: %w", errors.ErrUnsupported)
	}
	return t.Transport.Write32(off, v)
}

// TestSoCResetWriteFailureStillRecovers makes the write of a SoC reset
// request fail. SoCReset has already put the host in SYS_ERR: it used to
// return the error without starting a recovery, and the controller stayed
// in SYS_ERR for good (client commands refused, a client Reset, which
// waits for the recovery during SYS_ERR, waiting forever). Now the
// recovery follows and a Reset of a running channel returns.
func TestSoCResetWriteFailureStillRecovers(t *testing.T) {
	cfg := sdx55()
	tr, err := inproc.New(ep.Config{MHI: cfg, SerialNumber: 0x1234abcd}, inproc.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ft := &socResetWriteFails{Transport: tr}
	ctrl, err := mhi.NewController(ft, cfg, mhi.Options{Name: "mhi0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = ctrl.PowerDown()
		_ = tr.Close()
	})
	if err := ctrl.PowerUp(); err != nil {
		t.Fatal(err)
	}
	ch, err := ctrl.Channel(0)
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Start(nil); err != nil {
		t.Fatal(err)
	}
	ft.fail.Store(true)
	if err := ctrl.SoCReset(); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("SoCReset with the request write failing: %v, want the transport's error", err)
	}
	done := make(chan error, 1)
	go func() { done <- ch.Reset() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("channel 0: Reset after the failed SoC reset: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("channel 0: Reset still waiting 10s after a failed SoC reset request (host PM %s, recovery attempts %d)",
			ctrl.PMState(), ctrl.Stats().RecoveryAttempts)
	}
	if !poll.Until(10*time.Second, func() bool { return ctrl.Stats().Recoveries >= 1 }) {
		t.Fatalf("no recovery within 10s after a failed SoC reset request (host PM %s)", ctrl.PMState())
	}
}
