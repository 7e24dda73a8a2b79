package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhi/ep"
	"github.com/gomhi/gomhi/mhi/testenv/poll"
)

// TestDumpFromRunningStack: `mhictl up --rddm --rddm-size` on the embedded
// mock, in a network namespace of its own; `mhictl dump mhi0` before any
// crash says there is no dump and writes nothing; `mhictl dump mhi0 --crash
// --out F` writes the mock's dump image (checked by SHA-256 against the
// image, the report and the tree's rddm attribute), mode 0600; the device
// is back in M0 and passes pings; the dump is read again without a crash;
// an existing --out is refused.
func TestDumpFromRunningStack(t *testing.T) {
	if !inNetns(t) {
		return
	}
	u := startUp(t, "--rddm", "--rddm-size", "1048576")
	want := ep.DumpPattern(ep.DefaultDumpSize)
	wantSum := sha256.Sum256(want)
	wantHex := hex.EncodeToString(wantSum[:])
	dir := t.TempDir()

	first := filepath.Join(dir, "none.bin")
	if out, err := runCmd(t, mhictl("dump", "mhi0", "--out", first)); err == nil ||
		!strings.Contains(out, "mhi0 has no RAM dump") || !strings.Contains(out, "--crash") {
		t.Fatalf("dump before any crash: %v\n%s", err, out)
	}
	if _, err := os.Lstat(first); err == nil {
		t.Fatal("a failed dump left its --out file")
	}

	file := filepath.Join(dir, "dump.bin")
	out, err := runCmd(t, mhictl("dump", "mhi0", "--crash", "--out", file, "--json"))
	t.Logf("$ mhictl dump mhi0 --crash --out %s --json\n%s", file, out)
	if err != nil {
		t.Fatalf("dump --crash: %v\n%s", err, u.logText())
	}
	var res runningDumpResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	got, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	gotSum := sha256.Sum256(got)
	if gotSum != wantSum || res.SHA256 != wantHex || res.Bytes != uint64(len(want)) || !res.Crashed || res.Device != "mhi0" {
		t.Fatalf("file of %d bytes sha256 %x, report %+v; want %d bytes sha256 %s", len(got), gotSum, res, len(want), wantHex)
	}
	if st, err := os.Stat(file); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("--out mode %v, %v; want 0600", st.Mode(), err)
	}
	attr, err := os.ReadFile(filepath.Join(u.mount, "devices/mhi0/rddm"))
	if err != nil || !strings.Contains(string(attr), "sha256 "+wantHex) {
		t.Errorf("tree attribute rddm reads %q, %v; want sha256 %s", attr, err, wantHex)
	}

	// The running stack recovers the device after the dump.
	var state, pm []byte
	poll.Until(15*time.Second, func() bool {
		state, _ = os.ReadFile(filepath.Join(u.mount, "devices/mhi0/state"))
		pm, _ = os.ReadFile(filepath.Join(u.mount, "devices/mhi0/pm_state"))
		return strings.TrimSpace(string(state)) == "M0" && strings.TrimSpace(string(pm)) == "M0"
	})
	if strings.TrimSpace(string(state)) != "M0" || strings.TrimSpace(string(pm)) != "M0" {
		t.Fatalf("after the dump: state %q, pm_state %q\n%s", state, pm, u.logText())
	}
	if got := pings(t, 500, 3); got != 3 {
		t.Errorf("%d of 3 pings answered after the recovery:\n%s", got, u.logText())
	}
	st := localStats(t)
	if st["mhi/dumps"] != 1 || st["mhi/dump_errors"] != 0 {
		t.Errorf("dumps %d, dump_errors %d; want 1, 0", st["mhi/dumps"], st["mhi/dump_errors"])
	}

	// The same dump again, without a crash; an existing file is refused.
	again := filepath.Join(dir, "again.bin")
	out, err = runCmd(t, mhictl("dump", "mhi0", "--out", again))
	t.Logf("$ mhictl dump mhi0 --out %s\n%s", again, out)
	if b, rerr := os.ReadFile(again); err != nil || rerr != nil || sha256.Sum256(b) != wantSum ||
		!strings.Contains(out, "sha256 "+wantHex) || !strings.Contains(out, "last dump of 196608 bytes") {
		t.Errorf("dump without --crash: %v %v\n%s", err, rerr, out)
	}
	if out, err := runCmd(t, mhictl("dump", "mhi0", "--crash", "--out", file)); err == nil || !strings.Contains(out, "the file exists") {
		t.Errorf("dump to an existing file: %v\n%s", err, out)
	}
	if st := localStats(t); st["mhi/dumps"] != 1 {
		t.Errorf("the refused dump crashed the device: %d dumps", st["mhi/dumps"])
	}
	u.stop(t)
}

// TestDumpFormFlags: the flags of one form of 'mhictl dump' are refused
// in the other with a message naming the flag.
func TestDumpFormFlags(t *testing.T) {
	out := filepath.Join(t.TempDir(), "x.bin")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"dump", "mhi0", "--out", out, "--device", "0000:01:00.0"}, "--device applies only without DEV"},
		{[]string{"dump", "mhi0", "--out", out, "--size", "1024"}, "--size applies only without DEV"},
		{[]string{"dump", "mhi0", "--out", out, "--model", "telit-fn990"}, "--model applies only without DEV"},
		{[]string{"dump", "mhi0", "--out", out, "--boot-ee", "pbl"}, "--boot-ee applies only without DEV"},
		{[]string{"dump", "--out", out, "--crash"}, "--crash applies only with DEV"},
		{[]string{"dump", "--out", out, "--netlink-port", "77"}, "--netlink-port applies only with DEV"},
		{[]string{"dump", "mhi0", "mhi1", "--out", out}, "accepts at most 1 arg"},
		{[]string{"dump", "mhi0"}, "--out is required"},
		{[]string{"dump", "mhi0", "--out", out, "--crash", "--timeout", "20m"}, "--timeout 20m0s: want 1ms..10m0s"},
	} {
		o, err := run(t, c.args...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("mhictl %s: %v\n%s\nwant an error with %q", strings.Join(c.args, " "), err, o, c.want)
		}
	}
	if _, err := os.Lstat(out); err == nil {
		t.Error("a refused command created --out")
	}
}
