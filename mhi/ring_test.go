package mhi

import (
	"errors"
	"testing"

	"github.com/gomhi/gomhi/mhi/wire"
)

func TestRingIndexRejectsDevicePointers(t *testing.T) {
	r := ring{mem: DMABuffer{IOVA: 0x1000, Bytes: make([]byte, 64*wire.ElementSize)}, n: 64}
	for _, tc := range []struct {
		iova uint64
		ok   bool
	}{
		{0x1000, true}, {0x1000 + 63*16, true}, {0x1000 + 64*16, false},
		{0xFF0, false}, {0x1008, false}, {0, false}, {^uint64(0), false},
	} {
		_, err := r.index(tc.iova)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, wire.ErrBounds)) {
			t.Errorf("index(0x%x) err %v, want ok=%v", tc.iova, err, tc.ok)
		}
	}
}
