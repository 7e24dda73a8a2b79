package modem

import (
	"errors"
	"net/netip"
	"strings"

	"github.com/gomhi/gomhi/mhi/proto/qmi"
)

// This file answers the DMS, NAS, WDS and WDA messages. TLV numbers and
// value layouts follow libqmi 1.32's data/qmi-service-*.json (see
// shared/reference/control-facts.md §2). Every handler runs with q.mu held
// and starts its response with r.ok() or r.fail().

// DMS operating modes.
const (
	dmsModeOnline             = 0
	dmsModeLowPower           = 1
	dmsModeOffline            = 3
	dmsModePersistentLowPower = 6
	dmsModeOnlyLowPower       = 7
)

// Radio interfaces and capabilities.
const (
	dmsRadioUMTS      = 5
	dmsRadioLTE       = 8
	dmsDataCapCSPS    = 3 // simultaneous CS and PS
	dmsSIMSupported   = 2
	dmsPINDisabled    = 3
	nasRadioLTE       = 8
	nasDataCapLTE     = 0x0B
	nasRegistered     = 1
	nasNotRegistered  = 0
	nasAttached       = 1
	nasDetached       = 2
	nasNetwork3GPP    = 2
	nasRoamingOff     = 1 // roaming indicator "off"
	nasDomainCSPS     = 3
	nasServiceNone    = 0
	nasServiceFull    = 2
	nasRoamStatusOff  = 0
	dmsBandWCDMA2100  = 1 << 22
	dmsLTEBands       = 1<<0 | 1<<2 | 1<<6 | 1<<19 // E-UTRA bands 1, 3, 7, 20
	mockCellID        = 0x01A2B3C
	mockTAC           = 0x0101
	qmiMaxTxRate      = 50_000_000
	qmiMaxRxRate      = 150_000_000
	wdsFamilyIPv4     = 4
	wdsFamilyIPv6     = 6
	wdsFamilyUnspec   = 8
	wdsConnected      = 2
	wdsDisconnected   = 1
	wdsPDPTypeIPv4    = 0
	wdsPDPTypeIPv6    = 2
	wdsGlobalHandle   = 0xFFFFFFFF
	wdsIPv6HandleBit  = 1 << 30
	wdaLinkRawIP      = 2
	wdaAggDisabled    = 0
	wdsVerbose3GPP    = 6
	wds3GPPUnknownAPN = 27
	// NAS system selection and technology preferences.
	nasRatUMTS           = 1 << 3
	nasRatLTE            = 1 << 4
	nasTechPref3GPP      = 1 << 1
	nasTechPrefWCDMA     = 1 << 3
	nasTechPrefLTE       = 1 << 5
	nasRadioUMTS         = 5
	nasNetSelAutomatic   = 0
	nasServiceDomainCSPS = 2
	nasEncodingASCII7    = 1
	// DMS personalisation facility state "deactivated".
	dmsFacilityDeactivated = 0
	// WDS profiles: the one 3GPP profile (the default attach PDN).
	wdsProfile3GPP          = 0
	wdsDefaultProfile       = 1
	wdsPDPTypeIPv4OrIPv6    = 3
	wdsIPSupportIPv4v6      = 2
	wdsAuthNone             = 0
	wdsStatsTxPacketsOK     = 1 << 0
	wdsStatsRxPacketsOK     = 1 << 1
	wdsStatsTxPacketsErrors = 1 << 2
	wdsStatsRxPacketsErrors = 1 << 3
	wdsStatsTxBytesOK       = 1 << 6
	wdsStatsRxBytesOK       = 1 << 7
	wdsStatsTxDropped       = 1 << 8
	wdsStatsRxDropped       = 1 << 9
)

// WDS call end reasons (QmiWdsCallEndReason).
const (
	wdsCERUnspecified   = 1
	wdsCERClientEnd     = 2
	wdsCERNoService     = 3
	wdsCERReleaseNormal = 5
	// wdsCERPDNHeld is the call-end reason the reports of a modem whose
	// own autoconnect holds the default PDN show (OpenMPTCProuter #4030,
	// QModem #251).
	wdsCERPDNHeld = 241
)

// dms answers DMS requests.
func (q *QMI) dms(r *qmiReq) {
	id := q.m.Identity()
	str := func(s string) {
		r.ok()
		r.b.TLVString(0x01, s)
	}
	switch r.f.Message {
	case qmi.DMSGetCapabilities:
		dmsCapabilities(r)
	case qmi.DMSGetManufacturer:
		str(id.Manufacturer)
	case qmi.DMSGetModel:
		str(id.Model)
	case qmi.DMSGetRevision, qmi.DMSGetSoftwareVersion:
		str(id.Firmware)
	case qmi.DMSGetHardwareRevision:
		str(id.Hardware)
	case qmi.DMSGetIDs:
		r.ok()
		r.b.TLVString(0x11, id.IMEI)
	case qmi.DMSGetMSISDN:
		if id.MSISDN == "" {
			r.fail(qmi.ErrNotProvisioned)
			return
		}
		str(id.MSISDN)
	case qmi.DMSUIMGetICCID:
		str(id.ICCID)
	case qmi.DMSUIMGetIMSI:
		str(id.IMSI)
	case qmi.DMSUIMGetPINStatus:
		dmsPINStatus(r)
	case qmi.DMSGetPowerState:
		r.ok()
		r.b.Begin(0x01)
		r.b.Put8(1)   // external power
		r.b.Put8(100) // battery level
		r.b.End()
	case qmi.DMSGetBandCapabilities:
		dmsBandCapabilities(r)
	case qmi.DMSGetOperatingMode:
		mode := uint8(dmsModeOnline)
		if !q.m.Radio() {
			mode = q.offMode
		}
		r.ok()
		r.b.TLVU8(0x01, mode)
	case qmi.DMSSetOperatingMode:
		q.setOperatingMode(r)
	case qmi.DMSUIMGetCKStatus:
		dmsCKStatus(r)
	case qmi.DMSSetEventReport:
		r.ok() // accepted; the mock sends no DMS event reports
	default:
		r.unsupported()
	}
}

