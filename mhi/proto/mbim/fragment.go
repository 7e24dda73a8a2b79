package mbim

import (
	"fmt"
	"time"
)

// Defaults of a Reassembler.
const (
	// DefaultFragmentTimeout is libmbim's limit between two fragments
	// (MAX_TIME_BETWEEN_FRAGMENTS_MS).
	DefaultFragmentTimeout = 1250 * time.Millisecond
	// DefaultMaxMessage bounds a reassembled message.
	DefaultMaxMessage = 64 << 10
)

// FragmentCount returns the number of fragments a message of msgLen bytes
// needs when no transfer may exceed maxTransfer bytes (1 when it fits).
// maxTransfer below MinControlTransfer counts as MinControlTransfer.
func FragmentCount(msgLen, maxTransfer int) int {
	maxTransfer = max(maxTransfer, MinControlTransfer)
	if msgLen <= maxTransfer {
		return 1
	}
	per := maxTransfer - FragmentPrefixLen
	return (msgLen - FragmentPrefixLen + per - 1) / per
}

// AppendFragment appends fragment i (0-based) of msg, a whole COMMAND,
// COMMAND_DONE or INDICATE_STATUS, split for transfers of at most
// maxTransfer bytes (see FragmentCount). Every fragment repeats msg's type
// and TID, carries its own MessageLength and the fragment header, and the
// next piece of msg's bytes after its 20-byte prefix.
func AppendFragment(dst, msg []byte, maxTransfer, i int) ([]byte, error) {
	t, length, tid, err := PeekHeader(msg)
	if err != nil {
		return dst, err
	}
	if !t.Fragmentable() {
		return dst, fmt.Errorf("%w: %s cannot be fragmented", ErrWrongMessage, t)
	}
	if uint64(length) != uint64(len(msg)) || len(msg) < FragmentPrefixLen {
		return dst, fmt.Errorf("%w: %s TID %d: MessageLength %d, %d bytes", ErrBadLength, t, tid, length, len(msg))
	}
	maxTransfer = max(maxTransfer, MinControlTransfer)
	n := FragmentCount(len(msg), maxTransfer)
	if i < 0 || i >= n {
		return dst, fmt.Errorf("%w: fragment %d of %d", ErrBadFragment, i, n)
	}
	per := maxTransfer - FragmentPrefixLen
	body := msg[FragmentPrefixLen:]
	lo := i * per
	hi := min(lo+per, len(body))
	dst = appendHeader(dst, t, uint32(FragmentPrefixLen+hi-lo), tid)
	dst = le.AppendUint32(dst, uint32(n))
	dst = le.AppendUint32(dst, uint32(i))
	return append(dst, body[lo:hi]...), nil
}

// Reassembler joins the fragments of one fragmented message at a time, as
// a receiver does: fragments must arrive in order, each within Timeout of
// the one before. The zero value is ready to use.
type Reassembler struct {
	// MaxLen bounds a reassembled message (0: DefaultMaxMessage).
	MaxLen int
	// Timeout is the longest gap between two fragments (0:
	// DefaultFragmentTimeout).
	Timeout time.Duration

	buf     []byte
	pending bool
	typ     MessageType
	tid     uint32
	total   uint32
	next    uint32
	last    time.Time
}

// Result is what Reassembler.Add produced.
type Result struct {
	// Message is the complete message (TotalFragments 1, CurrentFragment
	// 0), or nil when more fragments are needed. For an unfragmented
	// message it is the message's own bytes; for a reassembled one it lives
	// in the Reassembler's buffer and is valid until the next Add or Reset.
	Message []byte
	// Abandoned is set when a pending message was given up before this
	// fragment was taken: a new message started before it was complete
	// (AbandonedErr wraps ErrFragmentOutOfSequence) or more than Timeout
	// passed since its last fragment (ErrFragmentTimeout). AbandonedTID
	// names it.
	Abandoned    bool
	AbandonedTID uint32
	AbandonedErr error
}

// Pending reports whether a fragmented message is incomplete, and its TID.
func (r *Reassembler) Pending() (tid uint32, ok bool) { return r.tid, r.pending }

