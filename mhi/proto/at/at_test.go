package at

import (
	"errors"
	"strings"
	"testing"
)

func TestParseLine(t *testing.T) {
	cases := []struct {
		line string
		want []string // Command.String() of each, with "/kind"
	}{
		{"AT", nil},
		{"at", nil},
		{"  \x00AT  ", nil},
		{"ATI", []string{"I/action"}},
		{"ati3", []string{"i3/action"}},
		{"ATE0V1X4&C1", []string{"E0/action", "V1/action", "X4/action", "&C1/action"}},
		{"ATE0 V1", []string{"E0/action", "V1/action"}},
		{"AT+GCAP", []string{"+GCAP/action"}},
		{"AT+CFUN?", []string{"+CFUN?/read"}},
		{"AT+CFUN=?", []string{"+CFUN=?/test"}},
		{"AT+CFUN = ?", []string{"+CFUN=?/test"}},
		{"AT+CFUN=1", []string{"+CFUN=1/set"}},
		{"AT+CMEE=1;+CGDCONT?", []string{"+CMEE=1/set", "+CGDCONT?/read"}},
		{"AT+CGDCONT=1,\"IP\",\"a;b,c\";+CGDCONT?", []string{"+CGDCONT=1,\"IP\",\"a;b,c\"/set", "+CGDCONT?/read"}},
		{"AT+COPS=3,2;+COPS?", []string{"+COPS=3,2/set", "+COPS?/read"}},
		{"ATE0;+CMEE=1", []string{"E0/action", "+CMEE=1/set"}},
		{"ATE0;", []string{"E0/action"}},
		{"AT+CGMI;;+CGMM;", []string{"+CGMI/action", "+CGMM/action"}},
		{"AT#PORTCFG?", []string{"#PORTCFG?/read"}},
		{"AT^SYSINFO", []string{"^SYSINFO/action"}},
		{"ATS0=2", []string{"S0=2/set"}},
		{"ATS7?", []string{"S7?/read"}},
		{"ATS0=?", []string{"S0=?/test"}},
		{"ATD*99#", []string{"D*99#/action"}},
		{"ATE1D*99***1#;", []string{"E1/action", "D*99***1#;/action"}},
		{"AT&F", []string{"&F/action"}},
		{"AT+CSQ", []string{"+CSQ/action"}},
	}
	for _, c := range cases {
		t.Run(c.line, func(t *testing.T) {
			cmds, err := ParseLine([]byte(c.line), nil)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, cmd := range cmds {
				got = append(got, cmd.String()+"/"+cmd.Kind.String())
			}
			if strings.Join(got, " | ") != strings.Join(c.want, " | ") {
				t.Fatalf("got %q, want %q", got, c.want)
			}
		})
	}
}

func TestParseLineErrors(t *testing.T) {
	cases := []struct {
		line string
		want error
	}{
		{"", ErrNoPrefix},
		{"A", ErrNoPrefix},
		{"TA", ErrNoPrefix},
		{"ATE0=1", ErrSyntax},
		{"AT+", ErrSyntax},
		{"AT+CGMI?x", ErrSyntax},
		{"AT&", ErrSyntax},
		{"AT&1", ErrSyntax},
		{"AT=1", ErrSyntax},
		{"AT+CGDCONT=1,\"IP", ErrString},
		{"AT+ABCDEFGHIJKLMNOPQ", ErrNameTooLong},
		{"AT" + strings.Repeat("E0", MaxCommands+1), ErrTooMany},
	}
	for _, c := range cases {
		if _, err := ParseLine([]byte(c.line), nil); !errors.Is(err, c.want) {
			t.Errorf("%q: %v, want %v", c.line, err, c.want)
		}
	}
}

func TestParseLineNoAlloc(t *testing.T) {
	line := []byte("AT+CMEE=1;+CGDCONT=1,\"IP\",\"internet\";E0V1")
	dst := make([]Command, 0, MaxCommands)
	if n := testing.AllocsPerRun(100, func() {
		cmds, err := ParseLine(line, dst[:0])
		if err != nil || len(cmds) != 4 {
			t.Fatal(err, len(cmds))
		}
		a := cmds[1].Arguments()
		for {
			if _, ok := a.Next(); !ok {
				break
			}
		}
	}); n != 0 {
		t.Fatalf("%v allocations per line", n)
	}
}

