package mhinet

import (
	"fmt"
	"strings"
)

// Format is the framing of packets on the data channels.
type Format uint8

// Data channel formats.
const (
	// FormatRawIP: one IP packet per transfer, as Linux's mhi_net without rmnet.
	FormatRawIP Format = iota
	// FormatMBIM: MBIM NTB16 or NTB32 aggregates, as Linux's mhi_wwan_mbim.
	FormatMBIM
	// FormatQMAP: QMAP (rmnet MAP) aggregates, as mhi_net with rmnet.
	FormatQMAP
)

var formatNames = []string{"raw", "mbim", "qmap"}

// String returns "raw", "mbim" or "qmap".
func (f Format) String() string {
	if int(f) < len(formatNames) {
		return formatNames[f]
	}
	return fmt.Sprintf("format(%d)", uint8(f))
}

// ParseFormat converts a name ("raw", "mbim", "ntb16", "qmap") to a Format.
func ParseFormat(s string) (Format, error) {
	switch strings.ToLower(s) {
	case "raw", "rawip", "ip":
		return FormatRawIP, nil
	case "mbim", "ntb", "ntb16", "ntb32":
		return FormatMBIM, nil
	case "qmap", "rmnet":
		return FormatQMAP, nil
	}
	return 0, fmt.Errorf("mhinet: unknown format %q (raw, mbim, qmap)", s)
}
