package pcigeneric

import (
	"errors"
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhi/wire"
)

func TestConfigsValidate(t *testing.T) {
	for name, cfg := range configs {
		t.Run(name, func(t *testing.T) {
			if err := cfg.Validate(); err != nil {
				t.Fatal(err)
			}
		})
	}
	for _, name := range Models() {
		t.Run("model/"+name, func(t *testing.T) {
			m, ok := Model(name)
			if !ok {
				t.Fatalf("Model(%q) not found though Models lists it", name)
			}
			if err := m.Config.Validate(); err != nil {
				t.Fatal(err)
			}
			if m.BAR != 0 || m.DMAWidth != 32 {
				t.Errorf("BAR %d, DMA width %d; want 0 and 32", m.BAR, m.DMAWidth)
			}
			if m.Config.MaxChannels != 128 || m.Config.CommandElements != 128 {
				t.Errorf("max channels %d, command ring %d; want 128 and 128",
					m.Config.MaxChannels, m.Config.CommandElements)
			}
		})
	}
}

// TestEventMacroSemantics checks that the builders encode the meaning of the
// channel and event macros: vectors, moderation, hardware rings dedicated to
// the channel that uses them, burst mode exactly on hardware channels.
func TestEventMacroSemantics(t *testing.T) {
	wantMod := map[wire.EventRingKind]int{wire.EventCtrl: 0, wire.EventData: 5, wire.EventSWData: 0, wire.EventHWData: 1}
	for name, cfg := range configs {
		t.Run(name, func(t *testing.T) {
			for i, er := range cfg.EventRings {
				if er.Vector != i+1 {
					t.Errorf("ring %d: vector %d, want %d", i, er.Vector, i+1)
				}
				if er.ModerationMs != wantMod[er.Kind] {
					t.Errorf("ring %d (%s): moderation %d ms, want %d", i, er.Kind, er.ModerationMs, wantMod[er.Kind])
				}
				if er.Hardware != (er.Kind == wire.EventHWData) {
					t.Errorf("ring %d (%s): hardware=%v", i, er.Kind, er.Hardware)
				}
				if !er.Hardware && er.Channel != -1 {
					t.Errorf("ring %d: software ring dedicated to channel %d", i, er.Channel)
				}
				if er.Hardware {
					ch, ok := cfg.Channel(uint8(er.Channel))
					if !ok || ch.EventRing != i || !ch.Burst {
						t.Errorf("ring %d: dedicated channel %d missing, not on this ring or not HW (%+v)", i, er.Channel, ch)
					}
				}
			}
			for _, ch := range cfg.Channels {
				hwRing := cfg.EventRings[ch.EventRing].Hardware
				if ch.Burst != hwRing || ch.DBModeSwitch != ch.Burst {
					t.Errorf("channel %d (%s): burst %v, mode switch %v, on HW ring %v",
						ch.Num, ch.Name, ch.Burst, ch.DBModeSwitch, hwRing)
				}
			}
		})
	}
}

