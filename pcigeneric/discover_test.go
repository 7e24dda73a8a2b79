package pcigeneric

import (
	"bytes"
	"errors"
	"flag"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in fixtures/pci")

const fixtureDir = "../fixtures/pci"

// fixtureTrees returns the names of the fixture trees (the directories of
// fixtures/pci).
func fixtureTrees(t *testing.T) []string {
	t.Helper()
	ents, err := os.ReadDir(fixtureDir)
	if err != nil {
		t.Fatal(err)
	}
	var trees []string
	for _, e := range ents {
		if e.IsDir() {
			trees = append(trees, e.Name())
		}
	}
	if len(trees) < 3 {
		t.Fatalf("only %d fixture trees in %s", len(trees), fixtureDir)
	}
	return trees
}

// TestDiscoverGolden pins the output of "mhictl list --json" for every
// fixture tree. Run "go test ./pcigeneric -run Golden -update" after a
// deliberate change.
func TestDiscoverGolden(t *testing.T) {
	for _, tree := range fixtureTrees(t) {
		t.Run(tree, func(t *testing.T) {
			scan, err := Discover(filepath.Join(fixtureDir, tree))
			if err != nil {
				t.Fatal(err)
			}
			var got bytes.Buffer
			if err := scan.WriteJSON(&got); err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join(fixtureDir, tree+".golden.json")
			if *update {
				if err := os.WriteFile(golden, got.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if !bytes.Equal(got.Bytes(), want) {
				t.Errorf("discovery of %s differs from %s (run with -update if intended):\n%s", tree, golden, got.String())
			}
		})
	}
}

type wantModem struct {
	addr, name, driver, group string
	state                     State
}

func TestDiscoverTrees(t *testing.T) {
	tests := []struct {
		tree     string
		modems   []wantModem
		problems map[string]string // address → text the message must contain
	}{
		{
			tree: "laptop",
			modems: []wantModem{
				{"0000:05:00.0", "quectel-em1xx", "mhi-pci-generic", "14", StateNoVFIO},
			},
			problems: map[string]string{"0000:06:00.0": `vendor: "0xqc17" is not a 16-bit hex number`},
		},
		{
			tree: "server",
			modems: []wantModem{
				{"0000:01:00.0", "qcom-sdx55m", "vfio-pci", "20", StateReady},
				{"0000:02:00.0", "telit-fn980-hwv1", "mhi-pci-generic", "21", StateNeedsBind},
				{"0000:03:00.0", "telit-fn990", "", "22", StateNeedsBind},
				{"0000:04:00.0", "foxconn-t99w175", "vfio-pci", "23", StateReady},
				{"0000:05:00.0", "quectel-rm5xx", "mhi-pci-generic", "24", StateNeedsBind},
				{"0000:06:00.0", "foxconn-sdx55", "mhi-pci-generic", "25", StateNeedsBind},
				{"0000:07:00.0", "foxconn-t99w696", "mhi-pci-generic", "26", StateNeedsBind},
			},
			problems: map[string]string{"0000:43:00.0": "open resource: no such file or directory"},
		},
		{
			tree: "vm-noiommu",
			modems: []wantModem{
				{"0000:00:04.0", "quectel-em1xx", "mhi-pci-generic", "", StateNoIOMMU},
				{"0000:00:05.0", "sierra-em919x", "", "", StateNoIOMMU},
			},
			problems: map[string]string{"0000:00:06.0": "subsystem_vendor: "},
		},
	}
	for _, tt := range tests {
		t.Run(tt.tree, func(t *testing.T) {
			scan, err := Discover(filepath.Join(fixtureDir, tt.tree))
			if err != nil {
				t.Fatal(err)
			}
			if len(scan.Modems) != len(tt.modems) {
				t.Errorf("%d modems, want %d: %+v", len(scan.Modems), len(tt.modems), scan.Modems)
			}
			for i, w := range tt.modems {
				if i >= len(scan.Modems) {
					break
				}
				m := scan.Modems[i]
				got := wantModem{m.Address, m.Name, m.Driver, m.IOMMUGroup, m.State}
				if got != w {
					t.Errorf("modem %d = %+v, want %+v", i, got, w)
				}
				if m.Info == nil || m.Info.Name != m.Name || m.Info.Config.Validate() != nil {
					t.Errorf("modem %s: bad Info %+v", m.Address, m.Info)
				}
				if !strings.Contains(m.Hint, m.Address) && m.State != StateNoIOMMU {
					t.Errorf("modem %s: hint %q does not name the device", m.Address, m.Hint)
				}
				if len(m.BARs) == 0 || m.BARs[0].Index != 0 || m.BARs[0].Size != 4096 || !m.BARs[0].Mem64 {
					t.Errorf("modem %s: BARs %+v, want a 64-bit 4 KiB BAR0", m.Address, m.BARs)
				}
			}
			if len(scan.Problems) != len(tt.problems) {
				t.Errorf("%d problems, want %d: %v", len(scan.Problems), len(tt.problems), scan.Problems)
			}
			for _, p := range scan.Problems {
				want, ok := tt.problems[p.Address]
				if !ok {
					t.Errorf("unexpected problem: %v", p)
					continue
				}
				if !errors.Is(p, ErrUnreadable) || !strings.Contains(p.Error(), want) ||
					!strings.HasPrefix(p.Error(), "pci "+p.Address+": ") {
					t.Errorf("problem %q: want ErrUnreadable naming the device and containing %q", p, want)
				}
				if strings.Contains(p.Error(), fixtureDir) {
					t.Errorf("problem %q names the fixture path", p)
				}
			}
		})
	}
}

func TestDiscoverRoots(t *testing.T) {
	server := filepath.Join(fixtureDir, "server")
	full, err := Discover(server)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		root   string
		err    error
		modems int
	}{
		{"mount point", server, nil, len(full.Modems)},
		{"devices dir", filepath.Join(server, "bus", "pci", "devices"), nil, len(full.Modems)},
		{"missing", filepath.Join(t.TempDir(), "nope"), ErrNoSysfs, 0},
		{"not sysfs", t.TempDir(), ErrNoSysfs, 0},
		{"file", filepath.Join(server, "bus", "pci", "drivers_probe"), ErrNoSysfs, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			scan, err := Discover(tt.root)
			if !errors.Is(err, tt.err) || (tt.err == nil) != (err == nil) {
				t.Fatalf("err = %v, want %v", err, tt.err)
			}
			if err == nil && len(scan.Modems) != tt.modems {
				t.Errorf("%d modems, want %d", len(scan.Modems), tt.modems)
			}
		})
	}
}

func TestEmptyScanJSON(t *testing.T) {
	var b bytes.Buffer
	if err := (&Scan{}).WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	if got := b.String(); got != "{\n  \"modems\": [],\n  \"problems\": []\n}\n" {
		t.Errorf("empty scan = %q", got)
	}
}

func TestDeviceAt(t *testing.T) {
	tests := []struct {
		tree, addr string
		name       string
		err        error
	}{
		{"server", "0000:03:00.0", "telit-fn990", nil},
		{"server", "03:00.0", "telit-fn990", nil},
		{"server", "0000:09:00.0", "", ErrNoDevice},
		{"server", "0000:42:00.0", "", ErrNotModem},   // NVMe
		{"server", "0000:08:00.0", "", ErrNotModem},   // 17cb:011a with an unknown subsystem
		{"server", "0000:43:00.0", "", ErrUnreadable}, // no resource file
		{"server", "0000:43:00", "", ErrBadAddress},
		{"laptop", "0000:06:00.0", "", ErrUnreadable},
		{"vm-noiommu", "0000:00:05.0", "sierra-em919x", nil},
	}
	for _, tt := range tests {
		m, err := DeviceAt(filepath.Join(fixtureDir, tt.tree), tt.addr)
		if !errors.Is(err, tt.err) || (tt.err == nil) != (err == nil) {
			t.Errorf("%s %s: err = %v, want %v", tt.tree, tt.addr, err, tt.err)
			continue
		}
		if err == nil && m.Name != tt.name {
			t.Errorf("%s %s: model %s, want %s", tt.tree, tt.addr, m.Name, tt.name)
		}
	}
}

// TestFixtureLinks keeps the fixture trees portable: every symbolic link is
// relative and resolves to something inside its tree, and there are no
// special files git could not store.
func TestFixtureLinks(t *testing.T) {
	for _, tree := range fixtureTrees(t) {
		root, err := filepath.Abs(filepath.Join(fixtureDir, tree))
		if err != nil {
			t.Fatal(err)
		}
		links := 0
		err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			switch {
			case d.Type()&fs.ModeSymlink != 0:
				links++
				target, err := os.Readlink(path)
				if err != nil {
					return err
				}
				if filepath.IsAbs(target) {
					t.Errorf("%s: absolute link to %s", path, target)
				}
				resolved := filepath.Join(filepath.Dir(path), target)
				if rel, err := filepath.Rel(root, resolved); err != nil || strings.HasPrefix(rel, "..") {
					t.Errorf("%s: link %s leaves the tree", path, target)
				}
				if _, err := os.Stat(path); err != nil {
					t.Errorf("%s: dangling link: %v", path, err)
				}
			case !d.IsDir() && !d.Type().IsRegular():
				t.Errorf("%s: special file (%v)", path, d.Type())
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if links == 0 {
			t.Errorf("%s: no symbolic links; driver and iommu_group links expected", tree)
		}
	}
}
