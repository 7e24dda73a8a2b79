package hostile

import (
	"fmt"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/gomhi/gomhi/mhi"
	"github.com/gomhi/gomhi/mhi/wire"
)

// Poison is the byte the quarantine fills freed buffers with.
const Poison = 0xA5

// Op is the kind of one Record of a Transport's log.
type Op uint8

// Operations the log records.
const (
	OpRead      Op = iota + 1 // register read (Off, Value as the host saw it)
	OpWrite                   // register write (Off, Value as the host wrote it)
	OpReset                   // Transport.Reset (function-level reset)
	OpAlloc                   // DMA allocation (IOVA, Size)
	OpFree                    // DMA free (IOVA, Size)
	OpInterrupt               // interrupt delivered to the host (Vector)
)

var opNames = map[Op]string{OpRead: "read", OpWrite: "write", OpReset: "reset", OpAlloc: "alloc", OpFree: "free", OpInterrupt: "interrupt"}

// String returns the operation's name.
func (o Op) String() string {
	if n, ok := opNames[o]; ok {
		return n
	}
	return fmt.Sprintf("Op(%d)", uint8(o))
}

// Record is one operation of the host on the transport.
type Record struct {
	Seq    uint64
	Op     Op
	Off    uint32 // register offset (OpRead, OpWrite)
	Value  uint32 // register value (OpRead, OpWrite)
	Vector int    // OpInterrupt
	IOVA   uint64 // OpAlloc, OpFree
	Size   int    // OpAlloc, OpFree
}

// String renders the record for test failures.
func (r Record) String() string {
	switch r.Op {
	case OpRead, OpWrite:
		return fmt.Sprintf("#%d %s 0x%x = 0x%x", r.Seq, r.Op, r.Off, r.Value)
	case OpAlloc, OpFree:
		return fmt.Sprintf("#%d %s 0x%x+%d", r.Seq, r.Op, r.IOVA, r.Size)
	case OpInterrupt:
		return fmt.Sprintf("#%d interrupt %d", r.Seq, r.Vector)
	}
	return fmt.Sprintf("#%d %s", r.Seq, r.Op)
}

// Hooks let a test tamper with what passes between the host and the device.
// Every hook is optional and may be called from any goroutine.
type Hooks struct {
	// Read sees every register read after the device answered (v, err)
	// and returns what the host gets.
	Read func(off, v uint32, err error) (uint32, error)
	// Write sees every register write before the device does. It returns
	// whether to pass the write on, and the error the host gets.
	Write func(off, v uint32) (forward bool, err error)
	// Interrupt sees every interrupt the device raises and returns how many
	// times the host gets it: 0 drops it, more than 1 makes a storm.
	Interrupt func(vector int) int
	// Reset replaces the device's function-level reset when set.
	Reset func() error
	// Free is called when the host frees a buffer, before it is poisoned.
	Free func(b mhi.DMABuffer)
}

// Options configure a Transport.
type Options struct {
	// LogLimit is the number of most recent records the log keeps
	// (default 1<<16).
	LogLimit int
	// BARSize, when non-zero, is what BARSize reports instead of the
	// inner transport's.
	BARSize uint64
	// PassFree hands frees straight to the inner transport instead of the
	// quarantine, for an inner transport that tracks freed memory itself
	// (Device does).
	PassFree bool
}

// Transport wraps an mhi.Transport for attacks: hooks on registers,
// interrupts and resets, a log of what the host did, and a quarantine that
// keeps freed buffers poisoned and out of reuse until Drain.
type Transport struct {
	inner mhi.Transport
	opts  Options

	hooks atomic.Pointer[Hooks]
	seq   atomic.Uint64

	logMu sync.Mutex
	log   []Record // ring of the last LogLimit records
	logN  uint64   // records ever written

	regMu   sync.Mutex
	written map[uint32]uint32 // last value the host wrote at each offset

	memMu      sync.Mutex
	live       map[uint64]mhi.DMABuffer
	quarantine []mhi.DMABuffer
	violations []string

	hmu     sync.RWMutex
	handler func(int)
}

var _ mhi.Transport = (*Transport)(nil)

