// Package mhi is the host side of the Modem Host Interface, the protocol
// Qualcomm modems speak over PCIe: the wire formats (registers, 44-byte
// contexts, 16-byte ring elements, packet types, completion codes, states
// and execution environments), a modem's static configuration
// (ControllerConfig: channels and event rings), the Transport contract a bus
// implements (registers, DMA memory with IOVAs, interrupts, reset), and the
// live objects: a Controller drives one device from RESET to M0 in mission
// mode, through M3 and SYS_ERR recovery, and owns its command ring, event
// rings and Channels.
//
// The package imports nothing else of gomhi. Its device-side mirror is
// mhi/ep; mhi/inproc joins the two in one process.
//
// Device-written memory is untrusted: every pointer and length read from
// it is checked against the ring or buffer it must lie in, and whatever
// fails is counted in ControllerStats and logged, never used.
package mhi
