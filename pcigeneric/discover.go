package pcigeneric

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/u-root/u-root/pkg/pci"

	"github.com/gomhi/gomhi/pcigeneric/pciaddr"
)

// Discovery reads a sysfs tree. It uses u-root's pkg/pci to read each
// device (pci.OnePCI), and reads sysfs directly where u-root does not help:
//
//   - u-root's BusReader hard-codes /sys/bus/pci/devices, so the device
//     directories are listed here and handed to OnePCI one by one; that also
//     keeps one unreadable device from hiding the others (BusReader.Read
//     gives up on the first error).
//   - u-root does not read subsystem IDs: subsystem_vendor and
//     subsystem_device are read here, only for devices whose vendor:device
//     is in the table.
//   - the driver and iommu_group links and driver_override are not PCI
//     properties u-root knows about; they are read here.
//   - u-root's errors do not say which file was malformed; when OnePCI
//     fails, the files it needs are checked again here to name the culprit.
//
// Config space is never read, so u-root's unchecked config length does not
// matter.

// DefaultRoot is the usual sysfs mount point.
const DefaultRoot = "/sys"

// kernelSysPaths locates the PCI bus inside the kernel's /sys (not
// gomhi's own attribute tree, package sysfs).
type kernelSysPaths struct {
	devices string // …/bus/pci/devices
	bus     string // …/bus/pci (drivers/, drivers_probe)
}

// resolveRoot accepts either a sysfs mount point (containing bus/pci/devices)
// or the PCI devices directory itself (…/bus/pci/devices).
func resolveRoot(root string) (kernelSysPaths, error) {
	if root == "" {
		root = DefaultRoot
	}
	candidates := []kernelSysPaths{{
		devices: filepath.Join(root, "bus", "pci", "devices"),
		bus:     filepath.Join(root, "bus", "pci"),
	}}
	if filepath.Base(filepath.Clean(root)) == "devices" {
		candidates = append(candidates, kernelSysPaths{devices: root, bus: filepath.Dir(filepath.Clean(root))})
	}
	var firstErr error
	for _, c := range candidates {
		fi, err := os.Stat(c.devices)
		if err == nil && fi.IsDir() {
			return c, nil
		}
		if err == nil {
			err = fmt.Errorf("%s is not a directory", c.devices)
		}
		if firstErr == nil {
			firstErr = err
		}
	}
	return kernelSysPaths{}, fmt.Errorf("%w: sysfs root %s: %w", ErrNoSysfs, root, firstErr)
}

// State says what stands between a modem and a VFIO user-space driver.
type State string

// States of a discovered modem, in the order they are checked.
const (
	StateNoIOMMU   State = "no-iommu"        // the device has no IOMMU group
	StateNoVFIO    State = "vfio-not-loaded" // the vfio-pci driver is not loaded
	StateNeedsBind State = "needs-bind"      // bound to another driver, or none
	StateReady     State = "ready"           // bound to vfio-pci
)

// BAR is one memory or I/O region of a PCI function, from its sysfs
// resource file.
type BAR struct {
	Index    int    `json:"index"`
	Base     Hex64  `json:"base"`
	Size     uint64 `json:"size"`
	IO       bool   `json:"io,omitempty"`
	Mem64    bool   `json:"mem64,omitempty"`
	Prefetch bool   `json:"prefetch,omitempty"`
}

// Hex64 is a 64-bit address; it marshals as "0x" and 16 hex digits.
type Hex64 uint64

// MarshalText implements encoding.TextMarshaler.
func (h Hex64) MarshalText() ([]byte, error) { return fmt.Appendf(nil, "0x%016x", uint64(h)), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (h *Hex64) UnmarshalText(b []byte) error {
	v, err := parseHex(string(b), 64)
	*h = Hex64(v)
	return err
}

// Modem is a PCI function that matches the table.
type Modem struct {
	Address        string     `json:"address"`
	Vendor         ID         `json:"vendor"`
	Device         ID         `json:"device"`
	SubVendor      ID         `json:"subsystem_vendor"`
	SubDevice      ID         `json:"subsystem_device"`
	Name           string     `json:"name"`            // model name, e.g. "telit-fn990"
	Product        string     `json:"product"`         // e.g. "Telit FN990"
	MRUDefault     int        `json:"mru_default"`     // bytes; 0: network driver's choice
	Driver         string     `json:"driver"`          // bound driver, "" if none
	DriverOverride string     `json:"driver_override"` // "" if unset
	IOMMUGroup     string     `json:"iommu_group"`     // group number, "" if none
	MHIBAR         int        `json:"mhi_bar"`         // BAR holding the MHI registers
	BARs           []BAR      `json:"bars"`
	State          State      `json:"state"`
	Hint           string     `json:"hint"` // what the user must do next
	Info           *ModemInfo `json:"-"`    // the model, with its MHI configuration
}

// IDs returns "vvvv:dddd ssss:ssss" (vendor:device subsystem).
func (m *Modem) IDs() string {
	return fmt.Sprintf("%s:%s %s:%s", m.Vendor, m.Device, m.SubVendor, m.SubDevice)
}

// Scan is the result of Discover: the modems found and the devices that
// could not be read, both in address order.
type Scan struct {
	Modems   []Modem        `json:"modems"`
	Problems []*DeviceError `json:"problems"`
}

// WriteJSON writes s as indented JSON followed by a newline. This is the
// output of "mhictl list --json".
func (s *Scan) WriteJSON(w io.Writer) error {
	out := *s
	if out.Modems == nil {
		out.Modems = []Modem{}
	}
	if out.Problems == nil {
		out.Problems = []*DeviceError{}
	}
	b, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// NormalizeAddress checks a PCI address and returns it in sysfs form:
// lower case, with the domain ("01:00.0" becomes "0000:01:00.0"). Errors
// wrap ErrBadAddress.
func NormalizeAddress(s string) (string, error) {
	a, err := pciaddr.Normalize(s)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrBadAddress, err)
	}
	return a, nil
}

