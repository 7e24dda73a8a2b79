package sysfs_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/gomhi/gomhi/mhinet"
	"github.com/gomhi/gomhi/sysfs"
	"github.com/gomhi/gomhi/sysfs/sysfstest"
)

// newTree binds a tree to a powered-up mock modem with its network device.
func newTree(t *testing.T) (*sysfs.Tree, *mhinet.Device) {
	t.Helper()
	tr, d := sysfstest.NewTree(t)
	return tr, d.Net
}

func TestTreeReadsLiveValues(t *testing.T) {
	tr, n := newTree(t)
	for path, want := range map[string]string{
		"devices/mhi0/mru":                           "32768",
		"devices/mhi0/mtu":                           "1500",
		"devices/mhi0/state":                         "M0",
		"devices/mhi0/ee":                            "AMSS",
		"devices/mhi0/pm_state":                      "M0",
		"devices/mhi0/stats/mhi/recovery_failed":     "0",
		"devices/mhi0/model":                         "qcom-sdx55m",
		"devices/mhi0/timeout_ms":                    "8000",
		"devices/mhi0/channels/101_IP_HW0/state":     "ENABLED",
		"devices/mhi0/channels/101_IP_HW0/ctx_state": "RUNNING",
		"devices/mhi0/channels/14_QMI/state":         "DISABLED",
		"devices/mhi0/stats/net/mru":                 "32768",
		"devices/mhi0/stats/net/rx_packets":          "0",
		"devices/mhi0/stats/net/gso_segments":        "0", // a nested counter block
		"devices/mhi0/stats/net/tx_zerocopy":         "0",
	} {
		got, err := tr.Get(path)
		if err != nil || got != want {
			t.Errorf("%s = %q, %v; want %q", path, got, err, want)
		}
	}
	if err := tr.Set("devices/mhi0/mru", "16384\n"); err != nil {
		t.Fatal(err)
	}
	if n.MRU() != 16384 {
		t.Fatalf("MRU %d after writing 16384", n.MRU())
	}
	if got, _ := tr.Get("devices/mhi0/channels/101_IP_HW0/pending"); got == "0" {
		t.Errorf("no buffers posted after the MRU change")
	}
	oem, _ := tr.Get("devices/mhi0/oem_pk_hash")
	if strings.Count(oem, "OEMPKHASH[") != 16 {
		t.Errorf("oem_pk_hash:\n%s", oem)
	}
	count := 0
	tr.Walk(func(string, *sysfs.Attr) { count++ })
	if count < 100 {
		t.Errorf("only %d attributes", count)
	}
}

func TestTreeRejectsBadWrites(t *testing.T) {
	tr, n := newTree(t)
	for _, tc := range []struct {
		path, value string
		want        error
		msg         string
	}{
		{"devices/mhi0/mru", "0", sysfs.ErrInvalid, "256..65535"},
		{"devices/mhi0/mru", "65536", sysfs.ErrInvalid, "256..65535"},
		{"devices/mhi0/mru", "bogus", sysfs.ErrInvalid, "256..65535"},
		{"devices/mhi0/mru", "-5", sysfs.ErrInvalid, ""},
		{"devices/mhi0/mtu", "20", sysfs.ErrInvalid, "68..65507"},
		{"devices/mhi0/timeout_ms", "0", sysfs.ErrInvalid, "1..600000"},
		{"devices/mhi0/state", "M3", sysfs.ErrReadOnly, ""},
		{"devices/mhi0/soc_reset", "2", sysfs.ErrInvalid, ""},
		{"devices/mhi0/nothing", "1", sysfs.ErrNotFound, ""},
		{"devices/mhi9/mru", "1", sysfs.ErrNotFound, ""},
	} {
		err := tr.Set(tc.path, tc.value)
		if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("Set(%s, %q) = %v, want %v mentioning %q", tc.path, tc.value, err, tc.want, tc.msg)
		}
	}
	if _, err := tr.Get("devices/mhi0/soc_reset"); !errors.Is(err, sysfs.ErrWriteOnly) {
		t.Errorf("reading soc_reset: %v", err)
	}
	if n.MRU() != mhinet.DefaultMRU {
		t.Errorf("MRU changed to %d by rejected writes", n.MRU())
	}
}
