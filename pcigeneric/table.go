// Package pcigeneric knows the real MHI PCI modems: a table that maps PCI IDs
// to a model (name, firmware images, MRU default, timeouts and the MHI
// channel and event-ring configuration), discovery of such modems in a sysfs
// tree, and binding them to vfio-pci so a user-space host stack can drive
// them.
//
// The table follows the device table of Linux's pci_generic MHI driver: same
// model names, same IDs, same order (the first matching entry wins, and
// entries that name a subsystem precede the generic entry for the same
// vendor:device). It is plain data; every accessor returns a copy, so callers
// may change what they get without affecting the table.
package pcigeneric

import (
	"fmt"
	"slices"
	"strings"

	"github.com/gomhi/gomhi/mhi/wire"
)

// AnyID in Match.SubVendor or Match.SubDevice matches any subsystem ID.
const AnyID uint32 = 0xFFFF_FFFF

// Match selects PCI functions by vendor and device ID and, optionally, by
// subsystem vendor and subsystem device ID.
type Match struct {
	Vendor    uint16
	Device    uint16
	SubVendor uint32 // a 16-bit subsystem vendor ID, or AnyID
	SubDevice uint32 // a 16-bit subsystem device ID, or AnyID
}

// Matches reports whether a function with these IDs is selected by m.
func (m Match) Matches(vendor, device, subVendor, subDevice uint16) bool {
	return m.Vendor == vendor && m.Device == device &&
		(m.SubVendor == AnyID || m.SubVendor == uint32(subVendor)) &&
		(m.SubDevice == AnyID || m.SubDevice == uint32(subDevice))
}

// IDs returns concrete IDs that a function (for example a mock modem) can
// present to be selected by m: a wildcard subsystem vendor becomes Vendor and
// a wildcard subsystem device becomes Device.
func (m Match) IDs() (vendor, device, subVendor, subDevice uint16) {
	subVendor, subDevice = m.Vendor, m.Device
	if m.SubVendor != AnyID {
		subVendor = uint16(m.SubVendor)
	}
	if m.SubDevice != AnyID {
		subDevice = uint16(m.SubDevice)
	}
	return m.Vendor, m.Device, subVendor, subDevice
}

// String formats m as "17cb:0306" or "17cb:0306 sub 1c5d:2000", with "*"
// for a wildcard.
func (m Match) String() string {
	s := fmt.Sprintf("%04x:%04x", m.Vendor, m.Device)
	if m.SubVendor == AnyID && m.SubDevice == AnyID {
		return s
	}
	part := func(v uint32) string {
		if v == AnyID {
			return "*"
		}
		return fmt.Sprintf("%04x", v)
	}
	return s + " sub " + part(m.SubVendor) + ":" + part(m.SubDevice)
}

// ModemInfo describes one modem model: what Linux's pci_generic driver keeps
// per model, plus the model's MHI configuration.
type ModemInfo struct {
	// Name is the model name, as Linux names the info entry (e.g.
	// "qcom-sdx55m", "telit-fn990").
	Name string
	// ConfigName names the channel/event-ring configuration (e.g.
	// "modem_qcom_v1", "telit_fn990"); several models share one.
	ConfigName string
	// Firmware is the image loaded over BHI when the modem boots in PBL,
	// relative to the firmware directory; empty when the modem boots alone.
	Firmware string
	// EDLImage is the image for the emergency download EE; may be empty.
	EDLImage string
	// EDLTrigger says the host can force the modem into EDL through a
	// register write.
	EDLTrigger bool
	// BAR is the PCI BAR holding the MHI registers.
	BAR int
	// DMAWidth is the number of IOVA bits the modem can address.
	DMAWidth int
	// VFDMAWidth is DMAWidth for SR-IOV virtual functions, 0 if the model
	// has none.
	VFDMAWidth int
	// MRUDefault is the receive buffer size of the data channels in bytes;
	// 0 means "let the network driver choose".
	MRUDefault int
	// SidebandWake says the modem is woken through a GPIO, so the host's
	// wake doorbell is a no-op.
	SidebandWake bool
	// NoM3 says the modem must not be put into M3 (suspend).
	NoM3 bool
	// ResetOnRemove says the modem gets a SoC reset when the driver
	// releases it.
	ResetOnRemove bool
	// MuxIDBase is the wire number of the modem's first data session: the
	// MBIM session id in its NDP signatures, or the QMAP mux id, of
	// session 0; session N is MuxIDBase+N. Zero for most modems; 112 for
	// the SDX72 in MBIM mode (Linux's mux_id in the T99W640 and DW5934e
	// entries, 6.12 and later).
	MuxIDBase uint8
	// Config is the MHI configuration: channels, event rings, timeouts.
	Config wire.ControllerConfig
}

// Clone returns a deep copy of m.
func (m *ModemInfo) Clone() *ModemInfo {
	c := *m
	c.Config.Channels = slices.Clone(m.Config.Channels)
	c.Config.EventRings = slices.Clone(m.Config.EventRings)
	return &c
}

// Entry is one line of the device table.
type Entry struct {
	Match   Match
	Product string     // the product the IDs belong to, e.g. "Telit FN990"
	Info    *ModemInfo // the model; a copy owned by the caller
}

// entry is the table's internal form; info points into the model table.
type entry struct {
	match   Match
	product string
	info    *ModemInfo
}

func (e entry) export() Entry {
	return Entry{Match: e.match, Product: e.product, Info: e.info.Clone()}
}

// Lookup returns the first table entry matching a function with the given
// IDs.
func Lookup(vendor, device, subVendor, subDevice uint16) (Entry, bool) {
	for _, e := range table {
		if e.match.Matches(vendor, device, subVendor, subDevice) {
			return e.export(), true
		}
	}
	return Entry{}, false
}

// knownVendorDevice reports whether some entry names vendor:device, whatever
// the subsystem; discovery reads subsystem IDs only for those.
func knownVendorDevice(vendor, device uint16) bool {
	for _, e := range table {
		if e.match.Vendor == vendor && e.match.Device == device {
			return true
		}
	}
	return false
}

// Model returns the model with the given name (e.g. "telit-fn990").
func Model(name string) (*ModemInfo, bool) {
	m, ok := models[name]
	if !ok {
		return nil, false
	}
	return m.Clone(), true
}

// Models returns the names of all models, sorted.
func Models() []string {
	names := make([]string, 0, len(models))
	for n := range models {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Entries returns the whole table in match order.
func Entries() []Entry {
	out := make([]Entry, len(table))
	for i, e := range table {
		out[i] = e.export()
	}
	return out
}

// EntriesFor returns the table entries of the named model, in match order;
// use an entry's Match.IDs to present the model's IDs.
func EntriesFor(name string) []Entry {
	var out []Entry
	for _, e := range table {
		if e.info.Name == name {
			out = append(out, e.export())
		}
	}
	return out
}

// ID is a 16-bit PCI ID. It prints and marshals as four hex digits.
type ID uint16

// String returns the ID as four lower-case hex digits.
func (id ID) String() string { return fmt.Sprintf("%04x", uint16(id)) }

// MarshalText implements encoding.TextMarshaler.
func (id ID) MarshalText() ([]byte, error) { return []byte(id.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler; it accepts four hex
// digits with or without "0x".
func (id *ID) UnmarshalText(b []byte) error {
	v, err := parseHex(strings.TrimSpace(string(b)), 16)
	if err != nil {
		return err
	}
	*id = ID(v)
	return nil
}
