// Command gotest runs `go test -json` with the given arguments and prints
// what plain `go test` prints (each package's ok/FAIL line, the output of
// failed tests, build errors), then the tests that skipped, with their
// reasons, and a closing count. With -v it prints everything, as go test
// -v does. Under CI (CI=true) a skipped test fails the
// run: a CI run must run every test (docs/RELIABILITY.md). The exit status
// is go test's, or 1 for skips under CI.
//
// Usage: go run ./.ci/gotest [go test flags] [packages]
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
)

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Action     string
	Package    string
	Test       string
	Output     string
	ImportPath string  // build-output, build-fail
	Elapsed    float64 // seconds, on pass and fail
}

// skip is one skipped test and why.
type skip struct{ pkg, test, reason string }

// summary is what a run printed and counted.
type summary struct {
	passed, failed int
	skips          []skip
	slow           []timed // the slowest top-level tests, slowest first
}

// timed is a top-level test and how long it ran.
type timed struct {
	pkg, test string
	secs      float64
}

// slowKept is how many of the slowest tests the closing report names, so
// that a run's time budget (CI: 30 minutes) can be read off its log.
const slowKept = 12

// noteTime keeps t if it is among the slowKept slowest.
func (s *summary) noteTime(t timed) {
	i := len(s.slow)
	for i > 0 && s.slow[i-1].secs < t.secs {
		i--
	}
	if i >= slowKept {
		return
	}
	s.slow = append(s.slow, timed{})
	copy(s.slow[i+1:], s.slow[i:])
	s.slow[i] = t
	if len(s.slow) > slowKept {
		s.slow = s.slow[:slowKept]
	}
}

func main() {
	cmd := exec.Command("go", append([]string{"test", "-json"}, os.Args[1:]...)...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		fmt.Fprintln(os.Stderr, "gotest:", err)
		os.Exit(2)
	}
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "gotest:", err)
		os.Exit(2)
	}
	w := bufio.NewWriter(os.Stdout)
	s := filter(out, w, verbose(os.Args[1:]))
	runErr := cmd.Wait()
	ci := os.Getenv("CI") == "true"
	report(w, s, ci)
	w.Flush()
	var exit *exec.ExitError
	switch {
	case errors.As(runErr, &exit):
		os.Exit(exit.ExitCode())
	case runErr != nil:
		fmt.Fprintln(os.Stderr, "gotest:", runErr)
		os.Exit(2)
	case ci && len(s.skips) > 0:
		os.Exit(1)
	}
}

// verbose reports whether args ask go test for -v.
func verbose(args []string) bool {
	for _, a := range args {
		switch strings.TrimLeft(a, "-") {
		case "v", "v=true", "test.v", "test.v=true":
			return true
		}
	}
	return false
}

// filter reads test2json events from r and writes the plain go test view
// to w: package lines as they come, a test's output only if it failed; with
// all, every line, each package's together when it ends (as go test -v
// prints several packages).
func filter(r io.Reader, w *bufio.Writer, all bool) summary {
	f := &eventFilter{w: w, all: all, held: map[testKey][]string{}, pkgOut: map[string][]string{}}
	defer f.writeUnendedPackages()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if json.Unmarshal(line, &e) != nil || e.Action == "" {
			w.Write(line) // not an event: pass it on
			w.WriteByte('\n')
			continue
		}
		f.handle(e)
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintln(w, "gotest: reading go test's output:", err)
	}
	return f.s
}

// testKey names a test: its package and name ("" for the package itself).
type testKey struct{ pkg, test string }

// eventFilter is filter's state between events.
type eventFilter struct {
	w      *bufio.Writer
	all    bool // print every line (go test -v)
	s      summary
	held   map[testKey][]string // output of running tests
	order  []testKey            // tests in the order they started
	pkgOut map[string][]string  // with all: output of packages not yet ended
}

