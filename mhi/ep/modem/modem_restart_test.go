package modem

import (
	"sync"
	"testing"
)

func TestModemRestart(t *testing.T) {
	m, err := New(Config{RequireConnect: true})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var got []EventKind
	m.Subscribe(func(e Event) { mu.Lock(); got = append(got, e.Kind); mu.Unlock() })
	if _, err := m.Connect("internet", IPv4); err != nil {
		t.Fatal(err)
	}
	if err := m.SetAttached(false); err != nil { // ends the session too
		t.Fatal(err)
	}
	if _, err := m.Connect("internet", IPv4); err != nil {
		t.Fatal(err)
	}
	if err := m.SetRSSI(5); err != nil {
		t.Fatal(err)
	}
	m.SetRadio(false)
	m.SetRadio(true)
	if _, err := m.Connect("internet", IPv4); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	got = nil
	mu.Unlock()
	m.Restart()
	if m.Session().Active || m.DataAllowed() || !m.Radio() || !m.Attached() || m.RSSI() != DefaultRSSI {
		t.Fatalf("after Restart: session %+v, data %v, radio %v, attached %v, RSSI %d", m.Session(), m.DataAllowed(), m.Radio(), m.Attached(), m.RSSI())
	}
	mu.Lock()
	if len(got) != 2 || got[0] != EventSession || got[1] != EventSignal {
		t.Errorf("events %v, want session and signal", got)
	}
	mu.Unlock()
	if st := m.Stats(); st.Restarts != 1 || st.Connects != 3 || st.Disconnects != 3 {
		t.Errorf("stats %+v", st)
	}
	// A modem configured with its radio off comes back with it off.
	off, _ := New(Config{RadioOff: true})
	off.SetRadio(true)
	off.Restart()
	if off.Radio() || off.Attached() {
		t.Errorf("radio-off modem after Restart: radio %v attached %v", off.Radio(), off.Attached())
	}
	// A new session after the restart gets a new id.
	s, err := m.Connect("internet", IPv4)
	if err != nil || s.ID != 4 {
		t.Errorf("connect after restart: %+v %v", s, err)
	}
}
