package modem

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/gomhi/gomhi/mhi/proto/qmi"
)

// The answers added for ModemManager 1.20 (pcigeneric/vfiouser's
// TestModemManager… runs them against the real daemon).

func TestATModemManagerCommands(t *testing.T) {
	h := newATTester(t, Config{Identity: Identity{Manufacturer: "Telit", Model: "FN990",
		ICCID: "8900100000000000042", ProviderID: "00101", ProviderName: "gomhi network"}}, ATOptions{})
	h.chat(DUNName, "ATE0\r")
	cases := []struct{ in, want string }{
		{"AT+WS46=?\r", "\r\n+WS46: (22,28,31)\r\n\r\nOK\r\n"},
		{"AT+WS46?\r", "\r\n+WS46: 31\r\n\r\nOK\r\n"},
		{"AT+WS46=28;+WS46?\r", "\r\n+WS46: 28\r\n\r\nOK\r\n"},
		{"AT+WS46=12\r", "\r\nERROR\r\n"}, // no GSM radio
		{"AT+CPOL?\r", "\r\nOK\r\n"},      // an empty list
		{"AT+CPOL=,2\r", "\r\nOK\r\n"},
		{"AT+CPOL=,7\r", "\r\nERROR\r\n"},
		{"AT+CPLS=0;+CPLS?\r", "\r\n+CPLS: 0\r\n\r\nOK\r\n"},
		{"AT+CPLS=1\r", "\r\nERROR\r\n"},
		{"AT+CEMODE?\r", "\r\n+CEMODE: 2\r\n\r\nOK\r\n"},
		{"AT+CTZU=1;+CTZU?\r", "\r\n+CTZU: 1\r\n\r\nOK\r\n"},
		{"AT+CTZU=2\r", "\r\nERROR\r\n"},
		{"AT+CESQ\r", "\r\n+CESQ: 99,99,255,255,20,37\r\n\r\nOK\r\n"}, // RSSI 20: RSRP -104 dBm
		{"ATH\r", "\r\nOK\r\n"},
		{"AT+CRSM=176,28599,0,0,15\r", "\r\n+CRSM: 144,0,\"11F2FF19F1FFFFFFFFFFFFFFFFFFFF\"\r\n\r\nOK\r\n"},
		{"AT+CRSM=176,12258,0,0,10\r", "\r\n+CRSM: 144,0,\"980001000000000040F2\"\r\n\r\nOK\r\n"},
		{"AT+CRSM=176,28486,0,0,17\r", "\r\n+CRSM: 144,0,\"01676F6D6869206E6574776F726BFFFFFF\"\r\n\r\nOK\r\n"},
		{"AT+CRSM=176,28589,0,0,0\r", "\r\n+CRSM: 144,0,\"00000002\"\r\n\r\nOK\r\n"},
		{"AT+CRSM=176,28478,0,0,0\r", "\r\n+CRSM: 144,0,\"FFFFFFFFFFFFFFFF\"\r\n\r\nOK\r\n"},
		{"AT+CRSM=176,28599,0,3,3\r", "\r\n+CRSM: 144,0,\"19F1FF\"\r\n\r\nOK\r\n"}, // offset 3
		{"AT+CRSM=176,28599,1,0,3\r", "\r\n+CRSM: 107,0\r\n\r\nOK\r\n"},            // offset past the end
		{"AT+CRSM=176,28672,0,0,0\r", "\r\n+CRSM: 106,130\r\n\r\nOK\r\n"},          // no such file
		{"AT+CRSM=178,28480,1,4,0\r", "\r\n+CRSM: 109,0\r\n\r\nOK\r\n"},            // READ RECORD: not modelled
		{"AT+CRSM=176,70000,0,0,0\r", "\r\nERROR\r\n"},
		{"AT#BND=?\r", "\r\n#BND: (0),(0),(80045),(0)\r\n\r\nOK\r\n"},
		{"AT#BND?\r", "\r\n#BND: 0,0,80045,0\r\n\r\nOK\r\n"},
		{"AT#PORTCFG?\r", "\r\nERROR\r\n"},
	}
	for _, c := range cases {
		if got := h.chat(DUNName, c.in); got != c.want {
			t.Errorf("%q: got %q, want %q", c.in, got, c.want)
		}
	}
	// Telit's commands only on a Telit.
	q := newATTester(t, Config{Identity: Identity{Manufacturer: "Quectel", Model: "EM120"}}, ATOptions{})
	if got := q.chat(DUNName, "AT#BND?\r"); got != "AT#BND?\r\r\nERROR\r\n" {
		t.Errorf("#BND on a Quectel: %q", got)
	}
	if u := q.a.Stats().Unknown["#BND"]; u != 1 {
		t.Errorf("#BND on a Quectel counted %d times as unknown", u)
	}
	// Radio off: no measurement.
	h.m.SetRadio(false)
	if got := h.chat(DUNName, "AT+CESQ\r"); got != "\r\n+CESQ: 99,99,255,255,255,255\r\n\r\nOK\r\n" {
		t.Errorf("+CESQ with the radio off: %q", got)
	}
}

