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
// M3/M0 (five pings, 'mhictl suspend' and 'mhictl resume', five pings;
// Linux's mhi_pci_generic suspends after 2 s idle and resumes on the
// next ping, which the device sees the same way: M3 requested and
// entered, M0 requested and entered, then the traffic).
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
	{name: "suspend", drive: func(t *testing.T, u *upProc, sock string) {
		pingN(t, u, 1, 5)
		for _, verb := range []string{"suspend", "resume"} {
			if out, err := runCmd(t, mhictl(verb, "mhi0")); err != nil {
				t.Fatalf("%s: %v\n%s", verb, err, out)
			}
		}
		pingN(t, u, 11, 5)
	}},
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
