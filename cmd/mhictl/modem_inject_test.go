package main

import (
	"errors"
	"testing"

	"github.com/gomhi/gomhi/mhi/ep/modem"
	"github.com/gomhi/gomhi/pcigeneric"
	"github.com/gomhi/gomhi/pcigeneric/mock"
)

func TestParseFault(t *testing.T) {
	for _, c := range []struct {
		in      string
		name    string
		session uint8
		ok      bool
	}{
		{"sys-err", "sys-err", 0, true},
		{"crash", "crash", 0, true},
		{"disconnect-session=1", disconnectSessionFault, 1, true},
		{"disconnect-session=255", disconnectSessionFault, 255, true},
		{"disconnect-session=256", "", 0, false},
		{"disconnect-session=", "", 0, false},
		{"disconnect-session=N", "", 0, false},
		{"disconnect-session=-1", "", 0, false},
		{"reboot", "", 0, false},
	} {
		name, n, err := parseFault(c.in)
		if (err == nil) != c.ok || name != c.name || n != c.session {
			t.Errorf("parseFault(%q) = %q, %d, %v", c.in, name, n, err)
		}
		if err != nil && !errors.Is(err, errBadFault) {
			t.Errorf("parseFault(%q): %v is not errBadFault", c.in, err)
		}
	}
}

// The disconnect-session fault ends the one session it names.
func TestDisconnectSessionFault(t *testing.T) {
	if _, err := disconnectSession(nil, 0); !errors.Is(err, errNoModemSession) {
		t.Fatalf("no client: %v", err)
	}
	_, fns, err := mock.NewConfig(pcigeneric.EntriesFor("telit-fn990")[0], mock.ModemOptions{Modem: modem.Config{RequireConnect: true}})
	if err != nil {
		t.Fatal(err)
	}
	for n, apn := range []string{"internet", "ims"} {
		if _, err := fns.Modem.ConnectSession(uint8(n), apn, modem.IPv4); err != nil {
			t.Fatal(err)
		}
	}
	if what, err := disconnectSession(fns, 1); err != nil || what != "the network ended session 1" {
		t.Fatalf("disconnect-session=1: %q %v", what, err)
	}
	if !fns.Modem.SessionOf(0).Active || fns.Modem.SessionOf(1).Active || fns.Modem.Stats().NetworkDisconnects != 1 {
		t.Fatalf("sessions %+v, stats %+v", fns.Modem.Sessions(), fns.Modem.Stats())
	}
	if _, err := disconnectSession(fns, 1); !errors.Is(err, errNoSuchSession) {
		t.Fatalf("disconnect-session=1 again: %v", err)
	}
}
