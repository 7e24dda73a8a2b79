package inproc_test

import (
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhi"
	"github.com/gomhi/gomhi/mhi/ep"
	"github.com/gomhi/gomhi/mhi/loopback"
	"github.com/gomhi/gomhi/mhi/wire"
)

// A misbehaving device must be detected and counted by the host, never make
// it panic or touch memory outside what it owns.
func TestMisbehavingDevice(t *testing.T) {
	cases := []struct {
		kind    ep.Corruption
		counter func(mhi.ControllerStatsSnapshot) uint64
	}{
		{ep.CorruptEventPointer, func(s mhi.ControllerStatsSnapshot) uint64 { return s.BadEventPtr }},
		{ep.CorruptChannelID, func(s mhi.ControllerStatsSnapshot) uint64 { return s.UnknownChannel }},
		{ep.CorruptCompletionCode, func(s mhi.ControllerStatsSnapshot) uint64 { return s.BadCode }},
		{ep.CorruptLength, func(s mhi.ControllerStatsSnapshot) uint64 { return s.LengthClamped }},
		{ep.CorruptEventRP, func(s mhi.ControllerStatsSnapshot) uint64 { return s.BadEventRingRP }},
	}
	for _, tc := range cases {
		t.Run(tc.kind.String(), func(t *testing.T) {
			r := newRig(t, sdx55(), nil)
			c := openLoopback(t, r, loopback.Options{Timeout: 300 * time.Millisecond, DLBufferSize: 2048})
			res, err := c.Run(loopback.RunOptions{Count: 5, MinSize: 100, MaxSize: 1000})
			checkRun(t, res, err, 5)
			if got := tc.counter(r.ctrl.Stats()); got != 0 {
				t.Fatalf("counter is %d before the fault", got)
			}
			if err := r.dev.CorruptNextEvent(tc.kind); err != nil {
				t.Fatal(err)
			}
			// The run may lose the transfer whose event was damaged; what
			// matters is that the host notices and carries on.
			res, err = c.Run(loopback.RunOptions{Count: 20, MinSize: 100, MaxSize: 1000})
			t.Logf("after %s: %+v, err %v", tc.kind, res, err)
			s := r.ctrl.Stats()
			if tc.kind == ep.CorruptEventRP {
				// A bad read pointer is visible only until the device
				// posts its next event, so the host sees it only if it
				// looks in between: try until it does.
				for i := 0; i < 200 && tc.counter(s) == 0; i++ {
					if err := r.dev.CorruptNextEvent(tc.kind); err != nil {
						t.Fatal(err)
					}
					_, _ = c.Run(loopback.RunOptions{Count: 1, MinSize: 100, MaxSize: 100})
					time.Sleep(time.Millisecond)
					s = r.ctrl.Stats()
				}
			}
			t.Logf("%s detected: %+v", tc.kind, s)
			if got := tc.counter(s); got < 1 {
				t.Fatalf("counter is %d after %s, want at least 1 (stats %+v)", got, tc.kind, s)
			}
			if st, _ := r.ctrl.State(); st != wire.StateM0 {
				t.Fatalf("state %s after a damaged event", st)
			}
		})
	}
}
