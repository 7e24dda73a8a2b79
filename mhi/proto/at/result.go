package at

import (
	"bytes"
	"strconv"
)

// Result is a final result code (V.250 §5.7.1), numbered as in ATV0 mode.
type Result uint8

// Final result codes.
const (
	OK         Result = 0
	Connect    Result = 1
	Ring       Result = 2
	NoCarrier  Result = 3
	Error      Result = 4
	NoDialtone Result = 6
	Busy       Result = 7
	NoAnswer   Result = 8
)

var resultText = map[Result]string{
	OK: "OK", Connect: "CONNECT", Ring: "RING", NoCarrier: "NO CARRIER", Error: "ERROR",
	NoDialtone: "NO DIALTONE", Busy: "BUSY", NoAnswer: "NO ANSWER",
}

// String returns the verbose text, e.g. "NO CARRIER".
func (r Result) String() string {
	if s, ok := resultText[r]; ok {
		return s
	}
	return "Result(" + strconv.Itoa(int(r)) + ")"
}

// CME error codes of 3GPP TS 27.007 §9.2 that the mock uses.
const (
	CMEPhoneFailure              = 0
	CMEOperationNotAllowed       = 3
	CMEOperationNotSupported     = 4
	CMESIMNotInserted            = 10
	CMEMemoryFailure             = 23
	CMENotFound                  = 22
	CMETextTooLong               = 24
	CMENoNetworkService          = 30
	CMENetworkTimeout            = 31
	CMEIncorrectParameters       = 50
	CMEUnknown                   = 100
	CMEMissingOrUnknownAPN       = 533
	CMEServiceOptionNotSupported = 132
)

var cmeText = map[int]string{
	CMEPhoneFailure: "phone failure", CMEOperationNotAllowed: "operation not allowed",
	CMEOperationNotSupported: "operation not supported", CMESIMNotInserted: "SIM not inserted",
	CMENotFound: "not found", CMEMemoryFailure: "memory failure", CMETextTooLong: "text string too long",
	CMENoNetworkService: "no network service", CMENetworkTimeout: "network timeout",
	CMEIncorrectParameters: "incorrect parameters", CMEUnknown: "unknown",
	CMEMissingOrUnknownAPN: "missing or unknown APN", CMEServiceOptionNotSupported: "service option not supported",
}

// CMEText returns the verbose text of a +CME ERROR code ("unknown" for
// codes the package does not name).
func CMEText(code int) string {
	if s, ok := cmeText[code]; ok {
		return s
	}
	return cmeText[CMEUnknown]
}

// CMEE is the +CMEE reporting mode.
type CMEE uint8

// +CMEE modes.
const (
	CMEEOff     CMEE = 0 // plain ERROR
	CMEENumeric CMEE = 1 // +CME ERROR: <code>
	CMEEVerbose CMEE = 2 // +CME ERROR: <text>
)

// Formatting follows V.250 §5.7: with ATV1 (verbose) information text is
// <CR><LF>text<CR><LF> and a result code <CR><LF>OK<CR><LF>; with ATV0
// information text is text<CR><LF> and a result code its number then <CR>.

// AppendInfo appends one block of information text: the lines joined by
// CR LF, framed for the verbose or numeric mode.
func AppendInfo(dst []byte, verbose bool, lines ...string) []byte {
	if verbose {
		dst = append(dst, '\r', '\n')
	}
	for i, l := range lines {
		if i > 0 {
			dst = append(dst, '\r', '\n')
		}
		dst = append(dst, l...)
	}
	return append(dst, '\r', '\n')
}

// AppendResult appends a final result code.
func AppendResult(dst []byte, r Result, verbose bool) []byte {
	if !verbose {
		dst = strconv.AppendInt(dst, int64(r), 10)
		return append(dst, '\r')
	}
	dst = append(dst, '\r', '\n')
	dst = append(dst, r.String()...)
	return append(dst, '\r', '\n')
}

// AppendError appends the final result of a failed command: ERROR when
// mode is CMEEOff, else +CME ERROR with the code or its text. (+CME ERROR
// is framed as information text, V.250 has no number for it.)
func AppendError(dst []byte, code int, mode CMEE, verbose bool) []byte {
	switch mode {
	case CMEENumeric:
		dst = appendFramedStart(dst, verbose)
		dst = append(dst, "+CME ERROR: "...)
		dst = strconv.AppendInt(dst, int64(code), 10)
		return append(dst, '\r', '\n')
	case CMEEVerbose:
		dst = appendFramedStart(dst, verbose)
		dst = append(dst, "+CME ERROR: "...)
		dst = append(dst, CMEText(code)...)
		return append(dst, '\r', '\n')
	}
	return AppendResult(dst, Error, verbose)
}

func appendFramedStart(dst []byte, verbose bool) []byte {
	if verbose {
		dst = append(dst, '\r', '\n')
	}
	return dst
}

// Final is a final response line recognised by ParseFinal.
type Final struct {
	Result Result
	// CME is the code of "+CME ERROR: <n>" (Result is Error); -1 when the
	// error carried text instead of a number, or for other results.
	CME int
	// CMS is set for "+CMS ERROR" (Result is Error).
	CMS bool
}

// ParseFinal recognises a final result line (without its CR LF) the way
// ModemManager's parser does: OK, CONNECT[ text], NO CARRIER, ERROR,
// +CME ERROR: <n|text>, +CMS ERROR: <n>, BUSY, NO ANSWER, NO DIALTONE, or
// the numeric forms 0–8 of ATV0. ok is false for any other line
// (information text, an echo, an unsolicited code).
func ParseFinal(line []byte) (f Final, ok bool) {
	line = bytes.TrimSpace(line)
	f.CME = -1
	switch {
	case bytes.Equal(line, []byte("OK")), bytes.Equal(line, []byte("0")):
		f.Result = OK
	case bytes.Equal(line, []byte("CONNECT")), bytes.HasPrefix(line, []byte("CONNECT ")), bytes.Equal(line, []byte("1")):
		f.Result = Connect
	case bytes.Equal(line, []byte("NO CARRIER")), bytes.Equal(line, []byte("3")):
		f.Result = NoCarrier
	case bytes.Equal(line, []byte("ERROR")), bytes.Equal(line, []byte("4")):
		f.Result = Error
	case bytes.Equal(line, []byte("NO DIALTONE")), bytes.Equal(line, []byte("6")):
		f.Result = NoDialtone
	case bytes.Equal(line, []byte("BUSY")), bytes.Equal(line, []byte("7")):
		f.Result = Busy
	case bytes.Equal(line, []byte("NO ANSWER")), bytes.Equal(line, []byte("8")):
		f.Result = NoAnswer
	case bytes.HasPrefix(line, []byte("+CME ERROR:")):
		f.Result = Error
		if n, err := atoi(bytes.TrimSpace(line[len("+CME ERROR:"):])); err == nil {
			f.CME = n
		}
	case bytes.HasPrefix(line, []byte("+CMS ERROR:")):
		f.Result, f.CMS = Error, true
	default:
		return Final{}, false
	}
	return f, true
}
