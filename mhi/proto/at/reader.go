package at

import "errors"

// DefaultMaxLine is the longest command line a LineReader keeps by default
// (V.250 asks for at least 40 characters; modems commonly take a few
// hundred).
const DefaultMaxLine = 1024

// ErrLineTooLong: a line longer than the reader's limit; its characters
// were discarded up to its terminator.
var ErrLineTooLong = errors.New("at: command line too long")

// Status says what LineReader.Scan found.
type Status uint8

// Scan statuses.
const (
	// NeedMore: every byte was consumed and no line is complete.
	NeedMore Status = iota
	// Line: a complete command line (without its terminator) is returned.
	Line
	// Repeat: "A/" was typed; the previous line should be executed again.
	Repeat
	// TooLong: a line exceeded the limit and was discarded (ErrLineTooLong).
	TooLong
)

// LineReader gathers command lines from a terminal byte stream, the way a
// modem's command interpreter does: a line ends at CR (S3); LF alone also
// ends one (tolerated, for terminals and scripts that send LF), and an LF
// right after a CR is ignored; backspace (S5, 0x08) removes the last
// character; other control characters are ignored; "A/" is recognised as
// soon as the '/' arrives, without a CR; empty lines are skipped. Lines
// longer than the limit are discarded and reported once, at their end.
// The zero LineReader is not ready; use NewLineReader.
type LineReader struct {
	buf      []byte
	max      int
	overflow bool
}

// NewLineReader returns a reader keeping lines of up to max bytes
// (DefaultMaxLine if max <= 0). It allocates its buffer once.
func NewLineReader(max int) *LineReader {
	if max <= 0 {
		max = DefaultMaxLine
	}
	return &LineReader{buf: make([]byte, 0, max), max: max}
}

// Scan consumes bytes of p up to and including the end of the first
// complete line (or all of p) and returns how many it consumed and what it
// found. The returned line is valid until the next call. A caller loops
//
//	for len(p) > 0 {
//		n, line, st := r.Scan(p)
//		echo(p[:n]); p = p[n:]
//		...
//	}
func (r *LineReader) Scan(p []byte) (n int, line []byte, st Status) {
	for i, c := range p {
		switch {
		case c == '\r' || c == '\n':
			if r.overflow {
				r.overflow = false
				r.buf = r.buf[:0]
				return i + 1, nil, TooLong
			}
			if len(r.buf) == 0 {
				continue // an empty line, or the LF of a CR LF
			}
			line = r.buf
			r.buf = r.buf[:0]
			return i + 1, line, Line
		case c == 0x08 || c == 0x7F:
			if !r.overflow && len(r.buf) > 0 {
				r.buf = r.buf[:len(r.buf)-1]
			}
		case c < 0x20:
			// other control characters are ignored
		case r.overflow:
		case c == '/' && len(r.buf) == 1 && r.buf[0]|0x20 == 'a':
			r.buf = r.buf[:0]
			return i + 1, nil, Repeat
		case len(r.buf) == r.max:
			r.overflow = true
		default:
			r.buf = append(r.buf, c)
		}
	}
	return len(p), nil, NeedMore
}

// Pending returns the bytes of the line being gathered.
func (r *LineReader) Pending() []byte { return r.buf }

// Reset drops a partly gathered line (the terminal went away).
func (r *LineReader) Reset() {
	r.buf = r.buf[:0]
	r.overflow = false
}
