package modem

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhi/ep"
	"github.com/gomhi/gomhi/mhi/proto/qmi"
)

// qmiTester is a QMI host (libqmi's part) on a ctrlRig's QMI pair.
type qmiTester struct {
	t    testing.TB
	r    *ctrlRig
	m    *Modem
	q    *QMI
	tid  uint16
	inds []qmi.Frame
}

func newQMITester(tb testing.TB, mc Config, opts QMIOptions) *qmiTester {
	tb.Helper()
	if mc.Identity.Model == "" {
		mc.Identity = Identity{Manufacturer: "Qualcomm", Model: "SDX55", Firmware: "MPSS.HI.2.0.c3-00186", Hardware: "10000"}
	}
	m, err := New(mc)
	if err != nil {
		tb.Fatal(err)
	}
	if opts.Logger == nil {
		opts.Logger = testLogger()
	}
	q, err := NewQMI(m, opts)
	if err != nil {
		tb.Fatal(err)
	}
	r := newCtrlRig(tb, "qcom-sdx55m", map[string]ep.Function{QMIName: q})
	r.open(QMIName)
	return &qmiTester{t: tb, r: r, m: m, q: q}
}

// next returns the next frame the modem sent.
func (h *qmiTester) next() qmi.Frame {
	h.t.Helper()
	raw := h.r.readDL(QMIName)
	f, err := qmi.ParseFrame(raw)
	if err != nil {
		h.t.Fatalf("modem sent a frame libqmi rejects: %v\n%x", err, raw)
	}
	if f.QMUXFlags != qmi.QMUXFromModem {
		h.t.Fatalf("QMUX flags 0x%02x, want 0x80", f.QMUXFlags)
	}
	return f
}

// send writes a request and returns the response, keeping indications
// that arrive meanwhile.
func (h *qmiTester) send(svc qmi.Service, cid uint8, msg qmi.MessageID, tlvs func(b *qmi.Builder)) (qmi.Frame, qmi.Result) {
	h.t.Helper()
	h.tid++
	tid := h.tid
	if svc == qmi.CTL {
		tid &= 0xFF
	}
	var b qmi.Builder
	b.Start(nil, qmi.Header{Service: svc, Client: cid, Type: qmi.Request, TID: tid, Message: msg})
	if tlvs != nil {
		tlvs(&b)
	}
	req, err := b.Finish()
	if err != nil {
		h.t.Fatal(err)
	}
	h.r.write(QMIName, req)
	for {
		f := h.next()
		if f.Type() == qmi.Indication {
			h.inds = append(h.inds, f)
			continue
		}
		if f.Type() != qmi.Response || f.Service != svc || f.Client != cid || f.TID != tid || f.Message != msg {
			h.t.Fatalf("answer %s type %v client %d tid %d to %s client %d tid %d", f.Name(), f.Type(), f.Client, f.TID,
				svc.String()+" "+svc.MessageName(msg), cid, tid)
		}
		res, err := f.TLVs.Result()
		if err != nil {
			h.t.Fatalf("%s: %v", f.Name(), err)
		}
		return f, res
	}
}

// ok sends a request that must succeed.
func (h *qmiTester) ok(svc qmi.Service, cid uint8, msg qmi.MessageID, tlvs func(b *qmi.Builder)) qmi.Frame {
	h.t.Helper()
	f, res := h.send(svc, cid, msg, tlvs)
	if !res.OK() {
		h.t.Fatalf("%s failed: %v", f.Name(), res.Code)
	}
	return f
}

// fails sends a request that must fail with code.
func (h *qmiTester) fails(svc qmi.Service, cid uint8, msg qmi.MessageID, tlvs func(b *qmi.Builder), code qmi.ErrorCode) qmi.Frame {
	h.t.Helper()
	f, res := h.send(svc, cid, msg, tlvs)
	if res.OK() || res.Code != code {
		h.t.Fatalf("%s: result %+v, want failure %v", f.Name(), res, code)
	}
	return f
}

func (h *qmiTester) alloc(svc qmi.Service) uint8 {
	h.t.Helper()
	f := h.ok(qmi.CTL, 0, qmi.CTLAllocateCID, func(b *qmi.Builder) { b.TLVU8(0x01, uint8(svc)) })
	v, ok := f.TLVs.Find(0x01)
	if !ok || len(v) != 2 || qmi.Service(v[0]) != svc || v[1] == 0 {
		h.t.Fatalf("allocation info %x", v)
	}
	return v[1]
}

// indication waits for an indication of svc/msg to client cid.
func (h *qmiTester) indication(svc qmi.Service, cid uint8, msg qmi.MessageID) qmi.Frame {
	h.t.Helper()
	for {
		for i, f := range h.inds {
			if f.Service == svc && f.Client == cid && f.Message == msg {
				h.inds = slices.Delete(h.inds, i, i+1)
				return f
			}
		}
		f := h.next()
		if f.Type() != qmi.Indication {
			h.t.Fatalf("unexpected %s %v", f.Name(), f.Type())
		}
		h.inds = append(h.inds, f)
	}
}

func tlv(tb testing.TB, f qmi.Frame, typ uint8) []byte {
	tb.Helper()
	v, ok := f.TLVs.Find(typ)
	if !ok {
		tb.Fatalf("%s has no TLV 0x%02x", f.Name(), typ)
	}
	return v
}

func tlvU32(tb testing.TB, f qmi.Frame, typ uint8) uint32 {
	tb.Helper()
	v := tlv(tb, f, typ)
	if len(v) != 4 {
		tb.Fatalf("%s TLV 0x%02x of %d bytes", f.Name(), typ, len(v))
	}
	return binary.LittleEndian.Uint32(v)
}

