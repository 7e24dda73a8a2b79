package modem_test

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gomhi/gomhi/mhi/ep"
	"github.com/gomhi/gomhi/mhi/ep/modem"
	"github.com/gomhi/gomhi/mhi/proto/at"
)

// TestATOverPTY: a terminal (this test, opening the PTY as minicom would)
// types ATI on the telit-fn990's DUN and DUN2 ports and reads the model's
// strings back through the host stack.
func TestATOverPTY(t *testing.T) {
	m, err := modem.New(modem.Config{Identity: modem.Identity{Manufacturer: "Telit", Model: "FN990", Firmware: "LE1.0.0.0-001"}})
	if err != nil {
		t.Fatal(err)
	}
	a, err := modem.NewAT(m, modem.ATOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mock := mockWith(t, "telit-fn990", map[string]ep.Function{modem.DUNName: a, modem.DUN2Name: a})
	for _, pair := range []string{modem.DUNName, modem.DUN2Name} {
		path, _ := newBridge(t, mock.Controller, pair, rawFramer, nil)
		term, err := os.OpenFile(path, os.O_RDWR|unix.O_NOCTTY, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = term.Close() })
		got := converse(t, term, "ATI\r")
		want := "ATI\r\r\nTelit\r\nFN990\r\nRevision: LE1.0.0.0-001\r\n\r\nOK\r\n"
		if got != want {
			t.Fatalf("%s: ATI answered %q, want %q", pair, got, want)
		}
		if got := converse(t, term, "ATE0\r"); got != "ATE0\r\r\nOK\r\n" {
			t.Fatalf("%s: ATE0: %q", pair, got)
		}
		if got := converse(t, term, "AT+CGMM;+CSQ\r"); got != "\r\nFN990\r\n\r\n+CSQ: 20,99\r\n\r\nOK\r\n" {
			t.Fatalf("%s: %q", pair, got)
		}
		t.Logf("%s (%s): ATI answered %q", pair, path, want)
	}
	if st := a.Stats(); st.Lines != 6 || st.OK != 6 {
		t.Fatalf("AT stats %+v", st)
	}
}

// converse writes s and reads until a final result line.
func converse(t *testing.T, f *os.File, s string) string {
	t.Helper()
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
	var got []byte
	buf := make([]byte, 512)
	// Not poll: blocking reads under one read deadline, nothing to poll.
	deadline := time.Now().Add(5 * time.Second)
	for {
		_ = f.SetReadDeadline(deadline)
		n, err := f.Read(buf)
		if err != nil {
			t.Fatalf("read after %q: %v (got %q)", s, err, got)
		}
		got = append(got, buf[:n]...)
		if bytes.HasSuffix(got, []byte("\r\n")) {
			lines := strings.Split(strings.TrimRight(string(got), "\r\n"), "\r\n")
			if _, ok := at.ParseFinal([]byte(lines[len(lines)-1])); ok {
				return string(got)
			}
		}
	}
}