// Wrap returns a Transport passing everything to inner, with no hooks.
func Wrap(inner mhi.Transport, opts Options) *Transport {
	if opts.LogLimit <= 0 {
		opts.LogLimit = 1 << 16
	}
	t := &Transport{inner: inner, opts: opts, written: map[uint32]uint32{}, live: map[uint64]mhi.DMABuffer{}}
	t.hooks.Store(&Hooks{})
	return t
}

// Inner returns the wrapped transport.
func (t *Transport) Inner() mhi.Transport { return t.inner }

// SetHooks replaces the hooks; the zero Hooks passes everything through.
func (t *Transport) SetHooks(h Hooks) { t.hooks.Store(&h) }

func (t *Transport) record(r Record) {
	r.Seq = t.seq.Add(1)
	t.logMu.Lock()
	if len(t.log) < t.opts.LogLimit {
		t.log = append(t.log, r)
	} else {
		t.log[t.logN%uint64(t.opts.LogLimit)] = r
	}
	t.logN++
	t.logMu.Unlock()
}

// Log returns the recorded operations, oldest first (at most LogLimit).
func (t *Transport) Log() []Record {
	t.logMu.Lock()
	defer t.logMu.Unlock()
	out := make([]Record, 0, len(t.log))
	if len(t.log) < t.opts.LogLimit {
		return append(out, t.log...)
	}
	start := int(t.logN % uint64(t.opts.LogLimit))
	out = append(out, t.log[start:]...)
	return append(out, t.log[:start]...)
}

// ClearLog forgets the recorded operations.
func (t *Transport) ClearLog() {
	t.logMu.Lock()
	t.log, t.logN = t.log[:0], 0
	t.logMu.Unlock()
}

// Written returns the last value the host wrote at off.
func (t *Transport) Written(off uint32) (uint32, bool) {
	t.regMu.Lock()
	defer t.regMu.Unlock()
	v, ok := t.written[off]
	return v, ok
}

// Read32 implements mhi.Registers.
func (t *Transport) Read32(off uint32) (uint32, error) {
	v, err := t.inner.Read32(off)
	if h := t.hooks.Load(); h.Read != nil {
		v, err = h.Read(off, v, err)
	}
	t.record(Record{Op: OpRead, Off: off, Value: v})
	return v, err
}

// Write32 implements mhi.Registers.
func (t *Transport) Write32(off, v uint32) error {
	t.record(Record{Op: OpWrite, Off: off, Value: v})
	t.regMu.Lock()
	t.written[off] = v
	t.regMu.Unlock()
	forward, err := true, error(nil)
	if h := t.hooks.Load(); h.Write != nil {
		forward, err = h.Write(off, v)
	}
	if forward {
		if ierr := t.inner.Write32(off, v); err == nil {
			err = ierr
		}
	}
	return err
}

// Alloc implements mhi.DMAMemory.
func (t *Transport) Alloc(size, align int) (mhi.DMABuffer, error) {
	b, err := t.inner.Alloc(size, align)
	if err != nil {
		return b, err
	}
	t.memMu.Lock()
	t.live[b.IOVA] = b
	t.memMu.Unlock()
	t.record(Record{Op: OpAlloc, IOVA: b.IOVA, Size: len(b.Bytes)})
	return b, nil
}

// Free implements mhi.DMAMemory: the buffer is poisoned and quarantined,
// not returned to the inner transport until Drain.
func (t *Transport) Free(b mhi.DMABuffer) error {
	t.record(Record{Op: OpFree, IOVA: b.IOVA, Size: len(b.Bytes)})
	if h := t.hooks.Load(); h.Free != nil {
		h.Free(b)
	}
	t.memMu.Lock()
	defer t.memMu.Unlock()
	if _, ok := t.live[b.IOVA]; !ok {
		t.violations = append(t.violations, fmt.Sprintf("free of 0x%x+%d, which is not allocated (double free?)", b.IOVA, len(b.Bytes)))
		return fmt.Errorf("hostile: free of 0x%x, not allocated: %w", b.IOVA, wire.ErrBounds)
	}
	delete(t.live, b.IOVA)
	if t.opts.PassFree {
		return t.inner.Free(b)
	}
	for i := range b.Bytes {
		b.Bytes[i] = Poison
	}
	t.quarantine = append(t.quarantine, b)
	return nil
}

