package inproc_test

import (
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhi"
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
