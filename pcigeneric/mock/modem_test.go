package mock

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhi/ctrlport"
	"github.com/gomhi/gomhi/mhi/ep"
	"github.com/gomhi/gomhi/mhi/ep/ipdata"
	"github.com/gomhi/gomhi/mhi/ep/modem"
	"github.com/gomhi/gomhi/mhi/ep/quirk"
	"github.com/gomhi/gomhi/mhi/proto/framing"
	"github.com/gomhi/gomhi/mhi/wire"
	"github.com/gomhi/gomhi/pcigeneric"
)

func TestLuhn(t *testing.T) {
	for _, c := range []struct {
		s    string
		want bool
	}{
		{"490154203237518", true}, // the IMEI example of 3GPP TS 23.003
		{"490154203237517", false},
		{"79927398713", true}, // the classic Luhn example
		{"79927398710", false},
		{"35000000000000a", false},
		{"", false},
	} {
		if got := LuhnValid(c.s); got != c.want {
			t.Errorf("LuhnValid(%q) = %v, want %v", c.s, got, c.want)
		}
	}
}

func TestSplitProduct(t *testing.T) {
	for _, c := range []struct{ product, man, model, hw string }{
		{"Telit FN990", "Telit", "FN990", ""},
		{"Telit FN920C04 (SDX35)", "Telit", "FN920C04", ""},
		{"Telit FN980 hardware revision 1", "Telit", "FN980", "rev 1"},
		{"Quectel RM520N-GL (SDX6x), eSIM", "Quectel", "RM520N-GL", ""},
		{"Cinterion MV31-W, new baseline", "Cinterion", "MV31-W", ""},
		{"HP variant of Foxconn T99W175 (SDX55)", "HP", "Foxconn T99W175", ""},
		{"Qualcomm SDX55 reference", "Qualcomm", "SDX55 reference", ""},
		{"Solo", "Solo", "Solo", ""},
	} {
		man, model, hw := splitProduct(c.product)
		if man != c.man || model != c.model || hw != c.hw {
			t.Errorf("splitProduct(%q) = %q, %q, %q; want %q, %q, %q", c.product, man, model, hw, c.man, c.model, c.hw)
		}
	}
}

// Every table entry gets a complete identity with a valid IMEI, the same
// in every call, and different products get different IMEIs.
func TestMockIdentityEveryEntry(t *testing.T) {
	imeis := map[string]string{}
	for _, e := range pcigeneric.Entries() {
		id := Identity(e)
		if id != Identity(e) {
			t.Errorf("%s: identity not deterministic", e.Product)
		}
		if id.Manufacturer == "" || id.Model == "" || id.Firmware == "" || id.Hardware == "" {
			t.Errorf("%s: incomplete identity %+v", e.Product, id)
		}
		if !strings.Contains(e.Product, id.Manufacturer) || !strings.Contains(e.Product, id.Model) {
			t.Errorf("%s: identity %q / %q not from the product name", e.Product, id.Manufacturer, id.Model)
		}
		if len(id.IMEI) != 15 || !LuhnValid(id.IMEI) {
			t.Errorf("%s: IMEI %q is not 15 digits with a valid check digit", e.Product, id.IMEI)
		}
		key := e.Info.Name + " " + e.Product // rows repeating a product share its identity
		if other, dup := imeis[id.IMEI]; dup && other != key {
			t.Errorf("%s and %s share IMEI %s", key, other, id.IMEI)
		}
		imeis[id.IMEI] = key
		if _, err := modem.New(modem.Config{Identity: id}); err != nil {
			t.Errorf("%s: %v", e.Product, err)
		}
	}
}

// Open gives a model with an MBIM pair a working MBIM function whose
// DEVICE_CAPS carry the entry's identity, and RequireConnect gates data.
func TestOpenMockControl(t *testing.T) {
	for _, c := range []struct {
		model         string
		mbim, qmi, at bool
		pairs         []string
	}{
		{"telit-fn990", true, false, true, []string{"MBIM", "DUN", "DUN2"}},
		{"qcom-sdx55m", true, true, false, []string{"MBIM", "QMI"}},
		{"telit-fn920c04", false, true, true, []string{"QMI", "DUN", "DUN2"}},
		{"sa8775p-none", false, false, false, nil},
	} {
		t.Run(c.model, func(t *testing.T) {
			model := c.model
			if model == "sa8775p-none" {
				model = "qcom-sa8775p"
			}
			info, _ := pcigeneric.Model(model)
			if got := pcigeneric.ControlPairs(info.Config); fmt.Sprint(got) != fmt.Sprint(c.pairs) {
				t.Errorf("ControlPairs = %v, want %v", got, c.pairs)
			}
			m, err := Open(Options{Model: model, Modem: modem.Config{RequireConnect: true}})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			f := m.Functions
			if (f.MBIM != nil) != c.mbim || (f.QMI != nil) != c.qmi || (f.AT != nil) != c.at {
				t.Fatalf("functions MBIM %v QMI %v AT %v, want %v %v %v", f.MBIM != nil, f.QMI != nil, f.AT != nil, c.mbim, c.qmi, c.at)
			}
			if fmt.Sprint(f.ControlPairs) != fmt.Sprint(c.pairs) {
				t.Errorf("pairs given a function %v, want %v", f.ControlPairs, c.pairs)
			}
			if m.Modem == nil || m.Modem.Session().Active || m.Modem.DataAllowed() {
				t.Fatal("RequireConnect did not reach the modem")
			}
			want := Identity(pcigeneric.EntriesFor(model)[0])
			if got := m.Modem.Identity(); got.Model != want.Model || got.IMEI != want.IMEI {
				t.Errorf("identity %+v, want %+v", got, want)
			}
			if _, err := m.Modem.Connect("internet", modem.IPv4); err != nil {
				t.Fatal(err)
			}
			if !m.Modem.DataAllowed() {
				t.Error("a connected session does not open the gate")
			}
			if st := m.Functions.Stats(); st.Connects != 1 || st.SessionActive != 1 {
				t.Errorf("stats %+v", st)
			}
		})
	}
}

