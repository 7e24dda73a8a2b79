package ntb

import (
	"fmt"
	"math"

	"github.com/gomhi/gomhi/mhi/proto/framing"
)

// Layout selects where the Writer puts the NDP (of the first session).
type Layout uint8

const (
	// NDPAfter puts the NDP after the last datagram (the default). The
	// aggregate is as small as possible: NTH, datagrams, NDP.
	NDPAfter Layout = iota
	// NDPFirst puts the NDP right after the NTH and reserves room for
	// MaxDatagrams entries before the first datagram, as CDC-NCM senders and
	// the mhi_wwan_mbim uplink do. With MaxDatagrams equal to the number of
	// datagrams the reserve is exact; MaxDatagrams 1 with 4-byte datagram
	// alignment gives exactly the 28-byte mhi_wwan_mbim TX form. With
	// several sessions, the first session's NDP is the reserved one and
	// the others follow the datagrams.
	NDPFirst
)

// Config describes the aggregates a Writer builds. The zero value is an
// NTB16 with IPS NDPs (Add and Append use session 0's), at most 32
// datagrams aligned to 4 bytes, NDPs aligned to 4 bytes and placed after
// the datagrams.
type Config struct {
	NTB32         bool    // NTH32 and NDP32 (32-bit offsets) instead of NTH16 and NDP16
	Layout        Layout  // NDPAfter or NDPFirst
	Kind          NDPKind // NDP signature: IPS (default), DSS or NCM
	Session       uint8   // MBIM session id (byte 3 of an IPS/DSS signature) of Add and Append
	MaxDatagrams  int     // datagrams per aggregate, at most 16380 (NTB16) or 8188 (NTB32); 0 means 32
	DatagramAlign int     // power of two (1…4096) each datagram starts on; 0 means 4
	NDPAlign      int     // power of two (4…4096) the NDP starts on; 0 means 4
}

// MaxWriterNDPs is the most NDPs, hence distinct session ids, a Writer
// puts in one aggregate. A datagram for one more session is refused with
// framing.ErrLimit, like one datagram more than MaxDatagrams: finish the
// aggregate and add it to the next. The bound keeps the Writer's
// bookkeeping in fixed arrays (no allocation) and is well below the
// MaxNDPs chain a Parser follows.
const MaxWriterNDPs = 16

// layout is a validated Config with the derived sizes.
type layout struct {
	ntb32          bool
	first          bool
	max            int
	dgAlign        int
	ndpAlign       int
	kind           NDPKind
	session        uint8 // Config.Session
	nthLen         int
	ndpHdr, entLen int
	ndpMin         int
	ndpOff         int // NDPFirst: offset of the first NDP
	dataStart      int // offset the first datagram is placed after
	formatLimit    int // largest block the format can describe
}

func newLayout(c Config) (layout, error) {
	var l layout
	if c.NTB32 {
		l.nthLen, l.ndpHdr, l.entLen, l.ndpMin = NTH32Len, NDP32HeaderLen, NDP32EntryLen, NDP32MinLen
		l.formatLimit = maxBlock32
	} else {
		l.nthLen, l.ndpHdr, l.entLen, l.ndpMin = NTH16Len, NDP16HeaderLen, NDP16EntryLen, NDP16MinLen
		l.formatLimit = math.MaxUint16
	}
	l.ntb32 = c.NTB32
	switch c.Layout {
	case NDPAfter:
	case NDPFirst:
		l.first = true
	default:
		return l, fmt.Errorf("%w: layout %d", ErrBadConfig, c.Layout)
	}
	if c.Kind > NCM {
		return l, fmt.Errorf("%w: NDP kind %d", ErrBadConfig, c.Kind)
	}
	l.kind, l.session = c.Kind, c.Session
	l.max = c.MaxDatagrams
	if l.max == 0 {
		l.max = DefaultMaxDatagrams
	}
	if l.max < 1 || l.max > maxConfigDatagrams {
		return l, fmt.Errorf("%w: MaxDatagrams %d not in 1…%d", ErrBadConfig, c.MaxDatagrams, maxConfigDatagrams)
	}
	if n := l.ndpLen(l.max); n > math.MaxUint16 {
		return l, fmt.Errorf("%w: MaxDatagrams %d needs a %v NDP of %d bytes, more than wLength can hold",
			ErrBadConfig, l.max, variant(l.ntb32), n)
	}
	l.dgAlign = c.DatagramAlign
	if l.dgAlign == 0 {
		l.dgAlign = DefaultDatagramAlign
	}
	if !isPow2(l.dgAlign) || l.dgAlign > maxAlign {
		return l, fmt.Errorf("%w: DatagramAlign %d is not a power of two in 1…%d", ErrBadConfig, c.DatagramAlign, maxAlign)
	}
	l.ndpAlign = c.NDPAlign
	if l.ndpAlign == 0 {
		l.ndpAlign = DefaultNDPAlign
	}
	if !isPow2(l.ndpAlign) || l.ndpAlign < 4 || l.ndpAlign > maxAlign {
		return l, fmt.Errorf("%w: NDPAlign %d is not a power of two in 4…%d", ErrBadConfig, c.NDPAlign, maxAlign)
	}
	if l.first {
		l.ndpOff = alignUp(l.nthLen, l.ndpAlign)
		l.dataStart = l.ndpOff + l.ndpLen(l.max)
	} else {
		l.dataStart = l.nthLen
	}
	return l, nil
}

