// Package pciaddr parses PCI addresses (domain:bus:device.function) as
// sysfs names them. It is shared by the discovery code and the VFIO
// transport, which cannot import each other's packages.
package pciaddr

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// ErrBadAddress: the string is not a PCI address.
var ErrBadAddress = errors.New("malformed PCI address")

var addrRE = regexp.MustCompile(`^(?:([0-9a-f]{4,8}):)?([0-9a-f]{2}):([01][0-9a-f])\.([0-7])$`)

// Valid reports whether s is a full, lower-case PCI address as sysfs
// names devices ("0000:01:00.0").
func Valid(s string) bool {
	m := addrRE.FindStringSubmatch(s)
	return m != nil && m[1] != ""
}

// Normalize checks a PCI address and returns it in sysfs form: lower case,
// with the domain ("01:00.0" becomes "0000:01:00.0").
func Normalize(s string) (string, error) {
	l := strings.ToLower(strings.TrimSpace(s))
	m := addrRE.FindStringSubmatch(l)
	if m == nil {
		return "", fmt.Errorf("%w: %q (want DDDD:BB:DD.F)", ErrBadAddress, s)
	}
	if m[1] == "" {
		l = "0000:" + l
	}
	return l, nil
}