// dmsCapabilities answers GET_CAPABILITIES: rates, data and SIM
// capabilities, the radio interfaces (UMTS, LTE).
func dmsCapabilities(r *qmiReq) {
	r.ok()
	r.b.Begin(0x01)
	r.b.Put32(qmiMaxTxRate)
	r.b.Put32(qmiMaxRxRate)
	r.b.Put8(dmsDataCapCSPS)
	r.b.Put8(dmsSIMSupported)
	r.b.Put8(2)
	r.b.Put8(dmsRadioUMTS)
	r.b.Put8(dmsRadioLTE)
	r.b.End()
}

// dmsPINStatus answers UIM_GET_PIN_STATUS: PIN1 and PIN2 disabled, 3
// tries, 10 unblock tries.
func dmsPINStatus(r *qmiReq) {
	r.ok()
	for _, typ := range []uint8{0x11, 0x12} {
		r.b.Begin(typ)
		r.b.Put8(dmsPINDisabled)
		r.b.Put8(3)
		r.b.Put8(10)
		r.b.End()
	}
}

// dmsBandCapabilities answers GET_BAND_CAPABILITIES: WCDMA 2100 and the
// LTE bands of dmsLTEBands.
func dmsBandCapabilities(r *qmiReq) {
	r.ok()
	r.b.Begin(0x01)
	r.b.Put64(dmsBandWCDMA2100)
	r.b.End()
	r.b.Begin(0x10)
	r.b.Put64(dmsLTEBands)
	r.b.End()
}

// setOperatingMode answers SET_OPERATING_MODE: online switches the radio
// on, the low-power and offline modes switch it off (and are remembered
// for GET_OPERATING_MODE).
func (q *QMI) setOperatingMode(r *qmiReq) {
	v, ok := r.arg(0x01, 1)
	if !ok {
		return
	}
	switch v[0] {
	case dmsModeOnline:
		if err := q.m.PowerRadio(true); err != nil {
			r.fail(qmi.ErrInvalidTransition) // FCC-locked: what ModemManager reads as the lock
			return
		}
	case dmsModeLowPower, dmsModeOffline, dmsModePersistentLowPower, dmsModeOnlyLowPower:
		q.offMode = v[0]
		q.m.SetRadio(false)
	default:
		r.fail(qmi.ErrInvalidArgument) // factory test, reset, shutting down: not modelled
		return
	}
	r.ok()
}

// dmsCKStatus answers UIM_GET_CK_STATUS: no personalisation (network,
// provider, corporate… locks) is active on the mock's SIM.
func dmsCKStatus(r *qmiReq) {
	if _, ok := r.arg(0x01, 1); !ok {
		return
	}
	r.ok()
	r.b.Begin(0x01)
	r.b.Put8(dmsFacilityDeactivated)
	r.b.Put8(3)  // verify retries left
	r.b.Put8(10) // unblock retries left
	r.b.End()
}

// plmn splits a provider id "MCCMNC" into numbers; ok is false when it is
// not 5 or 6 digits.
func plmn(id string) (mcc, mnc uint16, mncDigits int, ok bool) {
	if len(id) != 5 && len(id) != 6 {
		return 0, 0, 0, false
	}
	for i := range len(id) {
		if id[i] < '0' || id[i] > '9' {
			return 0, 0, 0, false
		}
	}
	n := func(s string) uint16 {
		v := uint16(0)
		for i := range len(s) {
			v = v*10 + uint16(s[i]-'0')
		}
		return v
	}
	return n(id[:3]), n(id[3:]), len(id) - 3, true
}

// putServingSystem writes the NAS serving system TLVs of the response or
// the indication (they share the first ones).
func (q *QMI) putServingSystem(b *qmi.Builder, sv qmiServing, indication bool) {
	id := q.m.Identity()
	b.Begin(0x01)
	if sv.registered {
		b.Put8(nasRegistered)
		b.Put8(nasAttached) // CS
		if sv.attached {
			b.Put8(nasAttached)
		} else {
			b.Put8(nasDetached)
		}
		b.Put8(nasNetwork3GPP)
		b.Put8(1)
		b.Put8(nasRadioLTE)
	} else {
		b.Put8(nasNotRegistered)
		b.Put8(nasDetached)
		b.Put8(nasDetached)
		b.Put8(0) // unknown network
		b.Put8(0) // no radio interface
	}
	b.End()
	if !sv.registered {
		return
	}
	b.TLVU8(0x10, nasRoamingOff)
	b.Begin(0x11)
	b.Put8(1)
	b.Put8(nasDataCapLTE)
	b.End()
	if mcc, mnc, digits, ok := plmn(id.ProviderID); ok {
		name := id.ProviderName
		if len(name) > 255 {
			name = name[:255]
		}
		b.Begin(0x12)
		b.Put16(mcc)
		b.Put16(mnc)
		b.PutString8(name)
		b.End()
		// MNC PCS digit status: TLV 0x27 in the response, 0x29 in the
		// indication.
		typ := uint8(0x27)
		if indication {
			typ = 0x29
		}
		b.Begin(typ)
		b.Put16(mcc)
		b.Put16(mnc)
		b.Put8(boolByte(digits == 3))
		b.End()
	}
}

