package genl

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/gomhi/gomhi/sysfs"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// This file holds the server's command handlers for the device commands
// (nlctrl GETFAMILY, GET_DEVICE, SET_DEVICE, GET_STATS, DUMP_CHANNELS) and
// the dispatch to them; the session commands' handlers are in
// handlers_session.go.

func (s *Server) dispatch(port uint32, cred *unix.Ucred, msg []byte, req *Request) {
	r := &reply{s: s, port: port, req: req}
	var err error
	if req.Ctrl() {
		err = s.getFamily(r)
	} else {
		switch req.Command {
		case CmdGetDevice:
			err = s.getDevice(r)
		case CmdSetDevice:
			err = s.setDevice(r, cred)
		case CmdGetStats:
			err = s.getStats(r)
		case CmdDumpChannels:
			err = s.dumpChannels(r)
		case CmdConnect:
			err = s.connect(r, cred)
		case CmdDisconnect:
			err = s.disconnect(r, cred)
		case CmdGetSession:
			err = s.getSession(r)
		case CmdDumpPorts:
			err = s.dumpPorts(r)
		case CmdGetDump:
			err = s.getDump(r, cred)
		default: // DecodeRequest rejects these; kept for safety
			err = reqErr(unix.EOPNOTSUPP, 0, "unknown command %d", req.Command)
		}
	}
	if err != nil {
		var re *RequestError
		if !errors.As(err, &re) {
			re = &RequestError{Errno: unix.EIO, Msg: err.Error(), Err: err}
		}
		s.log.Debug("genl: request refused", "port", port, "cmd", cmdName(req.Command), "err", re)
		s.send(port, errorMsg(port, msg, re))
		return
	}
	if !r.multi {
		r.finish(msg)
	}
}

// getFamily answers nlctrl CTRL_CMD_GETFAMILY for this family only.
func (s *Server) getFamily(r *reply) error {
	req := r.req
	if !req.Dump() {
		if req.FamilyName != "" && req.FamilyName != FamilyName {
			return reqErr(unix.ENOENT, req.AttrOffset(unix.CTRL_ATTR_FAMILY_NAME),
				"no generic netlink family %q here (only %q)", req.FamilyName, FamilyName)
		}
		if req.FamilyID != 0 && req.FamilyID != FamilyID {
			return reqErr(unix.ENOENT, req.AttrOffset(unix.CTRL_ATTR_FAMILY_ID),
				"no generic netlink family with id %#x here", req.FamilyID)
		}
	}
	ae := netlink.NewAttributeEncoder()
	ae.Uint16(unix.CTRL_ATTR_FAMILY_ID, FamilyID)
	ae.String(unix.CTRL_ATTR_FAMILY_NAME, FamilyName)
	ae.Uint32(unix.CTRL_ATTR_VERSION, FamilyVersion)
	ae.Uint32(unix.CTRL_ATTR_HDRSIZE, 0)
	ae.Uint32(unix.CTRL_ATTR_MAXATTR, uint32(AttrMax))
	ae.Nested(unix.CTRL_ATTR_OPS, func(nae *netlink.AttributeEncoder) error {
		for i, op := range []struct {
			cmd   uint8
			flags uint32
		}{
			{CmdGetDevice, unix.GENL_CMD_CAP_DO | unix.GENL_CMD_CAP_DUMP | unix.GENL_CMD_CAP_HASPOL},
			{CmdSetDevice, unix.GENL_CMD_CAP_DO | unix.GENL_CMD_CAP_HASPOL | unix.GENL_ADMIN_PERM},
			{CmdGetStats, unix.GENL_CMD_CAP_DO | unix.GENL_CMD_CAP_HASPOL},
			{CmdDumpChannels, unix.GENL_CMD_CAP_DUMP | unix.GENL_CMD_CAP_HASPOL},
			{CmdConnect, unix.GENL_CMD_CAP_DO | unix.GENL_CMD_CAP_HASPOL | unix.GENL_ADMIN_PERM},
			{CmdDisconnect, unix.GENL_CMD_CAP_DO | unix.GENL_CMD_CAP_HASPOL | unix.GENL_ADMIN_PERM},
			{CmdGetSession, unix.GENL_CMD_CAP_DO | unix.GENL_CMD_CAP_DUMP | unix.GENL_CMD_CAP_HASPOL},
			{CmdDumpPorts, unix.GENL_CMD_CAP_DUMP | unix.GENL_CMD_CAP_HASPOL},
			{CmdGetDump, unix.GENL_CMD_CAP_DO | unix.GENL_CMD_CAP_DUMP | unix.GENL_CMD_CAP_HASPOL | unix.GENL_ADMIN_PERM},
		} {
			nae.Nested(uint16(i+1), func(oe *netlink.AttributeEncoder) error {
				oe.Uint32(unix.CTRL_ATTR_OP_ID, uint32(op.cmd))
				oe.Uint32(unix.CTRL_ATTR_OP_FLAGS, op.flags)
				return nil
			})
		}
		return nil
	})
	b, err := ae.Encode()
	if err != nil {
		return err
	}
	r.multi = req.Dump()
	r.add(unix.CTRL_CMD_NEWFAMILY, ctrlVersion, b)
	if r.multi {
		r.done()
	}
	return nil
}

