package main

import (
	"errors"
	"flag"
	"fmt"
	"slices"
	"time"

	"github.com/gomhi/gomhi/mhi/proto/mbim"
)

// subscribeCIDs is the number of CIDs in the large DEVICE_SERVICE_
// SUBSCRIBE_LIST the probe sends: 4 880 bytes each way, more than a page
// and more than libmbim's 4096-byte MaxControlTransfer.
const subscribeCIDs = 1200

// probeService is a service UUID no modem implements: the large
// subscribe list names it, so that no indication follows from it.
var probeService = mbim.UUID{0x67, 0x6f, 0x6d, 0x68, 0x69, 0x2d, 0x70, 0x72, 0x6f, 0x62, 0x65, 0x00, 0x00, 0x00, 0x00, 0x01}

// mbimClient runs MBIM transactions over a node: one write per message,
// fragments of the answer reassembled from one read each.
type mbimClient struct {
	tid   uint32
	reasm mbim.Reassembler
	// indications counts INDICATE_STATUS messages read (none expected).
	indications int
}

// transact sends msg and returns the answer to it (reassembled) and the
// number of fragments it came in. The answer's bytes are valid until the
// next read.
func (c *mbimClient) transact(n *node, msg []byte) (mbim.Message, int, error) {
	t, _, tid, err := mbim.PeekHeader(msg)
	if err != nil {
		return mbim.Message{}, 0, err
	}
	if err := n.write(msg); err != nil {
		return mbim.Message{}, 0, err
	}
	frags := 0
	for {
		b, err := n.read()
		if err != nil {
			return mbim.Message{}, frags, fmt.Errorf("waiting for the answer to %v (tid %d): %w", t, tid, err)
		}
		m, err := mbim.ParseMessage(b)
		if err != nil {
			return mbim.Message{}, frags, fmt.Errorf("answer to %v (tid %d), %d bytes: %w", t, tid, len(b), err)
		}
		if m.Type == mbim.TypeIndicateStatus {
			c.indications++
			continue
		}
		if m.TID != tid {
			return mbim.Message{}, frags, fmt.Errorf("answer %v with tid %d to %v tid %d", m.Type, m.TID, t, tid)
		}
		switch m.Type {
		case mbim.TypeFunctionError:
			return m, frags, fmt.Errorf("FUNCTION_ERROR %v to %v", m.ErrorCode(), t)
		case mbim.TypeOpenDone, mbim.TypeCloseDone:
			return m, 1, nil
		case mbim.TypeCommandDone:
			frags++
			res, err := c.reasm.Add(m, time.Now())
			if err != nil {
				return m, frags, fmt.Errorf("fragment %d/%d: %w", m.CurrentFragment, m.TotalFragments, err)
			}
			if res.Message == nil {
				continue
			}
			whole, err := mbim.ParseMessage(res.Message)
			return whole, frags, err
		default:
			return m, frags, fmt.Errorf("unexpected %v answering %v", m.Type, t)
		}
	}
}

// open sends OPEN with maxCtl and checks OPEN_DONE's status.
func (c *mbimClient) open(n *node, maxCtl uint32) error {
	c.tid++
	m, _, err := c.transact(n, mbim.AppendOpen(nil, c.tid, maxCtl))
	if err == nil && m.DoneStatus() != mbim.StatusSuccess {
		err = fmt.Errorf("OPEN_DONE status %v", m.DoneStatus())
	}
	return err
}

// command sends a BASIC_CONNECT command and returns the COMMAND_DONE,
// which must be Success.
func (c *mbimClient) command(n *node, cid uint32, ct mbim.CommandType, info []byte) (mbim.Message, int, error) {
	c.tid++
	m, frags, err := c.transact(n, mbim.AppendCommand(nil, c.tid, mbim.ServiceBasicConnect, cid, ct, info))
	if err != nil {
		return m, frags, err
	}
	if m.Status != mbim.StatusSuccess {
		return m, frags, fmt.Errorf("%s: status %v", mbim.CIDName(mbim.ServiceBasicConnect, cid), m.Status)
	}
	return m, frags, nil
}

