// Package atterm talks to an AT port opened as a terminal, as a terminal
// program does: it writes a command line and reads until the modem's final
// result line (OK, ERROR, +CME ERROR…).
//
// It is a test helper, imported only by _test.go files and test-support
// packages.
package atterm

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhi/proto/at"
)

// Timeout bounds one Converse: the answer must end within it.
const Timeout = 5 * time.Second

// Converse writes s (a command line with its "\r") to f and returns what
// the port answered, up to and including the final result line. It fails
// tb when the write fails or no final result comes within Timeout.
func Converse(tb testing.TB, f *os.File, s string) string {
	tb.Helper()
	if _, err := f.WriteString(s); err != nil {
		tb.Fatal(err)
	}
	var got []byte
	buf := make([]byte, 512)
	// A read deadline, not a poll: each Read blocks until data or the end.
	_ = f.SetReadDeadline(time.Now().Add(Timeout))
	for {
		n, err := f.Read(buf)
		if err != nil {
			tb.Fatalf("read after %q: %v (got %q)", s, err, got)
		}
		got = append(got, buf[:n]...)
		if final(got) {
			return string(got)
		}
	}
}

// final reports whether got ends with a complete final result line.
func final(got []byte) bool {
	if !bytes.HasSuffix(got, []byte("\r\n")) {
		return false
	}
	lines := strings.Split(strings.TrimRight(string(got), "\r\n"), "\r\n")
	_, ok := at.ParseFinal([]byte(lines[len(lines)-1]))
	return ok
}
