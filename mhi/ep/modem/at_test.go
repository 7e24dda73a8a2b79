package modem

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhi/ep"
	"github.com/gomhi/gomhi/mhi/proto/at"
	"github.com/gomhi/gomhi/mhi/testenv/poll"
)

// atTester types into the DUN and DUN2 ports of a ctrlRig.
type atTester struct {
	t testing.TB
	r *ctrlRig
	m *Modem
	a *AT
}

func newATTester(tb testing.TB, mc Config, opts ATOptions) *atTester {
	tb.Helper()
	if mc.Identity.Model == "" {
		mc.Identity = Identity{Manufacturer: "Telit", Model: "FN990", Firmware: "LE1.0.0.0-001", ProviderID: "00101", ProviderName: "gomhi network"}
	}
	m, err := New(mc)
	if err != nil {
		tb.Fatal(err)
	}
	if opts.Logger == nil {
		opts.Logger = testLogger()
	}
	a, err := NewAT(m, opts)
	if err != nil {
		tb.Fatal(err)
	}
	r := newCtrlRig(tb, "telit-fn990", map[string]ep.Function{DUNName: a, DUN2Name: a})
	r.open(DUNName)
	r.open(DUN2Name)
	return &atTester{t: tb, r: r, m: m, a: a}
}

// chat writes in and returns everything the port sends back until a final
// result code line (or, in numeric mode, a digit and CR) ends it.
func (h *atTester) chat(port, in string) string {
	h.t.Helper()
	h.r.write(port, []byte(in))
	var got []byte
	if !poll.Until(waitTimeout, func() bool {
		got = append(got, h.r.readDL(port)...)
		return complete(got)
	}) {
		h.t.Fatalf("%s: no final result for %q; got %q", port, in, got)
	}
	return string(got)
}

// complete reports whether s ends with a final result code.
func complete(s []byte) bool {
	if bytes.HasSuffix(s, []byte("\r\n")) {
		body := s[:len(s)-2]
		line := body[bytes.LastIndexAny(body, "\r\n")+1:]
		_, ok := at.ParseFinal(line)
		return ok
	}
	// ATV0: "<digit>\r"
	return len(s) >= 2 && s[len(s)-1] == '\r' && s[len(s)-2] >= '0' && s[len(s)-2] <= '8' &&
		(len(s) == 2 || s[len(s)-3] == '\n' || s[len(s)-3] == '\r')
}

