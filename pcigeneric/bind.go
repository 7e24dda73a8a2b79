package pcigeneric

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// vfioDriver is the name under which vfio-pci registers with the PCI bus.
const vfioDriver = "vfio-pci"

// BindResult says what Bind or Unbind did.
type BindResult struct {
	Address  string `json:"address"`  // PCI address
	Previous string `json:"previous"` // driver bound before, "" if none
	Driver   string `json:"driver"`   // driver bound after, "" if none
	Changed  bool   `json:"changed"`  // false when there was nothing to do
}

// Bind hands the modem at address over to vfio-pci: it writes "vfio-pci" to
// the device's driver_override, unbinds it from its current driver and asks
// the bus to probe it again (drivers_probe). root is the sysfs mount point
// (see Discover). Only devices of the table are accepted, so a mistyped
// address cannot take a disk or a NIC away from its driver.
//
// Errors wrap ErrBadAddress, ErrNoDevice, ErrNotModem, ErrVFIONotLoaded,
// ErrPermission or ErrBindFailed.
func Bind(root, address string) (BindResult, error) {
	return kernelSysWriter{write: writeAttr}.bind(root, address)
}

// Unbind releases the modem at address: it clears driver_override and
// unbinds the device from its driver. With reprobe, it then asks the bus to
// probe the device again, so its default driver (mhi-pci-generic) can take
// it back. Errors wrap ErrBadAddress, ErrNoDevice, ErrNotModem,
// ErrPermission or ErrBindFailed.
func Unbind(root, address string, reprobe bool) (BindResult, error) {
	return kernelSysWriter{write: writeAttr}.unbind(root, address, reprobe)
}

// kernelSysWriter performs the kernel /sys attribute writes of Bind and Unbind. Tests
// replace write with a fake kernel that also moves the driver link.
type kernelSysWriter struct {
	write func(path, value string) error
}

// writeAttr writes value to an existing sysfs attribute in one write call.
// It never creates files.
func writeAttr(path, value string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return err
	}
	_, werr := f.WriteString(value)
	cerr := f.Close()
	if werr != nil {
		return werr
	}
	return cerr
}

// target is a device ready for bind or unbind.
type target struct {
	paths  kernelSysPaths
	addr   string
	dir    string
	driver string
}

func (w kernelSysWriter) prepare(root, address string) (target, error) {
	paths, err := resolveRoot(root)
	if err != nil {
		return target{}, err
	}
	addr, err := NormalizeAddress(address)
	if err != nil {
		return target{}, err
	}
	if err := deviceExists(paths, addr); err != nil {
		return target{}, err
	}
	if _, err := DeviceAt(root, addr); err != nil {
		return target{}, err
	}
	t := target{paths: paths, addr: addr, dir: filepath.Join(paths.devices, addr)}
	if t.driver, err = linkBase(t.dir, "driver"); err != nil {
		return target{}, fmt.Errorf("%w: pci %s: %w", ErrUnreadable, addr, err)
	}
	return t, nil
}

// set writes one attribute and turns the error into a clear one.
func (w kernelSysWriter) set(t target, path, value, what string) error {
	err := w.write(path, value)
	if err == nil {
		return nil
	}
	rel, rerr := filepath.Rel(t.paths.bus, path)
	if rerr != nil {
		rel = path
	}
	switch {
	case errors.Is(err, fs.ErrPermission):
		return fmt.Errorf("%w: pci %s: %s: writing %s needs root: %w", ErrPermission, t.addr, what, rel, err)
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%w: pci %s: %s: %s is missing: %w", ErrNoDevice, t.addr, what, rel, err)
	default:
		return fmt.Errorf("pci %s: %s: writing %q to %s: %w", t.addr, what, value, rel, err)
	}
}

func (w kernelSysWriter) bind(root, address string) (BindResult, error) {
	t, err := w.prepare(root, address)
	if err != nil {
		return BindResult{}, err
	}
	res := BindResult{Address: t.addr, Previous: t.driver, Driver: t.driver}
	if t.driver == vfioDriver {
		return res, nil
	}
	if !vfioLoaded(t.paths) {
		return res, fmt.Errorf("%w: pci %s: no %s (run: modprobe vfio-pci)",
			ErrVFIONotLoaded, t.addr, filepath.Join(t.paths.bus, "drivers", vfioDriver))
	}
	override := filepath.Join(t.dir, "driver_override")
	if err := w.set(t, override, vfioDriver, "set driver_override"); err != nil {
		return res, err
	}
	if t.driver != "" {
		if err := w.set(t, filepath.Join(t.dir, "driver", "unbind"), t.addr, "unbind from "+t.driver); err != nil {
			w.restore(t)
			return res, err
		}
		res.Changed = true
	}
	if err := w.set(t, filepath.Join(t.paths.bus, "drivers_probe"), t.addr, "probe"); err != nil {
		w.restore(t)
		return res, err
	}
	res.Changed = true
	if res.Driver, err = linkBase(t.dir, "driver"); err != nil {
		return res, fmt.Errorf("%w: pci %s: %w", ErrUnreadable, t.addr, err)
	}
	if res.Driver != vfioDriver {
		got := res.Driver
		if got == "" {
			got = "no driver"
		}
		return res, fmt.Errorf("%w: pci %s: after probing the device has %s, not %s (see the kernel log)",
			ErrBindFailed, t.addr, got, vfioDriver)
	}
	return res, nil
}

// restore undoes a half-done bind: clear the override and let the bus find
// the device's usual driver again. Errors are ignored; the caller reports
// the one that made it give up.
func (w kernelSysWriter) restore(t target) {
	_ = w.write(filepath.Join(t.dir, "driver_override"), "\n")
	_ = w.write(filepath.Join(t.paths.bus, "drivers_probe"), t.addr)
}

func (w kernelSysWriter) unbind(root, address string, reprobe bool) (BindResult, error) {
	t, err := w.prepare(root, address)
	if err != nil {
		return BindResult{}, err
	}
	res := BindResult{Address: t.addr, Previous: t.driver, Driver: t.driver}
	override := filepath.Join(t.dir, "driver_override")
	if readOverride(t.dir) != "" {
		// A lone newline clears the attribute.
		if err := w.set(t, override, "\n", "clear driver_override"); err != nil {
			return res, err
		}
		res.Changed = true
	}
	if t.driver != "" {
		if err := w.set(t, filepath.Join(t.dir, "driver", "unbind"), t.addr, "unbind from "+t.driver); err != nil {
			return res, err
		}
		res.Changed = true
	}
	if reprobe {
		if err := w.set(t, filepath.Join(t.paths.bus, "drivers_probe"), t.addr, "probe"); err != nil {
			return res, err
		}
		res.Changed = true
	}
	if res.Driver, err = linkBase(t.dir, "driver"); err != nil {
		return res, fmt.Errorf("%w: pci %s: %w", ErrUnreadable, t.addr, err)
	}
	if !reprobe && res.Driver != "" {
		return res, fmt.Errorf("%w: pci %s: still bound to %s after unbind (see the kernel log)",
			ErrBindFailed, t.addr, res.Driver)
	}
	return res, nil
}
