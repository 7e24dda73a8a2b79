package atterm

import "testing"

// TestFinal: only a complete final result line ends an answer.
func TestFinal(t *testing.T) {
	for in, want := range map[string]bool{
		"\r\nOK\r\n":                true,
		"\r\nQuectel\r\n\r\nOK\r\n": true,
		"\r\nERROR\r\n":             true,
		"\r\n+CME ERROR: 10\r\n":    true,
		"\r\nOK":                    false,
		"\r\nQuectel\r\n":           false,
		"\r\n+CSQ: 20,99\r\n":       false,
		"":                          false,
	} {
		if got := final([]byte(in)); got != want {
			t.Errorf("final(%q) = %v, want %v", in, got, want)
		}
	}
}
