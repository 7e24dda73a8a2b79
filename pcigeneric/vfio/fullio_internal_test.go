package vfio

import (
	"errors"
	"io"
	"testing"

	"golang.org/x/sys/unix"
)

// TestFullIO drives fullIO with scripted pread/pwrite results: partial
// transfers continue at the right offset, EINTR is retried, no progress
// is the short error, any other error is returned.
func TestFullIO(t *testing.T) {
	type step struct {
		n   int
		err error
	}
	cases := []struct {
		name  string
		steps []step
		want  error
		offs  []int64 // offsets op is called at
	}{
		{"one call", []step{{8, nil}}, nil, []int64{100}},
		{"partial", []step{{3, nil}, {5, nil}}, nil, []int64{100, 103}},
		{"interrupted", []step{{2, nil}, {0, unix.EINTR}, {6, nil}}, nil, []int64{100, 102, 102}},
		{"no progress", []step{{4, nil}, {0, nil}}, io.ErrShortWrite, []int64{100, 104}},
		{"error", []step{{0, unix.EIO}}, unix.EIO, []int64{100}},
	}
	for _, c := range cases {
		var offs []int64
		i := 0
		op := func(fd int, b []byte, off int64) (int, error) {
			if fd != 7 {
				t.Fatalf("%s: fd %d", c.name, fd)
			}
			if i >= len(c.steps) {
				t.Fatalf("%s: call %d beyond the script", c.name, i)
			}
			offs = append(offs, off)
			s := c.steps[i]
			i++
			return s.n, s.err
		}
		err := fullIO(op, 7, 100, make([]byte, 8), io.ErrShortWrite)
		if !errors.Is(err, c.want) || (err == nil) != (c.want == nil) {
			t.Errorf("%s: err %v, want %v", c.name, err, c.want)
		}
		if len(offs) != len(c.offs) {
			t.Errorf("%s: called at %v, want %v", c.name, offs, c.offs)
			continue
		}
		for j := range offs {
			if offs[j] != c.offs[j] {
				t.Errorf("%s: called at %v, want %v", c.name, offs, c.offs)
				break
			}
		}
	}
}
