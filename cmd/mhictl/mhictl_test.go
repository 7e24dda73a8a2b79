package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := newRootCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	err := cmd.Execute()
	return out.String(), err
}

func TestLoopbackJSON(t *testing.T) {
	out, err := run(t, "loopback", "--count", "1000", "--json")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var res struct{ Sent, Received, Mismatched, Timeouts int }
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if res.Sent != 1000 || res.Received != 1000 || res.Mismatched != 0 || res.Timeouts != 0 {
		t.Fatalf("%+v", res)
	}
}

func TestLoopbackBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"loopback", "--size", "70000"},
		{"loopback", "--size", "10", "--min-size", "20"},
		{"loopback", "--num-tre", "40"},
		{"loopback", "--dl-buffer", "0"},
		{"loopback", "--model", "no-such-modem"},
	} {
		if out, err := run(t, args...); err == nil {
			t.Errorf("%v succeeded:\n%s", args, out)
		}
	}
}

func TestRegdumpJSON(t *testing.T) {
	out, err := run(t, "regdump", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var dump struct {
		Registers []struct {
			Name   string
			Offset uint32
			Value  uint32
		}
	}
	if err := json.Unmarshal([]byte(out), &dump); err != nil {
		t.Fatal(err)
	}
	got := map[string]uint32{}
	val := map[string]uint32{}
	for _, r := range dump.Registers {
		got[r.Name] = r.Offset
		val[r.Name] = r.Value
	}
	// Offsets from the facts sheet, section 1.1.
	want := map[string]uint32{
		"MHIREGLEN": 0x00, "MHIVER": 0x08, "MHICFG": 0x10, "CHDBOFF": 0x18, "ERDBOFF": 0x20,
		"BHIOFF": 0x28, "MHICTRL": 0x38, "MHISTATUS": 0x48, "CCABAP_LOWER": 0x58,
		"ECABAP_LOWER": 0x60, "CRCBAP_LOWER": 0x68, "CRDB_LOWER": 0x70,
	}
	for name, off := range want {
		if o, ok := got[name]; !ok || o != off {
			t.Errorf("%s at 0x%x (present %v), want 0x%x", name, o, ok, off)
		}
	}
	if val["MHIVER"] != 0x01000000 || val["MHISTATUS"]>>8&0xFF != 2 {
		t.Errorf("MHIVER 0x%x MHISTATUS 0x%x: want version 1.0 and M0", val["MHIVER"], val["MHISTATUS"])
	}
}

func TestStatus(t *testing.T) {
	out, err := run(t, "status", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		State, EE  string `json:"-"`
		MHIState   string `json:"mhi_state"`
		Ee         string `json:"ee"`
		Channels   []struct{ Num int }
		EventRings []struct{ Index int } `json:"event_rings"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatal(err)
	}
	if st.MHIState != "M0" || st.Ee != "AMSS" || len(st.Channels) == 0 || len(st.EventRings) != 6 {
		t.Fatalf("%+v", st)
	}
	text, err := run(t, "status")
	if err != nil || !strings.Contains(text, "IP_HW0") {
		t.Fatalf("%v\n%s", err, text)
	}
}

// `up --device` goes through the device table and the VFIO transport; on a
// machine without VFIO (like this one) it must say so clearly, and a device
// that is not a modem or not bound to vfio-pci must be refused by name.
func TestUpDeviceErrors(t *testing.T) {
	root := "../../fixtures/pci/server"
	for _, tc := range []struct {
		addr string
		want []string
	}{
		{"0000:09:00.0", []string{"0000:09:00.0"}},
		{"0000:02:00.0", []string{"0000:02:00.0", "mhi-pci-generic"}},
	} {
		out, err := run(t, "up", "--sysfs-root", root, "--device", tc.addr, "--netlink-port", "1")
		if err == nil {
			t.Fatalf("up --device %s succeeded:\n%s", tc.addr, out)
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("up --device %s: %v; want it to mention %q", tc.addr, err, w)
			}
		}
	}
	// Bound to vfio-pci in the fixture: Open gets as far as the kernel.
	_, err := run(t, "up", "--sysfs-root", root, "--device", "0000:01:00.0", "--netlink-port", "1")
	if err == nil || !strings.Contains(err.Error(), "0000:01:00.0") {
		t.Fatalf("up --device on a fixture: %v", err)
	}
	t.Logf("vfio-pci device in a fixture tree: %v", err)
}
