package mhinet

import (
	"errors"
	"fmt"
)

// MRU limits. The MRU is the size of every receive buffer the host posts on
// the downlink channel. The MHI protocol allows up to 65535 bytes in one
// element; below MinMRU a buffer would not hold even the headers of an
// aggregate plus a minimal packet.
const (
	DefaultMRU = 32768
	MinMRU     = 256
	MaxMRU     = 65535
)

// MTU limits, as Linux's mhi_net sets them.
const (
	DefaultMTU = 1500
	MinMTU     = 68
	MaxMTU     = 65535 - 28 // leaves room for the MBIM transmit header
)

// ErrInvalidMRU: an MRU outside [MinMRU, MaxMRU].
var ErrInvalidMRU = errors.New("mhinet: invalid MRU")

// ErrInvalidMTU: an MTU outside [MinMTU, MaxMTU].
var ErrInvalidMTU = errors.New("mhinet: invalid MTU")

// ValidateMRU checks an MRU value and names the valid range when it is wrong.
func ValidateMRU(n int) error {
	if n < MinMRU || n > MaxMRU {
		return fmt.Errorf("%w: %d bytes, valid range %d..%d", ErrInvalidMRU, n, MinMRU, MaxMRU)
	}
	return nil
}

// ValidateMTU checks an MTU value and names the valid range when it is wrong.
func ValidateMTU(n int) error {
	if n < MinMTU || n > MaxMTU {
		return fmt.Errorf("%w: %d bytes, valid range %d..%d", ErrInvalidMTU, n, MinMTU, MaxMTU)
	}
	return nil
}
