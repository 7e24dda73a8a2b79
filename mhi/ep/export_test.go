package ep

import "github.com/gomhi/gomhi/mhi/wire"

// This file lends the external tests (package ep_test, which drive a
// Device through eptest's fake host) the few internal hooks they need.

// SetAfterResumeEvent sets the function the control goroutine runs after
// posting the STATE_CHANGE(M0) event of a resume (nil: none).
func (d *Device) SetAfterResumeEvent(f *func()) { d.afterResumeEvent.Store(f) }

// WaitControlIdle waits for the state-machine work in progress (the
// control goroutine holds ctrlMu through it) to end.
func (d *Device) WaitControlIdle() {
	d.ctrlMu.Lock()
	d.ctrlMu.Unlock() //nolint:staticcheck // waits for the work in progress
}

// ChannelWorker reaches the worker of one channel.
type ChannelWorker struct{ c *channel }

// ChannelWorker returns the worker of channel n, which the device must
// offer.
func (d *Device) ChannelWorker(n uint8) ChannelWorker { return ChannelWorker{d.channelByNum(n)} }

// Lock holds the worker off its ring (channel.work).
func (w ChannelWorker) Lock() { w.c.work.Lock() }

// Unlock lets the worker go.
func (w ChannelWorker) Unlock() { w.c.work.Unlock() }

// WaitIdle waits for the worker's round in progress to end.
func (w ChannelWorker) WaitIdle() {
	w.c.work.Lock()
	w.c.work.Unlock() //nolint:staticcheck // waits for the round in progress
}

// DBModeResync reports whether the channel still has an M0 re-entry's
// doorbell-mode resync to take.
func (w ChannelWorker) DBModeResync() bool { return w.c.dbModeResync.Load() }

// StopRequested reports whether a STOP is pending on the downlink worker.
func (w ChannelWorker) StopRequested() bool { return w.c.stopReq.Load() }

// ExecEnv is the execution environment boot start b starts in.
func (b BootStart) ExecEnv() wire.ExecEnv { return b.ee() }
