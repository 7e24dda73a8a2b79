package pcigeneric

import (
	"bytes"
	"errors"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestUdevRuleCurrent: deploy/udev/70-gomhi.rules is what `mhictl deploy
// udev-rule` prints (make deploy-files rewrites it).
func TestUdevRuleCurrent(t *testing.T) {
	var b bytes.Buffer
	if err := WriteUdevRule(&b, UdevRuleOptions{}); err != nil {
		t.Fatal(err)
	}
	have, err := os.ReadFile("../deploy/udev/" + UdevRuleName)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(have, b.Bytes()) {
		t.Errorf("deploy/udev/%s is stale: run make deploy-files", UdevRuleName)
	}
}

func TestUdevRuleOptions(t *testing.T) {
	for _, o := range []UdevRuleOptions{{Mhictl: "mhictl"}, {Mhictl: "/usr/bin/mh ictl"}, {Mhictl: `/a"b`}, {Group: "a b"}, {Group: `g"`}} {
		if err := WriteUdevRule(&bytes.Buffer{}, o); !errors.Is(err, ErrUdevOption) {
			t.Errorf("%+v: %v, want ErrUdevOption", o, err)
		}
	}
	var b bytes.Buffer
	if err := WriteUdevRule(&b, UdevRuleOptions{Group: "modems", Mhictl: "/opt/gomhi/mhictl"}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`GROUP="modems"`, `RUN+="/opt/gomhi/mhictl bind $kernel"`, `PROGRAM=="/opt/gomhi/mhictl deploy vfio-group %k"`} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("rule lacks %s", want)
		}
	}
}

// The rest of this file evaluates the generated rule as udev would, for
// the keys it uses, against the fixture sysfs trees: a small interpreter
// (match keys ==/!= with udev's glob patterns, ATTR{} read from the
// device's files with trailing white space stripped, GOTO/LABEL,
// assignments collected). cmd/mhictl's TestUdevRuleWithUdevadm runs the
// same rule through udevadm itself.

// udevKey is one key of a rule line.
type udevKey struct{ key, attr, op, value string }

var udevKeyRE = regexp.MustCompile(`^([A-Z]+)(?:\{([^}]*)\})?(==|!=|\+=|=)"((?:[^"\\]|\\.)*)"$`)

// parseUdevRules splits a rules file into lines of keys.
func parseUdevRules(t *testing.T, text string) [][]udevKey {
	t.Helper()
	var lines [][]udevKey
	for n, l := range strings.Split(text, "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		var keys []udevKey
		for _, f := range strings.Split(l, ", ") {
			m := udevKeyRE.FindStringSubmatch(strings.TrimSpace(f))
			if m == nil {
				t.Fatalf("line %d: cannot parse %q", n+1, f)
			}
			keys = append(keys, udevKey{m[1], m[2], m[3], m[4]})
		}
		lines = append(lines, keys)
	}
	return lines
}

// udevDevice is what the interpreter knows of a device event.
type udevDevice struct {
	action, subsystem, kernel string
	dir                       string                // its sysfs directory, for ATTR{}
	program                   func(cmd string) bool // runs a PROGRAM
}

// udevResult is what the rules assigned.
type udevResult struct {
	attrs        map[string]string
	run          []string
	group, mode  string
	programsRun  []string
	matchedLines int
}

// udevGlob matches value against a udev pattern (globs and "|" alternatives).
func udevGlob(pattern, value string) bool {
	for _, p := range strings.Split(pattern, "|") {
		if ok, _ := path.Match(p, value); ok {
			return true
		}
	}
	return false
}

func (d udevDevice) subst(s string) string {
	return strings.NewReplacer("$kernel", d.kernel, "%k", d.kernel).Replace(s)
}