// devicePath checks that devices/<name> exists.
func (s *Server) devicePath(req *Request) (string, error) {
	p := "devices/" + req.DevName
	if _, err := s.tree.LookupDir(p); err != nil {
		return "", &RequestError{Errno: unix.ENODEV, Offset: req.AttrOffset(AttrDevName), Err: err,
			Msg: fmt.Sprintf("no MHI device %q", req.DevName)}
	}
	return p, nil
}

// deviceNames lists the directories under devices/.
func (s *Server) deviceNames() []string {
	d, err := s.tree.LookupDir("devices")
	if err != nil {
		return nil
	}
	var names []string
	for _, sub := range d.Dirs() {
		names = append(names, sub.Name)
	}
	return names
}

// encodeDevice writes a device's attributes (flat) into ae.
func (s *Server) encodeDevice(ae *netlink.AttributeEncoder, name string) error {
	base := "devices/" + name + "/"
	ae.String(AttrDevName, name)
	for _, a := range []struct {
		typ  uint16
		file string
	}{{AttrState, "state"}, {AttrEE, "ee"}, {AttrModel, "model"}, {AttrSerial, "serial_number"},
		{AttrPMState, "pm_state"}, {AttrRecovery, "recovery"}} {
		v, err := s.tree.Get(base + a.file)
		if errors.Is(err, sysfs.ErrNotFound) {
			continue
		}
		if err != nil {
			return treeError(err, 0, name)
		}
		ae.String(a.typ, v)
	}
	for _, a := range []struct {
		typ  uint16
		file string
	}{{AttrMRU, "mru"}, {AttrMTU, "mtu"}, {AttrTimeoutMs, "timeout_ms"}, {AttrAutosuspendMs, "autosuspend_ms"}} {
		v, err := s.tree.Get(base + a.file)
		if errors.Is(err, sysfs.ErrNotFound) {
			continue // e.g. no network device: no mru/mtu
		}
		if err != nil {
			return treeError(err, 0, name)
		}
		n, err := strconv.ParseUint(v, 0, 64)
		if err != nil {
			return reqErr(unix.EIO, 0, "%s: %s: %q is not a number", name, a.file, v)
		}
		ae.Uint32(a.typ, uint32(min(n, math.MaxUint32)))
	}
	return nil
}

