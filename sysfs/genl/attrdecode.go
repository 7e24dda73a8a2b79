package genl

import (
	"errors"
	"fmt"

	"github.com/mdlayher/genetlink"
	"github.com/mdlayher/netlink"
)

// This file holds the client's one way of decoding the attributes of a
// reply: a table that says where each attribute type goes.

// attrFields says where the attributes of one attribute set go: each
// attribute type names the field it fills or, for a nest, the function
// that decodes it. Types it does not name are skipped, as a newer server
// may send attributes this client does not know.
type attrFields struct {
	str    map[uint16]*string
	strs   map[uint16]*[]string // repeated: each one is appended
	u16    map[uint16]*uint16
	u32    map[uint16]*uint32
	u64    map[uint16]*uint64
	nested map[uint16]func(*netlink.AttributeDecoder) error
}

// decode fills the fields from the attributes ad walks and returns ad's
// error: a malformed attribute, a value of the wrong size or a nest that
// failed.
func (f attrFields) decode(ad *netlink.AttributeDecoder) error {
	for ad.Next() {
		t := ad.Type()
		if p, ok := f.str[t]; ok {
			*p = ad.String()
		} else if p, ok := f.strs[t]; ok {
			*p = append(*p, ad.String())
		} else if p, ok := f.u16[t]; ok {
			*p = ad.Uint16()
		} else if p, ok := f.u32[t]; ok {
			*p = ad.Uint32()
		} else if p, ok := f.u64[t]; ok {
			*p = ad.Uint64()
		} else if fn, ok := f.nested[t]; ok {
			ad.Nested(fn)
		}
	}
	return ad.Err()
}

// decodeBytes decodes the attributes in b with f.
func (f attrFields) decodeBytes(b []byte) error {
	ad, err := netlink.NewAttributeDecoder(b)
	if err != nil {
		return err
	}
	return f.decode(ad)
}

// eachNest returns the attrFields of a set whose only attribute that
// matters is the nest typ, repeated: fn decodes each.
func eachNest(typ uint16, fn func(*netlink.AttributeDecoder) error) attrFields {
	return attrFields{nested: map[uint16]func(*netlink.AttributeDecoder) error{typ: fn}}
}

// decodeReplies decodes the top-level attributes of every message with f
// and stops at the first malformed one.
func decodeReplies(msgs []genetlink.Message, f attrFields) error {
	for _, m := range msgs {
		if err := f.decodeBytes(m.Data); err != nil {
			return err
		}
	}
	return nil
}

// oneReply decodes the single message a request is answered with; any
// other number of messages, or a malformed one, is a protocol error.
func oneReply[T any](c *Client, op, dev string, msgs []genetlink.Message, decode func([]byte) (T, error)) (T, error) {
	var zero T
	if len(msgs) != 1 {
		return zero, c.malformed(op, dev, fmt.Errorf("%d replies", len(msgs)))
	}
	v, err := decode(msgs[0].Data)
	if err != nil {
		return zero, c.malformed(op, dev, err)
	}
	return v, nil
}

// dumpNests runs the dump command cmd and decodes, with decode, every
// nest of type typ in its answer, in order.
func dumpNests[T any](c *Client, op, dev string, cmd uint8, typ uint16, decode func(*netlink.AttributeDecoder) (T, error)) ([]T, error) {
	msgs, err := c.request(op, dev, cmd, netlink.Request|netlink.Dump, nil)
	if err != nil {
		return nil, err
	}
	var out []T
	err = decodeReplies(msgs, eachNest(typ, func(ad *netlink.AttributeDecoder) error {
		v, err := decode(ad)
		out = append(out, v)
		return err
	}))
	if err != nil {
		return nil, c.malformed(op, dev, err)
	}
	return out, nil
}

// decodeStatEntries calls add with each StatsAttrEntry nest (NAME and
// VALUE) of a stats set.
func decodeStatEntries(ad *netlink.AttributeDecoder, add func(Stat)) error {
	return eachNest(StatsAttrEntry, func(ead *netlink.AttributeDecoder) error {
		var st Stat
		err := attrFields{
			str: map[uint16]*string{StatAttrName: &st.Name},
			u64: map[uint16]*uint64{StatAttrValue: &st.Value},
		}.decode(ead)
		add(st)
		return err
	}).decode(ad)
}

