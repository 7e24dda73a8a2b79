package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/gomhi/gomhi/mhi/testenv"
	"github.com/gomhi/gomhi/pcigeneric"
)

// TestUdevRuleWithUdevadm runs the generated udev rule through udev itself
// (`udevadm test`, Debian's udev package), once per PCI function of the
// fixture trees, without touching the machine: in a private mount namespace
// the rules directories hold only the rule, and one real PCI function of
// this machine wears the fixture function's vendor, device and subsystem
// ID files (bind mounts over its sysfs attributes), with a temporary file
// bind-mounted over its driver_override, which is where udev's write of
// "vfio-pci" lands. udevadm must read the rule without a complaint, write
// driver_override for exactly the fixtures' modems and list `mhictl bind`
// to run for them. A rule with a bad line is run too, to show that
// udevadm's complaints are caught.
//
// udevadm cannot be shown a VFIO group node that is not there (it refuses
// a device directory outside sysfs), so the group branch of the rule is
// checked by pcigeneric's TestUdevRuleMatchesFixtures, with the same
// `mhictl deploy vfio-group` code it runs.
func TestUdevRuleWithUdevadm(t *testing.T) {
	testenv.NeedRoot(t, "mount namespaces and bind mounts over sysfs")
	udevadm := testenv.LookPath(t, "udevadm", "udev")
	unshare := testenv.LookPath(t, "unshare", "util-linux")
	real := realPCIFunction(t)
	tmp := t.TempDir()
	rules := filepath.Join(tmp, "rules")
	if err := os.Mkdir(rules, 0o755); err != nil {
		t.Fatal(err)
	}
	// The group must exist for udev to accept GROUP=; root always does.
	// PROGRAM's and RUN's mhictl is this test binary (never run here).
	var rule bytes.Buffer
	if err := pcigeneric.WriteUdevRule(&rule, pcigeneric.UdevRuleOptions{Group: "root", Mhictl: os.Args[0]}); err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{ // the fixtures' modems, fixtures/pci/README.md
		"laptop":     {"0000:05:00.0"},
		"server":     {"0000:01:00.0", "0000:02:00.0", "0000:03:00.0", "0000:04:00.0", "0000:05:00.0", "0000:06:00.0", "0000:07:00.0", "0000:43:00.0"},
		"vm-noiommu": {"0000:00:04.0", "0000:00:05.0", "0000:00:06.0"},
	}
	total := 0
	for _, fixture := range []string{"laptop", "server", "vm-noiommu"} {
		root, _ := filepath.Abs(filepath.Join("../../fixtures/pci", fixture, "bus/pci/devices"))
		ents, err := os.ReadDir(root)
		if err != nil {
			t.Fatal(err)
		}
		var addrs []string
		for _, e := range ents {
			addrs = append(addrs, e.Name())
		}
		results := udevadmRun(t, unshare, udevadm, real, rules, rule.Bytes(), root, addrs)
		var taken []string
		for _, addr := range addrs {
			r := results[addr]
			total++
			if r.complaints != "" {
				t.Errorf("%s %s: udevadm complains about the rule:\n%s", fixture, addr, r.complaints)
			}
			switch r.override {
			case "vfio-pci":
				taken = append(taken, addr)
				if !strings.Contains(r.out, "run: '"+os.Args[0]+" bind "+filepath.Base(real)+"'") {
					t.Errorf("%s %s: udevadm does not list `mhictl bind` to run:\n%s", fixture, addr, r.out)
				}
			case "":
			default:
				t.Errorf("%s %s: driver_override %q", fixture, addr, r.override)
			}
		}
		if !slices.Equal(taken, want[fixture]) {
			t.Errorf("%s: udev hands %v to vfio-pci, want %v", fixture, taken, want[fixture])
		}
	}
	t.Logf("udevadm test ran the rule for %d fixture PCI functions on %s", total, real)

	// A bad line is reported, so the check above can fail.
	bad := append(bytes.Clone(rule.Bytes()), []byte("ATTR{vendor}==\"0x17cb\", NOSUCHKEY=\"x\"\n")...)
	r := udevadmRun(t, unshare, udevadm, real, rules, bad, "", nil)[""]
	if r.complaints == "" {
		t.Errorf("udevadm reported nothing for a bad line:\n%s", r.out)
	}
}