// nas answers NAS requests.
func (q *QMI) nas(r *qmiReq) {
	switch r.f.Message {
	case qmi.NASGetServingSystem:
		r.ok()
		q.putServingSystem(&r.b, q.servingLocked(), false)
	case qmi.NASGetHomeNetwork:
		q.homeNetwork(r)
	case qmi.NASGetSignalStrength:
		q.signalStrength(r)
	case qmi.NASGetSignalInfo:
		r.ok()
		if q.m.Radio() {
			rssi, rsrq, rsrp, snr := q.signal()
			r.b.Begin(0x14)
			r.b.Put8(uint8(int8(rssi)))
			r.b.Put8(uint8(int8(rsrq)))
			r.b.Put16(uint16(int16(rsrp)))
			r.b.Put16(uint16(int16(snr)))
			r.b.End()
		}
	case qmi.NASGetSystemInfo:
		r.ok()
		q.putSystemInfo(&r.b)
	case qmi.NASRegisterIndications:
		if v, ok := r.f.TLVs.Find(0x13); ok && len(v) == 1 {
			r.client.servingInds = v[0] != 0
		}
		r.ok()
	case qmi.NASSetEventReport:
		r.ok() // accepted; the mock sends no NAS event reports
	case qmi.NASConfigSignalInfo, qmi.NASConfigSignalInfoV2:
		r.ok() // thresholds accepted; the mock sends no signal info indications
	case qmi.NASGetSystemSelectionPreference:
		nasSystemSelectionPreference(r)
	case qmi.NASSetSystemSelectionPreference:
		setSystemSelectionPreference(r)
	case qmi.NASGetTechnologyPreference:
		r.ok()
		r.b.Begin(0x01)
		r.b.Put16(nasTechPref3GPP | nasTechPrefWCDMA | nasTechPrefLTE)
		r.b.Put8(0) // permanent
		r.b.End()
	case qmi.NASGetPreferredNetworks:
		// The SIM's preferred network list is empty.
		r.ok()
		r.b.Begin(0x10)
		r.b.Put16(0)
		r.b.End()
	case qmi.NASGetPLMNName:
		q.plmnName(r)
	case qmi.NASInitiateNetworkRegister:
		// The mock registers automatically while the radio is on: a
		// request finds it already there (NoEffect, which ModemManager
		// takes as "registered in the wanted network").
		if q.servingLocked().registered {
			r.fail(qmi.ErrNoEffect)
		} else {
			r.fail(qmi.ErrNoNetworkFound)
		}
	default:
		r.unsupported()
	}
}

// homeNetwork answers GET_HOME_NETWORK: the MCC/MNC and name of the
// provider, and whether its MNC has three digits.
func (q *QMI) homeNetwork(r *qmiReq) {
	id := q.m.Identity()
	mcc, mnc, digits, ok := plmn(id.ProviderID)
	if !ok {
		r.fail(qmi.ErrInformationUnavailable)
		return
	}
	r.ok()
	r.b.Begin(0x01)
	r.b.Put16(mcc)
	r.b.Put16(mnc)
	name := id.ProviderName
	if len(name) > 255 {
		name = name[:255]
	}
	r.b.PutString8(name)
	r.b.End()
	r.b.Begin(0x12)
	r.b.Put8(1) // 3GPP
	r.b.Put8(boolByte(digits == 3))
	r.b.End()
}

// signalStrength answers GET_SIGNAL_STRENGTH (LTE values); it fails while
// the radio is off.
func (q *QMI) signalStrength(r *qmiReq) {
	if !q.m.Radio() {
		r.fail(qmi.ErrNoNetworkFound)
		return
	}
	rssi, rsrq, rsrp, snr := q.signal()
	r.ok()
	r.b.Begin(0x01)
	r.b.Put8(uint8(int8(rssi)))
	r.b.Put8(nasRadioLTE)
	r.b.End()
	r.b.Begin(0x11) // RSSI list: one LTE entry, value in -dBm
	r.b.Put16(1)
	r.b.Put8(uint8(-rssi))
	r.b.Put8(nasRadioLTE)
	r.b.End()
	r.b.Begin(0x16)
	r.b.Put8(uint8(int8(rsrq)))
	r.b.Put8(nasRadioLTE)
	r.b.End()
	r.b.TLVU16(0x17, uint16(int16(snr)))
	r.b.TLVU16(0x18, uint16(int16(rsrp)))
}