// Reset drops any pending message.
func (r *Reassembler) Reset() { r.pending = false; r.buf = r.buf[:0] }

// Expire gives up a pending message whose next fragment is overdue at now
// and reports its TID (for a TimeoutFragment error).
func (r *Reassembler) Expire(now time.Time) (tid uint32, expired bool) {
	if r.pending && now.Sub(r.last) > r.timeout() {
		r.Reset()
		return r.tid, true
	}
	return 0, false
}

func (r *Reassembler) timeout() time.Duration {
	if r.Timeout > 0 {
		return r.Timeout
	}
	return DefaultFragmentTimeout
}

// Add takes m, a COMMAND, COMMAND_DONE or INDICATE_STATUS (or one fragment
// of one) parsed by ParseMessage, received at now. An error means m itself
// was refused (a continuation that does not follow the pending fragment,
// ErrFragmentOutOfSequence; a message growing beyond MaxLen, ErrTooLarge);
// any pending message it interrupted is given up as well, reported in the
// Result.
func (r *Reassembler) Add(m Message, now time.Time) (Result, error) {
	var res Result
	if !m.Type.Fragmentable() || m.TotalFragments == 0 || m.CurrentFragment >= m.TotalFragments {
		return res, fmt.Errorf("%w: %s TID %d fragment %d of %d", ErrBadFragment, m.Type, m.TID, m.CurrentFragment, m.TotalFragments)
	}
	if tid, ok := r.Expire(now); ok {
		res.Abandoned, res.AbandonedTID = true, tid
		res.AbandonedErr = fmt.Errorf("%w: TID %d: no fragment for more than %v", ErrFragmentTimeout, tid, r.timeout())
	}
	maxLen := r.MaxLen
	if maxLen <= 0 {
		maxLen = DefaultMaxMessage
	}
	if m.CurrentFragment == 0 {
		if r.pending {
			res.Abandoned, res.AbandonedTID = true, r.tid
			res.AbandonedErr = fmt.Errorf("%w: TID %d: fragment %d of %d expected, TID %d started", ErrFragmentOutOfSequence, r.tid, r.next, r.total, m.TID)
			r.Reset()
		}
		if m.TotalFragments == 1 {
			res.Message = m.Raw
			return res, nil
		}
		if len(m.Raw) > maxLen {
			return res, fmt.Errorf("%w: %s TID %d: first fragment of %d bytes, limit %d", ErrTooLarge, m.Type, m.TID, len(m.Raw), maxLen)
		}
		r.buf = append(r.buf[:0], m.Raw...)
		r.pending, r.typ, r.tid, r.total, r.next, r.last = true, m.Type, m.TID, m.TotalFragments, 1, now
		return res, nil
	}
	if !r.pending || m.TID != r.tid || m.Type != r.typ || m.TotalFragments != r.total || m.CurrentFragment != r.next {
		err := fmt.Errorf("%w: %s TID %d fragment %d of %d", ErrFragmentOutOfSequence, m.Type, m.TID, m.CurrentFragment, m.TotalFragments)
		if r.pending {
			res.Abandoned, res.AbandonedTID = true, r.tid
			res.AbandonedErr = fmt.Errorf("%w: TID %d: fragment %d of %d expected, got TID %d fragment %d of %d",
				ErrFragmentOutOfSequence, r.tid, r.next, r.total, m.TID, m.CurrentFragment, m.TotalFragments)
			r.Reset()
		}
		return res, err
	}
	if len(r.buf)+len(m.Payload) > maxLen {
		tid := r.tid
		r.Reset()
		return res, fmt.Errorf("%w: %s TID %d grows beyond %d bytes", ErrTooLarge, m.Type, tid, maxLen)
	}
	r.buf = append(r.buf, m.Payload...)
	r.next++
	r.last = now
	if r.next < r.total {
		return res, nil
	}
	r.pending = false
	le.PutUint32(r.buf[4:], uint32(len(r.buf)))
	le.PutUint32(r.buf[12:], 1)
	le.PutUint32(r.buf[16:], 0)
	res.Message = r.buf
	return res, nil
}
