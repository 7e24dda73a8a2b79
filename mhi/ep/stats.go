package ep

import (
	"sync/atomic"

	"github.com/gomhi/gomhi/mhi/wire"
)

// counters are the device's statistics, kept as atomics in the data path.
type counters struct {
	channelDoorbells      atomic.Uint64
	eventDoorbells        atomic.Uint64
	commandDoorbells      atomic.Uint64
	commands              atomic.Uint64
	commandErrors         atomic.Uint64
	eventsPosted          []atomic.Uint64
	interruptsRaised      atomic.Uint64
	interruptsModerated   atomic.Uint64
	interruptsDropped     atomic.Uint64
	ulTransfers           atomic.Uint64
	ulBytes               atomic.Uint64
	ulDiscarded           atomic.Uint64
	dlTransfers           atomic.Uint64
	dlBytes               atomic.Uint64
	badTREs               atomic.Uint64
	boundsViolations      atomic.Uint64
	dlDroppedOnReset      atomic.Uint64
	dlDroppedBytesOnReset atomic.Uint64
	dlPartialDropped      atomic.Uint64
	dlPartialDroppedBytes atomic.Uint64
	dlQueueWaits          atomic.Uint64
	badRegisterAccesses   atomic.Uint64
	eventRingFullWaits    atomic.Uint64
	eventsLostFull        atomic.Uint64
	dbModeEvents          atomic.Uint64
	faultsInjected        atomic.Uint64
	stateChanges          atomic.Uint64
	resets                atomic.Uint64
	imagesLoaded          atomic.Uint64
	imagesRefused         atomic.Uint64
	dumpsWritten          atomic.Uint64
	dumpsFailed           atomic.Uint64
	m3Entries             atomic.Uint64
	m3Refused             atomic.Uint64
	m3Exits               atomic.Uint64
}

// Stats is a snapshot of the device's counters.
type Stats struct {
	ChannelDoorbells      uint64   // channel doorbells latched (wake doorbell excluded)
	EventDoorbells        uint64   // event ring doorbells latched
	CommandDoorbells      uint64   // command ring doorbells latched
	Commands              uint64   // command elements executed
	CommandErrors         uint64   // commands completed with a code other than SUCCESS
	EventsPosted          []uint64 // events written, per event ring
	InterruptsRaised      uint64   // MSIs delivered to the Interrupter
	InterruptsModerated   uint64   // of those, raised by a moderation timer
	InterruptsDropped     uint64   // MSIs swallowed by DropInterrupts
	ULTransfers           uint64   // complete uplink transfers consumed
	ULBytes               uint64   // their bytes
	ULDiscarded           uint64   // uplink transfers no Function took
	DLTransfers           uint64   // downlink transfers written to the host
	DLBytes               uint64   // their bytes
	BadTREs               uint64   // TREs completed with BAD_TRE
	BoundsViolations      uint64   // host pointers or contexts the device could not use
	DLDroppedOnReset      uint64   // queued downlink transfers dropped by an MHI reset (or a reservation committed after one)
	DLDroppedBytesOnReset uint64   // their bytes
	DLPartialDropped      uint64   // downlink transfers dropped by RESET_CHAN after part of them reached host buffers
	DLPartialDroppedBytes uint64   // their whole length
	DLQueueWaits          uint64   // downlink reservations (Pipe.Send, Reserve) that waited for room in their channel's queue or for it to start
	BadRegisterAccesses   uint64   // unaligned, out-of-range, reserved or read-only accesses
	EventRingFullWaits    uint64   // events that had to wait for an event doorbell
	EventsLostFull        uint64   // events not posted because the ring was full in virtual time (Config.Clock), where nothing can wait
	DBModeEvents          uint64   // DB_MODE completions posted by burst channels
	FaultsInjected        uint64   // faults applied (corruptions, dropped MSIs, SYS_ERR, NeverReady)
	StateChanges          uint64   // MHI state changes
	Resets                uint64   // MHI and function-level resets performed
	ImagesLoaded          uint64   // boot images accepted over BHI and BHIe
	ImagesRefused         uint64   // boot images refused (size, digest, DMA, sequence)
	DumpsWritten          uint64   // RAM dumps delivered over BHIe
	DumpsFailed           uint64   // RAM dumps the host's vector table could not take
	M3Entries             uint64   // M0 -> M3 transitions (suspends)
	M3Refused             uint64   // M3 requests ignored by a device without M3 (Config.NoM3)
	M3Exits               uint64   // M3 -> M0 transitions (resumes)
}