// ndpLen is the wLength of an NDP holding n datagram entries.
func (l *layout) ndpLen(n int) int {
	return max(l.ndpMin, l.ndpHdr+l.entLen*(n+1))
}

// padded is the room an NDP of n entries takes before the next NDP.
func (l *layout) padded(n int) int { return alignUp(l.ndpLen(n), l.ndpAlign) }

// inTail reports whether the NDP of slot i goes after the datagrams
// (all of them with NDPAfter; all but the first, reserved one with NDPFirst).
func (l *layout) inTail(i int) bool { return !l.first || i > 0 }

// key is the NDP a datagram of session sid belongs to: sid, except for
// NCM NDPs, which carry no session, so that every datagram shares one.
func (l *layout) key(sid uint8) uint8 {
	if l.kind == NCM {
		return 0
	}
	return sid
}

// limit is the usable part of a buffer of n bytes.
func (l *layout) limit(n int) int { return min(n, l.formatLimit) }

// tally is the arithmetic of one aggregate: its datagrams so far, the end
// of their data, and its NDPs in the order their sessions first appeared
// (slot i holds the datagrams of sids[i]). Writer, Size and Fit share it.
type tally struct {
	n    int // datagrams
	off  int // end of the last datagram (dataStart when empty)
	nndp int
	hint int // the slot of the last datagram added
	sids [MaxWriterNDPs]uint8
	cnt  [MaxWriterNDPs]int
	// padOthers is the room taken by the NDPs after the datagrams other
	// than the last NDP: the sum of their padded lengths.
	padOthers int
}

// reset empties the tally. The arrays keep stale values past nndp, which
// nothing reads: commit sets a new slot's count.
func (t *tally) reset(l *layout) {
	t.n, t.off, t.nndp, t.hint, t.padOthers = 0, l.dataStart, 0, 0, 0
}

// slot returns the NDP slot of session key k, or nndp when it has none yet.
func (t *tally) slot(k uint8) int {
	if t.nndp > 0 && t.sids[t.hint] == k {
		return t.hint
	}
	for i, s := range t.sids[:t.nndp] {
		if s == k {
			return i
		}
	}
	return t.nndp
}

// blockLen is the block length of an aggregate of k NDPs whose data ends
// at end, whose NDPs after the data take padOthers bytes before the last
// one, and whose last NDP holds last entries.
func (l *layout) blockLen(end, k, padOthers, last int) int {
	switch {
	case l.first && k <= 1:
		return end
	case k == 0: // no datagram: one empty NDP for Config.Session
		last = 0
	}
	return alignUp(end, l.ndpAlign) + padOthers + l.ndpLen(last)
}

// total is the block length of the aggregate as it stands.
func (t *tally) total(l *layout) int {
	last := 0
	if t.nndp > 0 {
		last = t.cnt[t.nndp-1]
	}
	return l.blockLen(t.off, t.nndp, t.padOthers, last)
}