func TestLookupPrecedence(t *testing.T) {
	tests := []struct {
		v, d, sv, sd uint16
		want         string // "" = no match
	}{
		{0x17cb, 0x0306, 0x1c5d, 0x2000, "telit-fn980-hwv1"},
		{0x17cb, 0x0306, 0x17cb, 0x010c, "foxconn-sdx55"},
		{0x17cb, 0x0306, 0x18d7, 0x0200, "sierra-em919x"},
		{0x17cb, 0x0306, 0x17cb, 0x0306, "qcom-sdx55m"},
		{0x17cb, 0x0306, 0x0000, 0x0000, "qcom-sdx55m"},
		{0x17cb, 0x0306, 0x1c5d, 0x2010, "qcom-sdx55m"}, // FN990's subsystem on the SDX55 ID
		{0x17cb, 0x0308, 0x105b, 0xe142, "foxconn-t99w696"},
		{0x17cb, 0x0308, 0x105b, 0x0000, "foxconn-t99w696"},
		{0x17cb, 0x0308, 0x1c5d, 0x2010, "telit-fn990"},
		{0x17cb, 0x0308, 0x1c5d, 0x2015, "telit-fe990a"},
		{0x17cb, 0x0308, 0x18d7, 0x0301, "sierra-em919x"},
		{0x17cb, 0x0308, 0x18d7, 0x0200, "qcom-sdx65m"},
		{0x17cb, 0x0309, 0x1c5d, 0x201a, "telit-fn990b40"},
		{0x17cb, 0x0309, 0x1234, 0x5678, "qcom-sdx75m"},
		{0x17cb, 0x011a, 0x1c5d, 0x2020, "telit-fn920c04"},
		{0x17cb, 0x011a, 0x1c5d, 0x2045, ""}, // FE912C04: unconfirmed, not in the table
		{0x17cb, 0x1101, 0x17cb, 0x0108, ""}, // QCA6390 Wi-Fi
		{0x1eac, 0x1002, 0x1eac, 0x1002, "quectel-em1xx"},
		{0x1eac, 0x1007, 0x17aa, 0x5003, "quectel-rm5xx"},
		{0x105b, 0xe0ab, 0x105b, 0xe0ab, "foxconn-t99w175"},
		{0x03f0, 0x0a6c, 0x03f0, 0x0a6c, "foxconn-t99w175"},
		{0x1269, 0x00bb, 0x1269, 0x00bb, "cinterion-mv32"},
		{0x203e, 0x1001, 0x203e, 0x1001, "netprisma-fcun69"},
		{0x8086, 0x0a54, 0x8086, 0x4802, ""},
	}
	for _, tt := range tests {
		e, ok := Lookup(tt.v, tt.d, tt.sv, tt.sd)
		got := ""
		if ok {
			got = e.Info.Name
		}
		if got != tt.want {
			t.Errorf("Lookup(%04x:%04x sub %04x:%04x) = %q, want %q", tt.v, tt.d, tt.sv, tt.sd, got, tt.want)
		}
	}
}

// TestEntryIDsReachEntry checks that no entry is shadowed by an earlier one:
// the IDs an entry advertises for impersonation look up to that very entry.
func TestEntryIDsReachEntry(t *testing.T) {
	entries := Entries()
	if len(entries) != len(idTable) {
		t.Fatalf("Entries() has %d rows, table %d", len(entries), len(idTable))
	}
	for i, e := range entries {
		v, d, sv, sd := e.Match.IDs()
		got, ok := Lookup(v, d, sv, sd)
		if !ok || got.Match != e.Match || got.Product != e.Product {
			t.Errorf("entry %d (%s, %s): its IDs %04x:%04x %04x:%04x look up to %v %q",
				i, e.Match, e.Product, v, d, sv, sd, got.Match, got.Product)
		}
	}
	for _, name := range Models() {
		if len(EntriesFor(name)) == 0 {
			t.Errorf("model %s has no table entry", name)
		}
	}
}

func TestMRUDefaults(t *testing.T) {
	want := map[string]int{
		"qcom-sa8775p": 32768, "qcom-sdx75m": 0, "qcom-sdx65m": 0, "qcom-sdx55m": 32768,
		"qcom-sdx24": 0, "qcom-qdu100": 0,
		"quectel-em1xx": 32768, "quectel-rm5xx": 32768,
		"foxconn-sdx55": 32768, "foxconn-t99w175": 32768, "foxconn-dw5930e": 32768,
		"foxconn-t99w368": 32768, "foxconn-t99w373": 32768, "foxconn-dw5932e": 32768,
		"foxconn-t99w510": 32768, "foxconn-t99w640": 32768, "foxconn-dw5934e": 32768,
		"foxconn-t99w696": 32768,
		"cinterion-mv31":  32768, "cinterion-mv32": 32768, "sierra-em919x": 32768,
		"telit-fn980-hwv1": 32768, "telit-fn990": 32768, "telit-fe990a": 32768,
		"telit-fn920c04": 32768, "telit-fn990b40": 32768, "telit-fe990b40": 32768,
		"netprisma-lcur57": 32768, "netprisma-fcun69": 32768,
	}
	names := Models()
	if len(names) != len(want) {
		t.Errorf("%d models, want %d: %v", len(names), len(want), names)
	}
	for _, n := range names {
		m, _ := Model(n)
		w, ok := want[n]
		if !ok {
			t.Errorf("unexpected model %s", n)
			continue
		}
		if m.MRUDefault != w {
			t.Errorf("%s: MRU default %d, want %d", n, m.MRUDefault, w)
		}
	}
}

