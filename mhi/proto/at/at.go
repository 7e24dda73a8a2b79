// Package at is a codec for AT command lines (ITU-T V.250, 3GPP TS 27.007)
// as a modem's terminal port sees them: a line reader for the byte stream,
// a command-line parser, and the formatting of information text and final
// result codes. It keeps no state beyond the line reader's buffer, imports
// nothing of the module, never panics, and parses without copying (every
// name and argument is a view into the caller's line).
//
// A command line is "AT" (any case) followed by commands: basic ones
// concatenated ("ATE0V1X4&C1", "ATI", "ATS0=0", "ATD*99#" — D takes the
// rest of the line), extended ones starting with '+' (or a vendor prefix
// '#', '$', '%', '^', '!', '*', '@') and separated by ';'
// ("AT+CMEE=1;+CGDCONT?"). Each command is an action ("ATI", "AT+CGMI"), a
// read ("AT+CFUN?"), a test ("AT+CFUN=?") or a set with arguments
// ("AT+CGDCONT=1,\"IP\",\"internet\""). "A/" repeats the previous line.
package at

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
)

// Kind is what a command asks for.
type Kind uint8

// Command kinds.
const (
	Action Kind = iota // "ATI", "AT+CGMI", "ATE0"
	Read               // "AT+CFUN?", "ATS0?"
	Test               // "AT+CFUN=?"
	Set                // "AT+CFUN=1", "ATS0=2"
)

var kindNames = [...]string{"action", "read", "test", "set"}

// String returns "action", "read", "test" or "set".
func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// Command is one command of a line. Name and Args are views into the line.
type Command struct {
	// Prefix is 0 for a basic command, '&' for an ampersand command, 'S'
	// for an S-parameter, and the prefix character of an extended command
	// ('+', or a vendor's '#', '$', '%', '^', '!', '*', '@').
	Prefix byte
	// Name is the command's name without its prefix: the letter of a
	// basic or ampersand command ("E", "C"), the register number of an
	// S-parameter ("0"), the name of an extended command ("CGDCONT").
	Name []byte
	Kind Kind
	// Args is a basic command's number ("0" of E0; empty when omitted),
	// D's dial string, an S-parameter's value, or the text after '=' of an
	// extended set command (split it with Arguments).
	Args []byte
}

// Is reports whether the command has prefix p and name n (case-insensitive).
func (c *Command) Is(p byte, n string) bool {
	return c.Prefix == p && len(c.Name) == len(n) && bytes.EqualFold(c.Name, []byte(n))
}

// Number returns a basic command's number (0 when omitted, as V.250 says).
func (c *Command) Number() (int, error) {
	if len(c.Args) == 0 {
		return 0, nil
	}
	return atoi(c.Args)
}

// String formats the command as it would appear after "AT".
func (c *Command) String() string {
	var b []byte
	if c.Prefix != 0 {
		b = append(b, c.Prefix)
	}
	b = append(b, c.Name...)
	switch c.Kind {
	case Read:
		b = append(b, '?')
	case Test:
		b = append(b, "=?"...)
	case Set:
		if c.Prefix != 0 {
			b = append(b, '=')
		}
		b = append(b, c.Args...)
	default:
		b = append(b, c.Args...)
	}
	return string(b)
}

// Limits of the parser.
const (
	// MaxCommands is the most commands one line may hold.
	MaxCommands = 32
	// MaxNameLen is the longest extended command name (V.250 allows 16
	// characters after the prefix).
	MaxNameLen = 16
)

// Errors of ParseLine and Arguments.
var (
	// ErrNoPrefix: the line does not start with "AT".
	ErrNoPrefix = errors.New("at: command line does not start with AT")
	// ErrSyntax: a character that no command can start with or contain.
	ErrSyntax = errors.New("at: syntax error")
	// ErrString: a quoted string without its closing quote.
	ErrString = errors.New("at: unterminated string")
	// ErrTooMany: more than MaxCommands commands on one line.
	ErrTooMany = errors.New("at: too many commands on one line")
	// ErrNameTooLong: an extended command name longer than MaxNameLen.
	ErrNameTooLong = errors.New("at: command name too long")
	// ErrNumber: a value that should be a number is not one (or overflows).
	ErrNumber = errors.New("at: not a number")
)

func isAlpha(c byte) bool { return (c|0x20) >= 'a' && (c|0x20) <= 'z' }
func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// isExtPrefix reports the characters that start an extended command.
func isExtPrefix(c byte) bool {
	switch c {
	case '+', '#', '$', '%', '^', '!', '*', '@':
		return true
	}
	return false
}