func evalUdev(t *testing.T, lines [][]udevKey, d udevDevice) udevResult {
	t.Helper()
	res := udevResult{attrs: map[string]string{}}
	labels := map[string]int{}
	for i, l := range lines {
		if len(l) == 1 && l[0].key == "LABEL" {
			labels[l[0].value] = i
		}
	}
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		matched := true
		for _, k := range l {
			var got string
			ok := true
			switch k.key {
			case "ACTION":
				got = d.action
			case "SUBSYSTEM":
				got = d.subsystem
			case "KERNEL":
				got = d.kernel
			case "ATTR":
				if k.op != "==" && k.op != "!=" {
					continue
				}
				b, err := os.ReadFile(filepath.Join(d.dir, k.attr))
				got, ok = strings.TrimRight(string(b), " \t\n"), err == nil
			case "PROGRAM":
				res.programsRun = append(res.programsRun, d.subst(k.value))
				got, ok = "", d.program != nil && d.program(d.subst(k.value))
				if !ok {
					matched = false
				}
				continue
			default:
				continue
			}
			switch k.op {
			case "==":
				matched = matched && ok && udevGlob(k.value, got)
			case "!=":
				matched = matched && !(ok && udevGlob(k.value, got))
			}
			if !matched {
				break
			}
		}
		if !matched {
			continue
		}
		res.matchedLines++
		jump := ""
		for _, k := range l {
			switch {
			case k.key == "ATTR" && k.op == "=":
				res.attrs[k.attr] = d.subst(k.value)
			case k.key == "RUN":
				res.run = append(res.run, strings.TrimSpace(k.attr+" "+d.subst(k.value)))
			case k.key == "GROUP":
				res.group = k.value
			case k.key == "MODE":
				res.mode = k.value
			case k.key == "GOTO":
				jump = k.value
			}
		}
		if jump != "" {
			j, ok := labels[jump]
			if !ok {
				t.Fatalf("GOTO %q: no such LABEL", jump)
			}
			i = j
		}
	}
	return res
}

// expectModem says whether the function in dir is a modem of the table,
// reading its IDs directly: vendor and device must parse; a subsystem ID
// that does not parse matches only an entry that does not name one.
func expectModem(dir string) bool {
	v, err1 := readHexFile(dir, "vendor", 16)
	dv, err2 := readHexFile(dir, "device", 16)
	if err1 != nil || err2 != nil {
		return false
	}
	sv, svErr := readHexFile(dir, "subsystem_vendor", 16)
	sd, sdErr := readHexFile(dir, "subsystem_device", 16)
	for _, e := range table {
		m := e.match
		if m.Vendor == uint16(v) && m.Device == uint16(dv) &&
			(m.SubVendor == AnyID || svErr == nil && m.SubVendor == uint32(sv)) &&
			(m.SubDevice == AnyID || sdErr == nil && m.SubDevice == uint32(sd)) {
			return true
		}
	}
	return false
}

