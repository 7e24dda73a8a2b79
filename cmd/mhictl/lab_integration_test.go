package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gomhi/gomhi/cmd/mhictl/internal/lab"
	"github.com/gomhi/gomhi/internal/labvm"
	"github.com/gomhi/gomhi/mhi/testenv"
)

// labRun runs 'mhictl lab run ARGS…' as a process of its own (this test
// binary as mhictl: the served modem it starts is this binary too) and
// returns its exit status, standard output and standard error.
func labRun(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"lab", "run"}, args...)...)
	cmd.Env = append(os.Environ(), "GOMHI_RUN_MHICTL=1")
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	status := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		status = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("mhictl lab run %v: %v", args, err)
	}
	return status, out.String(), errOut.String()
}

// labSummary parses the JSON summary, the last line of standard output.
func labSummary(t *testing.T, out string) lab.Summary {
	t.Helper()
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	var sum lab.Summary
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &sum); err != nil {
		t.Fatalf("the last line of the output is no JSON summary: %v\n%s", err, out)
	}
	return sum
}

// needLab skips (fails with CI=true) when the lab's guest cannot boot here.
func needLab(t *testing.T) *labvm.Env {
	t.Helper()
	if testing.Short() {
		t.Skip("boots a VM; skipped in -short mode")
	}
	e, err := labvm.Find(labvm.Options{VFIOUser: true})
	testenv.Need(t, "the lab's guest", err)
	return e
}