// getDevice answers GET_DEVICE: one device, or with NLM_F_DUMP every
// device (or the one DEV_NAME names) as DEVICE nests packed into as few
// messages as fit a datagram.
func (s *Server) getDevice(r *reply) error {
	req := r.req
	if !req.Dump() {
		if _, err := s.devicePath(req); err != nil {
			return err
		}
		ae := netlink.NewAttributeEncoder()
		if err := s.encodeDevice(ae, req.DevName); err != nil {
			return err
		}
		return r.addEncoded(CmdGetDevice, ae)
	}
	names := s.deviceNames()
	if req.DevName != "" {
		if _, err := s.devicePath(req); err != nil {
			return err
		}
		names = []string{req.DevName}
	}
	// Build every device first so that an error replaces the whole dump.
	var nests [][]byte
	for _, name := range names {
		ae := netlink.NewAttributeEncoder()
		if err := s.encodeDevice(ae, name); err != nil {
			if errors.Is(err, unix.ENODEV) {
				continue // removed meanwhile
			}
			return err
		}
		b, err := ae.Encode()
		if err != nil {
			return err
		}
		nests = append(nests, b)
	}
	r.multi = true
	var payload []byte
	for _, b := range nests {
		if len(payload) > 0 && len(payload)+nlaHdrLen+len(b) > maxDatagram-nlHdrLen-genlHdrLen {
			r.add(CmdGetDevice, FamilyVersion, payload)
			payload = nil
		}
		payload = appendAttr(payload, AttrDevice|nlaFNested, b)
	}
	if len(payload) > 0 {
		r.add(CmdGetDevice, FamilyVersion, payload)
	}
	r.done()
	return nil
}

// setDevice applies MRU, MTU and TIMEOUT_MS, in that order, through
// Tree.Set. It stops at the first failure; the values before it stay
// applied and the message says so.
func (s *Server) setDevice(r *reply, cred *unix.Ucred) error {
	req := r.req
	if err := authorize(cred); err != nil {
		return err
	}
	base, err := s.devicePath(req)
	if err != nil {
		return err
	}
	var applied []string
	for _, a := range []struct {
		typ  uint16
		file string
		v    *uint32
	}{{AttrMRU, "mru", req.MRU}, {AttrMTU, "mtu", req.MTU}, {AttrTimeoutMs, "timeout_ms", req.TimeoutMs},
		{AttrAutosuspendMs, "autosuspend_ms", req.AutosuspendMs}, {AttrPMRequest, "pm", req.PMRequest}} {
		if a.v == nil {
			continue
		}
		off := req.AttrOffset(a.typ)
		file, val := a.file, strconv.FormatUint(uint64(*a.v), 10)
		if a.typ == AttrPMRequest {
			// The tree's action attributes: devices/<dev>/suspend, resume.
			file, val = "suspend", "1"
			if *a.v == PMRequestResume {
				file = "resume"
			}
		}
		err := s.tree.Set(base+"/"+file, val)
		if err != nil {
			var e *RequestError
			if errors.Is(err, sysfs.ErrNotFound) {
				if _, derr := s.tree.LookupDir(base); derr != nil {
					e = &RequestError{Errno: unix.ENODEV, Offset: req.AttrOffset(AttrDevName), Err: err,
						Msg: fmt.Sprintf("no MHI device %q", req.DevName)}
				} else {
					e = &RequestError{Errno: unix.EOPNOTSUPP, Offset: off, Err: err,
						Msg: fmt.Sprintf("%s has no %s (is its network device up?)", req.DevName, a.file)}
				}
			} else {
				e = treeError(err, off, req.DevName)
			}
			if len(applied) > 0 {
				e.Msg += " (already applied: " + strings.Join(applied, ", ") + ")"
			}
			return e
		}
		applied = append(applied, a.file)
	}
	ae := netlink.NewAttributeEncoder()
	if err := s.encodeDevice(ae, req.DevName); err != nil {
		return err
	}
	return r.addEncoded(CmdSetDevice, ae)
}

// statEntry is one counter under devices/<name>/stats.
type statEntry struct {
	name  string
	value uint64
}

// collectStats appends the counters of d and its subdirectories, named
// by their path below d (prefix first); unreadable or non-numeric
// attributes are left out.
func collectStats(prefix string, d *sysfs.Dir, out []statEntry) []statEntry {
	for _, a := range d.Attrs() {
		v, err := a.Read()
		if err != nil {
			continue
		}
		n, err := strconv.ParseUint(strings.TrimSpace(v), 0, 64)
		if err != nil {
			continue
		}
		out = append(out, statEntry{prefix + a.Name, n})
	}
	for _, sub := range d.Dirs() {
		out = collectStats(prefix+sub.Name+"/", sub, out)
	}
	return out
}