func TestATBasics(t *testing.T) {
	h := newATTester(t, Config{}, ATOptions{})
	cases := []struct {
		in, want string
	}{
		{"AT\r", "AT\r\r\nOK\r\n"},
		{"ATI\r", "ATI\r\r\nTelit\r\nFN990\r\nRevision: LE1.0.0.0-001\r\n\r\nOK\r\n"},
		{"at+gcap\r", "at+gcap\r\r\n+GCAP: +CGSM,+CLTE\r\n\r\nOK\r\n"},
		{"AT+CGMI\r", "AT+CGMI\r\r\nTelit\r\n\r\nOK\r\n"},
		{"AT+CGMM\r", "AT+CGMM\r\r\nFN990\r\n\r\nOK\r\n"},
		{"AT+CGMR\r", "AT+CGMR\r\r\nLE1.0.0.0-001\r\n\r\nOK\r\n"},
		{"AT+CGSN\r", "AT+CGSN\r\r\n" + DefaultIMEI + "\r\n\r\nOK\r\n"},
		{"AT+CIMI\r", "AT+CIMI\r\r\n" + DefaultIMSI + "\r\n\r\nOK\r\n"},
		{"AT+CSQ\r", "AT+CSQ\r\r\n+CSQ: 20,99\r\n\r\nOK\r\n"},
		{"AT+CPIN?\r", "AT+CPIN?\r\r\n+CPIN: READY\r\n\r\nOK\r\n"},
		{"AT+COPS?\r", "AT+COPS?\r\r\n+COPS: 0,0,\"gomhi network\",7\r\n\r\nOK\r\n"},
		{"AT+COPS=3,2;+COPS?\r", "AT+COPS=3,2;+COPS?\r\r\n+COPS: 0,2,\"00101\",7\r\n\r\nOK\r\n"},
		{"AT+CEREG?\r", "AT+CEREG?\r\r\n+CEREG: 0,1\r\n\r\nOK\r\n"},
		{"AT+CGATT?\r", "AT+CGATT?\r\r\n+CGATT: 1\r\n\r\nOK\r\n"},
		{"AT+CFUN?\r", "AT+CFUN?\r\r\n+CFUN: 1\r\n\r\nOK\r\n"},
		{"AT+CGDCONT?\r", "AT+CGDCONT?\r\r\n+CGDCONT: 1,\"IPV4V6\",\"\",\"0.0.0.0\",0,0\r\n\r\nOK\r\n"},
		{"ATV1X4&C1&D2\r", "ATV1X4&C1&D2\r\r\nOK\r\n"},
		{"AT+FOO\r", "AT+FOO\r\r\nERROR\r\n"},
		{"ATD*99#\r", "ATD*99#\r\r\nERROR\r\n"},
		{"AT+CMEE=1\r", "AT+CMEE=1\r\r\nOK\r\n"},
		{"AT+FOO\r", "AT+FOO\r\r\nERROR\r\n"}, // unknown stays ERROR with CMEE=1
		{"AT+CFUN=9\r", "AT+CFUN=9\r\r\n+CME ERROR: 4\r\n"},
		{"AT+CGDCONT=1,\"X25\",\"a\"\r", "AT+CGDCONT=1,\"X25\",\"a\"\r\r\n+CME ERROR: 50\r\n"},
		{"AT+CMEE=2;+CPIN=\"1234\"\r", "AT+CMEE=2;+CPIN=\"1234\"\r\r\n+CME ERROR: operation not allowed\r\n"},
		{"AT+CSQ;+FOO;+CGMI\r", "AT+CSQ;+FOO;+CGMI\r\r\n+CSQ: 20,99\r\n\r\nERROR\r\n"}, // stops at the first error
		{"AT+CGDCONT=1,\"IP\r", "AT+CGDCONT=1,\"IP\r\r\nERROR\r\n"},                    // syntax
		{"ATE0\r", "ATE0\r\r\nOK\r\n"},
		{"ATI\r", "\r\nTelit\r\nFN990\r\nRevision: LE1.0.0.0-001\r\n\r\nOK\r\n"},
		{"A/", "\r\nTelit\r\nFN990\r\nRevision: LE1.0.0.0-001\r\n\r\nOK\r\n"},
		{"AT\r\nAT\r\n", "\r\nOK\r\n\r\nOK\r\n"},
		{"ATV0\r", "0\r"},
		{"AT+CSQ\r", "+CSQ: 20,99\r\n0\r"},
		{"AT+FOO\r", "4\r"},
		{"ATZ\r", "\r\nOK\r\n"}, // typed without echo, answered in the restored verbose form
		{"AT\r", "AT\r\r\nOK\r\n"},
	}
	for _, c := range cases {
		if got := h.chat(DUNName, c.in); got != c.want {
			t.Errorf("%q: got %q, want %q", c.in, got, c.want)
		}
	}
	st := h.a.Stats()
	if st.Lines+st.Repeats+st.TooLong != st.OK+st.Errors {
		t.Fatalf("conservation: %+v", st)
	}
	if st.Unknown["+FOO"] != 4 || st.Unknown["D"] != 1 {
		t.Fatalf("unknown %v", st.Unknown)
	}
}