// isNameChar reports V.250's extended-name characters.
func isNameChar(c byte) bool {
	if isAlpha(c) || isDigit(c) {
		return true
	}
	switch c {
	case '!', '%', '-', '.', '/', ':', '_':
		return true
	}
	return false
}

func skipSpaces(line []byte, i int) int {
	for i < len(line) && line[i] == ' ' {
		i++
	}
	return i
}

// ParseLine parses a command line (without its terminating CR) and appends
// its commands to dst, returning the extended slice. Leading spaces and
// control characters are ignored, "AT" may have any case, and spaces
// between commands are skipped. Errors: ErrNoPrefix, ErrSyntax, ErrString,
// ErrTooMany, ErrNameTooLong; on error dst is returned as far as parsed.
// A line of just "AT" yields no commands. ParseLine does not allocate when
// dst has room.
func ParseLine(line []byte, dst []Command) ([]Command, error) {
	i := 0
	for i < len(line) && (line[i] == ' ' || line[i] < 0x20) {
		i++
	}
	if len(line)-i < 2 || line[i]|0x20 != 'a' || line[i+1]|0x20 != 't' {
		return dst, ErrNoPrefix
	}
	i += 2
	n := 0
	for {
		// Spaces between commands are ignored; so are empty commands
		// between separators ("AT+CGMI;;+CGMM", "ATE0;").
		for i < len(line) && (line[i] == ' ' || line[i] == ';') {
			i++
		}
		if i >= len(line) {
			return dst, nil
		}
		if n == MaxCommands {
			return dst, ErrTooMany
		}
		var c Command
		var err error
		c, i, err = parseCommand(line, i)
		if err != nil {
			return dst, err
		}
		dst = append(dst, c)
		n++
	}
}

// parseCommand parses one command starting at line[i].
func parseCommand(line []byte, i int) (Command, int, error) {
	ch := line[i]
	switch {
	case isExtPrefix(ch):
		return parseExtended(line, i)
	case ch|0x20 == 's' && i+1 < len(line) && isDigit(line[i+1]):
		return parseSParam(line, i)
	case ch|0x20 == 'd':
		// D takes the rest of the line as its dial string (a trailing ';'
		// means "stay in command mode", it stays part of Args).
		return Command{Name: line[i : i+1 : i+1], Kind: Action, Args: trimSpaces(line[i+1:])}, len(line), nil
	case ch == '&':
		if i+1 >= len(line) || !isAlpha(line[i+1]) {
			return Command{}, i, fmt.Errorf("%w: '&' without a letter at column %d", ErrSyntax, i)
		}
		c, j := parseBasic(line, i+1)
		c.Prefix = '&'
		return c, j, nil
	case isAlpha(ch):
		c, j := parseBasic(line, i)
		return c, j, nil
	}
	return Command{}, i, fmt.Errorf("%w: unexpected %q at column %d", ErrSyntax, ch, i)
}

// parseBasic parses a letter and its optional number; "ATI?" style reads
// of a basic command are accepted too.
func parseBasic(line []byte, i int) (Command, int) {
	c := Command{Name: line[i : i+1 : i+1], Kind: Action}
	j := i + 1
	k := j
	for k < len(line) && isDigit(line[k]) {
		k++
	}
	c.Args = line[j:k:k]
	if k < len(line) && line[k] == '?' {
		c.Kind = Read
		k++
	}
	return c, k
}

// parseSParam parses "S<n>", "S<n>?", "S<n>=?", "S<n>=<value>".
func parseSParam(line []byte, i int) (Command, int, error) {
	j := i + 1
	k := j
	for k < len(line) && isDigit(line[k]) {
		k++
	}
	c := Command{Prefix: 'S', Name: line[j:k:k], Kind: Action}
	k = skipSpaces(line, k)
	if k < len(line) && line[k] == '?' {
		c.Kind = Read
		return c, k + 1, nil
	}
	if k < len(line) && line[k] == '=' {
		k = skipSpaces(line, k+1)
		if k < len(line) && line[k] == '?' {
			c.Kind = Test
			return c, k + 1, nil
		}
		v := k
		for k < len(line) && isDigit(line[k]) {
			k++
		}
		c.Kind, c.Args = Set, line[v:k:k]
	}
	return c, k, nil
}

