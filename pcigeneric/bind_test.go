package pcigeneric

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// copyTree copies a fixture tree into a fresh directory, keeping symbolic
// links as links, and returns the copy's root.
func copyTree(t *testing.T, tree string) string {
	t.Helper()
	src := filepath.Join(fixtureDir, tree)
	dst := filepath.Join(t.TempDir(), tree)
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		out := filepath.Join(dst, rel)
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(path)
			if err != nil {
				return err
			}
			return os.Symlink(target, out)
		case d.IsDir():
			return os.MkdirAll(out, 0o755)
		default:
			in, err := os.Open(path)
			if err != nil {
				return err
			}
			defer in.Close()
			f, err := os.Create(out)
			if err != nil {
				return err
			}
			if _, err := io.Copy(f, in); err != nil {
				f.Close()
				return err
			}
			return f.Close()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

// write is one attribute write seen by the fake kernel.
type write struct{ path, value string }

// fakeKernel writes attributes like writeAttr and then acts on them the way
// the PCI core would: unbind removes the driver link, drivers_probe binds
// the device to its driver_override (or, when unset, to defaultDriver).
type fakeKernel struct {
	t             *testing.T
	root          string
	defaultDriver string
	fail          map[string]error // attribute base name → error to return
	writes        []write
}

func (k *fakeKernel) write(path, value string) error {
	rel, _ := filepath.Rel(k.root, path)
	k.writes = append(k.writes, write{rel, value})
	if err, ok := k.fail[filepath.Base(path)]; ok {
		return &fs.PathError{Op: "write", Path: path, Err: err}
	}
	if err := writeAttr(path, value); err != nil {
		return err
	}
	dev := filepath.Join(k.root, "bus", "pci", "devices", value)
	switch filepath.Base(path) {
	case "unbind":
		if err := os.Remove(filepath.Join(dev, "driver")); err != nil {
			k.t.Errorf("fake kernel: unbind %s: %v", value, err)
		}
	case "drivers_probe":
		if _, err := os.Lstat(filepath.Join(dev, "driver")); err == nil {
			return nil // already bound: the kernel leaves it alone
		}
		drv := readOverride(dev)
		if drv == "" {
			drv = k.defaultDriver
		}
		target := filepath.Join(k.root, "bus", "pci", "drivers", drv)
		if _, err := os.Stat(target); err != nil {
			return nil // no such driver: the device stays unbound
		}
		if err := os.Symlink(target, filepath.Join(dev, "driver")); err != nil {
			k.t.Errorf("fake kernel: bind %s: %v", value, err)
		}
	}
	return nil
}

func TestBind(t *testing.T) {
	tests := []struct {
		name     string
		tree     string
		addr     string
		fail     map[string]error
		err      error
		prev     string
		driver   string
		changed  bool
		writes   []string // attribute paths relative to the root, in order
		override string   // driver_override afterwards
	}{
		{
			name: "unbound FN990", tree: "server", addr: "0000:03:00.0",
			driver: "vfio-pci", changed: true, override: "vfio-pci",
			writes: []string{"bus/pci/devices/0000:03:00.0/driver_override", "bus/pci/drivers_probe"},
		},
		{
			name: "FN980 on mhi-pci-generic", tree: "server", addr: "02:00.0",
			prev: "mhi-pci-generic", driver: "vfio-pci", changed: true, override: "vfio-pci",
			writes: []string{"bus/pci/devices/0000:02:00.0/driver_override",
				"bus/pci/devices/0000:02:00.0/driver/unbind", "bus/pci/drivers_probe"},
		},
		{
			name: "already on vfio-pci", tree: "server", addr: "0000:01:00.0",
			prev: "vfio-pci", driver: "vfio-pci", override: "vfio-pci",
		},
		{name: "NVMe refused", tree: "server", addr: "0000:42:00.0", err: ErrNotModem, override: "(null)"},
		{name: "no device", tree: "server", addr: "0000:0a:00.0", err: ErrNoDevice},
		{name: "bad address", tree: "server", addr: "eth0", err: ErrBadAddress},
		{
			name: "vfio-pci not loaded", tree: "laptop", addr: "0000:05:00.0", err: ErrVFIONotLoaded,
			prev: "mhi-pci-generic", driver: "mhi-pci-generic", override: "(null)",
		},
		{
			name: "permission denied", tree: "server", addr: "0000:02:00.0",
			fail: map[string]error{"driver_override": syscall.EACCES}, err: ErrPermission,
			prev: "mhi-pci-generic", driver: "mhi-pci-generic", override: "(null)",
			writes: []string{"bus/pci/devices/0000:02:00.0/driver_override"},
		},
		{
			name: "unbind refused, rolled back", tree: "server", addr: "0000:02:00.0",
			fail: map[string]error{"unbind": syscall.EBUSY}, err: syscall.EBUSY,
			prev: "mhi-pci-generic", driver: "mhi-pci-generic", override: "",
			writes: []string{"bus/pci/devices/0000:02:00.0/driver_override",
				"bus/pci/devices/0000:02:00.0/driver/unbind",
				"bus/pci/devices/0000:02:00.0/driver_override", "bus/pci/drivers_probe"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := copyTree(t, tt.tree)
			k := &fakeKernel{t: t, root: root, defaultDriver: "mhi-pci-generic", fail: tt.fail}
			res, err := kernelSysWriter{write: k.write}.bind(root, tt.addr)
			if !errors.Is(err, tt.err) || (tt.err == nil) != (err == nil) {
				t.Fatalf("err = %v, want %v", err, tt.err)
			}
			if res.Previous != tt.prev || res.Driver != tt.driver || res.Changed != tt.changed {
				t.Errorf("result %+v; want previous %q driver %q changed %v", res, tt.prev, tt.driver, tt.changed)
			}
			var paths []string
			for _, w := range k.writes {
				paths = append(paths, w.path)
			}
			if !slices.Equal(paths, tt.writes) {
				t.Errorf("writes %v, want %v", paths, tt.writes)
			}
			if addr, err := NormalizeAddress(tt.addr); err == nil && tt.err != ErrNoDevice {
				b, _ := os.ReadFile(filepath.Join(root, "bus/pci/devices", addr, "driver_override"))
				if got := strings.TrimSpace(string(b)); got != tt.override {
					t.Errorf("driver_override = %q, want %q", got, tt.override)
				}
				// What discovery says afterwards agrees with the result.
				if tt.driver != "" {
					m, err := DeviceAt(root, addr)
					if err != nil || m.Driver != tt.driver {
						t.Errorf("after bind: DeviceAt = %+v, %v", m, err)
					}
				}
			}
			if err != nil && !strings.Contains(err.Error(), tt.addr) {
				t.Errorf("error %q does not name the device", err)
			}
		})
	}
}

// TestBindRealWrites runs Bind with the real attribute writer on a copy of a
// fixture. Nothing plays the kernel, so the device is not rebound and Bind
// must say so; the attribute files must hold what a kernel would have been
// told.
func TestBindRealWrites(t *testing.T) {
	root := copyTree(t, "server")
	_, err := Bind(root, "0000:02:00.0")
	if !errors.Is(err, ErrBindFailed) {
		t.Fatalf("err = %v, want ErrBindFailed", err)
	}
	for path, want := range map[string]string{
		"bus/pci/devices/0000:02:00.0/driver_override": "vfio-pci",
		"bus/pci/drivers/mhi-pci-generic/unbind":       "0000:02:00.0",
		"bus/pci/drivers_probe":                        "0000:02:00.0",
	} {
		b, err := os.ReadFile(filepath.Join(root, path))
		if err != nil || string(b) != want {
			t.Errorf("%s = %q, %v; want %q", path, b, err, want)
		}
	}
	if _, err := Unbind(root, "0000:04:00.0", false); !errors.Is(err, ErrBindFailed) {
		t.Errorf("Unbind without a kernel: err = %v, want ErrBindFailed", err)
	}
	// writeAttr never creates a missing attribute.
	if err := writeAttr(filepath.Join(root, "bus/pci/devices/0000:02:00.0/new_attr"), "x"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("writeAttr on a missing file: %v", err)
	}
}

func TestUnbind(t *testing.T) {
	tests := []struct {
		name    string
		addr    string
		reprobe bool
		fail    map[string]error
		err     error
		driver  string
		changed bool
		writes  []string
	}{
		{
			name: "release from vfio-pci", addr: "0000:01:00.0", changed: true,
			writes: []string{"bus/pci/devices/0000:01:00.0/driver_override", "bus/pci/devices/0000:01:00.0/driver/unbind"},
		},
		{
			name: "release and reprobe", addr: "0000:04:00.0", reprobe: true, driver: "mhi-pci-generic", changed: true,
			writes: []string{"bus/pci/devices/0000:04:00.0/driver_override",
				"bus/pci/devices/0000:04:00.0/driver/unbind", "bus/pci/drivers_probe"},
		},
		{name: "nothing to do", addr: "0000:03:00.0"},
		{
			name: "permission denied", addr: "0000:02:00.0", fail: map[string]error{"unbind": syscall.EPERM},
			err: ErrPermission, driver: "mhi-pci-generic",
			writes: []string{"bus/pci/devices/0000:02:00.0/driver/unbind"},
		},
		{name: "not a modem", addr: "0000:41:00.0", err: ErrNotModem},
		{name: "unreadable modem", addr: "0000:43:00.0", err: ErrUnreadable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := copyTree(t, "server")
			k := &fakeKernel{t: t, root: root, defaultDriver: "mhi-pci-generic", fail: tt.fail}
			res, err := kernelSysWriter{write: k.write}.unbind(root, tt.addr, tt.reprobe)
			if !errors.Is(err, tt.err) || (tt.err == nil) != (err == nil) {
				t.Fatalf("err = %v, want %v", err, tt.err)
			}
			if res.Driver != tt.driver || res.Changed != tt.changed {
				t.Errorf("result %+v; want driver %q changed %v", res, tt.driver, tt.changed)
			}
			var paths []string
			for _, w := range k.writes {
				paths = append(paths, w.path)
			}
			if !slices.Equal(paths, tt.writes) {
				t.Errorf("writes %v, want %v", paths, tt.writes)
			}
			if tt.err == nil {
				m, err := DeviceAt(root, tt.addr)
				if err != nil || m.DriverOverride != "" || m.Driver != tt.driver {
					t.Errorf("after unbind: %+v, %v", m, err)
				}
			}
		})
	}
}
