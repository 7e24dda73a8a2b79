package at

import (
	"bytes"
	"errors"
	"testing"
)

// FuzzParseLine: ParseLine never panics, returns only named errors, at most
// MaxCommands commands whose names and arguments are views inside the line,
// and a reparse of the formatted commands gives the same commands. The line
// reader, fed the same bytes, consumes them all and returns lines within
// its limit.
func FuzzParseLine(f *testing.F) {
	for _, s := range []string{
		"AT", "ATI", "ATE0V1X4&C1", "AT+CMEE=1;+CGDCONT?", "AT+CGDCONT=1,\"IP\",\"internet\"",
		"AT+COPS=3,2;+COPS?", "ATD*99#", "ATS0=0", "ATS7?", "AT#PORTCFG?", "AT+CFUN=?",
		"AT+CGDCONT=1,\"IP", "A/", "AT\r\nATI\rat+csq\n", "AT+X=\"a;b\",,\"c\"", "AT\x08\x7fE0",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		cmds, err := ParseLine(line, nil)
		if err != nil {
			named := false
			for _, e := range []error{ErrNoPrefix, ErrSyntax, ErrString, ErrTooMany, ErrNameTooLong} {
				named = named || errors.Is(err, e)
			}
			if !named {
				t.Fatalf("unnamed error %v", err)
			}
		}
		if len(cmds) > MaxCommands {
			t.Fatalf("%d commands", len(cmds))
		}
		for _, c := range cmds {
			for _, part := range [][]byte{c.Name, c.Args} {
				if len(part) > 0 && !within(line, part) {
					t.Fatalf("%q is not a view into the line", part)
				}
			}
			a := c.Arguments()
			for {
				arg, ok := a.Next()
				if !ok {
					break
				}
				if len(arg.Value) > 0 && !within(line, arg.Value) {
					t.Fatalf("argument %q is not a view into the line", arg.Value)
				}
				_, _ = arg.Int()
			}
			_, _ = c.Number()
		}
		if err == nil && len(cmds) > 0 && !bytes.ContainsAny(line, "\x00\r\n") {
			// Formatting and reparsing keeps every command (D last: it
			// takes the rest of the line).
			var again []byte
			again = append(again, "AT"...)
			for i, c := range cmds {
				if i > 0 {
					again = append(again, ';')
				}
				again = append(again, c.String()...)
			}
			re, err := ParseLine(again, nil)
			if err != nil || len(re) != len(cmds) {
				t.Fatalf("reparse of %q: %d commands, %v (had %d)", again, len(re), err, len(cmds))
			}
			for i := range re {
				if re[i].Prefix != cmds[i].Prefix || !bytes.Equal(re[i].Name, cmds[i].Name) || re[i].Kind != cmds[i].Kind {
					t.Fatalf("reparse of %q changed command %d: %q vs %q", again, i, re[i].String(), cmds[i].String())
				}
			}
		}

		r := NewLineReader(64)
		p := line
		for len(p) > 0 {
			n, got, st := r.Scan(p)
			if n <= 0 || n > len(p) {
				t.Fatalf("Scan consumed %d of %d", n, len(p))
			}
			if st == Line && (len(got) == 0 || len(got) > 64) {
				t.Fatalf("line of %d bytes", len(got))
			}
			p = p[n:]
		}
	})
}

// within reports whether sub's memory lies inside b's.
func within(b, sub []byte) bool {
	if len(b) == 0 {
		return false
	}
	for i := range b {
		if &b[i] == &sub[0] {
			return i+len(sub) <= len(b)
		}
	}
	return false
}