// setSystemSelectionPreference answers SET_SYSTEM_SELECTION_PREFERENCE.
// ModemManager sends it to register automatically (network selection
// TLV 0x16: mode 0, MCC and MNC 0), as when a connect comes while the modem
// is still enabling; a real modem takes it, and one that refuses makes
// ModemManager hold every domain idle until the next enable. The mock
// takes automatic selection, and a manual one of its own network (it has
// no other): it registers by itself either way, and GET keeps answering
// its fixed preferences. Other preferences (modes, bands) are accepted and
// not modelled.
func setSystemSelectionPreference(r *qmiReq) {
	v, ok := r.f.TLVs.Find(0x16)
	if !ok {
		r.ok()
		return
	}
	if len(v) != 5 {
		r.fail(qmi.ErrMalformedMessage)
		return
	}
	mode, mcc, mnc := v[0], uint16(v[1])|uint16(v[2])<<8, uint16(v[3])|uint16(v[4])<<8
	if mode != nasNetSelAutomatic {
		own, ownMNC, _, ok := plmn(r.q.m.Identity().ProviderID)
		if !ok || mcc != own || mnc != ownMNC {
			r.fail(qmi.ErrNoNetworkFound)
			return
		}
	}
	r.ok()
}

// nasSystemSelectionPreference answers GET_SYSTEM_SELECTION_PREFERENCE:
// UMTS and LTE, every supported band, automatic network selection, LTE
// acquired first.
func nasSystemSelectionPreference(r *qmiReq) {
	r.ok()
	r.b.TLVU8(0x10, 0) // not in emergency mode
	r.b.TLVU16(0x11, nasRatUMTS|nasRatLTE)
	r.b.Begin(0x12)
	r.b.Put64(dmsBandWCDMA2100) // the same bit as DMS band capabilities
	r.b.End()
	r.b.Begin(0x15)
	r.b.Put64(dmsLTEBands)
	r.b.End()
	r.b.TLVU8(0x16, nasNetSelAutomatic)
	r.b.TLVU32(0x18, nasServiceDomainCSPS)
	r.b.Begin(0x1C) // acquisition order: LTE, then UMTS
	r.b.Put8(2)
	r.b.Put8(nasRadioLTE)
	r.b.Put8(nasRadioUMTS)
	r.b.End()
}

// plmnName answers GET_PLMN_NAME: the home network's name for its own
// MCC/MNC (the network the mock registers on), InformationUnavailable for
// any other.
func (q *QMI) plmnName(r *qmiReq) {
	v, ok := r.arg(0x01, 4)
	if !ok {
		return
	}
	rd := qmi.NewReader(v)
	mcc, mnc := rd.U16(), rd.U16()
	id := q.m.Identity()
	hmcc, hmnc, _, ok := plmn(id.ProviderID)
	if !ok || mcc != hmcc || mnc != hmnc {
		r.fail(qmi.ErrInformationUnavailable)
		return
	}
	name := id.ProviderName
	if len(name) > 255 {
		name = name[:255]
	}
	r.ok()
	r.b.Begin(0x10) // 3GPP EONS PLMN name: SPN, short and long name, ASCII
	r.b.Put8(nasEncodingASCII7)
	r.b.PutString8(name)
	for range 2 {
		r.b.Put8(nasEncodingASCII7)
		r.b.Put8(0) // country initials not added
		r.b.Put8(0) // no spare bits
		r.b.PutString8(name)
	}
	r.b.End()
}

// signal derives LTE measurements from the Modem's 0–31 RSSI: RSSI in
// dBm as +CSQ defines it, RSRP about 31 dB below (a 20 MHz carrier),
// RSRQ -10 dB, SNR in tenths of a dB.
func (q *QMI) signal() (rssi, rsrq, rsrp, snr int) {
	v := q.m.RSSI()
	if v > 31 {
		v = 0
	}
	rssi = -113 + 2*v
	rsrp = max(rssi-31, -140)
	return rssi, -10, rsrp, (v - 10) * 10
}

// putSystemInfo writes GET_SYSTEM_INFO's LTE TLVs.
func (q *QMI) putSystemInfo(b *qmi.Builder) {
	sv := q.servingLocked()
	b.Begin(0x14) // LTE service status
	if sv.registered {
		b.Put8(nasServiceFull)
		b.Put8(nasServiceFull)
	} else {
		b.Put8(nasServiceNone)
		b.Put8(nasServiceNone)
	}
	b.Put8(0) // preferred data path
	b.End()
	if !sv.registered {
		return
	}
	mcc, mnc, idOK := "", "", false
	if id := q.m.Identity().ProviderID; len(id) == 5 || len(id) == 6 {
		if _, _, _, ok := plmn(id); ok {
			mcc, mnc, idOK = id[:3], id[3:], true
		}
	}
	b.Begin(0x19) // LTE system info v2
	b.Put8(1)     // domain valid
	b.Put8(nasDomainCSPS)
	b.Put8(1) // service capability valid
	b.Put8(nasDomainCSPS)
	b.Put8(1) // roaming status valid
	b.Put8(nasRoamStatusOff)
	b.Put8(1) // forbidden valid
	b.Put8(0)
	b.Put8(0) // LAC not valid (LTE)
	b.Put16(0)
	b.Put8(1) // cell id valid
	b.Put32(mockCellID)
	b.Put8(0) // no registration reject
	b.Put8(0)
	b.Put8(0)
	b.Put8(boolByte(idOK)) // network id valid
	if idOK {
		b.PutString(mcc)
		b.PutString(mnc)
		if len(mnc) == 2 {
			b.Put8(0xFF) // a two-digit MNC is padded with 0xFF
		}
	} else {
		b.PutBytes([]byte{0, 0, 0, 0, 0, 0})
	}
	b.Put8(1) // TAC valid
	b.Put16(mockTAC)
	b.End()
}

