package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhi/testenv/poll"
)

// The SYS_ERR and M3/M0 scenarios of the comparison with Linux's host
// (docs/FIDELITY.md §10): Linux's side is recorded in the lab by
// docs/transcripts/syserr.sh and suspend.sh, gomhi's here.

// transcriptScenario is one scenario of the comparison: the Linux
// transcripts' name (linux-NAME-KERNEL-MODEL.jsonl), the flags 'mhictl up'
// takes for it and what gomhi's host does between power-up and stop.
type transcriptScenario struct {
	name   string
	upArgs []string
	drive  func(t *testing.T, u *upProc, sock string)
}

// pingN pings the gateway n times from seq on (56 bytes of data, as the
// lab's ping) and fails the test on one not answered.
func pingN(t *testing.T, u *upProc, seq uint16, n int) {
	t.Helper()
	for i := uint16(0); i < uint16(n); i++ {
		if !pingData(t, seq+i, make([]byte, 56)) {
			t.Fatalf("ping %d not answered:\n%s", seq+i, u.logText())
		}
	}
}

// transcriptScenarios: SYS_ERR recovery (five pings, SYS_ERR injected
// through the served modem's fault socket, the recovery, five pings) and
// M3/M0 as Linux's mhi_pci_generic does it with runtime PM (five pings;
// 'up --autosuspend 2s', Linux's delay, suspends the idle modem; a second
// more of idle, as Linux's script sleeps 4 s; five pings, the first of
// which resumes it on demand).
var transcriptScenarios = []transcriptScenario{
	{name: "syserr", drive: func(t *testing.T, u *upProc, sock string) {
		pingN(t, u, 1, 5)
		if out, err := runCmd(t, mhictl("modem", "inject", "--socket", sock, "sys-err")); err != nil {
			t.Fatalf("inject sys-err: %v\n%s", err, out)
		}
		if !poll.Until(30*time.Second, func() bool { return strings.Contains(u.logText(), "recovered from SYS_ERR") }) {
			t.Fatalf("no recovery from SYS_ERR:\n%s", u.logText())
		}
		pingN(t, u, 11, 5)
	}},
	{name: "suspend", upArgs: []string{"--autosuspend", "2s"}, drive: func(t *testing.T, u *upProc, sock string) {
		pingN(t, u, 1, 5)
		if !poll.Until(10*time.Second, func() bool { return hostPM(u) == "M3" }) {
			t.Fatalf("not auto-suspended 10 s after the pings:\n%s", u.logText())
		}
		time.Sleep(time.Second)
		pingN(t, u, 11, 5)
		if st := hostPM(u); st != "M0" {
			t.Fatalf("host PM %s after the pings, want M0 (resumed on demand)", st)
		}
	}},
}

// hostPM is the host's power state of mhi0 as the attribute tree of the
// 'up' says it (its pm_state file: "M0", "M3"…), "" when unreadable.
func hostPM(u *upProc) string {
	b, err := os.ReadFile(filepath.Join(u.mount, "devices", "mhi0", "pm_state"))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// linuxScenarioFixture is Linux's transcript of the scenario on kernel
// and model, recorded in the lab (docs/transcripts/NAME.sh).
func linuxScenarioFixture(name, kernel, model string) string {
	return filepath.Join(linuxTranscripts, "linux-"+name+"-"+kernel+"-"+model+".jsonl")
}

// recordGomhiScenario records gomhi's host on model over vfio-user
// ('mhictl modem serve --transcript', 'mhictl up --vfio-user') through
// the scenario, then stopped. Root, in the test's network namespace.
// With GOMHI_TRANSCRIPT_KEEP=DIR the record is also copied to DIR, to read.
func recordGomhiScenario(t *testing.T, sc transcriptScenario, model string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "gomhi-"+sc.name+"-"+model+".jsonl")
	srv, sock, srvLog := serveModem(t, "--model", model, "--transcript", f)
	u := startUp(t, append([]string{"--vfio-user", sock}, sc.upArgs...)...)
	sc.drive(t, u, sock)
	u.stop(t)
	sigterm(t, srv, srvLog)
	if dir := os.Getenv("GOMHI_TRANSCRIPT_KEEP"); dir != "" {
		b, err := os.ReadFile(f)
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, filepath.Base(f)), b, 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// TestTranscriptScenariosAgainstLinux: gomhi's host through SYS_ERR
// recovery and through an M3/M0 cycle programs the device as Linux 6.1's,
// 6.12's and 7.3's hosts do through the same scenarios in the lab (their
// checked-in transcripts), but for the differences
// docs/transcript-rules.yaml explains, on the telit-fn990 and the
// qcom-sdx55m.
func TestTranscriptScenariosAgainstLinux(t *testing.T) {
	if !inNetns(t) {
		return
	}
	for _, model := range transcriptModels {
		for _, sc := range transcriptScenarios {
			gomhi := recordGomhiScenario(t, sc, model)
			for _, k := range transcriptKernels {
				diffOneAgainstLinux(t, linuxScenarioFixture(sc.name, k, model), gomhi, sc.name+", Linux "+k+", "+model)
			}
		}
	}
}
