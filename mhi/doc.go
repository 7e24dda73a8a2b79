// Package mhi is the host side of the Modem Host Interface, the protocol
// Qualcomm modems speak over PCIe: the Transport contract a bus implements
// (registers, DMA memory with IOVAs, interrupts, reset), and the live
// objects: a Controller drives one device from RESET to M0 in mission
// mode, through M3 and SYS_ERR recovery, downloads its firmware over BHI
// and BHIe and collects its RAM dumps, and owns its command ring, event
// rings and Channels.
//
// The wire formats (registers, 44-byte contexts, 16-byte ring elements,
// packet types, completion codes, states and execution environments), a
// modem's static configuration (wire.ControllerConfig: channels and event
// rings) and the sentinel errors both sides wrap live in mhi/wire, which
// the host and its device-side mirror, the mock modem mhi/ep, share. This
// package imports nothing of gomhi but mhi/wire, and the mock links
// nothing of it; mhi/inproc joins the two in one process.
//
// Device-written memory is untrusted: every pointer and length read from
// it is checked against the ring or buffer it must lie in, and whatever
// fails is counted in ControllerStats and logged, never used.
package mhi