// decodeDevice decodes a GET_DEVICE or SET_DEVICE reply.
func decodeDevice(b []byte) (Device, error) {
	ad, err := netlink.NewAttributeDecoder(b)
	if err != nil {
		return Device{}, err
	}
	return decodeDeviceAttrs(ad)
}

// decodeDeviceAttrs decodes a device's attributes (a reply, or a DEVICE
// nest of a dump).
func decodeDeviceAttrs(ad *netlink.AttributeDecoder) (Device, error) {
	var d Device
	err := attrFields{
		str: map[uint16]*string{AttrDevName: &d.Name, AttrState: &d.State, AttrEE: &d.EE,
			AttrModel: &d.Model, AttrSerial: &d.Serial, AttrPMState: &d.PMState, AttrRecovery: &d.Recovery},
		u32: map[uint16]*uint32{AttrMRU: &d.MRU, AttrMTU: &d.MTU, AttrTimeoutMs: &d.TimeoutMs,
			AttrAutosuspendMs: &d.AutosuspendMs},
	}.decode(ad)
	return d, err
}

// decodeChannel decodes a CHANNEL nest.
func decodeChannel(ad *netlink.AttributeDecoder) (Channel, error) {
	var ch Channel
	err := attrFields{
		str: map[uint16]*string{ChanAttrName: &ch.Name, ChanAttrDir: &ch.Dir, ChanAttrState: &ch.State,
			ChanAttrCtxState: &ch.CtxState},
		u32: map[uint16]*uint32{ChanAttrNum: &ch.Num},
		u64: map[uint16]*uint64{
			ChanAttrElements: &ch.Elements, ChanAttrPending: &ch.Pending, ChanAttrCompleted: &ch.Completed,
			ChanAttrBytes: &ch.Bytes, ChanAttrHostRP: &ch.HostRP, ChanAttrHostWP: &ch.HostWP,
			ChanAttrCtxRP: &ch.CtxRP, ChanAttrCtxWP: &ch.CtxWP,
		},
	}.decode(ad)
	return ch, err
}

// decodePort decodes a PORT nest.
func decodePort(ad *netlink.AttributeDecoder) (Port, error) {
	p := Port{Stats: map[string]uint64{}}
	err := attrFields{
		str: map[uint16]*string{PortAttrName: &p.Name, PortAttrPath: &p.Path},
		nested: map[uint16]func(*netlink.AttributeDecoder) error{
			PortAttrStats: func(sd *netlink.AttributeDecoder) error {
				return decodeStatEntries(sd, func(st Stat) { p.Stats[st.Name] = st.Value })
			},
		},
	}.decode(ad)
	return p, err
}

// decodeSession decodes a GET_SESSION, CONNECT or DISCONNECT reply: the
// device name and the SESSION nest, which it must hold.
func decodeSession(b []byte) (Session, error) {
	var s Session
	var num uint32
	found := false
	err := attrFields{
		str: map[uint16]*string{AttrDevName: &s.Device},
		nested: map[uint16]func(*netlink.AttributeDecoder) error{
			AttrSession: func(sd *netlink.AttributeDecoder) error {
				found = true
				return attrFields{
					str: map[uint16]*string{
						SessAttrState: &s.State, SessAttrProtocol: &s.Protocol, SessAttrAPN: &s.APN, SessAttrIPType: &s.IPType,
						SessAttrIPv4: &s.IPv4, SessAttrGateway4: &s.Gateway4, SessAttrIPv6: &s.IPv6, SessAttrGateway6: &s.Gateway6,
						SessAttrInterface: &s.Interface, SessAttrLastError: &s.LastError,
					},
					strs: map[uint16]*[]string{SessAttrDNS4: &s.DNS4, SessAttrDNS6: &s.DNS6},
					u32:  map[uint16]*uint32{SessAttrMTU: &s.MTU, SessAttrNumber: &num},
				}.decode(sd)
			},
		},
	}.decodeBytes(b)
	if err != nil {
		return s, err
	}
	if !found {
		return s, errors.New("reply has no session nest")
	}
	if num > MaxSessionID {
		return s, fmt.Errorf("session number %d, beyond %d", num, MaxSessionID)
	}
	s.Session = uint8(num)
	return s, nil
}
