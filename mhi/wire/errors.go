package wire

import "errors"

// Sentinel errors both sides return: the host stack (mhi) and the mock
// modem (mhi/ep) wrap them with %w when data they read from the other side,
// or a configuration both are built from, fails a check, and when a ring or
// channel refuses work. The host's own failures (timeouts, SYS_ERR, a
// misbehaving device, power state) are its sentinels, in package mhi.
var (
	// ErrBounds: an address or length falls outside the memory it must lie in.
	ErrBounds = errors.New("mhi: out of bounds")
	// ErrConfig: a controller configuration is inconsistent.
	ErrConfig = errors.New("mhi: invalid configuration")
	// ErrNoChannel: no such channel in the configuration.
	ErrNoChannel = errors.New("mhi: no such channel")
	// ErrChannelState: the operation is not allowed in the channel's state.
	ErrChannelState = errors.New("mhi: channel in wrong state")
	// ErrRingFull: the transfer ring (or the mock's downlink queue) has no
	// free element.
	ErrRingFull = errors.New("mhi: transfer ring full")
	// ErrAborted: a transfer was dropped before it completed. On the host,
	// the completion of a buffer the device never completed: the channel was
	// reset, the device entered SYS_ERR, or the controller was powered down
	// (the buffer is returned to its owner). On the mock modem, a downlink
	// transfer whose queue an MHI reset dropped while it was being built.
	ErrAborted = errors.New("mhi: transfer aborted")
)
