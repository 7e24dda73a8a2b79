package ctrlport

import (
	"bytes"
	"slices"
	"testing"
)

func TestFramers(t *testing.T) {
	open := []byte{1, 0, 0, 0, 16, 0, 0, 0, 1, 0, 0, 0, 0, 16, 0, 0}
	huge := []byte{3, 0, 0, 0, 0x01, 0x80, 0, 0} // 32769 bytes: too long
	qmux := []byte{0x01, 0x0b, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x22, 0x00, 0x00, 0x00}
	for _, c := range []struct {
		name string
		f    Framer
		in   []byte
		want int
	}{
		{"mbim empty", MBIMFramer{}, nil, 0},
		{"mbim partial header", MBIMFramer{}, open[:6], 0},
		{"mbim partial body", MBIMFramer{}, open[:14], 0},
		{"mbim whole", MBIMFramer{}, open, 16},
		{"mbim two", MBIMFramer{}, append(slices.Clone(open), open...), 16},
		{"mbim bad type", MBIMFramer{}, append([]byte{9, 0, 0, 0}, open...), -1},
		{"mbim device type", MBIMFramer{}, []byte{1, 0, 0, 0x80, 16, 0, 0, 0}, -1},
		{"mbim length below header", MBIMFramer{}, []byte{2, 0, 0, 0, 8, 0, 0, 0}, -1},
		{"mbim too long", MBIMFramer{}, huge, -1},
		{"qmux whole", QMUXFramer{}, qmux, 12},
		{"qmux partial", QMUXFramer{}, qmux[:7], 0},
		{"qmux bad marker", QMUXFramer{}, []byte{0x02, 1, 2}, -1},
		{"qmux length too small", QMUXFramer{}, []byte{0x01, 0x02, 0x00, 0, 0}, -1},
		{"at line", ATFramer{}, []byte("ATI\rAT+CSQ\r"), 4},
		{"at partial", ATFramer{}, []byte("AT+CG"), 0},
		{"at leading LF", ATFramer{}, []byte("\n\nATI\r"), -2},
		{"at overlong", ATFramer{}, bytes.Repeat([]byte{'A'}, MaxMTU), -MaxMTU},
	} {
		if got := c.f.Frame(c.in); got != c.want {
			t.Errorf("%s: Frame = %d, want %d", c.name, got, c.want)
		}
	}
}

func TestPortNames(t *testing.T) {
	got := PortNames(0, []string{"SAHARA", "DIAG", "MBIM", "DUN", "DUN2", "IP_HW0_MBIM"})
	want := []string{"", "wwan0qcdm0", "wwan0mbim0", "wwan0at0", "wwan0at1", ""}
	if !slices.Equal(got, want) {
		t.Fatalf("%q, want %q", got, want)
	}
	if got := PortNames(1, []string{"QMI"}); got[0] != "wwan1qmi0" {
		t.Fatal(got)
	}
	for k, f := range map[Kind]string{KindMBIM: "MBIM", KindQMI: "QMUX", KindAT: "AT"} {
		if FramerFor(k).Name() != f {
			t.Errorf("%s: %s", k, FramerFor(k).Name())
		}
	}
	if FramerFor(KindQCDM) != nil {
		t.Error("QCDM framer")
	}
}
