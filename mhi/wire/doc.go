// Package wire is what the two sides of the Modem Host Interface share —
// this project's counterpart of Linux's drivers/bus/mhi/common.h (with the
// channel configuration of include/linux/mhi.h): the MHI register offsets
// and fields (regs.go), the BHI and BHIe blocks (bhi.go), the 16-byte ring
// elements with their packet types, flags and completion codes
// (element.go), the 44-byte channel, event and command contexts
// (context.go), MHI states, execution environments and channel states
// (state.go), the 32-bit atomic accesses to memory both sides write
// (atomic.go), the sentinel errors both sides wrap (errors.go), and a
// modem's static channel and event-ring configuration, which a device-table
// entry gives to the host and to the mock modem alike (config.go).
//
// The host stack (mhi) and the mock modem (mhi/ep) both use it and link
// nothing of each other. It is plain data and codecs: no state, no
// goroutines, and it imports nothing of gomhi, only the standard library.
package wire