// TestATOneNumber checks the set commands that take exactly one number:
// another count of arguments, an empty one or one out of range is
// "incorrect parameters" (CME error 50), one in range is OK.
func TestATOneNumber(t *testing.T) {
	h := newATTester(t, Config{}, ATOptions{})
	if got := h.chat(DUNName, "ATE0;+CMEE=1\r"); !strings.HasSuffix(got, "OK\r\n") {
		t.Fatalf("ATE0;+CMEE=1: %q", got)
	}
	const bad, ok = "\r\n+CME ERROR: 50\r\n", "\r\nOK\r\n"
	cases := []struct{ in, want string }{
		{"AT+CMEE=1,0", bad}, {"AT+CMEE=3", bad}, {"AT+CMEE=", bad}, {"AT+CMEE=1", ok},
		{"AT+CREG=1,1", bad}, {"AT+CREG=3", bad}, {"AT+CREG=2", ok},
		{"AT+CGREG=0,0", bad}, {"AT+CEREG=-1", bad}, {"AT+CEREG=0", ok},
		{"AT+CGATT=1,1", bad}, {"AT+CGATT=2", bad}, {"AT+CGATT=1", ok},
		{"AT+WS46=28,1", bad}, {"AT+WS46=256", bad}, {"AT+WS46=28", ok},
		{"AT+CPLS=0,0", bad}, {"AT+CPLS=3", bad}, {"AT+CPLS=0", ok},
		{"AT+CEMODE=2,2", bad}, {"AT+CEMODE=4", bad}, {"AT+CEMODE=\"2\"", bad}, {"AT+CEMODE=2", ok},
		{"AT+CTZU=1,1", bad}, {"AT+CTZU=2", bad}, {"AT+CTZU=1", ok},
	}
	for _, c := range cases {
		if got := h.chat(DUNName, c.in+"\r"); got != c.want {
			t.Errorf("%q: got %q, want %q", c.in, got, c.want)
		}
	}
}

func TestATStreamAndPorts(t *testing.T) {
	h := newATTester(t, Config{}, ATOptions{MaxLine: 32})
	// A line split across transfers.
	h.r.write(DUNName, []byte("AT+CG"))
	if got := string(h.r.readDL(DUNName)); got != "AT+CG" {
		t.Fatalf("echo of a partial line %q", got)
	}
	if got := h.chat(DUNName, "MI\r"); got != "MI\r\r\nTelit\r\n\r\nOK\r\n" {
		t.Fatalf("rest of the line: %q", got)
	}
	// Each port has its own settings.
	h.chat(DUNName, "ATE0\r")
	if got := h.chat(DUN2Name, "AT\r"); got != "AT\r\r\nOK\r\n" {
		t.Fatalf("DUN2 lost its echo to DUN's ATE0: %q", got)
	}
	// A line over the limit is discarded and answered ERROR.
	if got := h.chat(DUNName, "AT"+strings.Repeat("E0", 20)+"\r"); got != "\r\nERROR\r\n" {
		t.Fatalf("long line: %q", got)
	}
	// Lines without AT are ignored; LF alone ends a line; backspace edits.
	h.r.write(DUNName, []byte("hello\r"))
	h.r.quiet(DUNName, 10*time.Millisecond)
	if got := h.chat(DUNName, "ATX\bI\n"); !strings.Contains(got, "FN990") {
		t.Fatalf("backspace/LF: %q", got)
	}
	// Radio control shared with the Modem.
	h.chat(DUNName, "AT+CFUN=0\r")
	if h.m.Radio() {
		t.Fatal("AT+CFUN=0 left the radio on")
	}
	for in, want := range map[string]string{
		"AT+CFUN?\r": "+CFUN: 0", "AT+COPS?\r": "+COPS: 0\r", "AT+CSQ\r": "+CSQ: 99,99", "AT+CEREG?\r": "+CEREG: 0,0", "AT+CGATT?\r": "+CGATT: 0",
	} {
		if got := h.chat(DUN2Name, in); !strings.Contains(got, want) {
			t.Errorf("%q with the radio off: %q", in, got)
		}
	}
	if got := h.chat(DUN2Name, "AT+CMEE=1;+CGATT=1\r"); !strings.Contains(got, "+CME ERROR: 30") {
		t.Fatalf("attach with radio off: %q", got)
	}
	h.chat(DUNName, "AT+CFUN=1\r")
	if !h.m.Radio() {
		t.Fatal("AT+CFUN=1 left the radio off")
	}
	// The context table is shared by the ports.
	h.chat(DUNName, "AT+CGDCONT=2,\"IP\",\"internet\"\r")
	if got := h.chat(DUN2Name, "AT+CGDCONT?\r"); !strings.Contains(got, "+CGDCONT: 2,\"IP\",\"internet\",") {
		t.Fatalf("context table: %q", got)
	}
	if _, err := h.m.Connect("internet", IPv4); err != nil {
		t.Fatal(err)
	}
	if got := h.chat(DUN2Name, "AT+CGACT?\r"); !strings.Contains(got, "+CGACT: 1,0\r\n+CGACT: 2,1") {
		t.Fatalf("CGACT: %q", got)
	}
	h.chat(DUNName, "AT+CGDCONT=2\r")
	if got := h.chat(DUN2Name, "AT+CGDCONT?\r"); strings.Contains(got, "internet") {
		t.Fatalf("context 2 not deleted: %q", got)
	}

	// A port reset drops a partly typed line.
	h.r.write(DUNName, []byte("AT+CG"))
	h.r.quiet(DUNName, 5*time.Millisecond) // echo is off
	h.r.close(DUNName)
	h.r.open(DUNName)
	h.r.write(DUNName, []byte("MI\r"))
	h.r.quiet(DUNName, 10*time.Millisecond)
	if got := h.chat(DUNName, "AT\r"); got != "\r\nOK\r\n" {
		t.Fatalf("after reopen: %q", got)
	}
	st := h.a.Stats()
	if st.Lines+st.Repeats+st.TooLong != st.OK+st.Errors || st.TooLong != 1 || st.NoPrefix != 2 {
		t.Fatalf("stats %+v", st)
	}
}

