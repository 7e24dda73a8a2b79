package mhinet_test

import (
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhi/ep/ipdata"
	"github.com/gomhi/gomhi/mhi/testenv/poll"
	"github.com/gomhi/gomhi/mhinet"
	"github.com/gomhi/gomhi/pcigeneric/mock"
)

// A SYS_ERR while the receive pool is starved must not hang the recovery.
// With fewer buffers than ring elements every refill finds the pool empty
// (RefillStarved); the recovery aborts the posted buffers while posting is
// still allowed, so each one that comes back wakes the refill, whose
// posting fails on the disabled channel. Giving those buffers back used to
// wake the refill again under its own lock: the recovery deadlocked and the
// device never received again.
func TestSysErrWithStarvedPoolRecovers(t *testing.T) {
	r := newIPRig(t, mock.DefaultModel, ipdata.Config{}, mhinet.Config{MRU: 2048, PoolBuffers: 4})
	pushRaw(t, r, 10, 0)
	r.rx.waitFor(t, 10)
	if s := r.dev.Stats(); s.RefillStarved == 0 {
		t.Fatalf("setup: the pool never starved: %+v", s)
	}
	r.mock.Transport.Device().InjectSysErr()
	// The controller's counter: the device's Stats would wait for the
	// lock a deadlocked refill holds.
	if !poll.Until(10*time.Second, func() bool { return r.mock.Controller.Stats().Recoveries != 0 }) {
		t.Fatal("no recovery within 10 s: the recovery hangs")
	}
	pushRaw(t, r, 10, 10)
	if !r.rx.waitFor(t, 20) {
		r.dump(t)
	}
	s := r.dev.Stats()
	t.Logf("refill errors %d, starved %d, recoveries %d", s.RefillErrors, s.RefillStarved, s.Recoveries)
}

// pushRaw makes the modem send n raw IPv4 packets numbered from seq.
func pushRaw(t *testing.T, r *rig, n int, seq uint32) {
	t.Helper()
	for i := range n {
		if err := r.pushDL(ipv4(100, seq+uint32(i))); err != nil {
			t.Fatal(err)
		}
	}
}