// The MBIM function answers DEVICE_CAPS over the host controller's MBIM
// pair with the identity (a raw exchange; ctrlport's tests drive it
// with a client).
func TestOpenMockMBIMAnswers(t *testing.T) {
	m, err := Open(Options{Model: "telit-fn990", Modem: modem.Config{Identity: modem.Identity{Firmware: "override-1"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := m.Controller.PowerUp(); err != nil {
		t.Fatal(err)
	}
	if got := m.Modem.Identity(); got.Firmware != "override-1" || got.Manufacturer != "Telit" || got.Model != "FN990" {
		t.Errorf("identity with override %+v", got)
	}
	pair, err := ctrlport.OpenPair(m.Controller, "MBIM", ctrlport.PairOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer pair.Close()
	c := ctrlport.NewMBIMClient(pair, ctrlport.MBIMClientOptions{})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Open(ctx); err != nil {
		t.Fatal(err)
	}
	caps, err := c.DeviceCaps(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := Identity(m.Entry)
	if caps.DeviceID != want.IMEI || caps.FirmwareInfo != "override-1" || !strings.Contains(caps.HardwareInfo, "FN990") {
		t.Errorf("DEVICE_CAPS %+v, want IMEI %s, firmware override-1, hardware with FN990", caps, want.IMEI)
	}
	if !m.Functions.MBIM.Open() {
		t.Error("the MBIM function is not open after OPEN")
	}
}

// The identity table in docs/CONTROL.md is generated from the table: this
// test fails when it is stale (GOMHI_UPDATE_DOCS=1 rewrites it).
func TestMockIdentityDocTable(t *testing.T) {
	const path = "../../docs/CONTROL.md"
	const begin, end = "<!-- mock-identity-table:begin -->\n", "<!-- mock-identity-table:end -->"
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	b.WriteString("| model | manufacturer | model string | firmware | hardware | IMEI | control pairs | data pair |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|\n")
	for _, name := range pcigeneric.Models() {
		es := pcigeneric.EntriesFor(name)
		if len(es) == 0 {
			continue
		}
		id := Identity(es[0])
		pairs := strings.Join(pcigeneric.ControlPairs(es[0].Info.Config), ", ")
		if pairs == "" {
			pairs = "—"
		}
		data := pcigeneric.DataPair(es[0].Info.Config)
		if data == "" {
			data = "—"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", name, id.Manufacturer, id.Model, id.Firmware, id.Hardware, id.IMEI, pairs, data)
	}
	i := bytes.Index(doc, []byte(begin))
	j := bytes.Index(doc, []byte(end))
	if i < 0 || j < i {
		t.Fatalf("%s lacks the markers %q … %q", path, begin, end)
	}
	cur := string(doc[i+len(begin) : j])
	if cur == b.String() {
		return
	}
	if os.Getenv("GOMHI_UPDATE_DOCS") == "1" {
		out := append(append(append([]byte{}, doc[:i+len(begin)]...), b.String()...), doc[j:]...)
		if err := os.WriteFile(path, out, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("rewrote the identity table in %s", path)
		return
	}
	t.Errorf("the identity table in %s is stale; run GOMHI_UPDATE_DOCS=1 go test ./pcigeneric/mock -run TestMockIdentityDocTable\nwant:\n%s", path, b.String())
}

// TestMockSWData: a model with IP_SW0 (46/47) gets a raw-IP data function
// there, gated by the modem and in the main pair's mode, so that Linux's
// mhi_swip0 (6.12+) is answered; a model without it gets none.
func TestMockSWData(t *testing.T) {
	for _, tc := range []struct {
		model     string
		responder bool
		want      bool
	}{{"qcom-sdx55m", true, true}, {"qcom-sdx55m", false, true}, {"telit-fn990", true, false}} {
		es := pcigeneric.EntriesFor(tc.model)
		if len(es) == 0 {
			t.Fatalf("no entry for %s", tc.model)
		}
		ec, fns, err := NewConfig(es[0], ModemOptions{IPData: &ipdata.Config{Responder: tc.responder}, Modem: modem.Config{RequireConnect: true}})
		if err != nil {
			t.Fatal(err)
		}
		if got := fns.SWData != nil; got != tc.want {
			t.Fatalf("%s: SWData present %v, want %v", tc.model, got, tc.want)
		}
		if !tc.want {
			continue
		}
		if ec.Functions[SWDataPair] != ep.Function(fns.SWData) {
			t.Fatalf("%s: IP_SW0 not given SWData", tc.model)
		}
		c := fns.SWData.Config()
		if c.Format != framing.RawIP || c.Gate != ipdata.Gate(fns.Modem) || (fns.SWData.Mode() == ipdata.ModeResponder) != tc.responder {
			t.Fatalf("%s: IP_SW0 function %+v mode %v", tc.model, c, fns.SWData.Mode())
		}
	}
}

// TestDataPairMatchesEp: pcigeneric.DataPair, which names the data pair
// without importing the mock, finds the pair the mock modem serves IP data
// on (ipdata.MBIMName before ipdata.Name) for every model.
func TestDataPairMatchesEp(t *testing.T) {
	for _, name := range pcigeneric.Models() {
		info, _ := pcigeneric.Model(name)
		want := ""
		for _, pair := range []string{ipdata.MBIMName, ipdata.Name} {
			if _, ok := info.Config.ChannelByName(pair, wire.Uplink); ok {
				want = pair
				break
			}
		}
		if got := pcigeneric.DataPair(info.Config); got != want {
			t.Errorf("%s: DataPair = %q, want %q", name, got, want)
		}
	}
}

// TestIPDataFraming: without IPData the data function speaks its pair's
// own framing (pcigeneric.PairFormat: NTB16 on IP_HW0_MBIM, raw IP on
// IP_HW0); an IPData given is taken as it is, raw IP on IP_HW0_MBIM
// included.
func TestIPDataFraming(t *testing.T) {
	for _, tc := range []struct {
		model string
		ipd   *ipdata.Config
		want  framing.Format
	}{
		{"telit-fn990", nil, framing.NTB16},
		{"qcom-sdx55m", nil, framing.RawIP},
		{"telit-fn990", &ipdata.Config{}, framing.RawIP},
		{"telit-fn990", &ipdata.Config{Format: framing.NTB32}, framing.NTB32},
		{"qcom-sdx55m", &ipdata.Config{Format: framing.QMAP}, framing.QMAP},
	} {
		_, fns, err := NewConfig(pcigeneric.EntriesFor(tc.model)[0], ModemOptions{IPData: tc.ipd})
		if err != nil {
			t.Fatal(err)
		}
		if got := fns.IPData.Config().Format; got != tc.want {
			t.Errorf("%s, IPData %+v: %v, want %v", tc.model, tc.ipd, got, tc.want)
		}
		if want := pcigeneric.PairFormat(fns.DataPair); tc.ipd == nil && want != tc.want {
			t.Errorf("%s: PairFormat(%s) = %v", tc.model, fns.DataPair, want)
		}
	}
}

// The model's mux-id base numbers session 0 on the wire without a quirk
// (foxconn-t99w640: 112), the sdx72-mux-112 quirk does on any model, and
// the modem's WireBase follows; MaxSessions defaults to 8.
func TestMockWireBase(t *testing.T) {
	sdx72, err := quirk.Parse("sdx72-mux-112")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		model  string
		quirks quirk.Set
		ipd    *ipdata.Config
		want   uint8
	}{
		{"foxconn-t99w640", nil, nil, 112},
		{"foxconn-dw5934e", nil, &ipdata.Config{Format: framing.QMAP}, 112},
		{"telit-fn990", nil, nil, 0},
		{"telit-fn990", sdx72, nil, 112},
		{"qcom-sdx55m", sdx72, &ipdata.Config{Format: framing.QMAP}, 112},
		{"foxconn-t99w640", nil, &ipdata.Config{Session: 5}, 5},
	} {
		_, fns, err := NewConfig(pcigeneric.EntriesFor(tc.model)[0], ModemOptions{IPData: tc.ipd, Quirks: tc.quirks})
		if err != nil {
			t.Fatal(err)
		}
		dc := fns.IPData.Config()
		wire := dc.Session
		if dc.Format == framing.QMAP {
			wire = dc.QMAPMux
		}
		if wire != tc.want || fns.Modem.WireBase() != tc.want || fns.Modem.MaxSessions() != modem.DefaultMaxSessions {
			t.Errorf("%s %v: data session %d mux %d, modem wire base %d, max sessions %d; want %d", tc.model, tc.quirks,
				dc.Session, dc.QMAPMux, fns.Modem.WireBase(), fns.Modem.MaxSessions(), tc.want)
		}
	}
}