func TestNewATOptions(t *testing.T) {
	m, _ := New(Config{})
	if _, err := NewAT(nil, ATOptions{}); !errors.Is(err, ErrConfig) {
		t.Fatal(err)
	}
	if _, err := NewAT(m, ATOptions{MaxLine: -1}); !errors.Is(err, ErrConfig) {
		t.Fatal(err)
	}
}

// FuzzATAnswer: whatever bytes arrive, in whatever pieces, the AT function
// never panics, answers every executed line with exactly one final result
// (counted), and keeps its output bounded.
func FuzzATAnswer(f *testing.F) {
	for _, s := range []string{
		"ATI\r", "ATE0\rAT+CSQ\r", "AT+CMEE=1;+CFUN=9\r", "AT+CGDCONT=1,\"IP\",\"internet\"\rAT+CGDCONT?\r",
		"A/", "AT+COPS=3,2;+COPS?\r", "ATV0\rATI\r", "AT+CFUN=0\rAT+CGATT=1\rAT+CFUN=1\r", "AT\x08\x08ATZ\n",
		"ATQ1\rAT+FOO\r", "AT" + strings.Repeat("X", 100) + "\r",
	} {
		f.Add([]byte(s), uint8(3))
	}
	f.Fuzz(func(t *testing.T, data []byte, chunk uint8) {
		m, _ := New(Config{})
		a, _ := NewAT(m, ATOptions{MaxLine: 64})
		a.mu.Lock()
		port := a.portLocked(nil)
		a.mu.Unlock()
		n := int(chunk%16) + 1
		total := 0
		for p := data; len(p) > 0; {
			piece := p[:min(n, len(p))]
			p = p[len(piece):]
			out := a.receive(port, piece)
			total += len(out)
		}
		st := a.Stats()
		if st.Lines+st.Repeats+st.TooLong != st.OK+st.Errors {
			t.Fatalf("conservation: %+v", st)
		}
		// Echo plus at most a few hundred bytes per executed line (the
		// largest answer is +CGDCONT? with 16 contexts of ≤100-byte APNs).
		if limit := len(data) + int(st.Lines+st.Repeats+st.TooLong)*2200 + 64; total > limit {
			t.Fatalf("%d bytes out for %d in", total, len(data))
		}
	})
}
