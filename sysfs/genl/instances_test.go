package genl_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gomhi/gomhi/sysfs"
	"github.com/gomhi/gomhi/sysfs/genl"
	"github.com/gomhi/gomhi/sysfs/sysfstest"
)

// TestOneInstancePerModem: two servers in one network namespace, one per
// device — `mhictl up --name mhi0` and `--name mhi1`, as the shipped
// mhictl@.service runs one instance per modem. The first takes
// DefaultPort and both run files; the second serves beside it on a
// kernel-assigned port advertised in its own per-device run file (not
// ErrPortInUse, as before); a third for a device already served is
// refused, naming the instance that serves it. Clients reach each device
// on its own server, and Close removes exactly its own files.
func TestOneInstancePerModem(t *testing.T) {
	if !inNetns(t) {
		return
	}
	runFile := filepath.Join(newRunDir(t), "genl.json")
	tree := func(name string) *sysfs.Tree {
		tr := sysfs.NewTree()
		tr.AddDevice(name, sysfstest.NewDevice(t, name, true).Binding())
		return tr
	}
	first, err := genl.NewServer(tree("mhi0"), genl.ServerOptions{RunFile: runFile, Device: "mhi0"})
	if err != nil {
		t.Fatal(err)
	}
	serve(t, first)
	if first.Port() != genl.DefaultPort || first.Beside() || first.RunFile() != runFile {
		t.Fatalf("first server: port %#x, beside %v, run file %s; want DefaultPort, %s", first.Port(), first.Beside(), first.RunFile(), runFile)
	}
	checkRunFile(t, runFile, genl.DefaultPort)
	checkRunFile(t, genl.DeviceRunFile(runFile, "mhi0"), genl.DefaultPort)

	second, err := genl.NewServer(tree("mhi1"), genl.ServerOptions{RunFile: runFile, Device: "mhi1"})
	if err != nil {
		t.Fatalf("a second instance for another device: %v", err)
	}
	serve(t, second)
	devFile := genl.DeviceRunFile(runFile, "mhi1")
	if second.Port() == genl.DefaultPort || !second.Beside() || second.RunFile() != devFile {
		t.Fatalf("second server: port %#x, beside %v, run file %s; want a kernel-assigned port beside, %s", second.Port(), second.Beside(), second.RunFile(), devFile)
	}
	checkRunFile(t, devFile, second.Port())
	checkRunFile(t, runFile, genl.DefaultPort) // still the first's

	_, err = genl.NewServer(tree("mhi1"), genl.ServerOptions{RunFile: runFile, Device: "mhi1"})
	if !errors.Is(err, genl.ErrPortInUse) || !strings.Contains(err.Error(), `device "mhi1"`) || !strings.Contains(err.Error(), devFile) {
		t.Errorf("a third instance for mhi1: %v; want ErrPortInUse naming the second and %s", err, devFile)
	}
	// Without a device name a second instance is refused, as before.
	if _, err := genl.NewServer(tree("mhi2"), genl.ServerOptions{RunFile: runFile}); !errors.Is(err, genl.ErrPortInUse) {
		t.Errorf("a second instance without a device name: %v, want ErrPortInUse", err)
	}

	for _, tc := range []struct {
		dev  string
		port uint32
		file string
	}{
		{"mhi0", genl.DefaultPort, genl.DeviceRunFile(runFile, "mhi0")},
		{"mhi1", second.Port(), devFile},
		{"", genl.DefaultPort, runFile},
		{"mhi7", genl.DefaultPort, runFile}, // served by nobody: the default instance says so
	} {
		c, err := genl.Dial(genl.ClientOptions{RunFile: runFile, Device: tc.dev})
		if err != nil {
			t.Fatalf("Dial for %q: %v", tc.dev, err)
		}
		if c.Port() != tc.port || c.RunFile() != tc.file {
			t.Errorf("client for %q: port %#x from %s, want %#x from %s", tc.dev, c.Port(), c.RunFile(), tc.port, tc.file)
		}
		if tc.dev != "" {
			d, err := c.SetDevice(tc.dev, genl.SetRequest{MRU: u32(16384)})
			switch {
			case tc.dev == "mhi7" && err == nil:
				t.Errorf("SetDevice(mhi7) on the default instance succeeded: %+v", d)
			case tc.dev != "mhi7" && (err != nil || d.MRU != 16384):
				t.Errorf("SetDevice(%s): %+v, %v", tc.dev, d, err)
			}
		}
		c.Close()
	}

	if err := second.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(devFile); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the second instance's run file after Close: %v", err)
	}
	if _, err := os.Stat(runFile); err != nil {
		t.Errorf("the first instance's run file after the second's Close: %v", err)
	}
}