func boolByte(v bool) uint8 {
	if v {
		return 1
	}
	return 0
}

// wdsFamily decodes a QMI IP family.
func wdsFamily(v uint8) (IPType, bool) {
	switch v {
	case wdsFamilyIPv4, wdsFamilyUnspec:
		return IPv4, true
	case wdsFamilyIPv6:
		return IPv6, true
	}
	return 0, false
}

func wdsFamilyByte(t IPType) uint8 {
	if t == IPv6 {
		return wdsFamilyIPv6
	}
	return wdsFamilyIPv4
}

// callHandle is the packet data handle of a session's call of one family:
// the Modem's session ID, with bit 30 set for the IPv6 call.
func callHandle(session uint32, family IPType) uint32 {
	if family == IPv6 {
		return session | wdsIPv6HandleBit
	}
	return session
}

// wdsPacketStatusInd builds a PACKET_SERVICE_STATUS indication.
func wdsPacketStatusInd(cid uint8, connected bool, family IPType, reason uint16) qmiIndication {
	return qmiIndication{svc: qmi.WDS, cid: cid, msg: qmi.WDSGetPacketServiceStatus, build: func(b *qmi.Builder) {
		b.Begin(0x01)
		if connected {
			b.Put8(wdsConnected)
		} else {
			b.Put8(wdsDisconnected)
		}
		b.Put8(0) // no reconfiguration required
		b.End()
		if !connected {
			b.TLVU16(0x10, reason)
		}
		b.TLVU8(0x12, wdsFamilyByte(family))
	}}
}

// callsLocked returns the QMI calls (all ports) on session id.
func (q *QMI) callsLocked(id uint32) (n int, has4, has6 bool) {
	for _, port := range q.ports {
		for _, c := range port.clients {
			if c.call != nil && c.call.session == id {
				n++
				has4 = has4 || c.call.family == IPv4
				has6 = has6 || c.call.family == IPv6
			}
		}
	}
	return n, has4, has6
}

// dropCallLocked ends c's call: when no QMI call is left on the session
// and QMI connected it, the session is disconnected (that session only);
// when one family is left of a dual-stack session, the session narrows
// to it.
func (q *QMI) dropCallLocked(c *qmiClient) {
	call := c.call
	c.call = nil
	s := q.m.SessionOf(call.num)
	if !s.Active || s.ID != call.session {
		delete(q.own, call.session)
		return
	}
	n, has4, has6 := q.callsLocked(call.session)
	switch {
	case n == 0 && q.own[call.session]:
		q.m.disconnectID(call.session)
		delete(q.own, call.session)
	case n > 0 && s.Type == IPv4v6 && !(has4 && has6):
		t := IPv4
		if has6 {
			t = IPv6
		}
		_, _ = q.m.setSessionType(call.session, t)
	}
}

// wds answers WDS requests.
func (q *QMI) wds(r *qmiReq) {
	c := r.client
	switch r.f.Message {
	case qmi.WDSStartNetwork:
		q.startNetwork(r)
	case qmi.WDSStopNetwork:
		q.stopNetwork(r)
	case qmi.WDSGetPacketServiceStatus:
		r.ok()
		st := uint8(wdsDisconnected)
		if q.clientConnected(c) {
			st = wdsConnected
		}
		r.b.TLVU8(0x01, st)
	case qmi.WDSGetCurrentSettings:
		q.currentSettings(r)
	case qmi.WDSBindMuxDataPort:
		q.bindMuxDataPort(r)
	case qmi.WDSSetIPFamily:
		setIPFamily(r)
	case qmi.WDSSetEventReport, qmi.WDSIndicationRegister:
		c.wdsEvents = true
		r.ok() // packet service status indications go to call holders anyway
	case qmi.WDSGetAutoconnectSettings:
		r.ok()
		if q.m.PDNHeld() {
			r.b.TLVU8(0x01, 1) // enabled: it holds the default PDN
		} else {
			r.b.TLVU8(0x01, 0) // autoconnect disabled
		}
	case qmi.WDSSetAutoconnectSettings:
		if v, ok := r.f.TLVs.Find(0x01); ok && len(v) == 1 && v[0] == 0 {
			q.m.ReleasePDN()
		}
		r.ok()
	case qmi.WDSGetLTEAttachPDNList:
		r.ok()
		r.b.Begin(0x10) // current list: the default profile
		r.b.Put8(1)
		r.b.Put16(wdsDefaultProfile)
		r.b.End()
	case qmi.WDSGetLTEAttachParameters:
		// The network attached with the default profile: no APN (the
		// network's default), IPv4v6.
		r.ok()
		r.b.TLVString(0x10, "")
		r.b.TLVU8(0x11, wdsIPSupportIPv4v6)
		r.b.TLVU8(0x12, 1) // attach performed over the air
	case qmi.WDSGetProfileList:
		wdsProfileList(r)
	case qmi.WDSGetProfileSettings:
		wdsProfileSettings(r)
	case qmi.WDSGetPacketStatistics:
		q.packetStatistics(r)
	default:
		r.unsupported()
	}
}

