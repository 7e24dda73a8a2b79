package pcigeneric

import (
	"encoding/json"
	"errors"
	"fmt"
)

// Sentinel errors. Errors returned by this package wrap one of these with %w
// and name the PCI address and the sysfs file involved.
var (
	// ErrNoSysfs: the sysfs root does not hold a readable PCI devices
	// directory.
	ErrNoSysfs = errors.New("pcigeneric: no readable PCI sysfs tree")
	// ErrUnreadable: a device's sysfs attributes are missing or malformed.
	ErrUnreadable = errors.New("pcigeneric: device attributes unreadable")
	// ErrBadAddress: a string is not a PCI address (DDDD:BB:DD.F).
	ErrBadAddress = errors.New("pcigeneric: malformed PCI address")
	// ErrNoDevice: there is no PCI device at the address.
	ErrNoDevice = errors.New("pcigeneric: no such PCI device")
	// ErrNotModem: the device is not a modem of the table.
	ErrNotModem = errors.New("pcigeneric: not a known MHI modem")
	// ErrPermission: writing a sysfs attribute was refused; bind and unbind
	// need root (CAP_SYS_ADMIN).
	ErrPermission = errors.New("pcigeneric: permission denied")
	// ErrVFIONotLoaded: the vfio-pci driver is not registered with the PCI
	// bus (modprobe vfio-pci).
	ErrVFIONotLoaded = errors.New("pcigeneric: vfio-pci driver not loaded")
	// ErrBindFailed: the kernel did not carry out a bind or unbind: the
	// device is not on the requested driver afterwards.
	ErrBindFailed = errors.New("pcigeneric: bind failed")
)

// DeviceError is a problem with one PCI device found during discovery. It
// names the device's address; the scan carries on with the other devices.
type DeviceError struct {
	Address string // PCI address, e.g. "0000:01:00.0"
	Err     error  // what went wrong; wraps a sentinel such as ErrUnreadable
}

// Error returns "pci ADDRESS: message".
func (e *DeviceError) Error() string { return "pci " + e.Address + ": " + e.Err.Error() }

// Unwrap returns the underlying error.
func (e *DeviceError) Unwrap() error { return e.Err }

// MarshalJSON encodes the error as {"address": …, "error": …}.
func (e *DeviceError) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Address string `json:"address"`
		Error   string `json:"error"`
	}{e.Address, e.Err.Error()})
}

func deviceErr(addr string, sentinel error, format string, args ...any) *DeviceError {
	return &DeviceError{Address: addr, Err: fmt.Errorf("%w: "+format, append([]any{sentinel}, args...)...)}
}

// ErrUnknownModel: no model of that name in the device table.
var ErrUnknownModel = errors.New("pcigeneric: unknown modem model")