// totalWith is the block length of the aggregate with its data ending at
// end and one datagram more in NDP slot (nndp: a new NDP, the last).
func (t *tally) totalWith(l *layout, slot, end int) int {
	k, pad := t.nndp, t.padOthers
	switch {
	case slot == k:
		if k > 0 && l.inTail(k-1) {
			pad += l.padded(t.cnt[k-1])
		}
		return l.blockLen(end, k+1, pad, 1)
	case slot == k-1:
		return l.blockLen(end, k, pad, t.cnt[slot]+1)
	case l.inTail(slot):
		pad += l.padded(t.cnt[slot]+1) - l.padded(t.cnt[slot])
	}
	return l.blockLen(end, k, pad, t.cnt[k-1])
}

// place works out where a datagram of n bytes for session key k goes: its
// start, its NDP slot and the block length after it, or the framing error
// that refuses it (the tally unchanged) in a block of at most limit bytes.
func (t *tally) place(l *layout, n int, k uint8, limit int) (start, slot int, err error) {
	switch {
	case n <= 0:
		return 0, 0, framing.ErrEmpty
	case t.n >= l.max:
		return 0, 0, framing.ErrLimit
	}
	slot = t.slot(k)
	if slot == MaxWriterNDPs {
		return 0, 0, framing.ErrLimit
	}
	if n > limit {
		return 0, 0, t.tooBig()
	}
	start = alignUp(t.off, l.dgAlign)
	if t.totalWith(l, slot, start+n) > limit {
		return 0, 0, t.tooBig()
	}
	return start, slot, nil
}

// tooBig is the verdict on a datagram that does not fit: too large for
// an empty aggregate, else full.
func (t *tally) tooBig() error {
	if t.n == 0 {
		return framing.ErrTooLarge
	}
	return framing.ErrFull
}

// commit records a datagram placed by place, ending at end.
func (t *tally) commit(l *layout, slot int, k uint8, end int) {
	switch {
	case slot == t.nndp:
		if t.nndp > 0 && l.inTail(t.nndp-1) {
			t.padOthers += l.padded(t.cnt[t.nndp-1])
		}
		t.sids[slot], t.cnt[slot] = k, 0
		t.nndp++
	case slot < t.nndp-1 && l.inTail(slot):
		t.padOthers += l.padded(t.cnt[slot]+1) - l.padded(t.cnt[slot])
	}
	t.cnt[slot]++
	t.n++
	t.off = end
	t.hint = slot
}

// Size returns the exact length of the aggregate a Writer with cfg builds
// from datagrams of the given lengths, in order, all for Config.Session.
// It fails with ErrBadConfig, framing.ErrEmpty for a zero length,
// framing.ErrLimit for more than MaxDatagrams lengths, or
// framing.ErrTooLarge when the aggregate exceeds what the format can
// describe (65535 bytes for NTB16).
func Size(cfg Config, lens []int) (int, error) { return SizeSessions(cfg, lens, nil) }

// SizeSessions is Size for datagrams of several sessions: lens[i] goes to
// the NDP of session id sids[i] (sids nil: Config.Session for all), one
// NDP per distinct id, as AddSession builds them. More than MaxWriterNDPs
// distinct ids fail with framing.ErrLimit; sids shorter than lens with
// ErrBadConfig.
func SizeSessions(cfg Config, lens []int, sids []uint8) (int, error) {
	l, err := newLayout(cfg)
	if err != nil {
		return 0, err
	}
	if sids != nil && len(sids) < len(lens) {
		return 0, fmt.Errorf("%w: %d session ids for %d datagrams", ErrBadConfig, len(sids), len(lens))
	}
	if len(lens) > l.max {
		return 0, fmt.Errorf("%w: %d datagrams, limit %d", framing.ErrLimit, len(lens), l.max)
	}
	var t tally
	t.reset(&l)
	for i, n := range lens {
		k := l.key(sessionAt(&l, sids, i))
		start, slot, err := t.place(&l, n, k, l.formatLimit)
		switch {
		case err == framing.ErrEmpty:
			return 0, fmt.Errorf("%w: datagram %d has length %d", framing.ErrEmpty, i, n)
		case err == framing.ErrLimit:
			return 0, fmt.Errorf("%w: datagram %d needs NDP %d, limit %d", framing.ErrLimit, i, slot+1, MaxWriterNDPs)
		case err != nil:
			return 0, fmt.Errorf("%w: aggregate with datagram %d (%d bytes) exceeds the %v limit %d",
				framing.ErrTooLarge, i, n, variant(l.ntb32), l.formatLimit)
		}
		t.commit(&l, slot, k, start+n)
	}
	return t.total(&l), nil
}