func TestQMICTL(t *testing.T) {
	h := newQMITester(t, Config{}, QMIOptions{MaxClients: 2})
	f := h.ok(qmi.CTL, 0, qmi.CTLGetVersionInfo, nil)
	rd := qmi.NewReader(tlv(t, f, 0x01))
	n := int(rd.U8())
	var svcs []qmi.Service
	for range n {
		svcs = append(svcs, qmi.Service(rd.U8()))
		if major, _ := rd.U16(), rd.U16(); major == 0 {
			t.Fatal("major version 0")
		}
	}
	if err := rd.Finish(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(svcs, []qmi.Service{qmi.CTL, qmi.WDS, qmi.DMS, qmi.NAS, qmi.WDA}) {
		t.Fatalf("services %v", svcs)
	}

	c1 := h.alloc(qmi.DMS)
	c2 := h.alloc(qmi.DMS)
	if c1 == c2 {
		t.Fatalf("two DMS clients with id %d", c1)
	}
	h.fails(qmi.CTL, 0, qmi.CTLAllocateCID, func(b *qmi.Builder) { b.TLVU8(0x01, uint8(qmi.DMS)) }, qmi.ErrClientIDsExhausted)
	h.fails(qmi.CTL, 0, qmi.CTLAllocateCID, func(b *qmi.Builder) { b.TLVU8(0x01, uint8(qmi.UIM)) }, qmi.ErrInvalidServiceType)
	h.fails(qmi.CTL, 0, qmi.CTLAllocateCID, nil, qmi.ErrMissingArgument)
	nas := h.alloc(qmi.NAS) // another service has its own ids
	release := func(svc qmi.Service, cid uint8) func(b *qmi.Builder) {
		return func(b *qmi.Builder) { b.TLV(0x01, []byte{byte(svc), cid}) }
	}
	h.fails(qmi.CTL, 0, qmi.CTLReleaseCID, release(qmi.DMS, 77), qmi.ErrInvalidClientID)
	f = h.ok(qmi.CTL, 0, qmi.CTLReleaseCID, release(qmi.DMS, c1))
	if v := tlv(t, f, 0x01); !bytes.Equal(v, []byte{byte(qmi.DMS), c1}) {
		t.Fatalf("release info %x", v)
	}
	h.fails(qmi.DMS, c1, qmi.DMSGetModel, nil, qmi.ErrInvalidClientID)
	h.ok(qmi.DMS, c2, qmi.DMSGetModel, nil)
	c3 := h.alloc(qmi.DMS)
	if c3 == c2 {
		t.Fatal("reallocated a client id in use")
	}

	// SYNC releases every client.
	h.ok(qmi.CTL, 0, qmi.CTLSync, nil)
	h.fails(qmi.DMS, c2, qmi.DMSGetModel, nil, qmi.ErrInvalidClientID)
	h.fails(qmi.NAS, nas, qmi.NASGetServingSystem, nil, qmi.ErrInvalidClientID)

	f = h.ok(qmi.CTL, 0, qmi.CTLSetDataFormat, func(b *qmi.Builder) { b.TLVU8(0x01, 0); b.TLVU16(0x10, 2) })
	if v := tlv(t, f, 0x10); !bytes.Equal(v, []byte{2, 0}) {
		t.Fatalf("data format protocol %x", v)
	}
	h.fails(qmi.CTL, 0, qmi.CTLSetDataFormat, func(b *qmi.Builder) { b.TLVU16(0x10, 1) }, qmi.ErrInvalidDataFormat)
	h.fails(qmi.CTL, 0, qmi.CTLSetInstanceID, func(b *qmi.Builder) { b.TLVU8(0x01, 0) }, qmi.ErrInvalidQMICommand)

	st := h.q.Stats()
	if st.ClientsAllocated != 4 || st.ClientsReleased != 4 || st.ClientsActive != 0 {
		t.Fatalf("client counters %+v", st)
	}
	if len(st.Unsupported) != 1 || st.Unsupported[0].Service != "CTL" || st.Unsupported[0].Message != 0x20 {
		t.Fatalf("unsupported %+v", st.Unsupported)
	}
}

func TestQMIDMS(t *testing.T) {
	h := newQMITester(t, Config{}, QMIOptions{})
	id := h.m.Identity()
	dms := h.alloc(qmi.DMS)
	for _, c := range []struct {
		msg  qmi.MessageID
		want string
	}{
		{qmi.DMSGetManufacturer, id.Manufacturer}, {qmi.DMSGetModel, id.Model},
		{qmi.DMSGetRevision, id.Firmware}, {qmi.DMSGetHardwareRevision, id.Hardware},
		{qmi.DMSGetSoftwareVersion, id.Firmware}, {qmi.DMSUIMGetICCID, id.ICCID}, {qmi.DMSUIMGetIMSI, id.IMSI},
	} {
		f := h.ok(qmi.DMS, dms, c.msg, nil)
		if got := string(tlv(t, f, 0x01)); got != c.want {
			t.Errorf("%s = %q, want %q", f.Name(), got, c.want)
		}
	}
	f := h.ok(qmi.DMS, dms, qmi.DMSGetIDs, nil)
	if got := string(tlv(t, f, 0x11)); got != id.IMEI {
		t.Fatalf("IMEI %q", got)
	}
	h.fails(qmi.DMS, dms, qmi.DMSGetMSISDN, nil, qmi.ErrNotProvisioned)

	f = h.ok(qmi.DMS, dms, qmi.DMSGetCapabilities, nil)
	rd := qmi.NewReader(tlv(t, f, 0x01))
	rd.U32()
	rd.U32()
	rd.U8()
	rd.U8()
	radios := rd.Bytes(int(rd.U8()))
	if rd.Finish() != nil || !slices.Contains(radios, dmsRadioLTE) {
		t.Fatalf("capabilities radio list %v (%v)", radios, rd.Finish())
	}

	mode := func() uint8 {
		f := h.ok(qmi.DMS, dms, qmi.DMSGetOperatingMode, nil)
		return tlv(t, f, 0x01)[0]
	}
	if mode() != dmsModeOnline {
		t.Fatal("not online")
	}
	h.ok(qmi.DMS, dms, qmi.DMSSetOperatingMode, func(b *qmi.Builder) { b.TLVU8(0x01, dmsModeLowPower) })
	if h.m.Radio() || mode() != dmsModeLowPower {
		t.Fatal("low power did not switch the radio off")
	}
	h.ok(qmi.DMS, dms, qmi.DMSSetOperatingMode, func(b *qmi.Builder) { b.TLVU8(0x01, dmsModeOnline) })
	if !h.m.Radio() || mode() != dmsModeOnline {
		t.Fatal("online did not switch the radio on")
	}
	h.fails(qmi.DMS, dms, qmi.DMSSetOperatingMode, func(b *qmi.Builder) { b.TLVU8(0x01, 4) }, qmi.ErrInvalidArgument)
	h.fails(qmi.DMS, dms, qmi.DMSSetOperatingMode, nil, qmi.ErrMissingArgument)
	h.m.SetRadio(false) // switched off elsewhere (MBIM, AT+CFUN)
	if mode() != dmsModeLowPower {
		t.Fatal("radio off elsewhere not reported as low power")
	}
	h.fails(qmi.DMS, dms, 0x0099, nil, qmi.ErrInvalidQMICommand)

	h2 := newQMITester(t, Config{Identity: Identity{Model: "X", MSISDN: "+15550100"}}, QMIOptions{})
	d2 := h2.alloc(qmi.DMS)
	if got := string(tlv(t, h2.ok(qmi.DMS, d2, qmi.DMSGetMSISDN, nil), 0x01)); got != "+15550100" {
		t.Fatalf("MSISDN %q", got)
	}
}

func TestQMINAS(t *testing.T) {
	h := newQMITester(t, Config{Identity: Identity{Model: "X", ProviderID: "310260", ProviderName: "gomhi net"}}, QMIOptions{})
	nas := h.alloc(qmi.NAS)
	f := h.ok(qmi.NAS, nas, qmi.NASGetServingSystem, nil)
	ss := tlv(t, f, 0x01)
	if !bytes.Equal(ss, []byte{nasRegistered, nasAttached, nasAttached, nasNetwork3GPP, 1, nasRadioLTE}) {
		t.Fatalf("serving system %x", ss)
	}
	rd := qmi.NewReader(tlv(t, f, 0x12))
	mcc, mnc, name := rd.U16(), rd.U16(), rd.String8()
	if rd.Finish() != nil || mcc != 310 || mnc != 260 || string(name) != "gomhi net" {
		t.Fatalf("PLMN %d %d %q", mcc, mnc, name)
	}
	if v := tlv(t, f, 0x27); !bytes.Equal(v, []byte{0x36, 0x01, 0x04, 0x01, 1}) {
		t.Fatalf("MNC PCS digit %x", v)
	}

	f = h.ok(qmi.NAS, nas, qmi.NASGetSignalStrength, nil)
	if v := tlv(t, f, 0x01); int8(v[0]) != -73 || v[1] != nasRadioLTE {
		t.Fatalf("signal strength %x", v)
	}
	f = h.ok(qmi.NAS, nas, qmi.NASGetSignalInfo, nil)
	rd = qmi.NewReader(tlv(t, f, 0x14))
	rssi, rsrq, rsrp, snr := int8(rd.U8()), int8(rd.U8()), int16(rd.U16()), int16(rd.U16())
	if rd.Finish() != nil || rssi != -73 || rsrq != -10 || rsrp != -104 || snr != 100 {
		t.Fatalf("LTE signal info %d %d %d %d", rssi, rsrq, rsrp, snr)
	}
	f = h.ok(qmi.NAS, nas, qmi.NASGetSystemInfo, nil)
	if v := tlv(t, f, 0x14); v[0] != nasServiceFull {
		t.Fatalf("LTE service status %x", v)
	}
	if v := tlv(t, f, 0x19); len(v) != 29 || string(v[20:23]) != "310" || string(v[23:26]) != "260" {
		t.Fatalf("LTE system info %x", v)
	}
	f = h.ok(qmi.NAS, nas, qmi.NASGetHomeNetwork, nil)
	rd = qmi.NewReader(tlv(t, f, 0x01))
	if rd.U16() != 310 || rd.U16() != 260 || string(rd.String8()) != "gomhi net" || rd.Finish() != nil {
		t.Fatal("home network")
	}

	h.fails(qmi.NAS, nas, qmi.NASInitiateNetworkRegister, func(b *qmi.Builder) { b.TLVU8(0x01, 1) }, qmi.ErrNoEffect)

	// Serving system indications go to clients that asked for them.
	other := h.alloc(qmi.NAS)
	h.ok(qmi.NAS, nas, qmi.NASRegisterIndications, func(b *qmi.Builder) { b.TLVU8(0x13, 1) })
	h.m.SetRadio(false)
	ind := h.indication(qmi.NAS, nas, qmi.NASGetServingSystem)
	if v := tlv(t, ind, 0x01); !bytes.Equal(v, []byte{nasNotRegistered, nasDetached, nasDetached, 0, 0}) {
		t.Fatalf("serving system indication %x", v)
	}
	h.fails(qmi.NAS, nas, qmi.NASGetSignalStrength, nil, qmi.ErrNoNetworkFound)
	h.fails(qmi.NAS, nas, qmi.NASInitiateNetworkRegister, func(b *qmi.Builder) { b.TLVU8(0x01, 1) }, qmi.ErrNoNetworkFound)
	f = h.ok(qmi.NAS, nas, qmi.NASGetSignalInfo, nil)
	if f.TLVs.Count() != 1 {
		t.Fatalf("signal info with the radio off has %d TLVs", f.TLVs.Count())
	}
	h.m.SetRadio(true)
	ind = h.indication(qmi.NAS, nas, qmi.NASGetServingSystem)
	if v := tlv(t, ind, 0x01); v[0] != nasRegistered || v[2] != nasAttached {
		t.Fatalf("serving system indication %x", v)
	}
	if _, ok := ind.TLVs.Find(0x29); !ok {
		t.Fatal("indication lacks the MNC PCS digit TLV 0x29")
	}
	h.r.quiet(QMIName, 20*time.Millisecond)
	for _, f := range h.inds {
		if f.Client == other {
			t.Fatalf("indication to a client that did not register: %s", f.Name())
		}
	}
}

func startV4(b *qmi.Builder) {
	b.TLVString(0x14, "internet")
	b.TLVU8(0x19, wdsFamilyIPv4)
}

func TestQMIWDSSession(t *testing.T) {
	h := newQMITester(t, Config{RequireConnect: true}, QMIOptions{})
	wds := h.alloc(qmi.WDS)
	status := func(cid uint8) uint8 { return tlv(t, h.ok(qmi.WDS, cid, qmi.WDSGetPacketServiceStatus, nil), 0x01)[0] }

	if h.m.DataAllowed() || status(wds) != wdsDisconnected {
		t.Fatal("connected before START_NETWORK")
	}
	h.fails(qmi.WDS, wds, qmi.WDSGetCurrentSettings, func(b *qmi.Builder) { b.TLVU32(0x10, 0xFFFF) }, qmi.ErrOutOfCall)
	h.ok(qmi.WDS, wds, qmi.WDSSetEventReport, func(b *qmi.Builder) { b.TLVU8(0x17, 1) })
	f := h.ok(qmi.WDS, wds, qmi.WDSStartNetwork, startV4)
	handle := tlvU32(t, f, 0x01)
	s := h.m.Session()
	if !s.Active || s.APN != "internet" || s.Type != IPv4 || handle != s.ID || !h.m.DataAllowed() {
		t.Fatalf("after START_NETWORK: handle %d session %+v gate %v", handle, s, h.m.DataAllowed())
	}
	ind := h.indication(qmi.WDS, wds, qmi.WDSGetPacketServiceStatus)
	if v := tlv(t, ind, 0x01); v[0] != wdsConnected {
		t.Fatalf("packet service indication %x", v)
	}
	if status(wds) != wdsConnected {
		t.Fatal("packet service status not connected")
	}
	h.fails(qmi.WDS, wds, qmi.WDSStartNetwork, startV4, qmi.ErrNoEffect)

	f = h.ok(qmi.WDS, wds, qmi.WDSGetCurrentSettings, func(b *qmi.Builder) {
		b.TLVU32(0x10, wdsReqDNS|wdsReqIP|wdsReqGateway|wdsReqMTU|wdsReqIPFamily|wdsReqAPN)
	})
	a := h.m.Addressing()
	v4 := func(u uint32) netip.Addr {
		return netip.AddrFrom4([4]byte{byte(u >> 24), byte(u >> 16), byte(u >> 8), byte(u)})
	}
	if got := v4(tlvU32(t, f, 0x1E)); got != a.IPv4.Addr() {
		t.Errorf("address %v, want %v", got, a.IPv4.Addr())
	}
	if raw := tlv(t, f, 0x1E); !bytes.Equal(raw, []byte{1, 0, 18, 198}) {
		t.Errorf("address bytes %x, want 01 00 12 c6 (u32 little-endian)", raw)
	}
	if got := v4(tlvU32(t, f, 0x20)); got != a.Gateway4 {
		t.Errorf("gateway %v", got)
	}
	if got := v4(tlvU32(t, f, 0x21)); got != netip.MustParseAddr("255.255.255.0") {
		t.Errorf("mask %v", got)
	}
	if got := v4(tlvU32(t, f, 0x15)); got != a.DNS4[0] {
		t.Errorf("DNS %v", got)
	}
	if got := tlvU32(t, f, 0x29); got != uint32(a.MTU) {
		t.Errorf("MTU %d", got)
	}
	if got := tlv(t, f, 0x2B); got[0] != wdsFamilyIPv4 {
		t.Errorf("family %d", got[0])
	}
	if got := string(tlv(t, f, 0x14)); got != "internet" {
		t.Errorf("APN %q", got)
	}
	if _, ok := f.TLVs.Find(0x25); ok {
		t.Error("IPv4 call reports an IPv6 address")
	}
	f = h.ok(qmi.WDS, wds, qmi.WDSGetCurrentSettings, func(b *qmi.Builder) { b.TLVU32(0x10, wdsReqMTU) })
	if f.TLVs.Count() != 2 {
		t.Errorf("MTU-only request answered with %d TLVs", f.TLVs.Count())
	}

	h.fails(qmi.WDS, wds, qmi.WDSStopNetwork, func(b *qmi.Builder) { b.TLVU32(0x01, handle+1) }, qmi.ErrInvalidHandle)
	h.fails(qmi.WDS, wds, qmi.WDSStopNetwork, nil, qmi.ErrMissingArgument)
	h.ok(qmi.WDS, wds, qmi.WDSStopNetwork, func(b *qmi.Builder) { b.TLVU32(0x01, handle) })
	if h.m.Session().Active || h.m.DataAllowed() {
		t.Fatal("session still up after STOP_NETWORK")
	}
	ind = h.indication(qmi.WDS, wds, qmi.WDSGetPacketServiceStatus)
	if v := tlv(t, ind, 0x01); v[0] != wdsDisconnected || binary.LittleEndian.Uint16(tlv(t, ind, 0x10)) != wdsCERClientEnd {
		t.Fatalf("disconnect indication %x", ind.TLVs)
	}
	h.fails(qmi.WDS, wds, qmi.WDSStopNetwork, func(b *qmi.Builder) { b.TLVU32(0x01, handle) }, qmi.ErrNoEffect)

	// Errors of START_NETWORK.
	f = h.fails(qmi.WDS, wds, qmi.WDSStartNetwork, func(b *qmi.Builder) { b.TLVU8(0x19, 4) }, qmi.ErrCallFailed)
	if v := tlv(t, f, 0x11); !bytes.Equal(v, []byte{wdsVerbose3GPP, 0, wds3GPPUnknownAPN, 0}) {
		t.Fatalf("verbose call end reason %x", v)
	}
	h.fails(qmi.WDS, wds, qmi.WDSStartNetwork, func(b *qmi.Builder) { b.TLVU8(0x19, 5) }, qmi.ErrInvalidIPFamilyPreference)
	h.m.SetRadio(false)
	f = h.fails(qmi.WDS, wds, qmi.WDSStartNetwork, startV4, qmi.ErrCallFailed)
	if binary.LittleEndian.Uint16(tlv(t, f, 0x10)) != wdsCERNoService {
		t.Fatal("call end reason with the radio off")
	}
	h.m.SetRadio(true)

	// A session ended elsewhere (radio off via AT, MBIM) is reported.
	h.ok(qmi.WDS, wds, qmi.WDSStartNetwork, startV4)
	h.indication(qmi.WDS, wds, qmi.WDSGetPacketServiceStatus)
	h.m.SetRadio(false)
	ind = h.indication(qmi.WDS, wds, qmi.WDSGetPacketServiceStatus)
	if v := tlv(t, ind, 0x01); v[0] != wdsDisconnected || binary.LittleEndian.Uint16(tlv(t, ind, 0x10)) != wdsCERNoService {
		t.Fatalf("indication after radio off %x", ind.TLVs)
	}
	if status(wds) != wdsDisconnected {
		t.Fatal("still connected after radio off")
	}
	h.m.SetRadio(true)

	// Releasing the client that holds the call stops it, as libqmi's
	// qmicli warns.
	h.ok(qmi.WDS, wds, qmi.WDSStartNetwork, startV4)
	h.ok(qmi.CTL, 0, qmi.CTLReleaseCID, func(b *qmi.Builder) { b.TLV(0x01, []byte{byte(qmi.WDS), wds}) })
	if h.m.Session().Active {
		t.Fatal("session survived the release of its only client")
	}
}

func TestQMIWDSDualStackAndSharing(t *testing.T) {
	h := newQMITester(t, Config{RequireConnect: true}, QMIOptions{})
	w4, w6 := h.alloc(qmi.WDS), h.alloc(qmi.WDS)
	h.ok(qmi.WDS, w6, qmi.WDSSetIPFamily, func(b *qmi.Builder) { b.TLVU8(0x01, wdsFamilyIPv6) })
	h4 := tlvU32(t, h.ok(qmi.WDS, w4, qmi.WDSStartNetwork, startV4), 0x01)
	h6 := tlvU32(t, h.ok(qmi.WDS, w6, qmi.WDSStartNetwork, func(b *qmi.Builder) { b.TLVString(0x14, "internet") }), 0x01)
	s := h.m.Session()
	if s.Type != IPv4v6 || h4 != s.ID || h6 != s.ID|wdsIPv6HandleBit {
		t.Fatalf("dual stack: session %+v handles %#x %#x", s, h4, h6)
	}
	f := h.ok(qmi.WDS, w6, qmi.WDSGetCurrentSettings, func(b *qmi.Builder) { b.TLVU32(0x10, 0xFFFF) })
	a := h.m.Addressing()
	v := tlv(t, f, 0x25)
	if addr, _ := netip.AddrFromSlice(v[:16]); addr != a.IPv6.Addr() || int(v[16]) != a.IPv6.Bits() {
		t.Fatalf("IPv6 address %x", v)
	}
	if gw, _ := netip.AddrFromSlice(tlv(t, f, 0x26)[:16]); gw != a.Gateway6 {
		t.Fatalf("IPv6 gateway %v", gw)
	}
	if dns, _ := netip.AddrFromSlice(tlv(t, f, 0x27)); dns != a.DNS6[0] {
		t.Fatalf("IPv6 DNS %v", dns)
	}
	if tlv(t, f, 0x2B)[0] != wdsFamilyIPv6 {
		t.Fatal("IPv6 family")
	}
	if _, ok := f.TLVs.Find(0x1E); ok {
		t.Fatal("IPv6 call reports an IPv4 address")
	}
	// A different APN while connected: one session only.
	w3 := h.alloc(qmi.WDS)
	f = h.fails(qmi.WDS, w3, qmi.WDSStartNetwork, func(b *qmi.Builder) { b.TLVString(0x14, "ims") }, qmi.ErrCallFailed)
	tlv(t, f, 0x10)
	// The same call from another client: NoEffect, and the client can
	// stop it with the global handle (what ModemManager does).
	h.fails(qmi.WDS, w3, qmi.WDSStartNetwork, startV4, qmi.ErrNoEffect)
	h.ok(qmi.WDS, w6, qmi.WDSStopNetwork, func(b *qmi.Builder) { b.TLVU32(0x01, h6) })
	if s := h.m.Session(); !s.Active || s.Type != IPv4 {
		t.Fatalf("after stopping IPv6: %+v", s)
	}
	h.ok(qmi.WDS, w4, qmi.WDSStopNetwork, func(b *qmi.Builder) { b.TLVU32(0x01, h4) })
	if !h.m.Session().Active {
		t.Fatal("session ended while another client holds it")
	}
	h.ok(qmi.WDS, w3, qmi.WDSStopNetwork, func(b *qmi.Builder) { b.TLVU32(0x01, wdsGlobalHandle) })
	if h.m.Session().Active || h.m.DataAllowed() {
		t.Fatal("session up after its last call stopped")
	}

	// A session QMI did not start (MBIM's) is never ended by QMI.
	if _, err := h.m.Connect("internet", IPv4); err != nil {
		t.Fatal(err)
	}
	h.fails(qmi.WDS, w4, qmi.WDSStartNetwork, startV4, qmi.ErrNoEffect)
	h.ok(qmi.WDS, w4, qmi.WDSStopNetwork, func(b *qmi.Builder) { b.TLVU32(0x01, wdsGlobalHandle) })
	if !h.m.Session().Active {
		t.Fatal("QMI ended a session MBIM started")
	}
}

func TestQMIWDA(t *testing.T) {
	h := newQMITester(t, Config{}, QMIOptions{})
	wda := h.alloc(qmi.WDA)
	check := func(f qmi.Frame) {
		t.Helper()
		if tlvU32(t, f, 0x11) != wdaLinkRawIP || tlvU32(t, f, 0x12) != wdaAggDisabled || tlvU32(t, f, 0x13) != wdaAggDisabled {
			t.Fatalf("data format %x", f.TLVs)
		}
	}
	check(h.ok(qmi.WDA, wda, qmi.WDAGetDataFormat, nil))
	check(h.ok(qmi.WDA, wda, qmi.WDAGetDataFormat, func(b *qmi.Builder) {
		b.Begin(0x10)
		b.Put32(3) // PCIe
		b.Put32(0)
		b.End()
	}))
	check(h.ok(qmi.WDA, wda, qmi.WDASetDataFormat, func(b *qmi.Builder) {
		b.TLVU32(0x11, wdaLinkRawIP)
		b.TLVU32(0x12, 0)
		b.TLVU32(0x13, 0)
	}))
	h.fails(qmi.WDA, wda, qmi.WDASetDataFormat, func(b *qmi.Builder) { b.TLVU32(0x13, 7) }, qmi.ErrInvalidDataFormat)
	h.fails(qmi.WDA, wda, qmi.WDASetDataFormat, func(b *qmi.Builder) { b.TLVU32(0x11, 1) }, qmi.ErrInvalidDataFormat)
	check(h.ok(qmi.WDA, wda, qmi.WDAGetDataFormat, nil)) // refusals changed nothing
	// QMAP (multiplexed sessions by mux id) is accepted, recorded and
	// reported.
	f := h.ok(qmi.WDA, wda, qmi.WDASetDataFormat, func(b *qmi.Builder) {
		b.TLVU32(0x11, wdaLinkRawIP)
		b.TLVU32(0x12, wdaAggQMAP)
		b.TLVU32(0x13, wdaAggQMAP)
	})
	g := h.ok(qmi.WDA, wda, qmi.WDAGetDataFormat, nil)
	for _, fr := range []qmi.Frame{f, g} {
		if tlvU32(t, fr, 0x12) != wdaAggQMAP || tlvU32(t, fr, 0x13) != wdaAggQMAP {
			t.Fatalf("data format after QMAP set %x", fr.TLVs)
		}
	}
}

// TestQMIBadInput: malformed frames are dropped or answered, counted, and
// the channel keeps working.
func TestQMIBadInput(t *testing.T) {
	h := newQMITester(t, Config{}, QMIOptions{})
	dms := h.alloc(qmi.DMS)
	for _, junk := range [][]byte{
		{0x7e, 0x01, 0x02},                   // not QMUX
		{0x01, 0x20, 0x00, 0x00, 0x02},       // truncated
		{0x01, 0x03, 0x00, 0x00},             // QMUX length below the header
		{0x01, 0x06, 0x00, 0x00, 0x02, 1, 0}, // service SDU header cut
	} {
		h.r.write(QMIName, junk)
	}
	// An empty transfer (a zero-length element, which the host stack does
	// not queue), handed over as the device does.
	if err := h.q.receive(context.Background(), h.q.portFor(nil), nil, nil); err != nil {
		t.Fatal(err)
	}
	// A request with bad TLVs is answered MalformedMessage.
	bad := []byte{0x01, 0x0f, 0x00, 0x00, 0x02, dms, 0x00, 0x42, 0x00, 0x22, 0x00, 0x03, 0x00, 0x01, 0x09, 0x00}
	h.r.write(QMIName, bad)
	f := h.next()
	if res, _ := f.TLVs.Result(); f.TID != 0x42 || f.Message != qmi.DMSGetModel || res.Code != qmi.ErrMalformedMessage {
		t.Fatalf("answer to bad TLVs: %s tid %d %+v", f.Name(), f.TID, res)
	}
	// A response from the host is not answered.
	var b qmi.Builder
	b.Start(nil, qmi.Header{Service: qmi.DMS, Client: dms, Type: qmi.Response, TID: 9, Message: qmi.DMSGetModel})
	b.Result(qmi.Success)
	resp, _ := b.Finish()
	h.r.write(QMIName, resp)
	// Two requests in one transfer get two answers.
	var two []byte
	for tid := uint16(100); tid < 102; tid++ {
		b.Start(two, qmi.Header{Service: qmi.DMS, Client: dms, Type: qmi.Request, TID: tid, Message: qmi.DMSGetModel})
		two, _ = b.Finish()
	}
	h.r.write(QMIName, two)
	for tid := uint16(100); tid < 102; tid++ {
		if f := h.next(); f.TID != tid || string(tlv(t, f, 0x01)) != h.m.Identity().Model {
			t.Fatalf("answer %d: %s tid %d", tid, f.Name(), f.TID)
		}
	}
	h.fails(qmi.WDS, 5, qmi.WDSStartNetwork, startV4, qmi.ErrInvalidClientID) // never allocated
	h.fails(qmi.Service(0x2B), 1, 0x20, nil, qmi.ErrInvalidClientID)          // service not implemented
	h.ok(qmi.DMS, dms, qmi.DMSGetModel, nil)

	st := h.q.Stats()
	if st.FramesIn != st.Responses+st.Dropped {
		t.Fatalf("conservation: in %d != responses %d + dropped %d", st.FramesIn, st.Responses, st.Dropped)
	}
	want := map[string]uint64{"marker": 1, "truncated": 1, "qmux_length": 1, "sdu_header": 1, "not_request": 1}
	for k, n := range want {
		if st.Errors[k] != n {
			t.Errorf("errors[%s] = %d, want %d (%v)", k, st.Errors[k], n, st.Errors)
		}
	}
	if st.Malformed != 1 || st.ErrorCodes["MalformedMessage"] != 1 || st.ErrorCodes["InvalidClientId"] != 2 {
		t.Fatalf("stats %+v", st)
	}
	if dst := h.r.dev.Stats(); dst.ULDiscarded != 0 {
		t.Fatalf("device discarded %d uplink transfers", dst.ULDiscarded)
	}
}

// TestQMIIndicationsAcrossReopen: a port closed and opened again (the
// host's last close and next open reset the channels) keeps its clients,
// as a modem does; indications for a closed port are dropped and counted.
// TestQMIMandatoryArgumentSize checks that a request whose mandatory TLV
// is present but one byte short or long is answered MissingArgument, like
// one without it.
func TestQMIMandatoryArgumentSize(t *testing.T) {
	h := newQMITester(t, Config{}, QMIOptions{})
	dms, nas, wds := h.alloc(qmi.DMS), h.alloc(qmi.NAS), h.alloc(qmi.WDS)
	cases := []struct {
		svc  qmi.Service
		cid  uint8
		msg  qmi.MessageID
		size int // of TLV 0x01
	}{
		{qmi.CTL, 0, qmi.CTLAllocateCID, 1},
		{qmi.CTL, 0, qmi.CTLReleaseCID, 2},
		{qmi.DMS, dms, qmi.DMSSetOperatingMode, 1},
		{qmi.DMS, dms, qmi.DMSUIMGetCKStatus, 1},
		{qmi.NAS, nas, qmi.NASGetPLMNName, 4},
		{qmi.WDS, wds, qmi.WDSStopNetwork, 4},
		{qmi.WDS, wds, qmi.WDSSetIPFamily, 1},
		{qmi.WDS, wds, qmi.WDSGetProfileSettings, 2},
		{qmi.WDS, wds, qmi.WDSGetPacketStatistics, 4},
	}
	for _, c := range cases {
		for _, n := range []int{c.size - 1, c.size + 1} {
			v := make([]byte, n)
			h.fails(c.svc, c.cid, c.msg, func(b *qmi.Builder) { b.TLV(0x01, v) }, qmi.ErrMissingArgument)
		}
	}
}

func TestQMIIndicationsAcrossReopen(t *testing.T) {
	h := newQMITester(t, Config{}, QMIOptions{})
	wds := h.alloc(qmi.WDS)
	h.ok(qmi.WDS, wds, qmi.WDSStartNetwork, startV4)
	h.indication(qmi.WDS, wds, qmi.WDSGetPacketServiceStatus)
	h.r.close(QMIName)
	h.m.Disconnect()
	waitUntil(t, "dropped indication", func() bool { return h.q.Stats().IndicationsDropped == 1 })
	h.r.open(QMIName)
	if st := tlv(t, h.ok(qmi.WDS, wds, qmi.WDSGetPacketServiceStatus, nil), 0x01)[0]; st != wdsDisconnected {
		t.Fatalf("status %d", st)
	}
}

func TestNewQMIOptions(t *testing.T) {
	m, _ := New(Config{})
	if _, err := NewQMI(nil, QMIOptions{}); !errors.Is(err, ErrQMIConfig) {
		t.Fatal(err)
	}
	if _, err := NewQMI(m, QMIOptions{MaxClients: 255}); !errors.Is(err, ErrQMIConfig) {
		t.Fatal(err)
	}
}

// qmiFuzzSeeds are request sequences (several frames in one transfer)
// that reach the deeper states.
func qmiFuzzSeeds() [][]byte {
	type seedReq struct {
		h    qmi.Header
		tlvs func(b *qmi.Builder)
	}
	var out [][]byte
	add := func(reqs ...seedReq) {
		var b qmi.Builder
		var buf []byte
		for i, r := range reqs {
			h := r.h
			h.TID = uint16(i + 1)
			b.Start(buf, h)
			if r.tlvs != nil {
				r.tlvs(&b)
			}
			buf = mustFinish(&b)
		}
		out = append(out, buf)
	}
	alloc := func(svc qmi.Service) seedReq {
		return seedReq{qmi.Header{Service: qmi.CTL, Message: qmi.CTLAllocateCID},
			func(b *qmi.Builder) { b.TLVU8(0x01, uint8(svc)) }}
	}
	req := func(svc qmi.Service, msg qmi.MessageID, tlvs func(b *qmi.Builder)) seedReq {
		return seedReq{qmi.Header{Service: svc, Client: 1, Message: msg}, tlvs}
	}
	add(alloc(qmi.WDS), req(qmi.WDS, qmi.WDSStartNetwork, startV4), req(qmi.WDS, qmi.WDSGetCurrentSettings, nil),
		req(qmi.WDS, qmi.WDSStopNetwork, func(b *qmi.Builder) { b.TLVU32(0x01, 1) }))
	add(alloc(qmi.DMS), req(qmi.DMS, qmi.DMSGetIDs, nil), req(qmi.DMS, qmi.DMSSetOperatingMode, func(b *qmi.Builder) { b.TLVU8(1, 1) }))
	add(alloc(qmi.NAS), req(qmi.NAS, qmi.NASRegisterIndications, func(b *qmi.Builder) { b.TLVU8(0x13, 1) }),
		req(qmi.NAS, qmi.NASGetServingSystem, nil), req(qmi.NAS, qmi.NASGetSystemInfo, nil))
	add(alloc(qmi.WDA), req(qmi.WDA, qmi.WDASetDataFormat, func(b *qmi.Builder) { b.TLVU32(0x11, 2) }))
	add(seedReq{h: qmi.Header{Service: qmi.CTL, Message: qmi.CTLSync}})
	return out
}

func mustFinish(b *qmi.Builder) []byte {
	out, err := b.Finish()
	if err != nil {
		panic(err)
	}
	return out
}

// FuzzQMIAnswer: whatever the host writes, the QMI function never panics;
// every frame it sends is one libqmi accepts, from the modem, a response
// to a request of the transfer (same service, client, transaction and
// message, with a result TLV) or an indication; and every frame in is
// answered or counted as dropped.
func FuzzQMIAnswer(f *testing.F) {
	for _, s := range qmiFuzzSeeds() {
		f.Add(s)
	}
	f.Add([]byte{0x01, 0x0f, 0x00, 0x00, 0x02, 0x01, 0x00, 0x42, 0x00, 0x22, 0x00, 0x03, 0x00, 0x01, 0x09, 0x00})
	f.Add([]byte{0x7e, 0x00})
	f.Fuzz(func(t *testing.T, data []byte) {
		m, _ := New(Config{RequireConnect: true})
		q, _ := NewQMI(m, QMIOptions{MaxClients: 4})
		port := q.portFor(nil)
		type key struct {
			svc qmi.Service
			cid uint8
			tid uint16
			msg qmi.MessageID
		}
		var asked []key
		for rest := data; len(rest) > 0; {
			n, err := qmi.FrameLen(rest)
			if err != nil || n > len(rest) {
				break
			}
			if fr, err := qmi.ParseFrame(rest[:n]); (err == nil || errors.Is(err, qmi.ErrTLVLength) || errors.Is(err, qmi.ErrTLVOverrun)) &&
				!errors.Is(err, qmi.ErrSDUHeader) {
				asked = append(asked, key{fr.Service, fr.Client, fr.TID, fr.Message})
			}
			rest = rest[n:]
		}
		responses := 0
		err := q.receive(context.Background(), port, data, func(b []byte) error {
			fr, err := qmi.ParseFrame(b)
			if err != nil {
				t.Fatalf("sent a frame libqmi rejects: %v\n%x", err, b)
			}
			if fr.QMUXFlags != qmi.QMUXFromModem {
				t.Fatal("frame without the modem flag")
			}
			switch fr.Type() {
			case qmi.Indication:
				return nil
			case qmi.Response:
			default:
				t.Fatalf("sent a %v", fr.Type())
			}
			if _, err := fr.TLVs.Result(); err != nil {
				t.Fatalf("%s without result: %v", fr.Name(), err)
			}
			if !slices.Contains(asked, key{fr.Service, fr.Client, fr.TID, fr.Message}) {
				t.Fatalf("response %s client %d tid %d to nothing asked", fr.Name(), fr.Client, fr.TID)
			}
			responses++
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		st := q.Stats()
		if st.FramesIn != st.Responses+st.Dropped || int(st.Responses) != responses {
			t.Fatalf("conservation: in %d, responses %d (%d seen), dropped %d", st.FramesIn, st.Responses, responses, st.Dropped)
		}
	})
}