// Discover scans the PCI devices of a sysfs tree (root is the sysfs mount
// point, e.g. DefaultRoot or a fixture, or the bus/pci/devices directory)
// and returns the modems of the table. A device that cannot be read is
// reported in Scan.Problems and does not stop the scan; the error is non-nil
// only when the devices directory itself cannot be read (ErrNoSysfs).
func Discover(root string) (*Scan, error) {
	paths, err := resolveRoot(root)
	if err != nil {
		return nil, err
	}
	ents, err := os.ReadDir(paths.devices)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoSysfs, err)
	}
	scan := &Scan{}
	for _, de := range ents { // os.ReadDir sorts by name
		addr := de.Name()
		if !pciaddr.Valid(addr) {
			continue // not a PCI function (stray file in a fixture)
		}
		m, probs := probe(paths, addr)
		scan.Problems = append(scan.Problems, probs...)
		if m != nil {
			scan.Modems = append(scan.Modems, *m)
		}
	}
	return scan, nil
}

// DeviceAt returns the modem at a PCI address. It fails with ErrBadAddress,
// ErrNoDevice, ErrUnreadable (wrapped in a *DeviceError) or ErrNotModem.
func DeviceAt(root, address string) (*Modem, error) {
	paths, err := resolveRoot(root)
	if err != nil {
		return nil, err
	}
	addr, err := NormalizeAddress(address)
	if err != nil {
		return nil, err
	}
	if err := deviceExists(paths, addr); err != nil {
		return nil, err
	}
	m, probs := probe(paths, addr)
	if m == nil && len(probs) > 0 {
		return nil, probs[0]
	}
	if m == nil {
		return nil, fmt.Errorf("%w: pci %s", ErrNotModem, addr)
	}
	return m, nil
}

func deviceExists(paths kernelSysPaths, addr string) error {
	_, err := os.Stat(filepath.Join(paths.devices, addr))
	switch {
	case err == nil:
		return nil
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%w: pci %s (not in %s)", ErrNoDevice, addr, paths.devices)
	default:
		return fmt.Errorf("%w: pci %s: %w", ErrNoDevice, addr, err)
	}
}

// probe reads one device. It returns the modem (nil if the device is not in
// the table or cannot be identified) and the problems met on the way.
func probe(paths kernelSysPaths, addr string) (*Modem, []*DeviceError) {
	dir := filepath.Join(paths.devices, addr)
	p, err := pci.OnePCI(dir)
	if err != nil {
		return nil, []*DeviceError{diagnose(dir, addr, err)}
	}
	if !knownVendorDevice(p.Vendor, p.Device) {
		return nil, nil
	}
	sv, err := readHexFile(dir, "subsystem_vendor", 16)
	if err != nil {
		return nil, []*DeviceError{deviceErr(addr, ErrUnreadable, "%w", err)}
	}
	sd, err := readHexFile(dir, "subsystem_device", 16)
	if err != nil {
		return nil, []*DeviceError{deviceErr(addr, ErrUnreadable, "%w", err)}
	}
	e, ok := Lookup(p.Vendor, p.Device, uint16(sv), uint16(sd))
	if !ok {
		return nil, nil
	}
	m := &Modem{
		Address:    addr,
		Vendor:     ID(p.Vendor),
		Device:     ID(p.Device),
		SubVendor:  ID(sv),
		SubDevice:  ID(sd),
		Name:       e.Info.Name,
		Product:    e.Product,
		MRUDefault: e.Info.MRUDefault,
		MHIBAR:     e.Info.BAR,
		BARs:       []BAR{},
		Info:       e.Info,
	}
	var probs []*DeviceError
	if m.Driver, err = linkBase(dir, "driver"); err != nil {
		probs = append(probs, deviceErr(addr, ErrUnreadable, "%w", err))
	}
	if m.IOMMUGroup, err = linkBase(dir, "iommu_group"); err != nil {
		probs = append(probs, deviceErr(addr, ErrUnreadable, "%w", err))
	}
	m.DriverOverride = readOverride(dir)
	for _, b := range p.BARS {
		if b.Index > 5 || b.Lim < b.Base {
			continue // expansion ROM and SR-IOV BARs are of no use here
		}
		m.BARs = append(m.BARs, BAR{
			Index:    b.Index,
			Base:     Hex64(b.Base),
			Size:     b.Lim - b.Base + 1,
			IO:       b.Attr&resIO != 0,
			Mem64:    b.Attr&resMem64 != 0,
			Prefetch: b.Attr&resPrefetch != 0,
		})
	}
	m.State, m.Hint = advise(paths, m)
	return m, probs
}

