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
	var a dumpAssembler
	for i, m := range msgs {
		p, err := a.decode(i, m)
		if err != nil {
			return RAMDump{}, err
		}
		if err := a.add(i, p); err != nil {
			return RAMDump{}, err
		}
	}
	return a.finish()
}

// dumpAssembler is the state of decodeDumpReply across the messages of
// one answer.
type dumpAssembler struct {
	d          RAMDump
	haveSum    bool // the summary (message 0) has been accepted
	haveDigest bool // some message carried a well-sized digest
}

// dumpPart is what one GET_DUMP message carries besides the fields it
// sets in the dump directly: whether it is the summary, or a chunk's
// offset and data.
type dumpPart struct {
	summary, haveOff bool
	off              uint64
	data             []byte
}

// decode checks message i's command and decodes its attributes: the
// device name, size, digest, time and crash flag go into the dump, the
// rest into the returned part.
func (a *dumpAssembler) decode(i int, m genetlink.Message) (dumpPart, error) {
	var p dumpPart
	if m.Header.Command != CmdGetDump {
		return p, fmt.Errorf("reply message %d is %s, not %s", i, cmdName(m.Header.Command), cmdName(CmdGetDump))
	}
	ad, err := netlink.NewAttributeDecoder(m.Data)
	if err != nil {
		return p, fmt.Errorf("reply message %d: %w", i, err)
	}
	d := &a.d
	for ad.Next() {
		switch ad.Type() {
		case AttrDevName:
			d.Device = ad.String()
		case AttrDumpSize:
			p.summary = true
			d.Size = ad.Uint64()
		case AttrDumpSHA256:
			b := ad.Bytes()
			if len(b) != sha256.Size {
				return p, fmt.Errorf("reply message %d: %s of %d bytes, want %d", i, attrName(AttrDumpSHA256), len(b), sha256.Size)
			}
			copy(d.SHA256[:], b)
			a.haveDigest = true
		case AttrDumpTime:
			d.Time = time.Unix(0, int64(ad.Uint64()))
		case AttrDumpCrash:
			d.Crashed = true
		case AttrDumpOffset:
			p.off, p.haveOff = ad.Uint64(), true
		case AttrDumpData:
			p.data = ad.Bytes()
		}
	}
	if err := ad.Err(); err != nil {
		return p, fmt.Errorf("reply message %d: %w", i, err)
	}
	return p, nil
}

// add accepts message i's part: the summary only as message 0, with a
// digest and a size within MaxDumpSize; a chunk only after it, at the
// offset the previous chunks reached and within the announced size.
func (a *dumpAssembler) add(i int, p dumpPart) error {
	d := &a.d
	switch {
	case p.summary:
		if i != 0 {
			return fmt.Errorf("reply message %d is a second summary (%s)", i, attrName(AttrDumpSize))
		}
		if !a.haveDigest {
			return fmt.Errorf("the summary has no %s", attrName(AttrDumpSHA256))
		}
		if d.Size > MaxDumpSize {
			return fmt.Errorf("the summary announces %d bytes, more than the client's limit of %d", d.Size, MaxDumpSize)
		}
		a.haveSum = true
	case !a.haveSum:
		return errors.New("the first reply message is not the summary (no " + attrName(AttrDumpSize) + ")")
	case !p.haveOff || len(p.data) == 0:
		return fmt.Errorf("reply message %d: a chunk needs %s and a non-empty %s", i, attrName(AttrDumpOffset), attrName(AttrDumpData))
	case p.off != uint64(len(d.Data)):
		return fmt.Errorf("reply message %d: chunk at offset %d, expected %d: part of the dump is missing or repeated", i, p.off, len(d.Data))
	case uint64(len(p.data)) > d.Size-uint64(len(d.Data)):
		return fmt.Errorf("reply message %d: chunk of %d bytes at offset %d runs past the announced %d bytes", i, len(p.data), p.off, d.Size)
	default:
		d.Data = append(d.Data, p.data...)
		d.Chunks++
	}
	return nil
}

// finish checks that a summary came and that the chunks add up to the
// announced size and digest, and returns the dump.
func (a *dumpAssembler) finish() (RAMDump, error) {
	d := a.d
	if !a.haveSum {
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