func TestModelParameters(t *testing.T) {
	tests := []struct {
		name           string
		config         string
		timeout, ready time.Duration
		fw, edl        string
		edlTrigger     bool
		sideband       bool
		noM3, reset    bool
		vfDMA          int
		channels       int
		rings          int
	}{
		{"qcom-sdx55m", "modem_qcom_v1", 8 * time.Second, 0, "qcom/sdx55m/sbl1.mbn", "qcom/sdx55m/edl.mbn", true, false, false, false, 0, 14, 6},
		{"qcom-sdx75m", "modem_qcom_v2", 8 * time.Second, 50 * time.Second, "qcom/sdx75m/xbl.elf", "qcom/sdx75m/edl.mbn", true, false, false, false, 0, 14, 6},
		{"qcom-sdx24", "modem_qcom_v1", 8 * time.Second, 0, "", "qcom/prog_firehose_sdx24.mbn", false, true, false, false, 0, 14, 6},
		{"qcom-qdu100", "qdu100", 120 * time.Second, 0, "qcom/qdu100/xbl_s.melf", "", true, false, true, true, 40, 15, 8},
		{"qcom-sa8775p", "sa8775p", 8 * time.Second, 0, "", "", false, false, false, false, 0, 2, 3},
		{"quectel-rm5xx", "quectel_em1xx", 20 * time.Second, 0, "", "qcom/prog_firehose_sdx6x.elf", false, true, false, false, 0, 14, 4},
		{"foxconn-t99w175", "foxconn_sdx55", 20 * time.Second, 0, "", "qcom/sdx55m/foxconn/prog_firehose_sdx55.mbn", true, false, false, false, 0, 12, 4},
		{"foxconn-t99w640", "foxconn_sdx72", 20 * time.Second, 50 * time.Second, "", "qcom/sdx72m/foxconn/edl.mbn", true, false, false, false, 0, 12, 4},
		{"foxconn-t99w696", "foxconn_sdx61", 20 * time.Second, 0, "", "qcom/sdx61/foxconn/prog_firehose_lite.elf", true, false, false, false, 0, 14, 4},
		{"cinterion-mv31", "mv3x", 20 * time.Second, 0, "", "", false, false, false, false, 0, 6, 4},
		{"sierra-em919x", "sierra_em919x", 24 * time.Second, 0, "", "", false, false, false, false, 0, 12, 3},
		{"telit-fn980-hwv1", "telit_fn980_hw_v1", 20 * time.Second, 0, "qcom/sdx55m/sbl1.mbn", "qcom/sdx55m/edl.mbn", false, false, false, false, 0, 6, 3},
		{"telit-fn990", "telit_fn990", 20 * time.Second, 0, "", "", false, false, false, false, 0, 12, 4},
		{"telit-fn920c04", "telit_fn920c04", 50 * time.Second, 0, "", "", true, false, false, false, 0, 14, 4},
		{"netprisma-lcur57", "quectel_em1xx", 20 * time.Second, 0, "", "qcom/prog_firehose_sdx24.mbn", false, true, false, false, 0, 14, 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, ok := Model(tt.name)
			if !ok {
				t.Fatal("no such model")
			}
			if m.ConfigName != tt.config || m.Config.Timeout != tt.timeout || m.Config.ReadyTimeout != tt.ready {
				t.Errorf("config %s timeout %v ready %v; want %s %v %v",
					m.ConfigName, m.Config.Timeout, m.Config.ReadyTimeout, tt.config, tt.timeout, tt.ready)
			}
			if m.Firmware != tt.fw || m.EDLImage != tt.edl || m.EDLTrigger != tt.edlTrigger {
				t.Errorf("fw %q edl %q trigger %v; want %q %q %v", m.Firmware, m.EDLImage, m.EDLTrigger, tt.fw, tt.edl, tt.edlTrigger)
			}
			if m.SidebandWake != tt.sideband || m.NoM3 != tt.noM3 || m.ResetOnRemove != tt.reset || m.VFDMAWidth != tt.vfDMA {
				t.Errorf("sideband %v noM3 %v reset %v vfDMA %d; want %v %v %v %d",
					m.SidebandWake, m.NoM3, m.ResetOnRemove, m.VFDMAWidth, tt.sideband, tt.noM3, tt.reset, tt.vfDMA)
			}
			if len(m.Config.Channels) != tt.channels || len(m.Config.EventRings) != tt.rings {
				t.Errorf("%d channels, %d event rings; want %d, %d",
					len(m.Config.Channels), len(m.Config.EventRings), tt.channels, tt.rings)
			}
		})
	}
}

