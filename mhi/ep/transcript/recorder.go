package transcript

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/gomhi/gomhi/mhi/ep"
	"github.com/gomhi/gomhi/mhi/wire"
)

// geometry is a ring as its context gave it: base and element count.
type geometry struct {
	base, n uint64
}

// slot renders ptr as a slot number of the ring: "null" for 0, "outside"
// for a pointer that is not an element of the ring.
func (g geometry) slot(ptr uint64) string {
	switch {
	case ptr == 0:
		return "null"
	case ptr < g.base || ptr >= g.base+g.n*wire.ElementSize || (ptr-g.base)%wire.ElementSize != 0:
		return "outside"
	}
	return strconv.FormatUint((ptr-g.base)/wire.ElementSize, 10)
}

// pendingDoorbell is a doorbell record whose ring the recorder does not
// know yet, and the value to resolve once it does.
type pendingDoorbell struct {
	rec   Record
	value uint64
}

// doorbellHalf is what the recorder keeps of a doorbell's high half.
type doorbellHalf struct {
	hi      uint32
	written bool // since the last low half
}

// Recorder writes a transcript of what a device observes: it is the
// ep.Observer to give to ep.Config.Observer. It is safe for concurrent use;
// Close flushes it.
type Recorder struct {
	// mu guards everything below. The device observes with its locks
	// held: mu is taken last, and nothing is taken under it.
	//
	// lockorder: ep.Device.regMu → Recorder.mu
	mu     sync.Mutex
	w      *bufio.Writer
	closer io.Closer // the file Create opened, or nil
	start  time.Time
	seq    uint64
	err    error // the first write error
	closed bool

	rings   map[string]geometry          // by ring name, learnt from contexts
	next    map[string]uint64            // the next slot the device reads in a ring
	halves  map[uint32]*doorbellHalf     // by doorbell offset (its low half)
	pending map[string][]pendingDoorbell // doorbells waiting for their ring's context
	lineBuf []byte
}

// New returns a Recorder writing to w.
func New(w io.Writer) *Recorder {
	return &Recorder{
		w: bufio.NewWriter(w), start: time.Now(),
		rings: map[string]geometry{}, next: map[string]uint64{},
		halves: map[uint32]*doorbellHalf{}, pending: map[string][]pendingDoorbell{},
	}
}

// Create returns a Recorder writing to a new file at path (truncated if it
// exists); Close closes the file.
func Create(path string) (*Recorder, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("transcript: %w", err)
	}
	r := New(f)
	r.closer = f
	return r, nil
}

// Close writes what is still pending (doorbells of rings whose context the
// device never read, with slot "?"), flushes the transcript and closes the
// file Create opened. Observations after Close are dropped. It returns the
// first error the recorder met.
func (r *Recorder) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return r.err
	}
	r.flushPendingLocked()
	r.closed = true
	if err := r.w.Flush(); err != nil && r.err == nil {
		r.err = fmt.Errorf("transcript: %w", err)
	}
	if r.closer != nil {
		if err := r.closer.Close(); err != nil && r.err == nil {
			r.err = fmt.Errorf("transcript: %w", err)
		}
	}
	return r.err
}

// Observe records o (ep.Observer).
func (r *Recorder) Observe(o ep.Observation) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	switch o.Kind {
	case ep.ObserveRegisterRead:
		r.emitLocked(r.newLocked(KindRegRead, ep.RegisterName(o.Offset), "value", registerValue(o.Offset, uint32(o.Value))))
	case ep.ObserveRegisterWrite:
		r.registerWriteLocked(o.Offset, uint32(o.Value))
	case ep.ObserveContext:
		r.contextLocked(o)
	case ep.ObserveElement:
		r.elementLocked(o)
	case ep.ObserveEvent:
		r.eventLocked(o)
	case ep.ObserveState:
		st := wire.State(o.Value)
		if st == wire.StateReset {
			// The rings are forgotten: the next session's come with
			// their contexts again.
			r.flushPendingLocked()
			clear(r.rings)
			clear(r.next)
		}
		r.emitLocked(r.newLocked(KindState, "", "state", st.String()))
	case ep.ObserveEE:
		r.emitLocked(r.newLocked(KindEE, "", "ee", wire.ExecEnv(o.Value).String()))
	case ep.ObserveInterrupt:
		r.emitLocked(r.newLocked(KindIRQ, "", "vector", strconv.FormatUint(o.Value, 10)))
	case ep.ObserveDMAMap:
		r.emitLocked(r.newLocked(KindDMAMap, "", "size", hex(o.Value), "flags", hex(uint64(o.Flags))))
	case ep.ObserveDMAUnmap:
		r.emitLocked(r.newLocked(KindDMAUnmap, "", "size", hex(o.Value), "flags", hex(uint64(o.Flags))))
	}
}

// newLocked starts a record with the next sequence number and the given
// field pairs.
func (r *Recorder) newLocked(kind Kind, name string, kv ...string) Record {
	r.seq++
	rec := Record{Seq: r.seq, TimeNS: time.Since(r.start).Nanoseconds(), Kind: kind, Name: name,
		Fields: make(map[string]string, len(kv)/2+4)}
	for i := 0; i+1 < len(kv); i += 2 {
		rec.Fields[kv[i]] = kv[i+1]
	}
	return rec
}

// emitLocked writes rec as one line.
func (r *Recorder) emitLocked(rec Record) {
	if r.err != nil {
		return
	}
	b, err := json.Marshal(rec)
	if err == nil {
		r.lineBuf = append(append(r.lineBuf[:0], b...), '\n')
		_, err = r.w.Write(r.lineBuf)
	}
	if err != nil {
		r.err = fmt.Errorf("transcript: %w", err)
	}
}

// flushPendingLocked writes the doorbells still waiting for their ring,
// with slot "?".
func (r *Recorder) flushPendingLocked() {
	for _, ring := range sortedKeys(r.pending) {
		for _, p := range r.pending[ring] {
			p.rec.Fields["slot"] = "?"
			r.emitLocked(p.rec)
		}
	}
	clear(r.pending)
}

// ringName names the ring of an observation.
func ringName(kind ep.RingKind, index int) string {
	switch kind {
	case ep.RingChannel:
		return "ch" + strconv.Itoa(index)
	case ep.RingEvent:
		return "er" + strconv.Itoa(index)
	case ep.RingCommand:
		return "cmd"
	}
	return "ring?"
}
