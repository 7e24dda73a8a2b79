package pciaddr

import (
	"errors"
	"testing"
)

func TestNormalize(t *testing.T) {
	for in, want := range map[string]string{
		"0000:01:00.0":   "0000:01:00.0",
		"01:00.0":        "0000:01:00.0",
		" 0000:3A:1f.7 ": "0000:3a:1f.7",
		"10000:00:02.0":  "10000:00:02.0",
	} {
		if got, err := Normalize(in); err != nil || got != want {
			t.Errorf("Normalize(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "0000:01:00", "0000:01:20.0", "0000:01:00.8", "x:01:00.0", "../../etc"} {
		if _, err := Normalize(bad); !errors.Is(err, ErrBadAddress) {
			t.Errorf("Normalize(%q) = %v, want ErrBadAddress", bad, err)
		}
	}
	if !Valid("0000:01:00.0") || Valid("01:00.0") || Valid("0000:01:00.0/..") {
		t.Error("Valid")
	}
}
