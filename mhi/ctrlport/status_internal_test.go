package ctrlport

import (
	"errors"
	"fmt"
	"testing"

	"github.com/gomhi/gomhi/mhi/proto/mbim"
)

// TestUnlessStatus checks which answers MBIMSession takes as success: only
// a StatusError (wrapped or not) with the status named.
func TestUnlessStatus(t *testing.T) {
	notActive := &StatusError{Op: "CONNECT set", Status: mbim.StatusContextNotActivated}
	wrapped := fmt.Errorf("disconnect: %w", notActive)
	cases := []struct {
		name string
		err  error
		st   mbim.Status
		want error
	}{
		{"no error", nil, mbim.StatusContextNotActivated, nil},
		{"the status", notActive, mbim.StatusContextNotActivated, nil},
		{"the status, wrapped", wrapped, mbim.StatusContextNotActivated, nil},
		{"another status", notActive, mbim.StatusNoDeviceSupport, notActive},
		{"another error", ErrTimeout, mbim.StatusContextNotActivated, ErrTimeout},
	}
	for _, c := range cases {
		if got := unlessStatus(c.err, c.st); !errors.Is(got, c.want) || (got == nil) != (c.want == nil) {
			t.Errorf("%s: unlessStatus(%v, %v) = %v, want %v", c.name, c.err, c.st, got, c.want)
		}
	}
}