func TestSwappedBCD(t *testing.T) {
	for _, c := range []struct {
		digits string
		n      int
		want   []byte
	}{
		{"8900100000000000042", 10, []byte{0x98, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x40, 0xF2}},
		{"12", 2, []byte{0x21, 0xFF}},
		{"123456", 2, []byte{0x21, 0x43}},
		{"1x", 1, []byte{0xF1}},
	} {
		if got := swappedBCD(c.digits, c.n); !bytes.Equal(got, c.want) {
			t.Errorf("swappedBCD(%q, %d) = %x, want %x", c.digits, c.n, got, c.want)
		}
	}
}

func TestQMIModemManagerMessages(t *testing.T) {
	counters := PacketCounters{TxPackets: 17, RxPackets: 15, TxBytes: 11272, RxBytes: 10500, TxDropped: 3}
	h := newQMITester(t, Config{Identity: Identity{Model: "SDX55", ProviderID: "00101", ProviderName: "gomhi network"}},
		QMIOptions{PacketStatistics: func() PacketCounters { return counters }})
	dms, nas, wds := h.alloc(qmi.DMS), h.alloc(qmi.NAS), h.alloc(qmi.WDS)

	f := h.ok(qmi.DMS, dms, qmi.DMSUIMGetCKStatus, func(b *qmi.Builder) { b.TLVU8(0x01, 0) })
	if v := tlv(t, f, 0x01); !bytes.Equal(v, []byte{dmsFacilityDeactivated, 3, 10}) {
		t.Errorf("CK status %x", v)
	}
	h.fails(qmi.DMS, dms, qmi.DMSUIMGetCKStatus, nil, qmi.ErrMissingArgument)

	f = h.ok(qmi.NAS, nas, qmi.NASGetSystemSelectionPreference, nil)
	if v := tlv(t, f, 0x11); binary.LittleEndian.Uint16(v) != nasRatUMTS|nasRatLTE {
		t.Errorf("mode preference %x", v)
	}
	if v := tlv(t, f, 0x15); binary.LittleEndian.Uint64(v) != dmsLTEBands {
		t.Errorf("LTE band preference %x", v)
	}
	if v := tlv(t, f, 0x1C); !bytes.Equal(v, []byte{2, nasRadioLTE, nasRadioUMTS}) {
		t.Errorf("acquisition order %x", v)
	}
	// SET_SYSTEM_SELECTION_PREFERENCE, as ModemManager registers
	// automatically (mode 0, MCC and MNC 0) when a connect comes while the
	// modem is enabling: accepted; manual selection of the mock's own
	// network too, of another refused; a network selection of the wrong
	// size is malformed.
	netSel := func(mode uint8, mcc, mnc uint16) func(*qmi.Builder) {
		return func(b *qmi.Builder) {
			b.Begin(0x16)
			b.Put8(mode)
			b.Put16(mcc)
			b.Put16(mnc)
			b.End()
		}
	}
	h.ok(qmi.NAS, nas, qmi.NASSetSystemSelectionPreference, netSel(nasNetSelAutomatic, 0, 0))
	h.ok(qmi.NAS, nas, qmi.NASSetSystemSelectionPreference, netSel(1, 1, 1))
	h.fails(qmi.NAS, nas, qmi.NASSetSystemSelectionPreference, netSel(1, 310, 260), qmi.ErrNoNetworkFound)
	h.fails(qmi.NAS, nas, qmi.NASSetSystemSelectionPreference, func(b *qmi.Builder) { b.TLVU8(0x16, 0) }, qmi.ErrMalformedMessage)
	h.ok(qmi.NAS, nas, qmi.NASSetSystemSelectionPreference, func(b *qmi.Builder) { b.TLVU16(0x11, nasRatLTE) })

	f = h.ok(qmi.NAS, nas, qmi.NASGetTechnologyPreference, nil)
	if v := tlv(t, f, 0x01); !bytes.Equal(v, []byte{0x2A, 0, 0}) {
		t.Errorf("technology preference %x", v)
	}
	f = h.ok(qmi.NAS, nas, qmi.NASGetPreferredNetworks, nil)
	if v := tlv(t, f, 0x10); !bytes.Equal(v, []byte{0, 0}) {
		t.Errorf("preferred networks %x", v)
	}
	f = h.ok(qmi.NAS, nas, qmi.NASGetPLMNName, func(b *qmi.Builder) { b.Begin(0x01); b.Put16(1); b.Put16(1); b.End() })
	rd := qmi.NewReader(tlv(t, f, 0x10))
	spnEnc, spn := rd.U8(), string(rd.String8())
	shortEnc, _, _, short := rd.U8(), rd.U8(), rd.U8(), string(rd.String8())
	longEnc, _, _, long := rd.U8(), rd.U8(), rd.U8(), string(rd.String8())
	if rd.Finish() != nil || spnEnc != nasEncodingASCII7 || shortEnc != nasEncodingASCII7 || longEnc != nasEncodingASCII7 ||
		spn != "gomhi network" || short != spn || long != spn {
		t.Errorf("PLMN name %x", tlv(t, f, 0x10))
	}
	h.fails(qmi.NAS, nas, qmi.NASGetPLMNName, func(b *qmi.Builder) { b.Begin(0x01); b.Put16(310); b.Put16(260); b.End() }, qmi.ErrInformationUnavailable)
	h.fails(qmi.NAS, nas, qmi.NASGetPLMNName, nil, qmi.ErrMissingArgument)
	h.ok(qmi.NAS, nas, qmi.NASConfigSignalInfoV2, nil)
	h.ok(qmi.NAS, nas, qmi.NASConfigSignalInfo, nil)

	f = h.ok(qmi.WDS, wds, qmi.WDSGetLTEAttachPDNList, nil)
	if v := tlv(t, f, 0x10); !bytes.Equal(v, []byte{1, wdsDefaultProfile, 0}) {
		t.Errorf("attach PDN list %x", v)
	}
	f = h.ok(qmi.WDS, wds, qmi.WDSGetProfileList, nil)
	if v := tlv(t, f, 0x01); !bytes.Equal(v, []byte{1, wdsProfile3GPP, wdsDefaultProfile, 0}) {
		t.Errorf("profile list %x", v)
	}
	f = h.ok(qmi.WDS, wds, qmi.WDSGetProfileList, func(b *qmi.Builder) { b.TLVU8(0x10, 1) })
	if v := tlv(t, f, 0x01); !bytes.Equal(v, []byte{0}) {
		t.Errorf("3GPP2 profile list %x", v)
	}
	f = h.ok(qmi.WDS, wds, qmi.WDSGetProfileSettings, func(b *qmi.Builder) { b.TLV(0x01, []byte{wdsProfile3GPP, wdsDefaultProfile}) })
	if v := tlv(t, f, 0x11); !bytes.Equal(v, []byte{wdsPDPTypeIPv4OrIPv6}) {
		t.Errorf("profile PDP type %x", v)
	}
	if v := tlv(t, f, 0x14); len(v) != 0 {
		t.Errorf("profile APN %q", v)
	}
	h.fails(qmi.WDS, wds, qmi.WDSGetProfileSettings, func(b *qmi.Builder) { b.TLV(0x01, []byte{wdsProfile3GPP, 2}) }, qmi.ErrInvalidProfile)
	f = h.ok(qmi.WDS, wds, qmi.WDSGetLTEAttachParameters, nil)
	if v := tlv(t, f, 0x11); !bytes.Equal(v, []byte{wdsIPSupportIPv4v6}) {
		t.Errorf("attach IP support %x", v)
	}

	all := uint32(wdsStatsTxPacketsOK | wdsStatsRxPacketsOK | wdsStatsTxBytesOK | wdsStatsRxBytesOK | wdsStatsTxDropped)
	f = h.ok(qmi.WDS, wds, qmi.WDSGetPacketStatistics, func(b *qmi.Builder) { b.TLVU32(0x01, all) })
	if tlvU32(t, f, 0x10) != 17 || tlvU32(t, f, 0x11) != 15 || tlvU32(t, f, 0x1D) != 3 ||
		binary.LittleEndian.Uint64(tlv(t, f, 0x19)) != 11272 || binary.LittleEndian.Uint64(tlv(t, f, 0x1A)) != 10500 {
		t.Errorf("packet statistics %v", f.TLVs)
	}
	f = h.ok(qmi.WDS, wds, qmi.WDSGetPacketStatistics, func(b *qmi.Builder) { b.TLVU32(0x01, wdsStatsRxBytesOK) })
	if _, ok := f.TLVs.Find(0x10); ok || f.TLVs.Count() != 2 {
		t.Errorf("statistics outside the mask: %d TLVs", f.TLVs.Count())
	}
	// Without a counter source the message is not supported.
	n := newQMITester(t, Config{}, QMIOptions{})
	nw := n.alloc(qmi.WDS)
	n.fails(qmi.WDS, nw, qmi.WDSGetPacketStatistics, func(b *qmi.Builder) { b.TLVU32(0x01, all) }, qmi.ErrInvalidQMICommand)
}