// handle takes one event.
func (f *eventFilter) handle(e event) {
	if f.all && e.Action == "output" {
		f.pkgOut[e.Package] = append(f.pkgOut[e.Package], e.Output)
	}
	if f.all && e.Test == "" && (e.Action == "pass" || e.Action == "fail" || e.Action == "skip") {
		f.w.WriteString(strings.Join(f.pkgOut[e.Package], ""))
		delete(f.pkgOut, e.Package)
	}
	switch {
	case f.all && e.Action == "output":
		if e.Test != "" {
			k := testKey{e.Package, e.Test}
			f.held[k] = append(f.held[k], e.Output) // for the skip reason
		}
	case e.Action == "build-output":
		f.w.WriteString(e.Output)
	case e.Test == "" && e.Action == "output":
		// Package lines: "ok  pkg 1.2s", "FAIL pkg", "? pkg [no test
		// files]", panics outside tests. -json implies -v, whose bare
		// "PASS" line plain go test does not print.
		if e.Output != "PASS\n" {
			f.w.WriteString(e.Output)
		}
	case e.Test == "" && (e.Action == "pass" || e.Action == "fail"):
		f.packageEnded(e.Package)
	case e.Test == "":
	default:
		f.testEvent(e)
	}
}

// packageEnded prints what the package's tests that never finished (a
// panic, a timeout) wrote, and forgets them.
func (f *eventFilter) packageEnded(pkg string) {
	rest := f.order[:0]
	for _, t := range f.order {
		if t.pkg != pkg {
			rest = append(rest, t)
			continue
		}
		if out, ok := f.held[t]; ok {
			if !f.all {
				f.w.WriteString(strings.Join(out, ""))
			}
			delete(f.held, t)
		}
	}
	f.order = rest
	f.w.Flush()
}

// testEvent takes an event of one test: it holds the test's output until
// the test ends, prints it if the test failed and counts the result.
func (f *eventFilter) testEvent(e event) {
	k := testKey{e.Package, e.Test}
	switch e.Action {
	case "run":
		if _, ok := f.held[k]; !ok {
			f.order = append(f.order, k)
		}
		f.held[k] = f.held[k][:0:0]
	case "output":
		f.held[k] = append(f.held[k], e.Output)
	case "pass":
		f.s.passed++
		delete(f.held, k)
		if !strings.Contains(e.Test, "/") {
			f.s.noteTime(timed{e.Package, e.Test, e.Elapsed})
		}
	case "fail":
		f.s.failed++
		if !f.all {
			f.w.WriteString(strings.Join(f.held[k], ""))
		}
		delete(f.held, k)
	case "skip":
		f.s.skips = append(f.s.skips, skip{e.Package, e.Test, reason(f.held[k])})
		delete(f.held, k)
	}
}

// writeUnendedPackages prints, with all, the output of packages that never
// ended.
func (f *eventFilter) writeUnendedPackages() {
	for _, out := range f.pkgOut {
		f.w.WriteString(strings.Join(out, ""))
	}
}

// reason returns the skip message of a skipped test's output: its lines
// without the === and --- framing.
func reason(out []string) string {
	var b []string
	for _, l := range out {
		t := strings.TrimSpace(l)
		if t == "" || strings.HasPrefix(t, "=== ") || strings.HasPrefix(t, "--- SKIP") {
			continue
		}
		b = append(b, t)
	}
	if len(b) == 0 {
		return "(no reason given)"
	}
	return strings.Join(b, " / ")
}

// report lists the skipped tests and prints the closing count.
func report(w *bufio.Writer, s summary, ci bool) {
	if len(s.skips) > 0 {
		fmt.Fprintf(w, "%d tests skipped:\n", len(s.skips))
		for _, k := range s.skips {
			fmt.Fprintf(w, "  SKIP %s %s: %s\n", k.pkg, k.test, k.reason)
		}
		if ci {
			fmt.Fprintln(w, "CI=true: a skipped test fails the run (docs/RELIABILITY.md)")
		} else {
			fmt.Fprintln(w, "(with CI=true these skips fail the run; docs/RELIABILITY.md says what each needs)")
		}
	}
	if len(s.slow) > 0 {
		fmt.Fprintf(w, "slowest tests:")
		for _, t := range s.slow {
			fmt.Fprintf(w, " %s %.0fs;", t.test, t.secs)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "tests: %d passed, %d failed, %d skipped\n", s.passed, s.failed, len(s.skips))
}
