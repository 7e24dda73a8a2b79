// Package tun joins an mhinet.Device to the host's IP stack: a Linux TUN
// interface (Interface) configured through rtnetlink, an in-memory
// stand-in over Go channels (ChannelTUN) for tests without root, and a
// Bridge that moves packets between either of them and the device.
//
// Both TUN kinds implement Device, a batched packet interface in the style
// of wireguard-go's tun.Device: the caller owns every buffer, Read fills
// as many as are ready (at least one), Write sends a batch.
package tun

import (
	"errors"
	"fmt"
	"time"
)

// Device is a packet interface to a host IP stack: what the Bridge needs
// from a TUN. Interface and ChannelTUN implement it.
type Device interface {
	// Read waits for at least one packet and fills bufs[i] with it and
	// sizes[i] with its length, for as many packets as are available
	// without waiting (at most min(len(bufs), len(sizes))). It returns the
	// number of packets read; with an error, n packets were still read
	// before it and are valid.
	Read(bufs [][]byte, sizes []int) (n int, err error)
	// Write sends each packet of bufs to the stack, in order. It returns
	// the number written; on an error, bufs[n] is the packet that failed
	// and the ones after it were not tried.
	Write(bufs [][]byte) (n int, err error)
	// MTU returns the interface's MTU.
	MTU() int
	// SetMTU changes the interface's MTU.
	SetMTU(n int) error
	// SetReadDeadline bounds pending and future Reads; the zero time
	// removes the bound. A Read past it fails with os.ErrDeadlineExceeded.
	SetReadDeadline(t time.Time) error
	// Close releases the device; pending Reads return ErrClosed.
	Close() error
}

// ErrNoTUN: /dev/net/tun is missing, or the caller may not use it (needs
// root or CAP_NET_ADMIN, and the tun module).
var ErrNoTUN = errors.New("tun: TUN unavailable")

// ErrClosed: the device is closed.
var ErrClosed = errors.New("tun: device closed")

// ErrInvalidConfig: a name, MTU or address the interface cannot take.
var ErrInvalidConfig = errors.New("tun: invalid configuration")

// ErrNetlink: an rtnetlink request to configure the interface failed.
var ErrNetlink = errors.New("tun: rtnetlink request failed")

// ErrStillPresent: Close closed the TUN but the interface did not go away.
var ErrStillPresent = errors.New("tun: interface still present after close")

// ErrTooBig: a packet does not fit the buffer given to Read; it was
// dropped.
var ErrTooBig = errors.New("tun: packet larger than the read buffer")

// ErrOffload: the kernel refused IFF_VNET_HDR or the TUN offloads asked
// for with OpenOptions.GSO.
var ErrOffload = errors.New("tun: offloads refused")

// ErrNotAttached: Bridge.Run before Bridge.Attach.
var ErrNotAttached = errors.New("tun: bridge has no mhinet device attached")

// ErrRunning: Bridge.Run while another Run is active.
var ErrRunning = errors.New("tun: bridge already running")

// ErrSessionTaken: AddSession for a session that has a receiver already.
var ErrSessionTaken = errors.New("tun: session has a bridge already")

// MTU limits of a TUN interface.
const (
	// MinMTU is the smallest MTU (IPv4's minimum).
	MinMTU = 68
	// MaxMTU is the largest MTU the kernel takes for a TUN.
	MaxMTU = 65535
)

func validateMTU(n int) error {
	if n < MinMTU || n > MaxMTU {
		return fmt.Errorf("%w: MTU %d, valid range %d..%d", ErrInvalidConfig, n, MinMTU, MaxMTU)
	}
	return nil
}

// OpenOptions are the options of OpenWith. The zero value is Open's
// behaviour.
type OpenOptions struct {
	// GSO opens the TUN with IFF_VNET_HDR and the offloads of GSOOffloads
	// (USO only where the kernel has it, 6.2 on): reads return super-packets
	// and partial checksums behind a virtio_net_hdr, and writes must carry
	// one. The Bridge segments the super-packets in mhinet before the ring.
	GSO bool
}

// VnetHdrDevice is a Device whose packets carry a virtio_net_hdr in front
// (IFF_VNET_HDR): Interface and ChannelTUN implement it. A VnetHdrLen of 0
// means bare packets.
type VnetHdrDevice interface {
	Device
	// VnetHdrLen is the length of the header in front of every packet read
	// and written (0: none).
	VnetHdrLen() int
}

// OffloadDevice is a Device that tells which TUN offloads its kernel
// accepted (Interface and ChannelTUN implement it). With OffloadUSO4 or
// OffloadUSO6 the Bridge also merges downlink UDP datagrams into UDP_L4
// super-packets: the kernels that accept USO (6.2 on) take such frames.
type OffloadDevice interface {
	Device
	// Offloads returns the offloads accepted (0 for bare packets).
	Offloads() Offloads
}

// Offloads is a set of TUN offload flags (TUNSETOFFLOAD's TUN_F_* bits).
type Offloads uint

// TUN offload flags.
const (
	// OffloadCsum (TUN_F_CSUM): packets may carry a partial checksum.
	OffloadCsum Offloads = 0x01
	// OffloadTSO4 (TUN_F_TSO4): TCP over IPv4 super-packets.
	OffloadTSO4 Offloads = 0x02
	// OffloadTSO6 (TUN_F_TSO6): TCP over IPv6 super-packets.
	OffloadTSO6 Offloads = 0x04
	// OffloadUSO4 (TUN_F_USO4): UDP segmentation over IPv4 (kernel 6.2 on).
	OffloadUSO4 Offloads = 0x20
	// OffloadUSO6 (TUN_F_USO6): UDP segmentation over IPv6 (kernel 6.2 on).
	OffloadUSO6 Offloads = 0x40
)

// GSOOffloads are the offloads OpenOptions.GSO asks for.
const GSOOffloads = OffloadCsum | OffloadTSO4 | OffloadTSO6 | OffloadUSO4 | OffloadUSO6

// String lists the flags by their kernel names, e.g. "csum|tso4|tso6".
func (o Offloads) String() string {
	if o == 0 {
		return "none"
	}
	names := []struct {
		f Offloads
		n string
	}{{OffloadCsum, "csum"}, {OffloadTSO4, "tso4"}, {OffloadTSO6, "tso6"}, {OffloadUSO4, "uso4"}, {OffloadUSO6, "uso6"}}
	s := ""
	for _, n := range names {
		if o&n.f != 0 {
			if s != "" {
				s += "|"
			}
			s += n.n
			o &^= n.f
		}
	}
	if o != 0 {
		if s != "" {
			s += "|"
		}
		s += fmt.Sprintf("%#x", uint(o))
	}
	return s
}
