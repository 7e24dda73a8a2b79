package sysfs_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/gomhi/gomhi/sysfs"
	"github.com/gomhi/gomhi/sysfs/sysfstest"
)

func TestTreeControlPortsAndSession(t *testing.T) {
	d := sysfstest.NewControlDevice(t, "mhi0", "")
	tr := sysfs.NewTree()
	tr.AddDevice("mhi0", d.Binding())
	get := func(p string) string {
		t.Helper()
		v, err := tr.Get("devices/mhi0/" + p)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	if got := get("ports/wwan0mbim0"); got != d.Port.Link() {
		t.Errorf("ports/wwan0mbim0 = %q, want %q", got, d.Port.Link())
	}
	if err := tr.Set("devices/mhi0/ports/wwan0mbim0", "/tmp/x"); !errors.Is(err, sysfs.ErrReadOnly) {
		t.Errorf("writing a port: %v", err)
	}
	if got := get("session/state"); got != "disconnected" {
		t.Errorf("session/state = %q", got)
	}
	for _, bad := range []string{"", "a b c", "internet ipv5"} {
		if err := tr.Set("devices/mhi0/session/connect", bad); !errors.Is(err, sysfs.ErrInvalid) {
			t.Errorf("connect %q: %v", bad, err)
		}
	}
	if _, err := tr.Get("devices/mhi0/session/connect"); !errors.Is(err, sysfs.ErrWriteOnly) {
		t.Errorf("reading connect: %v", err)
	}
	if d.Mock.Modem.DataAllowed() {
		t.Fatal("the mock passes data before connect")
	}
	if err := tr.Set("devices/mhi0/session/connect", "internet ipv4v6\n"); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]string{
		"session/state": "connected", "session/apn": "internet", "session/ip_type": "ipv4v6", "session/protocol": "mbim",
		"session/ipv4": "198.18.0.1/24", "session/gateway4": "198.18.0.2", "session/dns4": "198.18.0.2",
		"session/ipv6": "fd00:6d68:6900::1/64", "session/gateway6": "fd00:6d68:6900::2", "session/mtu": "1500",
		"stats/session/connects": "1", "stats/session/connected": "1", "stats/modem/connects": "1", "stats/modem/session_active": "1",
	} {
		if got := get(p); got != want {
			t.Errorf("%s = %q, want %q", p, got, want)
		}
	}
	if !d.Mock.Modem.DataAllowed() {
		t.Fatal("the mock gates data after connect")
	}
	if err := tr.Set("devices/mhi0/session/connect", "other"); !errors.Is(err, sysfs.ErrBusy) {
		t.Errorf("second connect: %v", err)
	}
	if get("session/last_error") == "" {
		t.Error("last_error empty after a failed connect")
	}
	if n := get("stats/ports/wwan0mbim0/pair_ul_messages"); n == "0" {
		t.Error("no uplink messages counted on the port's pair")
	}
	m := scrape(t, tr).text
	for _, want := range []string{
		`mhi_port_pair_ul_messages_total{device="mhi0",port="wwan0mbim0"} `,
		`mhi_port_ul_framing_errors_total{device="mhi0",port="wwan0mbim0"} 0`,
		`mhi_session_info{apn="internet",device="mhi0",interface="",ip_type="ipv4v6",ipv4="198.18.0.1/24",ipv6="fd00:6d68:6900::1/64",protocol="mbim",state="connected"} 1`,
		`mhi_session_up{device="mhi0"} 1`,
		`mhi_session_connects_total{device="mhi0"} 1`,
		"# TYPE mhi_session_connected gauge",
		`mhi_modem_ip_dropped_gated_total{device="mhi0"} 0`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	if err := tr.Set("devices/mhi0/session/disconnect", "1"); err != nil {
		t.Fatal(err)
	}
	if got := get("session/state"); got != "disconnected" || get("session/ipv4") != "" || d.Mock.Modem.DataAllowed() {
		t.Errorf("after disconnect: state %q ipv4 %q data %v", got, get("session/ipv4"), d.Mock.Modem.DataAllowed())
	}
}

func TestTreeSessionsByNumber(t *testing.T) {
	d := sysfstest.NewControlDevice(t, "mhi0", "")
	tr := sysfs.NewTree()
	tr.AddDevice("mhi0", d.Binding())
	get := func(p string) string {
		t.Helper()
		v, err := tr.Get("devices/mhi0/" + p)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	if get("sessions/0/number") != "0" || get("sessions/1/number") != "1" || get("sessions/1/state") != "disconnected" {
		t.Errorf("sessions/0, sessions/1: %q %q %q", get("sessions/0/number"), get("sessions/1/number"), get("sessions/1/state"))
	}
	if _, err := tr.Get("devices/mhi0/sessions/2/state"); !errors.Is(err, sysfs.ErrNotFound) {
		t.Errorf("sessions/2 of a device taking 2: %v", err)
	}
	if err := tr.Set("devices/mhi0/sessions/1/disconnect", "1"); !errors.Is(err, sysfs.ErrInvalid) {
		t.Errorf("disconnect of an idle session 1: %v, want ErrInvalid", err)
	}
	if err := tr.Set("devices/mhi0/sessions/1/connect", "ims ipv4 bad/name"); !errors.Is(err, sysfs.ErrInvalid) {
		t.Errorf("connect with a bad interface name: %v, want ErrInvalid", err)
	}
	// sessions/0 is session/.
	if err := tr.Set("devices/mhi0/sessions/0/connect", "internet"); err != nil {
		t.Fatal(err)
	}
	if get("session/state") != "connected" || get("sessions/0/ipv4") != "198.18.0.1/24" || get("stats/sessions/0/connects") != "1" {
		t.Errorf("after connecting sessions/0: session/state %q, sessions/0/ipv4 %q", get("session/state"), get("sessions/0/ipv4"))
	}
	d.SessionData.Set(1, sysfstest.SessionRow{RxPackets: 7, TxBytes: 700})
	d.SessionData.SetUnknown(3)
	if get("stats/modem_sessions/0/ul_packets") != "0" || get("stats/modem_sessions/1/dropped_gated") != "0" {
		t.Error("the mock's per-session counters are not in the tree")
	}
	if get("stats/sessions/1/rx_packets") != "7" || get("stats/sessions/1/tx_bytes") != "700" || get("stats/sessions/rx_session_unknown") != "3" {
		t.Error("per-session data counters not in the tree")
	}
	m := scrape(t, tr).text
	for _, want := range []string{
		`mhi_sessions_rx_packets_total{device="mhi0",session="1"} 7`,
		`mhi_sessions_tx_bytes_total{device="mhi0",session="1"} 700`,
		`mhi_sessions_rx_packets_total{device="mhi0",session="0"} 0`,
		`mhi_sessions_rx_session_unknown_total{device="mhi0"} 3`,
		`mhi_sessions_up{device="mhi0",session="0"} 1`,
		`mhi_sessions_up{device="mhi0",session="1"} 0`,
		`mhi_sessions_connects_total{device="mhi0",session="0"} 1`,
		`mhi_session_up{device="mhi0"} 1`,
		`mhi_modem_sessions_ul_packets_total{device="mhi0",session="1"} 0`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}