// sessionAt is the session id of datagram i: sids[i], or Config.Session.
func sessionAt(l *layout, sids []uint8, i int) uint8 {
	if sids == nil {
		return l.session
	}
	return sids[i]
}

// Fit returns how many of the datagrams with the given lengths, taken in
// order, a Writer with cfg can put into one aggregate in a buffer of bufLen
// bytes, and the length of that aggregate. It stops at the first length
// that does not fit, at MaxDatagrams, and at a length ≤ 0. It does not
// allocate unless cfg is invalid. If not even an empty aggregate fits, it
// returns 0, 0 and ErrShortBuffer.
func Fit(cfg Config, bufLen int, lens []int) (n, size int, err error) {
	return FitSessions(cfg, bufLen, lens, nil)
}

// FitSessions is Fit for datagrams of several sessions, lens[i] for
// session id sids[i] (sids nil: Config.Session for all; sids shorter than
// lens: ErrBadConfig). It also stops at a datagram that would need NDP
// number MaxWriterNDPs+1.
func FitSessions(cfg Config, bufLen int, lens []int, sids []uint8) (n, size int, err error) {
	l, err := newLayout(cfg)
	if err != nil {
		return 0, 0, err
	}
	if sids != nil && len(sids) < len(lens) {
		return 0, 0, fmt.Errorf("%w: %d session ids for %d datagrams", ErrBadConfig, len(sids), len(lens))
	}
	limit := l.limit(bufLen)
	var t tally
	t.reset(&l)
	size = t.total(&l)
	if size > limit {
		return 0, 0, ErrShortBuffer
	}
	for i, dl := range lens {
		k := l.key(sessionAt(&l, sids, i))
		start, slot, err := t.place(&l, dl, k, limit)
		if err != nil {
			break
		}
		t.commit(&l, slot, k, start+dl)
	}
	return t.n, t.total(&l), nil
}

// Writer builds one NTB at a time in a caller-owned buffer. The zero value
// is ready for Reset. A Writer keeps the wSequence counter across
// aggregates and increments it on every Finish.
//
// An aggregate holds one NDP per session id: Add and Append put datagrams
// in Config.Session's, AddSession and AppendSession in the given
// session's. The NDPs are chained by wNextNdpIndex in the order their
// sessions first appear, each listing its datagrams in the order they were
// added; at most MaxWriterNDPs of them. An aggregate of one session costs
// what a single-NDP writer does: the NDP slots of the datagrams are kept
// only from the moment a second session appears.
type Writer struct {
	l    layout
	buf  []byte // the usable part of the caller's buffer
	t    tally
	ents []entry
	// slots[i] is the NDP slot of ents[i] while the aggregate has more
	// than one NDP (len(slots) == len(ents)); empty while it has one.
	slots []uint8
	seq   uint16
	open  bool
	size  int // length returned by the last Finish
}

// entry is a datagram of the open aggregate: where it is.
type entry struct{ idx, n int }

var _ framing.Writer = (*Writer)(nil)

// Reset starts a new aggregate in buf with the settings in cfg. Bytes of
// buf beyond the returned aggregate length are never written. NTB16 uses at
// most the first 65535 bytes of buf. Reset fails with ErrBadConfig or, if
// buf cannot hold an empty aggregate, ErrShortBuffer.
func (w *Writer) Reset(buf []byte, cfg Config) error {
	w.open = false
	w.size = 0
	w.t.n, w.t.nndp = 0, 0
	w.ents = w.ents[:0]
	w.slots = w.slots[:0]
	l, err := newLayout(cfg)
	if err != nil {
		return err
	}
	w.l = l
	w.t.reset(&w.l)
	limit := l.limit(len(buf))
	if e := w.t.total(&w.l); e > limit {
		return fmt.Errorf("%w: %d bytes, an empty %v aggregate needs %d", ErrShortBuffer, len(buf), variant(l.ntb32), e)
	}
	w.buf = buf[:limit]
	w.open = true
	return nil
}

// SetSequence sets the wSequence the next Finish writes.
func (w *Writer) SetSequence(seq uint16) { w.seq = seq }

// Sequence returns the wSequence the next Finish writes.
func (w *Writer) Sequence() uint16 { return w.seq }

// Count returns the number of datagrams in the open aggregate, of all
// sessions.
func (w *Writer) Count() int { return w.t.n }

