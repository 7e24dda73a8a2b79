package ep

import "github.com/gomhi/gomhi/mhi/wire"

// Observer is told what the device observes of its host and what it does
// in return, as it happens (Config.Observer; mhi/ep/transcript records it).
// Observe is called from the device's goroutines, concurrently, and with
// the device's locks held: it must not block for long and must not call
// the device. With no Observer the device builds no Observation.
type Observer interface {
	Observe(o Observation)
}

// ObservationKind says what an Observation reports.
type ObservationKind uint8

// The kinds of Observation.
const (
	// ObserveRegisterRead: the host read Offset and got Value.
	ObserveRegisterRead ObservationKind = iota + 1
	// ObserveRegisterWrite: the host wrote Value to Offset (doorbells
	// included: two writes, the high half first as a rule).
	ObserveRegisterWrite
	// ObserveContext: the device read Context, the context of Ring Index
	// (at START_CHAN, an event ring's first event, M0 for the command ring).
	ObserveContext
	// ObserveElement: the device read Element, posted by the host at Slot
	// of Ring Index (a TRE or a command).
	ObserveElement
	// ObserveEvent: the device wrote event Element at Slot of event ring
	// Index.
	ObserveEvent
	// ObserveState: the device's MHI state became Value (a wire.State).
	ObserveState
	// ObserveEE: the device's execution environment became Value (a
	// wire.ExecEnv).
	ObserveEE
	// ObserveInterrupt: the device raised MSI vector Value.
	ObserveInterrupt
	// ObserveDMAMap: the transport made Value bytes of host memory
	// visible to the device, with access Flags (vfio-user's DMA_MAP: READ
	// 1, WRITE 2). A transport with maps reports it (vfio-user), not the
	// device.
	ObserveDMAMap
	// ObserveDMAUnmap: the transport took Value bytes back (Flags: the
	// unmap's; vfio-user's ALL, 2, takes every map).
	ObserveDMAUnmap
)

// RingKind names the kind of ring an Observation is about.
type RingKind uint8

// The kinds of ring.
const (
	RingNone    RingKind = iota
	RingChannel          // a transfer ring; Index is the channel number
	RingEvent            // an event ring; Index is its index
	RingCommand          // the command ring; Index is 0
)

// Observation is one thing the device observed or did.
type Observation struct {
	Kind ObservationKind
	// Ring and Index name the ring of a context, element or event.
	Ring  RingKind
	Index int
	// Offset is the register offset of a register access.
	Offset uint32
	// Value is a register's value, a state, an EE or a vector.
	Value uint64
	// Slot is the element's index in its ring.
	Slot uint64
	// Context is the context read (ObserveContext).
	Context wire.Context
	// Element is the element read or the event written.
	Element wire.Element
	// Flags are a DMA map's or unmap's flags.
	Flags uint32
}

// observe hands o to the configured Observer; callers check that there is
// one first, so that no Observation is built without.
func (d *Device) observe(o Observation) { d.cfg.Observer.Observe(o) }

// observing reports whether an Observer is configured.
func (d *Device) observing() bool { return d.cfg.Observer != nil }

// setEELocked records the device's execution environment; regMu must be
// held.
func (d *Device) setEELocked(ee wire.ExecEnv) {
	d.ee = ee
	if d.observing() {
		d.observe(Observation{Kind: ObserveEE, Value: uint64(ee)})
	}
}
