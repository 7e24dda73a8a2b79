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
	ImportPath string // build-output, build-fail
}

// skip is one skipped test and why.
type skip struct{ pkg, test, reason string }

// summary is what a run printed and counted.
type summary struct {
	passed, failed int
	skips          []skip
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
	var s summary
	type key struct{ pkg, test string }
	held := map[key][]string{} // output of running tests
	order := []key{}           // tests in the order they started
	pkgOut := map[string][]string{}
	defer func() { // packages that never ended
		for _, out := range pkgOut {
			w.WriteString(strings.Join(out, ""))
		}
	}()
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
		k := key{e.Package, e.Test}
		if all && e.Action == "output" {
			pkgOut[e.Package] = append(pkgOut[e.Package], e.Output)
		}
		if all && e.Test == "" && (e.Action == "pass" || e.Action == "fail" || e.Action == "skip") {
			w.WriteString(strings.Join(pkgOut[e.Package], ""))
			delete(pkgOut, e.Package)
		}
		switch {
		case all && e.Action == "output":
			if e.Test != "" {
				held[k] = append(held[k], e.Output) // for the skip reason
			}
		case e.Action == "build-output":
			w.WriteString(e.Output)
		case e.Test == "" && e.Action == "output":
			// Package lines: "ok  pkg 1.2s", "FAIL pkg", "? pkg [no test
			// files]", panics outside tests. -json implies -v, whose bare
			// "PASS" line plain go test does not print.
			if e.Output != "PASS\n" {
				w.WriteString(e.Output)
			}
		case e.Test == "" && (e.Action == "pass" || e.Action == "fail"):
			// The package ended: print what tests that never finished (a
			// panic, a timeout) wrote.
			rest := order[:0]
			for _, t := range order {
				if t.pkg != e.Package {
					rest = append(rest, t)
					continue
				}
				if out, ok := held[t]; ok {
					if !all {
						w.WriteString(strings.Join(out, ""))
					}
					delete(held, t)
				}
			}
			order = rest
			w.Flush()
		case e.Test == "":
		case e.Action == "run":
			if _, ok := held[k]; !ok {
				order = append(order, k)
			}
			held[k] = held[k][:0:0]
		case e.Action == "output":
			held[k] = append(held[k], e.Output)
		case e.Action == "pass":
			s.passed++
			delete(held, k)
		case e.Action == "fail":
			s.failed++
			if !all {
				w.WriteString(strings.Join(held[k], ""))
			}
			delete(held, k)
		case e.Action == "skip":
			s.skips = append(s.skips, skip{e.Package, e.Test, reason(held[k])})
			delete(held, k)
		}
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintln(w, "gotest: reading go test's output:", err)
	}
	return s
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
	fmt.Fprintf(w, "tests: %d passed, %d failed, %d skipped\n", s.passed, s.failed, len(s.skips))
}