// NDPs returns the number of NDPs (distinct sessions) in the open
// aggregate; Finish writes at least one.
func (w *Writer) NDPs() int { return w.t.nndp }

// Len returns the length the open aggregate would have if finished now.
func (w *Writer) Len() int {
	if !w.open {
		return w.size
	}
	return w.t.total(&w.l)
}

// Fits reports whether a datagram of n bytes for Config.Session can still
// be added.
func (w *Writer) Fits(n int) bool { return w.FitsSession(n, w.l.session) }

// FitsSession reports whether a datagram of n bytes for session id sid can
// still be added, counting the NDP a session new to the aggregate needs.
func (w *Writer) FitsSession(n int, sid uint8) bool {
	if !w.open {
		return false
	}
	_, _, err := w.t.place(&w.l, n, w.l.key(sid), len(w.buf))
	return err == nil
}

// Add copies one datagram of Config.Session into the aggregate, or fails
// as [framing.Writer] says (framing.ErrLimit: the aggregate holds
// MaxDatagrams datagrams). Add does not allocate once the Writer has seen
// MaxDatagrams datagrams in an earlier aggregate.
func (w *Writer) Add(d []byte) error { return w.AddSession(d, w.l.session) }

// AddSession copies one datagram of session id sid (byte 3 of its NDP's
// signature) into the aggregate, in that session's NDP. It fails as Add
// does; framing.ErrLimit also when sid would be the aggregate's
// MaxWriterNDPs+1-th session.
func (w *Writer) AddSession(d []byte, sid uint8) error {
	b, err := w.AppendSession(len(d), sid)
	if err != nil {
		return err
	}
	copy(b, d)
	return nil
}

// Append adds a datagram of n bytes of Config.Session to the aggregate
// without writing it and returns the n bytes of the buffer it occupies,
// for the caller to fill in place before Finish (their content is
// whatever the buffer held). It fails as Add does, leaving the aggregate
// unchanged.
func (w *Writer) Append(n int) ([]byte, error) { return w.AppendSession(n, w.l.session) }

// AppendSession is Append for a datagram of session id sid, in that
// session's NDP; it fails as AddSession does.
func (w *Writer) AppendSession(n int, sid uint8) ([]byte, error) {
	if !w.open {
		return nil, framing.ErrNotOpen
	}
	k := w.l.key(sid)
	t, l := &w.t, &w.l
	if t.nndp > 1 {
		if b, ok := w.appendKnown(n, k); ok {
			return b, nil
		}
		return w.appendSlow(n, k)
	}
	// The fast path while the aggregate has at most one NDP: a datagram
	// that fits, for that NDP's session (or the first).
	if (t.nndp == 1 && t.sids[0] != k) || n <= 0 || n > len(w.buf) || t.n >= l.max {
		return w.appendSlow(n, k)
	}
	start := alignUp(t.off, l.dgAlign)
	end := start + n
	total := end // NDPFirst: the reserved NDP
	if !l.first {
		// An NDP of one entry or more has no slack.
		total = alignUp(end, l.ndpAlign) + l.ndpHdr + l.entLen*(t.n+2)
	}
	if total > len(w.buf) {
		return w.appendSlow(n, k)
	}
	clear(w.buf[t.off:start])
	if t.nndp == 0 {
		t.sids[0], t.cnt[0], t.nndp = k, 0, 1
	}
	t.cnt[0]++
	t.n++
	t.off = end
	w.ents = append(w.ents, entry{start, n})
	return w.buf[start:end:end], nil
}

// appendSlow is AppendSession when its fast paths do not apply: a new
// NDP, or a datagram that may be refused.
func (w *Writer) appendSlow(n int, k uint8) ([]byte, error) {
	start, slot, err := w.t.place(&w.l, n, k, len(w.buf))
	if err != nil {
		return nil, err
	}
	end := start + n
	clear(w.buf[w.t.off:start])
	w.t.commit(&w.l, slot, k, end)
	if w.t.nndp > 1 {
		// Entries added while there was one NDP are all in slot 0.
		for len(w.slots) < len(w.ents) {
			w.slots = append(w.slots, 0)
		}
		w.slots = append(w.slots, uint8(slot))
	}
	w.ents = append(w.ents, entry{start, n})
	return w.buf[start:end:end], nil
}