// stopNetwork answers STOP_NETWORK: the client's call (named by its handle
// or the global one) ends, and a packet status indication says so.
func (q *QMI) stopNetwork(r *qmiReq) {
	c := r.client
	v, ok := r.arg(0x01, 4)
	if !ok {
		return
	}
	rd := qmi.NewReader(v)
	h := rd.U32()
	if c.call == nil && h == wdsGlobalHandle && q.clientSession(c) == 0 && q.m.ReleasePDN() {
		r.ok() // the call the modem's autoconnect held ends
		return
	}
	if c.call == nil {
		r.fail(qmi.ErrNoEffect)
		return
	}
	if h != wdsGlobalHandle && h != c.call.handle {
		r.fail(qmi.ErrInvalidHandle)
		return
	}
	family := c.call.family
	q.dropCallLocked(c)
	r.ok()
	r.post = append(r.post, wdsPacketStatusInd(c.cid, false, family, wdsCERClientEnd))
}

// setIPFamily answers SET_IP_FAMILY: the family of the client's next call.
func setIPFamily(r *qmiReq) {
	v, ok := r.arg(0x01, 1)
	if !ok {
		return
	}
	t, ok := wdsFamily(v[0])
	if !ok {
		r.fail(qmi.ErrInvalidIPFamilyPreference)
		return
	}
	r.client.family = t
	r.ok()
}

// wdsProfileList answers GET_PROFILE_LIST: one 3GPP profile, the default
// attach PDN (unnamed, the network's default APN); no 3GPP2 profiles.
func wdsProfileList(r *qmiReq) {
	typ := uint8(wdsProfile3GPP)
	if v, ok := r.f.TLVs.Find(0x10); ok {
		if len(v) != 1 {
			r.fail(qmi.ErrMalformedMessage)
			return
		}
		typ = v[0]
	}
	r.ok()
	r.b.Begin(0x01)
	if typ == wdsProfile3GPP {
		r.b.Put8(1)
		r.b.Put8(wdsProfile3GPP)
		r.b.Put8(wdsDefaultProfile)
		r.b.PutString8("")
	} else {
		r.b.Put8(0)
	}
	r.b.End()
}

// wdsProfileSettings answers GET_PROFILE_SETTINGS for the one profile
// there is: no APN, IPv4 or IPv6, no authentication.
func wdsProfileSettings(r *qmiReq) {
	v, ok := r.arg(0x01, 2)
	if !ok {
		return
	}
	if v[0] != wdsProfile3GPP || v[1] != wdsDefaultProfile {
		r.fail(qmi.ErrInvalidProfile)
		return
	}
	r.ok()
	r.b.TLVString(0x10, "")
	r.b.TLVU8(0x11, wdsPDPTypeIPv4OrIPv6)
	r.b.TLVString(0x14, "")
	r.b.TLVU8(0x1D, wdsAuthNone)
}

// packetStatistics answers GET_PACKET_STATISTICS from
// QMIOptions.PacketStatistics, the TLVs the request's mask asks for.
func (q *QMI) packetStatistics(r *qmiReq) {
	v, ok := r.arg(0x01, 4)
	if !ok {
		return
	}
	rd := qmi.NewReader(v)
	mask := rd.U32()
	if q.opts.PacketStatistics == nil {
		r.unsupported()
		return
	}
	c := q.opts.PacketStatistics()
	r.ok()
	u32 := func(bit uint32, typ uint8, v uint64) {
		if mask&bit != 0 {
			r.b.TLVU32(typ, uint32(min(v, 0xFFFFFFFF)))
		}
	}
	u64 := func(bit uint32, typ uint8, v uint64) {
		if mask&bit != 0 {
			r.b.Begin(typ)
			r.b.Put64(v)
			r.b.End()
		}
	}
	u32(wdsStatsTxPacketsOK, 0x10, c.TxPackets)
	u32(wdsStatsRxPacketsOK, 0x11, c.RxPackets)
	u32(wdsStatsTxPacketsErrors, 0x12, c.TxErrors)
	u32(wdsStatsRxPacketsErrors, 0x13, c.RxErrors)
	u64(wdsStatsTxBytesOK, 0x19, c.TxBytes)
	u64(wdsStatsRxBytesOK, 0x1A, c.RxBytes)
	u32(wdsStatsTxDropped, 0x1D, c.TxDropped)
	u32(wdsStatsRxDropped, 0x1E, c.RxDropped)
}

// clientFamily is the family a WDS client's settings refer to: its call's,
// else its preference.
func clientFamily(c *qmiClient) IPType {
	if c.call != nil {
		return c.call.family
	}
	return c.family
}

// clientSession is the Modem session number a WDS client's calls are on:
// its call's, else the session of its bound mux id, else 0.
func (q *QMI) clientSession(c *qmiClient) uint8 {
	switch {
	case c.call != nil:
		return c.call.num
	case c.bound:
		return c.num
	}
	return 0
}

