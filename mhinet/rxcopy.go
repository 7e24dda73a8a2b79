package mhinet

import (
	"fmt"
	"strings"
)

// RxCopyMode says whether a received transfer is copied out of DMA memory
// into host-private memory before it is parsed and delivered
// (copy-on-receive), or delivered as views into the DMA buffer (zero-copy).
//
// The trade-off is the device's trust. A DMA buffer stays mapped for the
// device while the receiver holds packets cut from it: under VFIO or
// vfio-user a buggy or malicious modem can write it at any time, so with
// zero-copy the bytes of a Packet may change while the receiver owns it,
// and a checksum verified earlier (the TUN bridge's GRO verifies every
// merged segment, then hands the kernel a super-packet it will not verify
// again) may no longer hold by the time the bytes are used. With
// copy-on-receive the device can change nothing the host has read: the
// transfer is copied once, before the parser's first look (so lengths and
// offsets cannot change between their check and their use either), into a
// private buffer paired with the DMA buffer and allocated with the pool.
type RxCopyMode uint8

// Receive copy modes.
const (
	// RxCopyAuto copies unless the transport vouches for its device
	// (TrustedTransport): the in-process mock is trusted, VFIO and
	// vfio-user are not.
	RxCopyAuto RxCopyMode = iota
	// RxCopyOn always copies (the safe mode).
	RxCopyOn
	// RxCopyOff never copies (zero-copy): the device can change the bytes
	// of packets the receiver holds.
	RxCopyOff
)

var rxCopyNames = []string{"auto", "on", "off"}

// String returns "auto", "on" or "off".
func (m RxCopyMode) String() string {
	if int(m) < len(rxCopyNames) {
		return rxCopyNames[m]
	}
	return fmt.Sprintf("rxcopy(%d)", uint8(m))
}

// ParseRxCopyMode converts "auto", "on" or "off" (also "copy", "safe",
// "zerocopy") to a RxCopyMode.
func ParseRxCopyMode(s string) (RxCopyMode, error) {
	switch strings.ToLower(s) {
	case "auto", "":
		return RxCopyAuto, nil
	case "on", "copy", "safe", "true":
		return RxCopyOn, nil
	case "off", "zerocopy", "zero-copy", "false":
		return RxCopyOff, nil
	}
	return 0, fmt.Errorf("mhinet: unknown receive copy mode %q (auto, on, off)", s)
}

// TrustedTransport is implemented by transports that can say whether their
// device is trusted not to write host memory it does not own. The
// in-process mock (mhi/inproc) is the project's own code in the host's
// process and reports true; a transport without the method (VFIO,
// vfio-user) is not trusted.
type TrustedTransport interface {
	DeviceTrusted() bool
}

// resolveRxCopy turns the configured mode into copy or not for a device on
// transport t (the controller's transport).
func resolveRxCopy(m RxCopyMode, t any) bool {
	switch m {
	case RxCopyOn:
		return true
	case RxCopyOff:
		return false
	}
	tt, ok := t.(TrustedTransport)
	return !ok || !tt.DeviceTrusted()
}
