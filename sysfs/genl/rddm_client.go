package genl

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"time"

	"github.com/mdlayher/genetlink"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// ErrNoDump: the device has no RAM dump (ENOENT: it has not crashed into
// RDDM yet), or a forced crash gave none in time (ETIMEDOUT); the error's
// Message says which.
var ErrNoDump = errors.New("no RAM dump")

// MaxDumpSize is the largest dump the client accepts (1 GiB): a larger
// DUMP_SIZE is a protocol error, before anything is assembled.
const MaxDumpSize = 1 << 30

// dumpTransferTime is what the client allows for the transfer itself, on
// top of the server's wait for a forced crash.
const dumpTransferTime = 30 * time.Second

// DumpOptions configure Client.Dump.
type DumpOptions struct {
	// Crash makes the device crash into RDDM first (it must be in M0);
	// the server waits up to Wait for the dump the running controller
	// collects, which then recovers the device.
	Crash bool
	// Wait bounds the server's wait for a forced crash's dump (0:
	// DefaultDumpWait; at most MaxDumpWaitMs milliseconds).
	Wait time.Duration
}

// RAMDump is a device's RAM dump as GET_DUMP delivers it, reassembled
// from its chunks and checked against the server's size and SHA-256.
type RAMDump struct {
	Device string `json:"device"`
	// Data is the dump (Size bytes).
	Data []byte `json:"-"`
	Size uint64 `json:"bytes"`
	// SHA256 is the digest the server sent, which Data matches.
	SHA256 [sha256.Size]byte `json:"-"`
	// Time is when the host collected the dump.
	Time time.Time `json:"time"`
	// Crashed reports that this request forced the crash.
	Crashed bool `json:"crashed"`
	// Chunks is the number of chunk messages received.
	Chunks int `json:"chunks"`
}

// Dump fetches the device's last RAM dump; with opts.Crash it first makes
// the device crash into RDDM and waits for the new dump. It needs root or
// CAP_NET_ADMIN. The reply's chunks must cover the dump in order, each
// byte once, and match the server's size and SHA-256; anything else fails
// with ErrProtocol. No dump fails with ErrNoDump, RAM-dump collection
// turned off with ErrNotSupported, a device that cannot crash now with
// ErrBusy.
func (c *Client) Dump(dev string, opts DumpOptions) (RAMDump, error) {
	const op = "get-dump"
	ae := netlink.NewAttributeEncoder()
	ae.String(AttrDevName, dev)
	timeout := max(c.timeout, dumpTransferTime)
	if opts.Crash {
		ae.Flag(AttrDumpCrash, true)
		wait := opts.Wait
		if wait == 0 {
			wait = DefaultDumpWait
		}
		ms := wait.Milliseconds()
		if ms < 1 || ms > MaxDumpWaitMs {
			return RAMDump{}, &Error{Op: op, Device: dev, Port: c.port, Kind: ErrInvalid,
				Err: fmt.Errorf("%w: wait %v outside 1ms..%v", ErrInvalid, wait, MaxDumpWaitMs*time.Millisecond)}
		}
		ae.Uint32(AttrDumpWaitMs, uint32(ms))
		timeout += wait
	}
	b, err := ae.Encode()
	if err != nil {
		return RAMDump{}, &Error{Op: op, Device: dev, Port: c.port, Kind: ErrInvalid, Err: err}
	}
	msgs, err := c.exec(timeout, genetlink.Message{Header: genetlink.Header{Command: CmdGetDump, Version: FamilyVersion}, Data: b}, c.family.ID,
		netlink.Request|netlink.Dump)
	if err != nil {
		e := c.fail(op, dev, err)
		if e.Errno == unix.ENOENT || e.Errno == unix.ETIMEDOUT {
			e.Kind = ErrNoDump
		}
		return RAMDump{}, e
	}
	d, err := decodeDumpReply(msgs)
	if err != nil {
		return RAMDump{}, c.malformed(op, dev, err)
	}
	return d, nil
}