func TestIsAndNumber(t *testing.T) {
	cmds, err := ParseLine([]byte("ate1+cgdcont?;&c"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !cmds[0].Is(0, "E") || cmds[0].Is('+', "E") {
		t.Fatal("Is E")
	}
	if n, err := cmds[0].Number(); n != 1 || err != nil {
		t.Fatalf("E1 number %d %v", n, err)
	}
	if !cmds[1].Is('+', "CGDCONT") {
		t.Fatal("Is +CGDCONT (case-insensitive)")
	}
	if n, err := cmds[2].Number(); n != 0 || err != nil || !cmds[2].Is('&', "C") {
		t.Fatalf("&C number %d %v", n, err)
	}
}

func TestArguments(t *testing.T) {
	cases := []struct {
		args string
		want []string // quoted ones as "q:..."
		err  error
	}{
		{``, nil, nil},
		{`1`, []string{"1"}, nil},
		{`1,"IP","internet"`, []string{"1", `q:IP`, `q:internet`}, nil},
		{` 1 , "a,b" ,,3`, []string{"1", "q:a,b", "", "3"}, nil},
		{`0,0,"gomhi network",7`, []string{"0", "0", "q:gomhi network", "7"}, nil},
		{`1,`, []string{"1", ""}, nil},
		{`"x"y`, nil, ErrSyntax},
		{`"x`, nil, ErrString},
		{`""`, []string{"q:"}, nil},
	}
	for _, c := range cases {
		cmd := Command{Prefix: '+', Name: []byte("X"), Kind: Set, Args: []byte(c.args)}
		a := cmd.Arguments()
		var got []string
		for {
			arg, ok := a.Next()
			if !ok {
				break
			}
			s := string(arg.Value)
			if arg.Quoted {
				s = "q:" + s
			}
			got = append(got, s)
		}
		if !errors.Is(a.Err(), c.err) {
			t.Errorf("%q: err %v, want %v", c.args, a.Err(), c.err)
			continue
		}
		if c.err == nil && strings.Join(got, "|") != strings.Join(c.want, "|") {
			t.Errorf("%q: got %q, want %q", c.args, got, c.want)
		}
	}
	if n, err := (Arg{Value: []byte("42")}).Int(); n != 42 || err != nil {
		t.Fatal(n, err)
	}
	for _, a := range []Arg{{Value: []byte("4x")}, {Value: []byte("42"), Quoted: true}, {}, {Value: []byte("1234567890")}} {
		if _, err := a.Int(); !errors.Is(err, ErrNumber) {
			t.Errorf("%+v: %v", a, err)
		}
	}
	if !(Arg{}).Empty() || (Arg{Quoted: true}).Empty() {
		t.Fatal("Empty")
	}
}

func TestFormatting(t *testing.T) {
	cases := []struct {
		got, want string
	}{
		{string(AppendResult(nil, OK, true)), "\r\nOK\r\n"},
		{string(AppendResult(nil, OK, false)), "0\r"},
		{string(AppendResult(nil, NoCarrier, true)), "\r\nNO CARRIER\r\n"},
		{string(AppendResult(nil, Error, false)), "4\r"},
		{string(AppendInfo(nil, true, "+CSQ: 20,99")), "\r\n+CSQ: 20,99\r\n"},
		{string(AppendInfo(nil, true, "Telit", "FN990", "Revision: 1")), "\r\nTelit\r\nFN990\r\nRevision: 1\r\n"},
		{string(AppendInfo(nil, false, "+CSQ: 20,99")), "+CSQ: 20,99\r\n"},
		{string(AppendError(nil, CMEOperationNotSupported, CMEEOff, true)), "\r\nERROR\r\n"},
		{string(AppendError(nil, CMEOperationNotSupported, CMEENumeric, true)), "\r\n+CME ERROR: 4\r\n"},
		{string(AppendError(nil, CMEOperationNotSupported, CMEEVerbose, true)), "\r\n+CME ERROR: operation not supported\r\n"},
		{string(AppendError(nil, 50, CMEENumeric, false)), "+CME ERROR: 50\r\n"},
		{CMEText(9999), "unknown"},
		{Result(5).String(), "Result(5)"},
	}
	for _, c := range cases {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}

func TestParseFinal(t *testing.T) {
	cases := []struct {
		line string
		ok   bool
		want Final
	}{
		{"OK", true, Final{Result: OK, CME: -1}},
		{" OK ", true, Final{Result: OK, CME: -1}},
		{"0", true, Final{Result: OK, CME: -1}},
		{"ERROR", true, Final{Result: Error, CME: -1}},
		{"+CME ERROR: 4", true, Final{Result: Error, CME: 4}},
		{"+CME ERROR: operation not supported", true, Final{Result: Error, CME: -1}},
		{"+CMS ERROR: 500", true, Final{Result: Error, CME: -1, CMS: true}},
		{"NO CARRIER", true, Final{Result: NoCarrier, CME: -1}},
		{"CONNECT 150000000", true, Final{Result: Connect, CME: -1}},
		{"BUSY", true, Final{Result: Busy, CME: -1}},
		{"NO ANSWER", true, Final{Result: NoAnswer, CME: -1}},
		{"NO DIALTONE", true, Final{Result: NoDialtone, CME: -1}},
		{"+CSQ: 20,99", false, Final{}},
		{"ATI", false, Final{}},
		{"OKAY", false, Final{}},
	}
	for _, c := range cases {
		f, ok := ParseFinal([]byte(c.line))
		if ok != c.ok || f != c.want {
			t.Errorf("%q: %+v %v, want %+v %v", c.line, f, ok, c.want, c.ok)
		}
	}
}

// scanAll feeds p to r in chunks of size n and records what it finds.
func scanAll(r *LineReader, p string, n int) (events []string, echoed string) {
	b := []byte(p)
	for len(b) > 0 {
		chunk := b[:min(n, len(b))]
		b = b[len(chunk):]
		for len(chunk) > 0 {
			k, line, st := r.Scan(chunk)
			echoed += string(chunk[:k])
			chunk = chunk[k:]
			switch st {
			case Line:
				events = append(events, "line:"+string(line))
			case Repeat:
				events = append(events, "repeat")
			case TooLong:
				events = append(events, "toolong")
			}
		}
	}
	return events, echoed
}

func TestLineReader(t *testing.T) {
	cases := []struct {
		name string
		in   string
		max  int
		want []string
	}{
		{"cr", "ATI\r", 0, []string{"line:ATI"}},
		{"crlf", "ATI\r\nAT\r\n", 0, []string{"line:ATI", "line:AT"}},
		{"lf only", "ATI\nAT+CSQ\n", 0, []string{"line:ATI", "line:AT+CSQ"}},
		{"empty lines", "\r\r\n\nAT\r", 0, []string{"line:AT"}},
		{"partial", "AT+CG", 0, nil},
		{"backspace", "ATX\x08I\r", 0, []string{"line:ATI"}},
		{"backspace at start", "\x08\x7fATI\r", 0, []string{"line:ATI"}},
		{"control chars", "A\x01T\x1bI\r", 0, []string{"line:ATI"}},
		{"repeat", "A/", 0, []string{"repeat"}},
		{"repeat lower", "ATI\ra/", 0, []string{"line:ATI", "repeat"}},
		{"slash elsewhere", "AT+X=\"a/b\"\r", 0, []string{"line:AT+X=\"a/b\""}},
		{"too long", "AT12345678\rATI\r", 6, []string{"toolong", "line:ATI"}},
		{"exactly max", "AT1234\r", 6, []string{"line:AT1234"}},
	}
	for _, c := range cases {
		for _, chunk := range []int{1, 2, 3, 1 << 10} {
			r := NewLineReader(c.max)
			got, echoed := scanAll(r, c.in, chunk)
			if strings.Join(got, ",") != strings.Join(c.want, ",") {
				t.Errorf("%s (chunks of %d): got %q, want %q", c.name, chunk, got, c.want)
			}
			if echoed != c.in {
				t.Errorf("%s (chunks of %d): consumed %q of %q", c.name, chunk, echoed, c.in)
			}
		}
	}
	r := NewLineReader(0)
	r.Scan([]byte("AT+CG"))
	if string(r.Pending()) != "AT+CG" {
		t.Fatalf("pending %q", r.Pending())
	}
	r.Reset()
	if _, line, st := r.Scan([]byte("MI\r")); st != Line || string(line) != "MI" {
		t.Fatalf("after Reset: %q %v", line, st)
	}
}