// appendKnown is AppendSession's fast path with several NDPs: a datagram
// that fits, for a session that has its NDP already. ok is false when
// the slow path must decide.
func (w *Writer) appendKnown(n int, k uint8) ([]byte, bool) {
	t, l := &w.t, &w.l
	last := t.nndp - 1
	if n <= 0 || n > len(w.buf) || t.n >= l.max {
		return nil, false
	}
	slot := last
	if t.sids[last] != k {
		if slot = t.slot(k); slot == t.nndp {
			return nil, false
		}
	}
	start := alignUp(t.off, l.dgAlign)
	end := start + n
	// blockLen, knowing that an NDP of one entry or more has no slack:
	// ndpLen(c) = ndpHdr + entLen×(c+1) for c ≥ 1.
	pad, lastCnt := t.padOthers, t.cnt[last]
	switch {
	case slot == last:
		lastCnt++
	case l.inTail(slot):
		pad += l.padded(t.cnt[slot]+1) - l.padded(t.cnt[slot])
	}
	if alignUp(end, l.ndpAlign)+pad+l.ndpHdr+l.entLen*(lastCnt+1) > len(w.buf) {
		return nil, false
	}
	clear(w.buf[t.off:start])
	t.padOthers = pad
	t.cnt[slot]++
	t.n++
	t.off = end
	t.hint = slot
	w.slots = append(w.slots, uint8(slot))
	w.ents = append(w.ents, entry{start, n})
	return w.buf[start:end:end], true
}

// Finish writes the NTH and the NDPs, closes the aggregate and returns its
// length: the aggregate is buf[:n]. An aggregate without datagrams is still
// a valid NTB with one empty NDP for Config.Session (check Count first to
// avoid sending it). Calling Finish again returns the same length without
// changing anything.
func (w *Writer) Finish() (n int) {
	if !w.open {
		return w.size
	}
	var total int
	if w.t.nndp <= 1 {
		total = w.finishOne()
	} else {
		total = w.finishMany()
	}
	w.seq++
	w.open = false
	w.size = total
	return total
}

// finishOne writes the NTH and the one NDP of an aggregate of at most
// one session and returns the block length.
func (w *Writer) finishOne() int {
	l, t := &w.l, &w.t
	sid := l.key(l.session)
	if t.nndp == 1 {
		sid = t.sids[0]
	}
	var ndpOff, total int
	if l.first {
		ndpOff, total = l.ndpOff, t.off
		clear(w.buf[l.nthLen:ndpOff])
	} else {
		ndpOff = alignUp(t.off, l.ndpAlign)
		total = ndpOff + l.ndpLen(t.n)
		clear(w.buf[t.off:ndpOff])
	}
	p := ndpOff + l.ndpHdr
	for _, e := range w.ents {
		w.putEntry(p, e.idx, e.n)
		p += l.entLen
	}
	if l.first {
		clear(w.buf[p:l.dataStart]) // the terminator and any unused reserved entries
	} else {
		clear(w.buf[p:total])
	}
	w.putNDPHeader(ndpOff, NDPSignature(l.ntb32, l.kind, sid), l.ndpLen(t.n), 0)
	w.putNTH(total, ndpOff)
	return total
}

// finishMany writes the NTH and the NDPs of an aggregate of several
// sessions and returns the block length.
func (w *Writer) finishMany() int {
	l, t := &w.l, &w.t
	total := t.total(l)
	// The NDPs' offsets, and where each one's next entry goes.
	var ndpOff, pos [MaxWriterNDPs]int
	p := alignUp(t.off, l.ndpAlign) // the NDPs after the datagrams
	clear(w.buf[t.off:p])
	for i := range t.nndp {
		if !l.inTail(i) {
			ndpOff[i] = l.ndpOff
			continue
		}
		ndpOff[i] = p
		p += l.ndpLen(t.cnt[i])
		if i < t.nndp-1 {
			next := alignUp(p, l.ndpAlign)
			clear(w.buf[p:next])
			p = next
		}
	}
	if l.first {
		clear(w.buf[l.nthLen:l.ndpOff])
	}
	for i := range t.nndp {
		pos[i] = ndpOff[i] + l.ndpHdr
	}
	for i, e := range w.ents {
		s := w.slots[i]
		w.putEntry(pos[s], e.idx, e.n)
		pos[s] += l.entLen
	}
	for i := range t.nndp {
		end := ndpOff[i] + l.ndpLen(t.cnt[i])
		if !l.inTail(i) {
			end = l.dataStart // the terminator and any unused reserved entries
		}
		clear(w.buf[pos[i]:end])
		next := 0
		if i < t.nndp-1 {
			next = ndpOff[i+1]
		}
		w.putNDPHeader(ndpOff[i], NDPSignature(l.ntb32, l.kind, t.sids[i]), l.ndpLen(t.cnt[i]), next)
	}
	w.putNTH(total, ndpOff[0])
	return total
}