// decodeDumpReply reassembles a GET_DUMP answer: the summary first, then
// chunks whose offsets follow each other from 0 to the summary's size,
// then a digest check.
func decodeDumpReply(msgs []genetlink.Message) (RAMDump, error) {
	var (
		d          RAMDump
		haveSum    bool
		haveDigest bool
	)
	for i, m := range msgs {
		if m.Header.Command != CmdGetDump {
			return RAMDump{}, fmt.Errorf("reply message %d is %s, not %s", i, cmdName(m.Header.Command), cmdName(CmdGetDump))
		}
		ad, err := netlink.NewAttributeDecoder(m.Data)
		if err != nil {
			return RAMDump{}, fmt.Errorf("reply message %d: %w", i, err)
		}
		var (
			summary, haveOff bool
			off              uint64
			data             []byte
		)
		for ad.Next() {
			switch ad.Type() {
			case AttrDevName:
				d.Device = ad.String()
			case AttrDumpSize:
				summary = true
				d.Size = ad.Uint64()
			case AttrDumpSHA256:
				b := ad.Bytes()
				if len(b) != sha256.Size {
					return RAMDump{}, fmt.Errorf("reply message %d: %s of %d bytes, want %d", i, attrName(AttrDumpSHA256), len(b), sha256.Size)
				}
				copy(d.SHA256[:], b)
				haveDigest = true
			case AttrDumpTime:
				d.Time = time.Unix(0, int64(ad.Uint64()))
			case AttrDumpCrash:
				d.Crashed = true
			case AttrDumpOffset:
				off, haveOff = ad.Uint64(), true
			case AttrDumpData:
				data = ad.Bytes()
			}
		}
		if err := ad.Err(); err != nil {
			return RAMDump{}, fmt.Errorf("reply message %d: %w", i, err)
		}
		switch {
		case summary:
			if i != 0 {
				return RAMDump{}, fmt.Errorf("reply message %d is a second summary (%s)", i, attrName(AttrDumpSize))
			}
			if !haveDigest {
				return RAMDump{}, fmt.Errorf("the summary has no %s", attrName(AttrDumpSHA256))
			}
			if d.Size > MaxDumpSize {
				return RAMDump{}, fmt.Errorf("the summary announces %d bytes, more than the client's limit of %d", d.Size, MaxDumpSize)
			}
			haveSum = true
		case !haveSum:
			return RAMDump{}, errors.New("the first reply message is not the summary (no " + attrName(AttrDumpSize) + ")")
		case !haveOff || len(data) == 0:
			return RAMDump{}, fmt.Errorf("reply message %d: a chunk needs %s and a non-empty %s", i, attrName(AttrDumpOffset), attrName(AttrDumpData))
		case off != uint64(len(d.Data)):
			return RAMDump{}, fmt.Errorf("reply message %d: chunk at offset %d, expected %d: part of the dump is missing or repeated", i, off, len(d.Data))
		case uint64(len(data)) > d.Size-uint64(len(d.Data)):
			return RAMDump{}, fmt.Errorf("reply message %d: chunk of %d bytes at offset %d runs past the announced %d bytes", i, len(data), off, d.Size)
		default:
			d.Data = append(d.Data, data...)
			d.Chunks++
		}
	}
	if !haveSum {
		return RAMDump{}, errors.New("empty answer: no summary")
	}
	if uint64(len(d.Data)) != d.Size {
		return RAMDump{}, fmt.Errorf("dump incomplete: %d of the announced %d bytes arrived", len(d.Data), d.Size)
	}
	if sum := sha256.Sum256(d.Data); !bytes.Equal(sum[:], d.SHA256[:]) {
		return RAMDump{}, fmt.Errorf("dump digest mismatch: the %d bytes received have SHA-256 %x, the server announced %x", len(d.Data), sum, d.SHA256)
	}
	if d.Data == nil {
		d.Data = []byte{}
	}
	return d, nil
}