// encodeStatEntries returns the encoder of a stats set: one
// StatsAttrEntry nest (NAME, VALUE) per counter.
func encodeStatEntries(stats []statEntry) func(*netlink.AttributeEncoder) error {
	return func(ae *netlink.AttributeEncoder) error {
		for _, st := range stats {
			ae.Nested(StatsAttrEntry, func(ee *netlink.AttributeEncoder) error {
				ee.String(StatAttrName, st.name)
				ee.Uint64(StatAttrValue, st.value)
				return nil
			})
		}
		return nil
	}
}

// getStats answers GET_STATS with every counter under the device's stats/.
func (s *Server) getStats(r *reply) error {
	req := r.req
	base, err := s.devicePath(req)
	if err != nil {
		return err
	}
	var stats []statEntry
	if d, err := s.tree.LookupDir(base + "/stats"); err == nil {
		stats = collectStats("", d, nil)
	}
	ae := netlink.NewAttributeEncoder()
	ae.String(AttrDevName, req.DevName)
	ae.Nested(AttrStats, encodeStatEntries(stats))
	return r.addEncoded(CmdGetStats, ae)
}

// dumpChannels answers DUMP_CHANNELS with one message per channel.
func (s *Server) dumpChannels(r *reply) error {
	req := r.req
	base, err := s.devicePath(req)
	if err != nil {
		return err
	}
	var msgs [][]byte
	if d, err := s.tree.LookupDir(base + "/channels"); err == nil {
		for _, ch := range d.Dirs() {
			b, err := encodeChannel(req.DevName, ch)
			if err != nil {
				return err
			}
			msgs = append(msgs, b)
		}
	}
	r.dump(CmdDumpChannels, msgs)
	return nil
}

// encodeChannel encodes DEV_NAME and a CHANNEL nest for the channel
// directory ch ("<num>_<name>").
func encodeChannel(dev string, ch *sysfs.Dir) ([]byte, error) {
	numStr, chName, _ := strings.Cut(ch.Name, "_")
	num, err := strconv.ParseUint(numStr, 10, 32)
	if err != nil {
		return nil, reqErr(unix.EIO, 0, "%s: channel directory %q has no number", dev, ch.Name)
	}
	ae := netlink.NewAttributeEncoder()
	ae.String(AttrDevName, dev)
	ae.Nested(AttrChannel, func(nae *netlink.AttributeEncoder) error {
		nae.Uint32(ChanAttrNum, uint32(num))
		nae.String(ChanAttrName, chName)
		for _, a := range []struct {
			typ  uint16
			file string
		}{{ChanAttrDir, "dir"}, {ChanAttrState, "state"}, {ChanAttrCtxState, "ctx_state"}} {
			if v, ok := readAttr(ch, a.file); ok {
				nae.String(a.typ, v)
			}
		}
		for _, a := range []struct {
			typ  uint16
			file string
		}{
			{ChanAttrElements, "elements"}, {ChanAttrPending, "pending"}, {ChanAttrCompleted, "completed"},
			{ChanAttrBytes, "bytes"}, {ChanAttrHostRP, "host_rp"}, {ChanAttrHostWP, "host_wp"},
			{ChanAttrCtxRP, "ctx_rp"}, {ChanAttrCtxWP, "ctx_wp"},
		} {
			if v, ok := readAttr(ch, a.file); ok {
				if n, err := strconv.ParseUint(strings.TrimSpace(v), 0, 64); err == nil {
					nae.Uint64(a.typ, n)
				}
			}
		}
		return nil
	})
	return ae.Encode()
}

// readAttr reads attribute file of directory d; ok is false when d has
// no such attribute or reading it failed.
func readAttr(d *sysfs.Dir, file string) (v string, ok bool) {
	a, ok := d.Attr(file)
	if !ok {
		return "", false
	}
	v, err := a.Read()
	return v, err == nil
}
