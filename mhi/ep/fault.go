package ep

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/gomhi/gomhi/mhi/wire"
)

// Corruption is a kind of damage CorruptNextEvent does to a transfer
// completion event, to exercise the host's validation.
type Corruption int

// Corruption kinds.
const (
	// CorruptEventPointer points the event at the first address after the
	// channel's transfer ring.
	CorruptEventPointer Corruption = iota + 1
	// CorruptChannelID names a channel the device does not offer.
	CorruptChannelID
	// CorruptCompletionCode uses BogusCompletionCode.
	CorruptCompletionCode
	// CorruptLength reports one byte more than the TRE's buffer holds
	// (capped at 0xFFFF, so use a TRE shorter than that).
	CorruptLength
	// CorruptEventRP stores an event-context rp just past the event ring
	// (the event itself is written normally).
	CorruptEventRP
)

// BogusCompletionCode is the completion code CorruptCompletionCode writes.
const BogusCompletionCode wire.CompletionCode = 0x7F

var corruptionNames = map[Corruption]string{
	CorruptEventPointer:   "event-pointer",
	CorruptChannelID:      "channel-id",
	CorruptCompletionCode: "completion-code",
	CorruptLength:         "length",
	CorruptEventRP:        "event-rp",
}

// String returns the corruption kind's name.
func (k Corruption) String() string {
	if n, ok := corruptionNames[k]; ok {
		return n
	}
	return fmt.Sprintf("Corruption(%d)", int(k))
}

// faultState holds the faults waiting to be applied.
type faultState struct {
	droppedInterrupts atomic.Int64
	corruptionsDue    atomic.Int32 // len(corruptions), for a lock-free check
	// mu guards corruptions; a channel's worker takes it while posting an
	// event, nothing is taken while it is held.
	//
	// lockorder: channel.work → faultState.mu
	mu          sync.Mutex
	corruptions []Corruption
}

// takeDroppedInterrupt consumes one DropInterrupts credit.
func (f *faultState) takeDroppedInterrupt() bool {
	for {
		n := f.droppedInterrupts.Load()
		if n <= 0 {
			return false
		}
		if f.droppedInterrupts.CompareAndSwap(n, n-1) {
			return true
		}
	}
}

// takeCorruption pops the next corruption, if any.
func (f *faultState) takeCorruption() (Corruption, bool) {
	if f.corruptionsDue.Load() == 0 {
		return 0, false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.corruptions) == 0 {
		return 0, false
	}
	k := f.corruptions[0]
	f.corruptions = f.corruptions[1:]
	f.corruptionsDue.Add(-1)
	return k, true
}

// SetNeverReady makes the device stay in RESET after the next reset (and
// now, if it is not READY yet) when v is true; false lets it become READY.
func (d *Device) SetNeverReady(v bool) {
	d.regMu.Lock()
	d.neverReady = v
	d.regMu.Unlock()
	if v {
		d.stats.faultsInjected.Add(1)
	}
	d.kickControl()
}

// InjectSysErr puts the device in SYS_ERR now: MHISTATUS shows SYS_ERR,
// transfers stop, STATE_CHANGE(SYS_ERR) is posted on event ring 0 and the
// BHI INTVEC vector is raised. The host recovers with MHICTRL.RESET.
func (d *Device) InjectSysErr() { d.enterSysErr(true) }

// DropInterrupts makes the device swallow the next n interrupts it raises.
func (d *Device) DropInterrupts(n int) {
	if n > 0 {
		d.faults.droppedInterrupts.Add(int64(n))
	}
}

// CorruptNextEvent damages the next transfer completion event the device
// posts (on any channel) in the way k says. Calls queue up: each applies
// to one event.
func (d *Device) CorruptNextEvent(k Corruption) error {
	if _, ok := corruptionNames[k]; !ok {
		return fmt.Errorf("ep: %w: unknown corruption %d", wire.ErrConfig, int(k))
	}
	d.faults.mu.Lock()
	d.faults.corruptions = append(d.faults.corruptions, k)
	d.faults.corruptionsDue.Add(1)
	d.faults.mu.Unlock()
	return nil
}

// corruptTransferEvent applies the next queued corruption to a transfer
// event about to be posted for a TRE in ring.
func (d *Device) corruptTransferEvent(ev *wire.Element, opt *eventOptions, ring ringGeometry, treLen uint32) {
	k, ok := d.faults.takeCorruption()
	if !ok {
		return
	}
	switch k {
	case CorruptEventPointer:
		ev.Ptr = ring.end()
	case CorruptChannelID:
		ev.Dword1 = uint32(d.unknownChannel())<<24 | ev.Dword1&0x00FFFFFF
	case CorruptCompletionCode:
		ev.Dword0 = uint32(BogusCompletionCode)<<24 | ev.Dword0&0x00FFFFFF
	case CorruptLength:
		ev.Dword0 = ev.Dword0&0xFF000000 | min(treLen+1, wire.MaxTRELength)
	case CorruptEventRP:
		opt.corruptRP = true
	}
	d.stats.faultsInjected.Add(1)
	d.log.Debug("mhi-ep: event corrupted (fault)", "kind", k, "event", *ev)
}

// unknownChannel returns a channel id the device does not offer: the
// highest unused number below MaxChannels, or 0xFF when all are used.
func (d *Device) unknownChannel() uint8 {
	for n := d.cfg.MHI.MaxChannels - 1; n >= 0; n-- {
		if d.channels[n] == nil {
			return uint8(n)
		}
	}
	return 0xFF
}