// putNTH writes the NTH of a block of total bytes whose first NDP is at ndp.
func (w *Writer) putNTH(total, ndp int) {
	b := w.buf
	if !w.l.ntb32 {
		le.PutUint32(b[0:], SigNTH16)
		le.PutUint16(b[4:], NTH16Len)
		le.PutUint16(b[6:], w.seq)
		le.PutUint16(b[8:], uint16(total))
		le.PutUint16(b[10:], uint16(ndp))
		return
	}
	le.PutUint32(b[0:], SigNTH32)
	le.PutUint16(b[4:], NTH32Len)
	le.PutUint16(b[6:], w.seq)
	le.PutUint32(b[8:], uint32(total))
	le.PutUint32(b[12:], uint32(ndp))
}

// putNDPHeader writes the header of the NDP at off.
func (w *Writer) putNDPHeader(off int, sig uint32, length, next int) {
	b := w.buf[off:]
	le.PutUint32(b[0:], sig)
	le.PutUint16(b[4:], uint16(length))
	if !w.l.ntb32 {
		le.PutUint16(b[6:], uint16(next))
		return
	}
	le.PutUint16(b[6:], 0)
	le.PutUint32(b[8:], uint32(next))
	le.PutUint32(b[12:], 0)
}

func (w *Writer) putEntry(p, idx, n int) {
	if !w.l.ntb32 {
		le.PutUint16(w.buf[p:], uint16(idx))
		le.PutUint16(w.buf[p+2:], uint16(n))
		return
	}
	le.PutUint32(w.buf[p:], uint32(idx))
	le.PutUint32(w.buf[p+4:], uint32(n))
}

// PutTXHeader writes into hdr[:TXHeaderLen] the 28-byte header Linux's
// mhi_wwan_mbim puts in front of an uplink IP packet of ipLen bytes: an
// NTH16 (wSequence seq, wBlockLength 28+ipLen, wNdpIndex 12) and an IPS NDP16
// for session sid at offset 12 with one entry {28, ipLen} and a terminator.
// The packet itself belongs at offset 28.
func PutTXHeader(hdr []byte, ipLen int, sid uint8, seq uint16) error {
	if len(hdr) < TXHeaderLen {
		return ErrShortBuffer
	}
	if ipLen <= 0 {
		return framing.ErrEmpty
	}
	if ipLen > math.MaxUint16-TXHeaderLen {
		return framing.ErrTooLarge
	}
	le.PutUint32(hdr[0:], SigNTH16)
	le.PutUint16(hdr[4:], NTH16Len)
	le.PutUint16(hdr[6:], seq)
	le.PutUint16(hdr[8:], uint16(TXHeaderLen+ipLen))
	le.PutUint16(hdr[10:], NTH16Len)
	le.PutUint32(hdr[12:], SigIPS16|uint32(sid)<<24)
	le.PutUint16(hdr[16:], NDP16MinLen)
	le.PutUint16(hdr[18:], 0)
	le.PutUint16(hdr[20:], TXHeaderLen)
	le.PutUint16(hdr[22:], uint16(ipLen))
	le.PutUint32(hdr[24:], 0)
	return nil
}

// EncodeTX writes the single-datagram uplink NTB for ip into dst (header at
// 0, packet at TXHeaderLen) and returns its length. It fails with
// ErrShortBuffer if dst is smaller than TXHeaderLen+len(ip),
// framing.ErrEmpty or framing.ErrTooLarge.
func EncodeTX(dst, ip []byte, sid uint8, seq uint16) (int, error) {
	n := TXHeaderLen + len(ip)
	if len(dst) < n {
		return 0, ErrShortBuffer
	}
	if err := PutTXHeader(dst, len(ip), sid, seq); err != nil {
		return 0, err
	}
	copy(dst[TXHeaderLen:], ip)
	return n, nil
}