// clientConnected reports whether the client's Modem session carries c's
// family (its own call, or a session another client or MBIM connected).
func (q *QMI) clientConnected(c *qmiClient) bool {
	s := q.m.SessionOf(q.clientSession(c))
	if c.call != nil {
		return s.Active && s.ID == c.call.session && sessionHas(s.Type, c.call.family)
	}
	return s.Active && sessionHas(s.Type, c.family)
}

// WDS BIND_MUX_DATA_PORT TLVs.
const (
	wdsTLVEndpoint = 0x10 // {type u32, interface u32}
	wdsTLVMuxID    = 0x11 // u8
	wdsTLVClient   = 0x13 // client type u32
)

// bindMuxDataPort answers BIND_MUX_DATA_PORT: the client's calls go on
// the session whose wire id is the mux id (N = mux − Config.WireBase, a
// mux id below the base read as N = mux). A session beyond the modem's
// limit is refused with InvalidArgument; rebinding a client whose call
// is up to another session with InvalidOperation (stop the call first).
func (q *QMI) bindMuxDataPort(r *qmiReq) {
	c := r.client
	v, ok := r.arg(wdsTLVMuxID, 1)
	if !ok {
		return
	}
	if ep, ok := r.f.TLVs.Find(wdsTLVEndpoint); ok && len(ep) != 8 {
		r.fail(qmi.ErrMalformedMessage)
		return
	}
	if ct, ok := r.f.TLVs.Find(wdsTLVClient); ok && len(ct) != 4 {
		r.fail(qmi.ErrMalformedMessage)
		return
	}
	n := q.m.SessionFromWire(v[0])
	if int(n) >= q.m.MaxSessions() {
		q.log.Info("qmi: mux id beyond the session limit", "mux", v[0], "session", n, "max", q.m.MaxSessions())
		r.fail(qmi.ErrInvalidArgument)
		return
	}
	if c.call != nil && c.call.num != n {
		r.fail(qmi.ErrInvalidOperation)
		return
	}
	c.bound, c.num = true, n
	r.ok()
}

func (q *QMI) startNetwork(r *qmiReq) {
	c := r.client
	apn := ""
	if v, ok := r.f.TLVs.Find(0x14); ok {
		apn = string(v)
	}
	family := c.family
	if v, ok := r.f.TLVs.Find(0x19); ok {
		t, valid := wdsFamily(firstByte(v))
		if !valid || len(v) != 1 {
			r.fail(qmi.ErrInvalidIPFamilyPreference)
			return
		}
		family = t
	}
	callFailed := func(reason uint16, verbose bool) {
		r.fail(qmi.ErrCallFailed)
		r.b.TLVU16(0x10, reason)
		if verbose {
			r.b.Begin(0x11)
			r.b.Put16(wdsVerbose3GPP)
			r.b.Put16(wds3GPPUnknownAPN)
			r.b.End()
		}
	}
	if c.call != nil {
		r.fail(qmi.ErrNoEffect)
		return
	}
	num := q.clientSession(c)
	s := q.m.SessionOf(num)
	switch {
	case s.Active && apn != "" && !strings.EqualFold(apn, s.APN):
		// The client's session carries another PDN: a second PDN goes on
		// another session (a client bound to another mux id).
		callFailed(wdsCERUnspecified, false)
		return
	case s.Active && sessionHas(s.Type, family):
		// The call exists (another client, MBIM, or a client that went
		// away): a real modem answers NoEffect and binds this client to
		// it, so that its STOP_NETWORK (with the global handle) works.
		c.call = &qmiCall{handle: callHandle(s.ID, family), family: family, session: s.ID, num: num}
		r.fail(qmi.ErrNoEffect)
		return
	case s.Active:
		// The other family of a dual-stack session.
		if _, err := q.m.setSessionType(s.ID, IPv4v6); err != nil {
			callFailed(wdsCERUnspecified, false)
			return
		}
	default:
		var err error
		s, err = q.m.ConnectSession(num, apn, family)
		switch {
		case err == nil:
			q.own[s.ID] = true
		case errors.Is(err, ErrNoAPN):
			callFailed(wdsCERUnspecified, true)
			return
		case errors.Is(err, ErrPDNHeld):
			callFailed(wdsCERPDNHeld, false)
			return
		case errors.Is(err, ErrRadioOff), errors.Is(err, ErrDetached):
			callFailed(wdsCERNoService, false)
			return
		default:
			callFailed(wdsCERUnspecified, false)
			return
		}
	}
	c.call = &qmiCall{handle: callHandle(s.ID, family), family: family, session: s.ID, num: num}
	r.ok()
	r.b.TLVU32(0x01, c.call.handle)
	r.post = append(r.post, wdsPacketStatusInd(c.cid, true, family, 0))
}

func firstByte(v []byte) uint8 {
	if len(v) == 0 {
		return 0
	}
	return v[0]
}

// Requested-settings bits of GET_CURRENT_SETTINGS.
const (
	wdsReqPDPType  = 1 << 2
	wdsReqAPN      = 1 << 3
	wdsReqDNS      = 1 << 4
	wdsReqIP       = 1 << 8
	wdsReqGateway  = 1 << 9
	wdsReqMTU      = 1 << 13
	wdsReqIPFamily = 1 << 15
)

