package framing

import (
	"errors"
	"strings"
	"testing"
)

// TestParse: every spelling the command line has accepted parses, in any
// case, to its framing; String gives the first spelling back.
func TestParse(t *testing.T) {
	for _, c := range []struct {
		names []string
		want  Format
	}{
		{[]string{"raw", "rawip", "ip", "RAW", "RawIP"}, RawIP},
		{[]string{"mbim", "ntb", "ntb16", "MBIM", "NTB16"}, NTB16},
		{[]string{"ntb32", "NTB32"}, NTB32},
		{[]string{"qmap", "rmnet", "QMAP", "RmNet"}, QMAP},
	} {
		for _, n := range c.names {
			got, err := Parse(n)
			if err != nil || got != c.want {
				t.Errorf("Parse(%q) = %v, %v; want %v", n, got, err, c.want)
			}
		}
		if got, err := Parse(c.want.String()); err != nil || got != c.want {
			t.Errorf("Parse(%v.String()) = %v, %v", c.want, got, err)
		}
	}
	for _, n := range []string{"", "ntb64", "mbim ", "qmap5"} {
		if _, err := Parse(n); err == nil || !strings.Contains(err.Error(), "raw, mbim, ntb32, qmap") {
			t.Errorf("Parse(%q): %v, want an error naming the framings", n, err)
		}
	}
}

// TestFormat: the zero value is raw IP; the names; validity.
func TestFormat(t *testing.T) {
	var zero Format
	if zero != RawIP {
		t.Fatalf("zero Format is %v, want raw", zero)
	}
	want := map[Format]string{RawIP: "raw", NTB16: "mbim", NTB32: "ntb32", QMAP: "qmap", QMAP + 1: "format(4)"}
	for f, s := range want {
		if f.String() != s || f.Valid() != (f <= QMAP) {
			t.Errorf("%d: String %q Valid %v", uint8(f), f.String(), f.Valid())
		}
	}
}

// TestErrors: the shared sentinels are distinct.
func TestErrors(t *testing.T) {
	errs := []error{ErrFull, ErrLimit, ErrTooLarge, ErrEmpty, ErrNotOpen}
	for i, a := range errs {
		for j, b := range errs {
			if errors.Is(a, b) != (i == j) {
				t.Errorf("errors.Is(%v, %v) = %v", a, b, i != j)
			}
		}
	}
}
