// Package transcript records what a mock modem (mhi/ep) observes of its
// host, one JSON object per line, and compares two such records.
//
// A Recorder is an ep.Observer: given to ep.Config.Observer it writes a
// record of every register read and write (by name), every context the
// device reads (its fields decoded), every ring element the host posted as
// the device reads it, every doorbell, every event the device posts, its
// state and EE changes and the interrupts it raises. Addresses are never
// written: a ring is named (ch100, er1, cmd), a pointer into it is a slot
// number, a buffer or context-array address is "addr" (or 0x0). Two hosts
// that allocate their memory differently therefore leave the same record
// when they program the device the same way.
//
// Diff compares two records (docs/FIDELITY.md, "gomhi's host against
// Linux's"): it splits them into phases (power-up, channel start, data,
// SYS_ERR, suspend, resume, shutdown), aligns the control records of each
// phase per stream, compares the data channels' records by their shape, and
// reports each difference with its kind, explained or not by a Rules file
// (docs/transcript-rules.yaml).
package transcript

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Kind is what a Record reports.
type Kind string

// The kinds of Record.
const (
	KindRegRead  Kind = "reg-read"  // Name: the register; fields: value
	KindRegWrite Kind = "reg-write" // Name: the register; fields: value
	KindContext  Kind = "context"   // Name: the ring; fields: the context's, decoded
	KindElement  Kind = "element"   // Name: the ring; fields: slot, type and the element's
	KindDoorbell Kind = "doorbell"  // Name: the ring; fields: slot (the wp), order
	KindEvent    Kind = "event"     // Name: the event ring; fields: slot, type and the event's
	KindState    Kind = "state"     // fields: state
	KindEE       Kind = "ee"        // fields: ee
	KindIRQ      Kind = "irq"       // fields: vector
	KindDMAMap   Kind = "dma-map"   // fields: size, flags (the transport's)
	KindDMAUnmap Kind = "dma-unmap" // fields: size, flags (the transport's)
)

// knownKinds are the kinds a transcript may hold.
var knownKinds = map[Kind]bool{
	KindRegRead: true, KindRegWrite: true, KindContext: true, KindElement: true, KindDoorbell: true,
	KindEvent: true, KindState: true, KindEE: true, KindIRQ: true, KindDMAMap: true, KindDMAUnmap: true,
}

// Record is one line of a transcript.
type Record struct {
	// Seq orders the records of one transcript: the order in which the
	// device observed them.
	Seq uint64 `json:"seq"`
	// TimeNS is the time since the recording began, in nanoseconds. It is
	// never compared.
	TimeNS int64 `json:"t_ns"`
	// Kind says what the record reports.
	Kind Kind `json:"kind"`
	// Name is the register or ring the record is about ("" for state,
	// EE and interrupt records).
	Name string `json:"name,omitempty"`
	// Fields are the record's values, each rendered as a string.
	Fields map[string]string `json:"fields,omitempty"`
}

// ErrMalformed is wrapped by the errors of Read for a transcript it cannot
// use.
var ErrMalformed = errors.New("transcript: malformed")

// String renders the record without its sequence number and time, in a
// stable order: what comparisons show.
func (r Record) String() string {
	var b strings.Builder
	b.WriteString(string(r.Kind))
	if r.Name != "" {
		b.WriteByte(' ')
		b.WriteString(r.Name)
	}
	b.WriteString(fieldString(r.Fields))
	return b.String()
}

// fieldString renders fields as " k=v" pairs in key order, leaving out
// those named in skip.
func fieldString(fields map[string]string, skip ...string) string {
	var b strings.Builder
	for _, k := range sortedKeys(fields) {
		if slices.Contains(skip, k) {
			continue
		}
		fmt.Fprintf(&b, " %s=%s", k, fields[k])
	}
	return b.String()
}

// sortedKeys returns the keys of m in order.
func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}