// v4le is an IPv4 address as WDS carries it: a u32 written little-endian
// (198.18.0.1 is 0xC6120001, bytes 01 00 12 c6).
func v4le(a netip.Addr) uint32 {
	b := a.As4()
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

func (q *QMI) currentSettings(r *qmiReq) {
	c := r.client
	mask := uint32(0xFFFFFFFF)
	if v, ok := r.f.TLVs.Find(0x10); ok {
		rd := qmi.NewReader(v)
		mask = rd.U32()
		if rd.Finish() != nil {
			r.fail(qmi.ErrMalformedMessage)
			return
		}
	}
	if !q.clientConnected(c) {
		r.fail(qmi.ErrOutOfCall)
		return
	}
	family := clientFamily(c)
	num := q.clientSession(c)
	s := q.m.SessionOf(num)
	a := q.m.AddressingOf(num)
	r.ok()
	if mask&wdsReqPDPType != 0 {
		if family == IPv6 {
			r.b.TLVU8(0x11, wdsPDPTypeIPv6)
		} else {
			r.b.TLVU8(0x11, wdsPDPTypeIPv4)
		}
	}
	if mask&wdsReqAPN != 0 {
		r.b.TLVString(0x14, s.APN)
	}
	if family == IPv4 {
		if mask&wdsReqDNS != 0 {
			for i, d := range a.DNS4 {
				if i < 2 {
					r.b.TLVU32(0x15+uint8(i), v4le(d))
				}
			}
		}
		if mask&wdsReqIP != 0 {
			r.b.TLVU32(0x1E, v4le(a.IPv4.Addr()))
		}
		if mask&wdsReqGateway != 0 {
			r.b.TLVU32(0x20, v4le(a.Gateway4))
			bits := a.IPv4.Bits()
			r.b.TLVU32(0x21, ^uint32(0)<<(32-bits))
		}
	} else {
		if mask&wdsReqIP != 0 {
			addr := a.IPv6.Addr().As16()
			r.b.Begin(0x25)
			r.b.PutBytes(addr[:])
			r.b.Put8(uint8(a.IPv6.Bits()))
			r.b.End()
		}
		if mask&wdsReqGateway != 0 {
			gw := a.Gateway6.As16()
			r.b.Begin(0x26)
			r.b.PutBytes(gw[:])
			r.b.Put8(uint8(a.IPv6.Bits()))
			r.b.End()
		}
		if mask&wdsReqDNS != 0 {
			for i, d := range a.DNS6 {
				if i < 2 {
					b := d.As16()
					r.b.TLV(0x27+uint8(i), b[:])
				}
			}
		}
	}
	if mask&wdsReqMTU != 0 {
		r.b.TLVU32(0x29, uint32(a.MTU))
	}
	if mask&wdsReqIPFamily != 0 {
		r.b.TLVU8(0x2B, wdsFamilyByte(family))
	}
}

// wdaFormat is the data format WDA reports: the link layer and the
// uplink and downlink aggregation protocols.
type wdaFormat struct {
	link, ul, dl uint32
}

// WDA aggregation protocols the mock's data path speaks (QMAP, with the
// MAPv4 and MAPv5 checksum offload framings).
const (
	wdaAggQMAP   = 5
	wdaAggQMAPv4 = 8
	wdaAggQMAPv5 = 9
)

// wda answers WDA requests: the data format is raw IP, without
// aggregation (mhi_net) until SET_DATA_FORMAT asks for QMAP (rmnet over
// mhi_net, multiplexed sessions by mux id), which is recorded and
// reported; the IP data function's framing is the model's (the mock's
// options), not switched by it.
func (q *QMI) wda(r *qmiReq) {
	switch r.f.Message {
	case qmi.WDAGetDataFormat:
		r.ok()
		q.putDataFormat(&r.b)
	case qmi.WDASetDataFormat:
		f := q.format
		for _, t := range []struct {
			typ uint8
			dst *uint32
		}{{0x11, &f.link}, {0x12, &f.ul}, {0x13, &f.dl}} {
			v, ok := r.f.TLVs.Find(t.typ)
			if !ok {
				continue
			}
			rd := qmi.NewReader(v)
			val := rd.U32()
			if rd.Finish() != nil {
				r.fail(qmi.ErrMalformedMessage)
				return
			}
			*t.dst = val
		}
		if v, ok := r.f.TLVs.Find(0x10); ok && (len(v) != 1 || v[0] != 0) {
			r.fail(qmi.ErrInvalidDataFormat) // no QoS header
			return
		}
		if f.link != wdaLinkRawIP || !wdaAggKnown(f.ul) || !wdaAggKnown(f.dl) {
			r.fail(qmi.ErrInvalidDataFormat)
			return
		}
		q.format = f
		r.ok()
		q.putDataFormat(&r.b)
	default:
		r.unsupported()
	}
}

func wdaAggKnown(v uint32) bool {
	return v == wdaAggDisabled || v == wdaAggQMAP || v == wdaAggQMAPv4 || v == wdaAggQMAPv5
}

func (q *QMI) putDataFormat(b *qmi.Builder) {
	b.TLVU8(0x10, 0) // no QoS header
	b.TLVU32(0x11, q.format.link)
	b.TLVU32(0x12, q.format.ul)
	b.TLVU32(0x13, q.format.dl)
}