// realPCIFunction returns the sysfs directory of a PCI function of this
// machine that has the attribute files the test covers.
func realPCIFunction(t *testing.T) string {
	t.Helper()
	ents, _ := os.ReadDir("/sys/bus/pci/devices")
	for _, e := range ents {
		dir, err := filepath.EvalSymlinks(filepath.Join("/sys/bus/pci/devices", e.Name()))
		if err != nil {
			continue
		}
		ok := true
		for _, f := range []string{"vendor", "device", "subsystem_vendor", "subsystem_device", "driver_override"} {
			if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
				ok = false
			}
		}
		if ok {
			return dir
		}
	}
	testenv.Need(t, "a PCI function with a driver_override file in /sys/bus/pci/devices", fmt.Errorf("none found"))
	return ""
}

// udevadmResult is what `udevadm test` did for one fixture function.
type udevadmResult struct {
	out, complaints, override string
}

var udevComplaintRE = regexp.MustCompile(`(?i)invalid|ignoring|unknown|error|failed|unexpected`)

// udevadmRun runs `udevadm test --action=add` on real, in a private mount
// namespace with rule as the only rule, once per fixture function (its ID
// files from fixtures/addr bind-mounted over real's; "" : real as it is).
func udevadmRun(t *testing.T, unshare, udevadm, real, rules string, rule []byte, fixtures string, addrs []string) map[string]udevadmResult {
	t.Helper()
	if err := os.WriteFile(filepath.Join(rules, pcigeneric.UdevRuleName), rule, 0o644); err != nil {
		t.Fatal(err)
	}
	var sh strings.Builder
	sh.WriteString("set -e\n")
	for _, d := range []string{"/etc/udev/rules.d", "/run/udev/rules.d", "/usr/local/lib/udev/rules.d", "/usr/lib/udev/rules.d", "/lib/udev/rules.d"} {
		fmt.Fprintf(&sh, "if [ -d %s ]; then mount --bind %s %s; fi\n", d, rules, d)
	}
	override := filepath.Join(filepath.Dir(rules), "driver_override")
	if len(addrs) == 0 {
		addrs = []string{""}
	}
	for _, addr := range addrs {
		fmt.Fprintf(&sh, "echo '@@@ begin %s'\n: > %s\nmount --bind %s %s/driver_override\n", addr, override, override, real)
		var mounted []string
		if addr != "" {
			for _, f := range []string{"vendor", "device", "subsystem_vendor", "subsystem_device"} {
				src := filepath.Join(fixtures, addr, f)
				if _, err := os.Stat(src); err != nil {
					src = "/dev/null" // a fixture without the file: an empty attribute
				}
				fmt.Fprintf(&sh, "mount --bind %s %s/%s\n", src, real, f)
				mounted = append(mounted, real+"/"+f)
			}
		}
		fmt.Fprintf(&sh, "%s test --action=add %s 2>&1 || echo \"@@@ udevadm exit $?\"\n", udevadm, real)
		fmt.Fprintf(&sh, "echo \"@@@ override $(cat %s)\"\n", override)
		for _, m := range append(mounted, real+"/driver_override") {
			fmt.Fprintf(&sh, "umount %s\n", m)
		}
	}
	cmd := exec.Command(unshare, "--mount", "--propagation", "private", "sh", "-c", sh.String())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("udevadm in a mount namespace: %v\n%s", err, out)
	}
	res := map[string]udevadmResult{}
	for _, part := range strings.Split(string(out), "@@@ begin ")[1:] {
		addr, body, _ := strings.Cut(part, "\n")
		var r udevadmResult
		r.out = body
		for _, l := range strings.Split(body, "\n") {
			if strings.HasPrefix(l, "@@@ override ") {
				r.override = strings.TrimSpace(strings.TrimPrefix(l, "@@@ override "))
			}
			if strings.HasPrefix(l, "@@@ udevadm exit") ||
				strings.Contains(l, pcigeneric.UdevRuleName) && udevComplaintRE.MatchString(l) {
				r.complaints += l + "\n"
			}
		}
		if !strings.Contains(body, "Reading rules file: /etc/udev/rules.d/"+pcigeneric.UdevRuleName) {
			r.complaints += "udevadm did not read the rule\n"
		}
		res[addr] = r
	}
	if len(res) != len(addrs) {
		t.Fatalf("%d results for %d functions:\n%s", len(res), len(addrs), out)
	}
	return res
}