func TestChannelDetails(t *testing.T) {
	tests := []struct {
		model string
		num   uint8
		want  wire.ChannelConfig
	}{
		{"qcom-sdx55m", 101, wire.ChannelConfig{Num: 101, Name: "IP_HW0", Elements: 128, EventRing: 5, Dir: wire.Downlink, EE: wire.EEAMSS, Burst: true, DBModeSwitch: true}},
		{"qcom-sdx55m", 46, wire.ChannelConfig{Num: 46, Name: "IP_SW0", Elements: 64, EventRing: 2, Dir: wire.Uplink, EE: wire.EEAMSS}},
		{"qcom-sdx55m", 35, wire.ChannelConfig{Num: 35, Name: "FIREHOSE", Elements: 32, EventRing: 0, Dir: wire.Downlink, EE: wire.EEFP}},
		{"quectel-em1xx", 2, wire.ChannelConfig{Num: 2, Name: "SAHARA", Elements: 32, EventRing: 0, Dir: wire.Uplink, EE: wire.EESBL}},
		{"sierra-em919x", 3, wire.ChannelConfig{Num: 3, Name: "SAHARA", Elements: 256, EventRing: 0, Dir: wire.Downlink, EE: wire.EESBL}},
		{"sierra-em919x", 100, wire.ChannelConfig{Num: 100, Name: "IP_HW0", Elements: 512, EventRing: 1, Dir: wire.Uplink, EE: wire.EEAMSS, Burst: true, DBModeSwitch: true}},
		{"telit-fn990", 93, wire.ChannelConfig{Num: 93, Name: "DUN2", Elements: 32, EventRing: 1, Dir: wire.Downlink, EE: wire.EEAMSS}},
		{"telit-fn980-hwv1", 101, wire.ChannelConfig{Num: 101, Name: "IP_HW0", Elements: 128, EventRing: 2, Dir: wire.Downlink, EE: wire.EEAMSS, Burst: true, DBModeSwitch: true}},
		{"foxconn-t99w696", 51, wire.ChannelConfig{Num: 51, Name: "NMEA", Elements: 32, EventRing: 0, Dir: wire.Downlink, EE: wire.EEAMSS}},
		{"cinterion-mv31", 100, wire.ChannelConfig{Num: 100, Name: "IP_HW0_MBIM", Elements: 512, EventRing: 2, Dir: wire.Uplink, EE: wire.EEAMSS, Burst: true, DBModeSwitch: true}},
		{"qcom-qdu100", 9, wire.ChannelConfig{Num: 9, Name: "QDSS", Elements: 64, EventRing: 3, Dir: wire.Downlink, EE: wire.EEAMSS}},
		{"qcom-qdu100", 47, wire.ChannelConfig{Num: 47, Name: "IP_SW0", Elements: 256, EventRing: 5, Dir: wire.Downlink, EE: wire.EEAMSS}},
		{"qcom-sa8775p", 47, wire.ChannelConfig{Num: 47, Name: "IP_SW0", Elements: 2048, EventRing: 2, Dir: wire.Downlink, EE: wire.EEAMSS}},
	}
	for _, tt := range tests {
		m, _ := Model(tt.model)
		got, ok := m.Config.Channel(tt.num)
		if !ok || got != tt.want {
			t.Errorf("%s channel %d = %+v (found %v), want %+v", tt.model, tt.num, got, ok, tt.want)
		}
	}
	m, _ := Model("qcom-sdx55m")
	if er := m.Config.EventRings[5]; er.Elements != 2048 || er.Channel != 101 || er.Vector != 6 || er.ModerationMs != 1 {
		t.Errorf("sdx55 event ring 5 = %+v", er)
	}
	if er := m.Config.EventRings[1]; er.Kind != wire.EventData || er.ModerationMs != 5 || er.Elements != 128 {
		t.Errorf("sdx55 event ring 1 = %+v", er)
	}
}

