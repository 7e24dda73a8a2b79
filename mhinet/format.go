package mhinet

import (
	"fmt"
	"strings"
)

// Format is the framing of packets on the data channels. Each format is
// defined, with its framing, in its own file (framing_raw.go,
// framing_ntb.go, framing_qmap.go); see framing.go.
type Format uint8

// formatSpec describes one format: its value, its names and how a device
// builds its framing.
type formatSpec struct {
	format Format
	// names are the names ParseFormat accepts, in lower case; the first
	// is the one String returns.
	names []string
	// newFraming builds the framing of a device with configuration cfg
	// (defaults applied) counting into c.
	newFraming func(cfg *Config, c *counters) framing
}

// formats holds the registered formats, indexed by Format.
var formats []*formatSpec

// registerFormat adds a format; each framing file registers its own in an
// init function. Two formats with one value are a programming error.
func registerFormat(s formatSpec) {
	for int(s.format) >= len(formats) {
		formats = append(formats, nil)
	}
	if formats[s.format] != nil {
		panic(fmt.Sprintf("mhinet: format %d registered twice (%q, %q)", s.format, formats[s.format].names[0], s.names[0]))
	}
	formats[s.format] = &s
}

// spec returns f's description, or nil for an unknown format.
func (f Format) spec() *formatSpec {
	if int(f) < len(formats) {
		return formats[f]
	}
	return nil
}

// String returns the format's name: "raw", "mbim" or "qmap".
func (f Format) String() string {
	if s := f.spec(); s != nil {
		return s.names[0]
	}
	return fmt.Sprintf("format(%d)", uint8(f))
}

// ParseFormat converts a name ("raw", "mbim", "ntb16", "qmap") to a Format.
func ParseFormat(s string) (Format, error) {
	name := strings.ToLower(s)
	var known []string
	for _, spec := range formats {
		if spec == nil {
			continue
		}
		for _, n := range spec.names {
			if n == name {
				return spec.format, nil
			}
		}
		known = append(known, spec.names[0])
	}
	return 0, fmt.Errorf("mhinet: unknown format %q (%s)", s, strings.Join(known, ", "))
}