// deviceCaps queries DEVICE_CAPS.
func (c *mbimClient) deviceCaps(n *node) (mbim.DeviceCaps, int, error) {
	m, frags, err := c.command(n, mbim.CIDDeviceCaps, mbim.CommandQuery, nil)
	if err != nil {
		return mbim.DeviceCaps{}, frags, err
	}
	caps, err := mbim.ParseDeviceCaps(m.Info)
	return caps, frags, err
}

// subscribe sets the large subscribe list and checks the echo.
func (c *mbimClient) subscribe(n *node) (sent, got, frags int, err error) {
	l := mbim.EventList{{Service: probeService}}
	for i := range subscribeCIDs {
		l[0].CIDs = append(l[0].CIDs, uint32(1000+i))
	}
	c.tid++
	msg := mbim.AppendCommand(nil, c.tid, mbim.ServiceBasicConnect, mbim.CIDDeviceServiceSubscribeList, mbim.CommandSet, l.AppendTo(nil))
	m, frags, err := c.transact(n, msg)
	if err != nil {
		return len(msg), 0, frags, err
	}
	if m.Status != mbim.StatusSuccess {
		return len(msg), len(m.Raw), frags, fmt.Errorf("DEVICE_SERVICE_SUBSCRIBE_LIST: status %v", m.Status)
	}
	echo, err := mbim.ParseEventList(m.Info)
	if err != nil {
		return len(msg), len(m.Raw), frags, err
	}
	if len(echo) != 1 || echo[0].Service != probeService || !slices.Equal(echo[0].CIDs, l[0].CIDs) {
		return len(msg), len(m.Raw), frags, errors.New("the echoed subscribe list differs from the one sent")
	}
	return len(msg), len(m.Raw), frags, nil
}

func capsText(c mbim.DeviceCaps) string {
	return fmt.Sprintf("device_id=%q firmware=%q hardware=%q", c.DeviceID, c.FirmwareInfo, c.HardwareInfo)
}

// runMBIM is the mbim command.
func runMBIM(args []string) bool {
	fs := flag.NewFlagSet("mbim", flag.ExitOnError)
	dev := fs.String("dev", "/dev/wwan0mbim0", "MBIM port")
	name := fs.String("name", "mbim", "prefix of the check names and CTRL kind")
	reopens := fs.Int("reopens", 3, "times the port is opened again after the first session")
	observe := fs.Bool("observe", false, "print MARK <name>-closed and <name>-opened around the first open")
	quick := fs.Bool("quick", false, "only OPEN, DEVICE_CAPS and CLOSE")
	_ = fs.Parse(args)
	t := &tally{kind: *name}
	defer t.print()
	p := *name + "-"
	var c mbimClient

	if *observe {
		mark(p + "closed")
	}
	n, err := openNode(*dev, t)
	if !check(p+"node", err, "open "+*dev) {
		return false
	}
	if *observe {
		// mhi_wwan_ctrl starts the channels and queues its receive
		// buffers; the test counts the doorbells between the marks.
		time.Sleep(300 * time.Millisecond)
		mark(p + "opened")
	}
	if !check(p+"open", c.open(n, 4096), "OPEN (MaxControlTransfer 4096) answered OPEN_DONE Success") {
		return false
	}
	caps, frags, err := c.deviceCaps(n)
	if !check(p+"device-caps", err, fmt.Sprintf("%s fragments=%d", capsText(caps), frags)) {
		return false
	}
	if *quick {
		err := c.closeFunction(n)
		n.close()
		return check(p+"close", err, "CLOSE answered CLOSE_DONE Success")
	}
	if !c.checkLarge(n, p) || !c.checkSmallest(n, p, caps) {
		return false
	}
	n.close()
	if !c.checkReopens(*dev, t, p, caps, *reopens) || !c.checkShared(*dev, t, p) {
		return false
	}

	n, err = openNode(*dev, t)
	if err == nil {
		err = c.closeFunction(n)
		n.close()
	}
	if err == nil && c.indications != 0 {
		err = fmt.Errorf("%d unexpected INDICATE_STATUS", c.indications)
	}
	return check(p+"close", err, "CLOSE answered CLOSE_DONE Success")
}