func TestUdevRuleMatchesFixtures(t *testing.T) {
	var b bytes.Buffer
	if err := WriteUdevRule(&b, UdevRuleOptions{}); err != nil {
		t.Fatal(err)
	}
	lines := parseUdevRules(t, b.String())
	wantModems := map[string][]string{ // from fixtures/pci/README.md
		"laptop":     {"0000:05:00.0"},
		"server":     {"0000:01:00.0", "0000:02:00.0", "0000:03:00.0", "0000:04:00.0", "0000:05:00.0", "0000:06:00.0", "0000:07:00.0", "0000:43:00.0"},
		"vm-noiommu": {"0000:00:04.0", "0000:00:05.0", "0000:00:06.0"},
	}
	for _, fixture := range []string{"laptop", "server", "vm-noiommu"} {
		root := filepath.Join("..", "fixtures", "pci", fixture)
		devs, err := os.ReadDir(filepath.Join(root, "bus", "pci", "devices"))
		if err != nil {
			t.Fatal(err)
		}
		var matched []string
		for _, ent := range devs {
			addr := ent.Name()
			dir := filepath.Join(root, "bus", "pci", "devices", addr)
			dev := udevDevice{action: "add", subsystem: "pci", kernel: addr, dir: dir}
			res := evalUdev(t, lines, dev)
			isModem := res.attrs["driver_override"] == "vfio-pci"
			if isModem != expectModem(dir) {
				t.Errorf("%s %s: rule hands it to vfio-pci: %v; a modem of the table: %v", fixture, addr, isModem, expectModem(dir))
			}
			if isModem {
				matched = append(matched, addr)
				want := []string{"builtin kmod load vfio-pci", DefaultMhictlPath + " bind " + addr}
				if !slices.Equal(res.run, want) {
					t.Errorf("%s %s: RUN %q, want %q", fixture, addr, res.run, want)
				}
			}
			// Any other event of the same device changes nothing.
			for _, action := range []string{"change", "bind", "remove"} {
				dev.action = action
				if r := evalUdev(t, lines, dev); len(r.attrs)+len(r.run) != 0 || r.group != "" {
					t.Errorf("%s %s on %s: %+v", fixture, addr, action, r)
				}
			}
		}
		if !slices.Equal(matched, wantModems[fixture]) {
			t.Errorf("%s: the rule takes %v, want %v", fixture, matched, wantModems[fixture])
		}
		// Discovery's modems are all taken.
		scan, err := Discover(root)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range scan.Modems {
			if !slices.Contains(matched, m.Address) {
				t.Errorf("%s: discovery finds %s (%s), the rule does not take it", fixture, m.Address, m.Name)
			}
		}

		// VFIO group nodes: the group is given only to groups holding a
		// modem, the check being `mhictl deploy vfio-group N`.
		groups, _ := os.ReadDir(filepath.Join(root, "kernel", "iommu_groups"))
		program := func(cmd string) bool {
			f := strings.Fields(cmd)
			if len(f) != 4 || f[0] != DefaultMhictlPath || f[1] != "deploy" || f[2] != "vfio-group" {
				t.Fatalf("PROGRAM %q", cmd)
			}
			modems, err := IOMMUGroupModems(root, f[3])
			return err == nil && len(modems) > 0
		}
		for _, g := range groups {
			members, _ := os.ReadDir(filepath.Join(root, "kernel", "iommu_groups", g.Name(), "devices"))
			want := false
			for _, m := range members {
				want = want || expectModem(filepath.Join(root, "kernel", "iommu_groups", g.Name(), "devices", m.Name()))
			}
			for _, action := range []string{"add", "change"} {
				res := evalUdev(t, lines, udevDevice{action: action, subsystem: "vfio", kernel: g.Name(), program: program})
				if got := res.group == DefaultServiceGroup && res.mode == "0660"; got != want {
					t.Errorf("%s: /dev/vfio/%s on %s: group %q mode %q; holds a modem: %v", fixture, g.Name(), action, res.group, res.mode, want)
				}
				if len(res.attrs)+len(res.run) != 0 {
					t.Errorf("%s: /dev/vfio/%s: %+v", fixture, g.Name(), res)
				}
			}
			if r := evalUdev(t, lines, udevDevice{action: "remove", subsystem: "vfio", kernel: g.Name(), program: program}); len(r.programsRun) != 0 {
				t.Errorf("%s: removing /dev/vfio/%s runs %q", fixture, g.Name(), r.programsRun)
			}
		}
	}
	// The container node and devices of other subsystems are left alone.
	for _, d := range []udevDevice{
		{action: "add", subsystem: "vfio", kernel: "vfio"},
		{action: "add", subsystem: "net", kernel: "eth0"},
		{action: "add", subsystem: "usb", kernel: "1-1"},
	} {
		d.program = func(cmd string) bool { t.Errorf("%s %s runs %s", d.subsystem, d.kernel, cmd); return true }
		if r := evalUdev(t, lines, d); len(r.attrs)+len(r.run) != 0 || r.group != "" {
			t.Errorf("%s %s: %+v", d.subsystem, d.kernel, r)
		}
	}
}

// TestUdevMatchesCoverTable: every entry of the table is covered by exactly
// the lines the rule keeps, and a function of no entry is not (the Telit
// FE912C04, 17cb:011a sub 1c5d:2045, shares vendor:device with the FN920C04
// entry but not its subsystem).
func TestUdevMatchesCoverTable(t *testing.T) {
	ms := udevMatches()
	covered := func(v, d, sv, sd uint16) bool {
		return slices.ContainsFunc(ms, func(m udevMatch) bool { return m.match.Matches(v, d, sv, sd) })
	}
	for _, e := range table {
		v, d, sv, sd := e.match.IDs()
		if !covered(v, d, sv, sd) {
			t.Errorf("%s (%s) not covered", e.product, e.match)
		}
	}
	if covered(0x17cb, 0x011a, 0x1c5d, 0x2045) {
		t.Error("the FE912C04 (17cb:011a sub 1c5d:2045) is covered")
	}
	if covered(0x17cb, 0x1101, 0x17cb, 0x0108) {
		t.Error("the QCA6390 Wi-Fi (17cb:1101) is covered")
	}
	// The generic SDX55/SDX65 lines replaced the specific ones before them.
	n := 0
	for _, m := range ms {
		if m.match.Vendor == 0x17cb && m.match.Device == 0x0306 {
			n++
			if m.match.SubVendor != AnyID || len(m.products) != 4 {
				t.Errorf("17cb:0306: %+v", m)
			}
		}
	}
	if n != 1 {
		t.Errorf("%d lines for 17cb:0306, want 1", n)
	}
}