func TestModelIsACopy(t *testing.T) {
	m, _ := Model("telit-fn990")
	m.MRUDefault = 1
	m.Config.Channels[0].Elements = 3
	m.Config.EventRings[0].Elements = 3
	e, _ := Lookup(0x17cb, 0x0308, 0x1c5d, 0x2010)
	e.Info.Config.Channels[1].Name = "X"
	again, _ := Model("telit-fn990")
	if again.MRUDefault != 32768 || again.Config.Channels[0].Elements != 32 ||
		again.Config.EventRings[0].Elements != 128 || again.Config.Channels[1].Name != "SAHARA" {
		t.Errorf("changing a returned model changed the table: %+v", again)
	}
	if _, ok := Model("no-such-modem"); ok {
		t.Error("Model found a model that does not exist")
	}
}

func TestMatch(t *testing.T) {
	tests := []struct {
		m    Match
		str  string
		ids  [4]uint16
		hits [][4]uint16
		miss [][4]uint16
	}{
		{Match{0x17cb, 0x0306, AnyID, AnyID}, "17cb:0306", [4]uint16{0x17cb, 0x0306, 0x17cb, 0x0306},
			[][4]uint16{{0x17cb, 0x0306, 0, 0}}, [][4]uint16{{0x17cb, 0x0308, 0, 0}}},
		{Match{0x17cb, 0x0306, 0x1c5d, 0x2000}, "17cb:0306 sub 1c5d:2000", [4]uint16{0x17cb, 0x0306, 0x1c5d, 0x2000},
			nil, [][4]uint16{{0x17cb, 0x0306, 0x1c5d, 0x2001}}},
		{Match{0x17cb, 0x0308, 0x105b, AnyID}, "17cb:0308 sub 105b:*", [4]uint16{0x17cb, 0x0308, 0x105b, 0x0308},
			[][4]uint16{{0x17cb, 0x0308, 0x105b, 0xffff}}, [][4]uint16{{0x17cb, 0x0308, 0x105c, 0x0308}}},
	}
	for _, tt := range tests {
		if s := tt.m.String(); s != tt.str {
			t.Errorf("String() = %q, want %q", s, tt.str)
		}
		v, d, sv, sd := tt.m.IDs()
		if got := [4]uint16{v, d, sv, sd}; got != tt.ids {
			t.Errorf("%s: IDs() = %04x, want %04x", tt.str, got, tt.ids)
		}
		for _, h := range append(tt.hits, tt.ids) {
			if !tt.m.Matches(h[0], h[1], h[2], h[3]) {
				t.Errorf("%s does not match %04x", tt.str, h)
			}
		}
		for _, h := range tt.miss {
			if tt.m.Matches(h[0], h[1], h[2], h[3]) {
				t.Errorf("%s matches %04x", tt.str, h)
			}
		}
	}
}

func TestNormalizeAddress(t *testing.T) {
	tests := []struct {
		in, want string
		err      error
	}{
		{"0000:01:00.0", "0000:01:00.0", nil},
		{"01:00.0", "0000:01:00.0", nil},
		{" 0000:3B:1F.7\n", "0000:3b:1f.7", nil},
		{"10000:e1:00.0", "10000:e1:00.0", nil},
		{"0000:01:20.0", "", ErrBadAddress},
		{"0000:01:00.8", "", ErrBadAddress},
		{"../../etc", "", ErrBadAddress},
		{"", "", ErrBadAddress},
	}
	for _, tt := range tests {
		got, err := NormalizeAddress(tt.in)
		if got != tt.want || !errors.Is(err, tt.err) || (tt.err == nil) != (err == nil) {
			t.Errorf("NormalizeAddress(%q) = %q, %v; want %q, %v", tt.in, got, err, tt.want, tt.err)
		}
	}
}

func TestIDText(t *testing.T) {
	var id ID
	if err := id.UnmarshalText([]byte("0x17CB")); err != nil || id != 0x17cb || id.String() != "17cb" {
		t.Errorf("ID round trip: %v %v", id, err)
	}
	if err := id.UnmarshalText([]byte("12345")); err == nil {
		t.Error("17-bit ID accepted")
	}
}