// closeFunction sends CLOSE on n and checks that CLOSE_DONE says Success.
func (c *mbimClient) closeFunction(n *node) error {
	c.tid++
	m, _, err := c.transact(n, mbim.AppendClose(nil, c.tid))
	if err == nil && m.DoneStatus() != mbim.StatusSuccess {
		err = fmt.Errorf("CLOSE_DONE status %v", m.DoneStatus())
	}
	return err
}

// checkLarge checks messages of more than a page each way: one write of
// 4 880 bytes; the answer in fragments of at most 4096 bytes, then, after
// an OPEN announcing 32768, in a single read.
func (c *mbimClient) checkLarge(n *node, p string) bool {
	sent, got, frags, err := c.subscribe(n)
	if err == nil && frags != 2 {
		err = fmt.Errorf("answer in %d fragments, want 2 of at most 4096 bytes", frags)
	}
	if !check(p+"large-fragmented", err, fmt.Sprintf("sent=%d got=%d fragments=%d", sent, got, frags)) {
		return false
	}
	if !check(p+"reopen-32k", c.open(n, 32768), "OPEN (MaxControlTransfer 32768) answered Success") {
		return false
	}
	sent, got, frags, err = c.subscribe(n)
	if err == nil && frags != 1 {
		err = fmt.Errorf("answer in %d fragments, want 1", frags)
	}
	return check(p+"large-single", err, fmt.Sprintf("sent=%d got=%d fragments=%d", sent, got, frags))
}

// checkSmallest checks the smallest MaxControlTransfer: DEVICE_CAPS (caps
// when unfragmented) comes in fragments of 64 bytes, one read each.
func (c *mbimClient) checkSmallest(n *node, p string, caps mbim.DeviceCaps) bool {
	if !check(p+"reopen-64", c.open(n, mbim.MinControlTransfer), "OPEN (MaxControlTransfer 64) answered Success") {
		return false
	}
	small, frags, err := c.deviceCaps(n)
	if err == nil && (frags < 2 || small != caps) {
		err = fmt.Errorf("%d fragments, caps %s (unfragmented: %s)", frags, capsText(small), capsText(caps))
	}
	return check(p+"fragmented", err, fmt.Sprintf("%s fragments=%d", capsText(small), frags))
}

// checkReopens checks that closing the node resets the channels while the
// function stays open, so DEVICE_CAPS (caps) works on each of reopens new
// sessions without a new OPEN.
func (c *mbimClient) checkReopens(dev string, t *tally, p string, caps mbim.DeviceCaps, reopens int) bool {
	return checkReopened(dev, t, p, reopens, fmt.Sprintf("%d more sessions, DEVICE_CAPS answered in each without a new OPEN", reopens), func(n *node) error {
		again, _, err := c.deviceCaps(n)
		if err == nil && again != caps {
			err = fmt.Errorf("caps %s", capsText(again))
		}
		return err
	})
}

// checkShared checks that two descriptors at once share one channel
// session: the channels stay started until the last one closes.
func (c *mbimClient) checkShared(dev string, t *tally, p string) bool {
	a, err := openNode(dev, t)
	if err != nil {
		return check(p+"shared", err, "")
	}
	b, err := openNode(dev, t)
	if err != nil {
		a.close()
		return check(p+"shared", err, "")
	}
	_, _, err = c.deviceCaps(b)
	a.close()
	if err == nil {
		_, _, err = c.deviceCaps(b)
	}
	b.close()
	return check(p+"shared", err, "two descriptors open, DEVICE_CAPS before and after the first closed")
}
