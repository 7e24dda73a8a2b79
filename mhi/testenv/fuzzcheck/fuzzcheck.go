// Package fuzzcheck holds what the project's fuzz targets check after
// every input besides "no panic": that the code under test released every
// file descriptor, goroutine and memory mapping it took, and it writes seed
// corpus files in the format of `go test` fuzzing.
package fuzzcheck

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhi/testenv/poll"
)

// Settle is how long Check waits for descriptors and goroutines released
// asynchronously (a goroutine between its last channel send and its
// return) before it calls them leaked.
const Settle = 2 * time.Second

// State is the process's open descriptors and goroutine count at one
// moment.
type State struct {
	fds        map[string]string // fd number → what it refers to
	goroutines int
}

// Snapshot records the open descriptors and the goroutine count.
func Snapshot() State {
	return State{fds: openFDs(), goroutines: runtime.NumGoroutine()}
}

func openFDs() map[string]string {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return nil
	}
	m := make(map[string]string, len(ents))
	for _, e := range ents {
		target, err := os.Readlink("/proc/self/fd/" + e.Name())
		if err != nil {
			continue // the descriptor ReadDir itself used, now closed
		}
		m[e.Name()] = target
	}
	return m
}

// Leaks waits up to Settle for the descriptors and goroutine count to
// return to what s recorded and describes what did not: each descriptor
// opened since (with what it refers to) and, for goroutines, every stack.
// It returns "" when nothing leaked.
func (s State) Leaks() string {
	var extra []string
	var g int
	if poll.Until(Settle, func() bool {
		extra = nil
		for fd, target := range openFDs() {
			if old, ok := s.fds[fd]; !ok || old != target {
				extra = append(extra, fd+" -> "+target)
			}
		}
		g = runtime.NumGoroutine()
		return len(extra) == 0 && g <= s.goroutines
	}) {
		return ""
	}
	slices.Sort(extra)
	var b strings.Builder
	if len(extra) > 0 {
		fmt.Fprintf(&b, "%d descriptors leaked: %s\n", len(extra), strings.Join(extra, ", "))
	}
	if g > s.goroutines {
		fmt.Fprintf(&b, "%d goroutines, %d before:\n", g, s.goroutines)
		_ = pprof.Lookup("goroutine").WriteTo(&b, 1)
	}
	return b.String()
}

// Check fails tb with Leaks' description if anything leaked.
func (s State) Check(tb testing.TB) {
	tb.Helper()
	if l := s.Leaks(); l != "" {
		tb.Fatal(l)
	}
}

// Mappings returns the number of lines of /proc/self/maps that contain
// name (a memfd's name appears as "/memfd:<name> (deleted)").
func Mappings(name string) int {
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return -1
	}
	return bytes.Count(b, []byte(name))
}

// Goroutines returns every goroutine's stack, for a hang report.
func Goroutines() string {
	var b strings.Builder
	_ = pprof.Lookup("goroutine").WriteTo(&b, 1)
	return b.String()
}

// WriteCorpus writes one seed in `go test fuzz v1` format to
// dir/name, creating dir. The arguments must have the types of the fuzz
// function's parameters, in order; []byte, string, bool, the sized
// integer types and int are supported.
func WriteCorpus(dir, name string, args ...any) error {
	var b strings.Builder
	b.WriteString("go test fuzz v1\n")
	for _, a := range args {
		switch v := a.(type) {
		case []byte:
			fmt.Fprintf(&b, "[]byte(%s)\n", strconv.Quote(string(v)))
		case string:
			fmt.Fprintf(&b, "string(%s)\n", strconv.Quote(v))
		case bool:
			fmt.Fprintf(&b, "bool(%v)\n", v)
		case uint8:
			fmt.Fprintf(&b, "byte(%s)\n", strconv.QuoteRune(rune(v)))
		case uint16:
			fmt.Fprintf(&b, "uint16(%d)\n", v)
		case uint32:
			fmt.Fprintf(&b, "uint32(%d)\n", v)
		case uint64:
			fmt.Fprintf(&b, "uint64(%d)\n", v)
		case int:
			fmt.Fprintf(&b, "int(%d)\n", v)
		case int64:
			fmt.Fprintf(&b, "int64(%d)\n", v)
		default:
			return fmt.Errorf("fuzzcheck: corpus value of type %T", a)
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, name), []byte(b.String()), 0o644)
}