// Stats returns a snapshot of the device's counters.
func (d *Device) Stats() Stats {
	c := &d.stats
	s := Stats{
		ChannelDoorbells:      c.channelDoorbells.Load(),
		EventDoorbells:        c.eventDoorbells.Load(),
		CommandDoorbells:      c.commandDoorbells.Load(),
		Commands:              c.commands.Load(),
		CommandErrors:         c.commandErrors.Load(),
		EventsPosted:          make([]uint64, len(c.eventsPosted)),
		InterruptsRaised:      c.interruptsRaised.Load(),
		InterruptsModerated:   c.interruptsModerated.Load(),
		InterruptsDropped:     c.interruptsDropped.Load(),
		ULTransfers:           c.ulTransfers.Load(),
		ULBytes:               c.ulBytes.Load(),
		ULDiscarded:           c.ulDiscarded.Load(),
		DLTransfers:           c.dlTransfers.Load(),
		DLBytes:               c.dlBytes.Load(),
		BadTREs:               c.badTREs.Load(),
		BoundsViolations:      c.boundsViolations.Load(),
		DLDroppedOnReset:      c.dlDroppedOnReset.Load(),
		DLDroppedBytesOnReset: c.dlDroppedBytesOnReset.Load(),
		DLPartialDropped:      c.dlPartialDropped.Load(),
		DLPartialDroppedBytes: c.dlPartialDroppedBytes.Load(),
		DLQueueWaits:          c.dlQueueWaits.Load(),
		BadRegisterAccesses:   c.badRegisterAccesses.Load(),
		EventRingFullWaits:    c.eventRingFullWaits.Load(),
		EventsLostFull:        c.eventsLostFull.Load(),
		DBModeEvents:          c.dbModeEvents.Load(),
		FaultsInjected:        c.faultsInjected.Load(),
		StateChanges:          c.stateChanges.Load(),
		Resets:                c.resets.Load(),
		ImagesLoaded:          c.imagesLoaded.Load(),
		ImagesRefused:         c.imagesRefused.Load(),
		DumpsWritten:          c.dumpsWritten.Load(),
		DumpsFailed:           c.dumpsFailed.Load(),
		M3Entries:             c.m3Entries.Load(),
		M3Refused:             c.m3Refused.Load(),
		M3Exits:               c.m3Exits.Load(),
	}
	for i := range c.eventsPosted {
		s.EventsPosted[i] = c.eventsPosted[i].Load()
	}
	return s
}

// ChannelStatus describes one channel for status displays.
type ChannelStatus struct {
	Num         uint8
	Name        string
	Dir         wire.Direction
	State       wire.ChannelState
	ReadPointer uint64 // IOVA of the next element the device reads; 0 when not started
	PendingDL   int    // downlink transfers queued, not yet written
	// HostBufferLen is the length of the last downlink buffer the host
	// posted that the device wrote into (the host's MRU); 0 before the
	// first downlink transfer or for an uplink channel.
	HostBufferLen uint32
}

// EventRingStatus describes one event ring the host set up.
type EventRingStatus struct {
	Index int
	// Loaded: the device has read the ring's context (its first event).
	Loaded bool
	// Vector is the MSI vector the context names (msivec), on which the
	// device raises the ring's interrupts; valid when Loaded.
	Vector int
}

// Status is a snapshot of the device's state for status displays.
type Status struct {
	State      wire.State
	EE         wire.ExecEnv
	Channels   []ChannelStatus   // in configuration order
	EventRings []EventRingStatus // of the current MHI session, by index
}

// Status returns the current MHI state, execution environment, per
// channel the device's read pointer and state, and per event ring of the
// current session the vector its context names.
func (d *Device) Status() Status {
	d.regMu.Lock()
	st := Status{State: d.state, EE: d.ee}
	sess := d.sess
	d.regMu.Unlock()
	if sess != nil {
		for _, er := range sess.events {
			er.mu.Lock()
			st.EventRings = append(st.EventRings, EventRingStatus{Index: er.index, Loaded: er.loaded, Vector: er.msiVec})
			er.mu.Unlock()
		}
	}
	st.Channels = make([]ChannelStatus, 0, len(d.chanList))
	for _, c := range d.chanList {
		c.mu.Lock()
		pending := c.qCount
		c.mu.Unlock()
		st.Channels = append(st.Channels, ChannelStatus{
			Num:         c.num,
			Name:        c.cfg.Name,
			Dir:         c.cfg.Dir,
			State:       c.channelState(),
			ReadPointer: c.rdIOVA.Load(),
			PendingDL:   pending,

			HostBufferLen: c.lastBufLen.Load(),
		})
	}
	return st
}