// parseExtended parses "+NAME", "+NAME?", "+NAME=?", "+NAME=args" up to
// the ';' that ends it (outside quotes) or the end of the line.
func parseExtended(line []byte, i int) (Command, int, error) {
	c := Command{Prefix: line[i], Kind: Action}
	j := i + 1
	k := j
	for k < len(line) && isNameChar(line[k]) {
		k++
	}
	if k == j {
		return c, i, fmt.Errorf("%w: %q without a command name at column %d", ErrSyntax, line[i], i)
	}
	if k-j > MaxNameLen {
		return c, i, fmt.Errorf("%w: %d characters at column %d", ErrNameTooLong, k-j, j)
	}
	c.Name = line[j:k:k]
	k = skipSpaces(line, k)
	switch {
	case k >= len(line):
		return c, k, nil
	case line[k] == ';':
		return c, k + 1, nil
	case line[k] == '?':
		c.Kind = Read
		k++
	case line[k] == '=':
		k = skipSpaces(line, k+1)
		if k < len(line) && line[k] == '?' {
			c.Kind = Test
			k++
			break
		}
		c.Kind = Set
		a := k
		for k < len(line) && line[k] != ';' {
			if line[k] == '"' {
				end := bytes.IndexByte(line[k+1:], '"')
				if end < 0 {
					return c, k, fmt.Errorf("%w: quote at column %d", ErrString, k)
				}
				k += end + 1
			}
			k++
		}
		c.Args = trimSpaces(line[a:k:k])
	default:
		return c, k, fmt.Errorf("%w: unexpected %q after %s at column %d", ErrSyntax, line[k], c.Name, k)
	}
	k = skipSpaces(line, k)
	if k < len(line) {
		if line[k] != ';' {
			return c, k, fmt.Errorf("%w: unexpected %q after %s at column %d", ErrSyntax, line[k], c.Name, k)
		}
		k++
	}
	return c, k, nil
}

func trimSpaces(b []byte) []byte {
	for len(b) > 0 && b[0] == ' ' {
		b = b[1:]
	}
	for len(b) > 0 && b[len(b)-1] == ' ' {
		b = b[:len(b)-1]
	}
	return b
}

// Arg is one argument of a set command: a view into the line. A quoted
// string's Value is its content without the quotes (escapes such as \22
// are left as they are).
type Arg struct {
	Value  []byte
	Quoted bool
}

// Empty reports an omitted argument ("AT+COPS=0,,\"x\"").
func (a Arg) Empty() bool { return !a.Quoted && len(a.Value) == 0 }

// Int returns the argument as a decimal number.
func (a Arg) Int() (int, error) {
	if a.Quoted {
		return 0, fmt.Errorf("%w: %q is a string", ErrNumber, a.Value)
	}
	return atoi(a.Value)
}

// Arguments splits a set command's Args at the commas outside quotes.
type Arguments struct {
	rest []byte
	done bool
	err  error
}

// Args returns an iterator over the command's arguments.
func (c *Command) Arguments() Arguments { return Arguments{rest: c.Args, done: len(c.Args) == 0} }

// Next returns the next argument; ok is false at the end or on an error
// (ErrString, ErrSyntax), which Err then reports.
func (a *Arguments) Next() (arg Arg, ok bool) {
	if a.done || a.err != nil {
		return Arg{}, false
	}
	b := trimSpaces(a.rest)
	if len(b) > 0 && b[0] == '"' {
		end := bytes.IndexByte(b[1:], '"')
		if end < 0 {
			a.err = ErrString
			return Arg{}, false
		}
		arg = Arg{Value: b[1 : 1+end : 1+end], Quoted: true}
		b = trimSpaces(b[end+2:])
		switch {
		case len(b) == 0:
			a.done = true
		case b[0] == ',':
			a.rest = b[1:]
		default:
			a.err = fmt.Errorf("%w: %q after a quoted argument", ErrSyntax, b[0])
			return Arg{}, false
		}
		return arg, true
	}
	if k := bytes.IndexByte(b, ','); k >= 0 {
		a.rest = b[k+1:]
		return Arg{Value: trimSpaces(b[:k:k])}, true
	}
	a.done = true
	return Arg{Value: b}, true
}

// Err returns the error that stopped Next, or nil.
func (a *Arguments) Err() error { return a.err }

// atoi parses a non-negative decimal number of at most 9 digits.
func atoi(b []byte) (int, error) {
	if len(b) == 0 || len(b) > 9 {
		return 0, fmt.Errorf("%w: %q", ErrNumber, b)
	}
	n := 0
	for _, c := range b {
		if !isDigit(c) {
			return 0, fmt.Errorf("%w: %q", ErrNumber, b)
		}
		n = n*10 + int(c-'0')
	}
	return n, nil
}
