package main

import (
	"flag"
	"fmt"
	"strings"

	"github.com/gomhi/gomhi/mhi/proto/qmi"
)

// qmiClient runs QMI requests over a node: one QMUX frame per write, one
// per read.
type qmiClient struct {
	tid         uint16
	indications int
}

// request sends one request and returns the TLVs of its response, whose
// result must be success.
func (c *qmiClient) request(n *node, svc qmi.Service, client uint8, msg qmi.MessageID, tlvs func(b *qmi.Builder)) (qmi.TLVs, error) {
	c.tid++
	if svc == qmi.CTL {
		c.tid %= 256
		if c.tid == 0 {
			c.tid = 1
		}
	}
	var b qmi.Builder
	b.Start(nil, qmi.Header{QMUXFlags: qmi.QMUXFromHost, Service: svc, Client: client, Type: qmi.Request, TID: c.tid, Message: msg})
	if tlvs != nil {
		tlvs(&b)
	}
	frame, err := b.Finish()
	if err != nil {
		return nil, err
	}
	what := svc.String() + " " + svc.MessageName(msg)
	if err := n.write(frame); err != nil {
		return nil, err
	}
	for {
		raw, err := n.read()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		if fl, err := qmi.FrameLen(raw); err != nil || fl != len(raw) {
			return nil, fmt.Errorf("%s: a read of %d bytes is not one QMUX frame (frame length %d, %v)", what, len(raw), fl, err)
		}
		f, err := qmi.ParseFrame(raw)
		if err != nil {
			return nil, fmt.Errorf("%s: answer: %w", what, err)
		}
		if f.Type() == qmi.Indication {
			c.indications++
			continue
		}
		if f.Type() != qmi.Response || f.Service != svc || f.Client != client || f.TID != c.tid || f.Message != msg {
			return nil, fmt.Errorf("%s (client %d, tid %d): answered by %s %v client %d tid %d", what, client, c.tid, f.Name(), f.Type(), f.Client, f.TID)
		}
		res, err := f.TLVs.Result()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		if !res.OK() {
			return nil, fmt.Errorf("%s: %w", what, res.Err())
		}
		return append(qmi.TLVs(nil), f.TLVs...), nil
	}
}

// str returns the string TLV typ of a response.
func str(t qmi.TLVs, typ uint8) (string, error) {
	v, ok := t.Find(typ)
	if !ok {
		return "", fmt.Errorf("no TLV 0x%02x", typ)
	}
	return string(v), nil
}

// dmsIdentity asks DMS for the manufacturer, model, revision and IMEI.
func (c *qmiClient) dmsIdentity(n *node, cid uint8) (string, error) {
	var out []string
	for _, q := range []struct {
		key string
		msg qmi.MessageID
		tlv uint8
	}{
		{"manufacturer", qmi.DMSGetManufacturer, 0x01},
		{"model", qmi.DMSGetModel, 0x01},
		{"revision", qmi.DMSGetRevision, 0x01},
		{"imei", qmi.DMSGetIDs, 0x11},
	} {
		t, err := c.request(n, qmi.DMS, cid, q.msg, nil)
		if err != nil {
			return strings.Join(out, " "), err
		}
		s, err := str(t, q.tlv)
		if err != nil {
			return strings.Join(out, " "), fmt.Errorf("%s: %w", q.key, err)
		}
		out = append(out, fmt.Sprintf("%s=%q", q.key, s))
	}
	return strings.Join(out, " "), nil
}

// versionInfo asks CTL for its version info and returns the service list
// as "service major.minor" entries.
func (c *qmiClient) versionInfo(n *node) ([]string, error) {
	tl, err := c.request(n, qmi.CTL, 0, qmi.CTLGetVersionInfo, nil)
	var svcs []string
	if err == nil {
		v, ok := tl.Find(0x01)
		rd := qmi.NewReader(v)
		cnt := int(rd.U8())
		for range cnt {
			s, major, minor := qmi.Service(rd.U8()), rd.U16(), rd.U16()
			svcs = append(svcs, fmt.Sprintf("%v %d.%d", s, major, minor))
		}
		if err = rd.Finish(); !ok || err != nil {
			err = fmt.Errorf("service list TLV: present %v, %v", ok, err)
		}
	}
	return svcs, err
}

// allocateDMS asks CTL for a DMS client id.
func (c *qmiClient) allocateDMS(n *node) (uint8, error) {
	tl, err := c.request(n, qmi.CTL, 0, qmi.CTLAllocateCID, func(b *qmi.Builder) { b.TLVU8(0x01, uint8(qmi.DMS)) })
	var cid uint8
	if err == nil {
		v, _ := tl.Find(0x01)
		if len(v) != 2 || qmi.Service(v[0]) != qmi.DMS {
			err = fmt.Errorf("allocation TLV % x", v)
		} else {
			cid = v[1]
		}
	}
	return cid, err
}

// runQMI is the qmi command.
func runQMI(args []string) bool {
	fs := flag.NewFlagSet("qmi", flag.ExitOnError)
	dev := fs.String("dev", "/dev/wwan0qmi0", "QMI port")
	name := fs.String("name", "qmi", "prefix of the check names and CTRL kind")
	reopens := fs.Int("reopens", 3, "times the port is opened again after the first session")
	_ = fs.Parse(args)
	t := &tally{kind: *name}
	defer t.print()
	p := *name + "-"
	var c qmiClient

	n, err := openNode(*dev, t)
	if !check(p+"node", err, "open "+*dev) {
		return false
	}
	svcs, err := c.versionInfo(n)
	if !check(p+"version", err, fmt.Sprintf("services=%q", strings.Join(svcs, ","))) {
		n.close()
		return false
	}

	cid, err := c.allocateDMS(n)
	if !check(p+"allocate", err, fmt.Sprintf("DMS client id %d", cid)) {
		n.close()
		return false
	}
	ident, err := c.dmsIdentity(n, cid)
	n.close()
	if !check(p+"dms", err, ident) {
		return false
	}

	// Client ids survive the channel reset of a close, as on a modem.
	if !checkReopened(*dev, t, p, *reopens, fmt.Sprintf("%d more sessions, DMS client %d answered in each", *reopens, cid), func(n *node) error {
		again, err := c.dmsIdentity(n, cid)
		if err == nil && again != ident {
			err = fmt.Errorf("identity %s", again)
		}
		return err
	}) {
		return false
	}

	n, err = openNode(*dev, t)
	if err == nil {
		_, err = c.request(n, qmi.CTL, 0, qmi.CTLReleaseCID, func(b *qmi.Builder) { b.TLV(0x01, []byte{uint8(qmi.DMS), cid}) })
		n.close()
	}
	if err == nil && c.indications != 0 {
		err = fmt.Errorf("%d unexpected indications", c.indications)
	}
	return check(p+"release", err, fmt.Sprintf("DMS client %d released", cid))
}
