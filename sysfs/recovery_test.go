package sysfs_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhi"
	"github.com/gomhi/gomhi/mhi/hostile"
	"github.com/gomhi/gomhi/mhi/testenv/poll"
	"github.com/gomhi/gomhi/sysfs"
)

// A device that crashes at every M0 drives SYS_ERR recovery to give up:
// the tree and the metrics show the terminal state.
func TestTreeShowsRecoveryFailed(t *testing.T) {
	dev := hostile.NewDevice(hostile.DeviceConfig{})
	defer dev.Close()
	c, err := mhi.NewController(dev, hostile.Config(), mhi.Options{PollInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.PowerUp(); err != nil {
		t.Fatal(err)
	}
	defer c.PowerDown()
	tr := sysfs.NewTree()
	tr.AddDevice("mhi0", sysfs.Device{Controller: c, Model: "hostile"})
	if got, _ := tr.Get("devices/mhi0/recovery"); !strings.HasPrefix(got, "ok") {
		t.Fatalf("recovery = %q before any SYS_ERR", got)
	}
	dev.SetBehaviour(hostile.Behaviour{SysErrAtM0: true})
	dev.EnterSysErr()
	var got string
	if !poll.Until(3*time.Second, func() bool {
		got, _ = tr.Get("devices/mhi0/pm_state")
		return got == mhi.PMRecoveryFailed
	}) {
		t.Fatalf("pm_state = %q, want %s", got, mhi.PMRecoveryFailed)
	}
	for path, want := range map[string]string{
		"devices/mhi0/recovery":                    "failed: ",
		"devices/mhi0/stats/mhi/recovery_failed":   "1",
		"devices/mhi0/stats/mhi/recovery_gave_up":  "1",
		"devices/mhi0/stats/mhi/recovery_attempts": "5",
	} {
		if got, err := tr.Get(path); err != nil || !strings.HasPrefix(got, want) {
			t.Errorf("%s = %q, %v; want %q", path, got, err, want)
		}
	}
	// Each of the five attempts failed, or reached M0 before the device
	// crashed again (a recovery that counts as done for that moment and
	// resets the backoff): under load either can happen, never neither.
	failures, _ := tr.Get("devices/mhi0/stats/mhi/recovery_failures")
	recoveries, _ := tr.Get("devices/mhi0/stats/mhi/recoveries")
	var f, r int
	if _, err := fmt.Sscan(failures, &f); err != nil {
		t.Fatalf("recovery_failures = %q", failures)
	}
	if _, err := fmt.Sscan(recoveries, &r); err != nil {
		t.Fatalf("recoveries = %q", recoveries)
	}
	if f+r != 5 || f == 0 {
		t.Errorf("recovery_failures %d + recoveries %d, want 5 attempts accounted for, at least one failed", f, r)
	}
	sc := scrape(t, tr)
	m := sc.text
	for _, want := range []string{
		`pm_state="RECOVERY_FAILED"`,
		"# TYPE mhi_controller_recovery_failed gauge\n",
		`mhi_controller_recovery_failed{device="mhi0"} 1`,
		`mhi_controller_recovery_gave_up_total{device="mhi0"} 1`,
		`mhi_controller_recovery_attempts_total{device="mhi0"} 5`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}
