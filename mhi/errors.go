package mhi

import "errors"

// Sentinel errors of the host stack. Errors returned by this package wrap
// one of these, or one of the sentinels both sides share (wire.ErrBounds,
// wire.ErrConfig, wire.ErrNoChannel, wire.ErrChannelState, wire.ErrRingFull,
// wire.ErrAborted), with %w and name the device, channel and values
// involved.
var (
	// ErrTimeout: the device did not reach a state or answer a command in time.
	ErrTimeout = errors.New("mhi: timeout")
	// ErrSysErr: the device entered SYS_ERR.
	ErrSysErr = errors.New("mhi: device in SYS_ERR")
	// ErrBadDevice: the device published register values the host cannot use.
	ErrBadDevice = errors.New("mhi: device misbehaves")
	// ErrCommandFailed: the device completed a command with a code other than SUCCESS.
	ErrCommandFailed = errors.New("mhi: command failed")
	// ErrPoweredDown: the controller is not powered up.
	ErrPoweredDown = errors.New("mhi: controller not powered up")
	// ErrWrongState: the controller is not in a state that allows the operation.
	ErrWrongState = errors.New("mhi: wrong controller state")
	// ErrTooLarge: a buffer is too large for the channel's ring.
	ErrTooLarge = errors.New("mhi: buffer too large")
	// ErrRecoveryFailed: SYS_ERR recovery gave up after Options.RecoveryLimit
	// consecutive attempts; the controller stays in RECOVERY_FAILED, leaving
	// the device alone, until PowerDown.
	ErrRecoveryFailed = errors.New("mhi: SYS_ERR recovery failed")
	// ErrRecovering: the device is in SYS_ERR and the controller is
	// recovering it; channel commands wait for the recovery to finish
	// (StatusRecovered) and are refused meanwhile.
	ErrRecovering = errors.New("mhi: SYS_ERR recovery in progress")
	// ErrLinkDown: the device stopped answering on the bus (its registers
	// read as all ones, or the transport failed): it fell off the bus or
	// was removed. The controller stays in LINK_DOWN, leaving the device
	// alone, until PowerDown.
	ErrLinkDown = errors.New("mhi: device not responding (link down or removed)")
	// ErrDoorbell: the elements were queued but the doorbell write failed
	// (see Channel.Queue).
	ErrDoorbell = errors.New("mhi: doorbell write failed")
	// ErrNoM3: the device does not support M3 (its table entry says so,
	// as Linux's no_m3, or it ignored an M3 request): suspend is refused.
	ErrNoM3 = errors.New("mhi: the device does not support M3 (suspend)")
)