// Flag bits of the third column of a sysfs resource line.
const (
	resIO       = 0x100
	resPrefetch = 0x2000
	resMem64    = 0x100000
)

// advise works out the modem's state and the hint that goes with it.
func advise(paths kernelSysPaths, m *Modem) (State, string) {
	switch {
	case m.IOMMUGroup == "":
		return StateNoIOMMU, "no IOMMU group: enable the IOMMU (intel_iommu=on or amd_iommu=on) or use VFIO no-IOMMU mode"
	case m.Driver == "vfio-pci":
		return StateReady, "ready for VFIO: mhictl up --device " + m.Address
	case !vfioLoaded(paths):
		return StateNoVFIO, "load vfio-pci (modprobe vfio-pci), then: mhictl bind " + m.Address
	default:
		return StateNeedsBind, "bind to vfio-pci: mhictl bind " + m.Address
	}
}

func vfioLoaded(paths kernelSysPaths) bool {
	fi, err := os.Stat(filepath.Join(paths.bus, "drivers", vfioDriver))
	return err == nil && fi.IsDir()
}

// linkBase returns the last element of the symbolic link dir/name, or ""
// when there is no such link.
func linkBase(dir, name string) (string, error) {
	t, err := os.Readlink(filepath.Join(dir, name))
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", relPathErr(dir, err)
	}
	return filepath.Base(t), nil
}

// readOverride returns the driver_override attribute, "" when unset or
// absent.
func readOverride(dir string) string {
	b, err := os.ReadFile(filepath.Join(dir, "driver_override"))
	if err != nil {
		return ""
	}
	s := strings.TrimSpace(string(b))
	if s == "(null)" {
		return ""
	}
	return s
}

// parseHex parses a hex number with an optional "0x" prefix.
func parseHex(s string, bits int) (uint64, error) {
	t := strings.TrimPrefix(strings.TrimPrefix(s, "0x"), "0X")
	v, err := strconv.ParseUint(t, 16, bits)
	if err != nil {
		return 0, fmt.Errorf("%q is not a %d-bit hex number", s, bits)
	}
	return v, nil
}

// readHexFile reads a sysfs attribute holding one hex number.
func readHexFile(dir, name string, bits int) (uint64, error) {
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		return 0, relPathErr(dir, err)
	}
	v, err := parseHex(strings.TrimSpace(string(b)), bits)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", name, err)
	}
	return v, nil
}

// relPathErr rewrites the path of a *fs.PathError relative to dir, so that
// messages name the attribute ("open vendor: …") and do not depend on
// where the tree lives.
func relPathErr(dir string, err error) error {
	var pe *fs.PathError
	if !errors.As(err, &pe) {
		return err
	}
	rel, rerr := filepath.Rel(dir, pe.Path)
	if rerr != nil {
		return err
	}
	return &fs.PathError{Op: pe.Op, Path: rel, Err: pe.Err}
}

// diagnose explains why pci.OnePCI failed on dir, naming the file at fault.
func diagnose(dir, addr string, uerr error) *DeviceError {
	for _, f := range []struct {
		name string
		bits int
	}{{"vendor", 16}, {"device", 16}, {"class", 24}} {
		if _, err := readHexFile(dir, f.name, f.bits); err != nil {
			return deviceErr(addr, ErrUnreadable, "%w", err)
		}
	}
	if b, err := os.ReadFile(filepath.Join(dir, "irq")); err != nil {
		return deviceErr(addr, ErrUnreadable, "%w", relPathErr(dir, err))
	} else if _, err := strconv.ParseUint(strings.TrimSpace(string(b)), 0, 64); err != nil {
		return deviceErr(addr, ErrUnreadable, "irq: %q is not a number", strings.TrimSpace(string(b)))
	}
	b, err := os.ReadFile(filepath.Join(dir, "resource"))
	if err != nil {
		return deviceErr(addr, ErrUnreadable, "%w", relPathErr(dir, err))
	}
	for i, line := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		if _, _, _, err := pci.BaseLimType(line); err != nil {
			return deviceErr(addr, ErrUnreadable, "resource line %d: %q is not \"start end flags\"", i, line)
		}
	}
	return deviceErr(addr, ErrUnreadable, "%w", relPathErr(dir, uerr))
}