// writeScript writes a guest script and returns its path.
func writeScript(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "script.sh")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestLabRun runs scripts in the lab's guest (Linux 6.1's MHI drivers on
// the served mock modem) and checks that mhictl lab run exits with the
// script's status, 124 on --timeout and 125 when the lab cannot start,
// that the script sees its arguments and the data interface, and that a
// modem Linux cannot bring up fails the script.
func TestLabRun(t *testing.T) {
	env := needLab(t)
	ping := writeScript(t, `echo "args $#:$1:$2"
echo "netdev $LAB_NETDEV kernel $LAB_KERNEL model $LAB_MODEL ports $LAB_PORTS"
ping -c 3 -W 5 "$LAB_PEER"
`)
	t.Run("ping", func(t *testing.T) {
		status, out, errOut := labRun(t, "--json", ping, "a", "b c")
		sum := labSummary(t, out)
		if status != 0 || sum.ExitStatus != 0 {
			t.Fatalf("exit %d (summary %d), want 0\n%s\n%s", status, sum.ExitStatus, out, errOut)
		}
		for _, want := range []string{"args 2:a:b c", "netdev mhi_hwip0 kernel " + env.Release + " model qcom-sdx55m ports /dev/wwan0mbim0",
			"3 packets transmitted, 3 packets received"} {
			if !strings.Contains(out, want) {
				t.Errorf("the console lacks %q:\n%s", want, out)
			}
		}
		if sum.Kernel != env.Release || sum.Driver != "linux" || sum.Userland != "minimal" || sum.BootS <= 0 || sum.DurationS < sum.BootS {
			t.Errorf("summary %+v", sum)
		}
		if sum.Modem.VFIOUserErrors != 0 || sum.Modem.Sessions != 1 || sum.Modem.Malformed != 0 {
			t.Errorf("the served modem: %+v", sum.Modem)
		}
		if a, _ := sum.Modem.IPData["Answered"].(float64); a < 3 {
			t.Errorf("the modem answered %v packets, want >= 3 (the pings)", sum.Modem.IPData["Answered"])
		}
		t.Logf("boot to the script %.2f s, whole run %.2f s", sum.BootS, sum.DurationS)
	})
	t.Run("status7", func(t *testing.T) {
		status, out, errOut := labRun(t, "--json", "--model", "telit-fn990", writeScript(t, "echo netdev $LAB_NETDEV\nexit 7\n"))
		if sum := labSummary(t, out); status != 7 || sum.ExitStatus != 7 {
			t.Fatalf("exit %d (summary %d), want 7\n%s\n%s", status, sum.ExitStatus, out, errOut)
		}
		if !strings.Contains(out, "netdev wwan0") {
			t.Errorf("FN990 (IP_HW0_MBIM): the data interface should be mhi_wwan_mbim's wwan0:\n%s", out)
		}
	})
	t.Run("timeout", func(t *testing.T) {
		status, out, errOut := labRun(t, "--json", "--timeout", "20s", writeScript(t, "sleep 600\n"))
		if sum := labSummary(t, out); status != lab.ExitTimeout || sum.ExitStatus != lab.ExitTimeout || !strings.Contains(sum.Reason, "timeout") {
			t.Fatalf("exit %d (summary %+v), want %d\n%s", status, sum, lab.ExitTimeout, errOut)
		}
	})
	t.Run("no-such-kernel", func(t *testing.T) {
		status, _, errOut := labRun(t, "--kernel", "4.19", ping)
		if status != lab.ExitLabFailed || !strings.Contains(errOut, `--kernel "4.19"`) {
			t.Fatalf("exit %d, want %d with a message naming the kernel:\n%s", status, lab.ExitLabFailed, errOut)
		}
	})
	t.Run("user-kernel", func(t *testing.T) {
		// A kernel image and modules folder as a kernel developer passes
		// them: the cached 6.1's files.
		status, out, errOut := labRun(t, "--kernel", env.Kernel, "--modules", env.Modules, ping)
		if status != 0 || !strings.Contains(out, "3 packets received") {
			t.Fatalf("exit %d, want 0 and the pings answered\n%s\n%s", status, out, errOut)
		}
		status, _, errOut = labRun(t, "--kernel", env.Kernel, ping)
		if status != lab.ExitLabFailed || !strings.Contains(errOut, "--modules") {
			t.Fatalf("a kernel image without --modules: exit %d, want %d naming --modules:\n%s", status, lab.ExitLabFailed, errOut)
		}
	})
	t.Run("two-modems", func(t *testing.T) {
		// Two served modems, Linux's mhi_net names them mhi_hwip0 and
		// mhi_hwip1; each answers on its own subnet.
		script := writeScript(t, `echo "netdevs $LAB_NETDEVS"
ping -c 2 -W 5 192.0.2.2 && ping -c 2 -W 5 192.0.2.18
`)
		status, out, errOut := labRun(t, "--json", "--modems", "2", script)
		sum := labSummary(t, out)
		if status != 0 || !strings.Contains(out, "netdevs mhi_hwip0 mhi_hwip1") || len(sum.Modems) != 2 {
			t.Fatalf("exit %d, %d modems in the summary\n%s\n%s", status, len(sum.Modems), out, errOut)
		}
		for i, m := range sum.Modems {
			if a, _ := m.IPData["Answered"].(float64); a < 2 {
				t.Errorf("modem %d answered %v packets, want >= 2", i, m.IPData["Answered"])
			}
		}
	})
	t.Run("modemmanager", func(t *testing.T) {
		// The Debian user land: ModemManager found the modem before the
		// script started; the script enables and connects it with mmcli.
		script := writeScript(t, `state() { mmcli -m "$LAB_MM_MODEM" -K | sed -n 's/^modem.generic.state *: *//p'; }
echo "mm modem $LAB_MM_MODEM, netdev $LAB_NETDEV"
mmcli -m "$LAB_MM_MODEM" --enable || exit 3
i=0; while [ $i -lt 120 ] && [ "$(state)" != registered ]; do sleep 0.5; i=$((i+1)); done
mmcli -m "$LAB_MM_MODEM" --simple-connect="apn=internet" || exit 4
echo "mm state $(state)"
[ "$(state)" = connected ]
`)
		status, out, errOut := labRun(t, "--json", "--userland", "modemmanager", script)
		sum := labSummary(t, out)
		if status != 0 || sum.ExitStatus != 0 || sum.Userland != "modemmanager" {
			t.Fatalf("exit %d (summary %+v), want 0\n%s\n%s", status, sum, out, errOut)
		}
		if !strings.Contains(out, "mm modem 0, netdev mhi_hwip0") || !strings.Contains(out, "mm state connected") {
			t.Errorf("the console:\n%s", out)
		}
	})
	t.Run("modem-never-ready", func(t *testing.T) {
		// The modem waits in its boot loader for an image the guest has
		// no firmware for: Linux never brings it up, the script's ping
		// fails and so does the run.
		status, out, errOut := labRun(t, "--serve-args", "--boot-ee pbl", "--timeout", "3m", ping)
		if status == 0 || status == lab.ExitLabFailed || status == lab.ExitTimeout {
			t.Fatalf("exit %d, want the script's failure\n%s\n%s", status, out, errOut)
		}
		if !strings.Contains(errOut, "0 data interfaces after 20 s") {
			t.Errorf("the lab did not say the data interface is missing:\n%s", errOut)
		}
	})
}