// Live returns the buffers allocated and not freed, by IOVA.
func (t *Transport) Live() []mhi.DMABuffer {
	t.memMu.Lock()
	defer t.memMu.Unlock()
	out := make([]mhi.DMABuffer, 0, len(t.live))
	for _, b := range t.live {
		out = append(out, b)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].IOVA < out[j].IOVA })
	return out
}

// Mem returns the host memory [iova, iova+n) of a live allocation, for a
// test that tampers with rings and contexts the way a device would.
func (t *Transport) Mem(iova uint64, n int) ([]byte, error) {
	t.memMu.Lock()
	defer t.memMu.Unlock()
	for _, b := range t.live {
		if iova >= b.IOVA && n >= 0 && iova-b.IOVA <= uint64(len(b.Bytes)) && uint64(n) <= uint64(len(b.Bytes))-(iova-b.IOVA) {
			off := int(iova - b.IOVA)
			return b.Bytes[off : off+n : off+n], nil
		}
	}
	return nil, fmt.Errorf("hostile: %d bytes at 0x%x are in no live allocation: %w", n, iova, wire.ErrBounds)
}

// checkQuarantineLocked records every quarantined buffer whose poison was
// changed.
func (t *Transport) checkQuarantineLocked() {
	for _, b := range t.quarantine {
		for i, c := range b.Bytes {
			if c != Poison {
				t.violations = append(t.violations, fmt.Sprintf("freed buffer 0x%x+%d written after free: byte %d is 0x%02x", b.IOVA, len(b.Bytes), i, c))
				for j := range b.Bytes { // poison again, to catch the next write
					b.Bytes[j] = Poison
				}
				break
			}
		}
	}
}

// Violations checks the quarantine and returns every use of freed memory
// and every bad free seen so far (nil when there is none).
func (t *Transport) Violations() []string {
	t.memMu.Lock()
	defer t.memMu.Unlock()
	t.checkQuarantineLocked()
	out := t.violations
	t.violations = nil
	return out
}

// Drain checks the quarantine (see Violations), then returns the
// quarantined buffers to the inner transport.
func (t *Transport) Drain() []string {
	v := t.Violations()
	t.memMu.Lock()
	q := t.quarantine
	t.quarantine = nil
	t.memMu.Unlock()
	for _, b := range q {
		_ = t.inner.Free(b)
	}
	return v
}

// Vectors implements mhi.Interrupts.
func (t *Transport) Vectors() int { return t.inner.Vectors() }

// SetInterruptHandler implements mhi.Interrupts. Like the transports of
// the project, it returns only once no call of the previous handler is
// running.
func (t *Transport) SetInterruptHandler(h func(int)) {
	if h != nil {
		t.inner.SetInterruptHandler(t.fromDevice)
	} else {
		t.inner.SetInterruptHandler(nil)
	}
	t.hmu.Lock()
	t.handler = h
	t.hmu.Unlock()
}

func (t *Transport) fromDevice(vector int) {
	n := 1
	if h := t.hooks.Load(); h.Interrupt != nil {
		n = h.Interrupt(vector)
	}
	for range n {
		t.Raise(vector)
	}
}

// Raise delivers an interrupt on vector to the host now, as the device
// would; nothing happens when no handler is installed.
func (t *Transport) Raise(vector int) {
	t.hmu.RLock()
	defer t.hmu.RUnlock()
	if t.handler != nil {
		t.record(Record{Op: OpInterrupt, Vector: vector})
		t.handler(vector)
	}
}

// Reset implements mhi.Transport.
func (t *Transport) Reset() error {
	t.record(Record{Op: OpReset})
	if h := t.hooks.Load(); h.Reset != nil {
		return h.Reset()
	}
	return t.inner.Reset()
}

// Close drains the quarantine and closes the inner transport.
func (t *Transport) Close() error {
	t.Drain()
	return t.inner.Close()
}

// BARSize reports Options.BARSize, or the inner transport's BAR size when
// it knows it (0 otherwise).
func (t *Transport) BARSize() uint64 {
	if t.opts.BARSize != 0 {
		return t.opts.BARSize
	}
	if s, ok := t.inner.(interface{ BARSize() uint64 }); ok {
		return s.BARSize()
	}
	return 0
}
