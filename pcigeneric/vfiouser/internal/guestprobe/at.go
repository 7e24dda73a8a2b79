package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"strings"
	"syscall"

	"github.com/gomhi/gomhi/mhi/proto/at"
)

// atMTU is mhi_wwan_ctrl's MHI_WWAN_MAX_MTU: the largest write it takes,
// and the size of its receive buffers.
const atMTU = 32768

// atResponse is what a command line got back.
type atResponse struct {
	info  []string // information text lines (echo removed)
	final string   // the final result line
	ok    bool     // the final result was OK
	reads int      // read(2) calls it took
	bytes int      // bytes read, echo included
}

// atCommand writes line (CR appended) with one write and reads until a
// final result code.
func atCommand(n *node, line string) (atResponse, error) {
	var r atResponse
	if err := n.write([]byte(line + "\r")); err != nil {
		return r, err
	}
	var acc []byte
	for {
		b, err := n.read()
		if err != nil {
			return r, fmt.Errorf("%q: %w (got %q)", shorten(line), err, shorten(string(acc)))
		}
		r.reads++
		r.bytes += len(b)
		acc = append(acc, b...)
		// Complete lines only: a final result ends with CR LF.
		end := bytes.LastIndexAny(acc, "\r\n")
		if end < 0 {
			continue
		}
		r.info = r.info[:0]
		for _, l := range strings.FieldsFunc(string(acc[:end]), func(c rune) bool { return c == '\r' || c == '\n' }) {
			if l == line {
				continue // the echo
			}
			if f, ok := at.ParseFinal([]byte(l)); ok {
				r.final, r.ok = l, f.Result == at.OK
				return r, nil
			}
			r.info = append(r.info, l)
		}
	}
}

func shorten(s string) string {
	if len(s) > 40 {
		return fmt.Sprintf("%s…(%d bytes)", s[:40], len(s))
	}
	return s
}

// expectOK runs line and fails unless it ends in OK.
func expectOK(n *node, line string) (atResponse, error) {
	r, err := atCommand(n, line)
	if err == nil && !r.ok {
		err = fmt.Errorf("%q answered %q", line, r.final)
	}
	return r, err
}

// runAT is the at command.
func runAT(args []string) bool {
	fs := flag.NewFlagSet("at", flag.ExitOnError)
	dev := fs.String("dev", "/dev/wwan0at0", "AT port")
	name := fs.String("name", "at0", "prefix of the check names and CTRL kind")
	reopens := fs.Int("reopens", 3, "times the port is opened again after the first session")
	long := fs.Bool("long", false, "also send a line of 32768 bytes (echoed: a downlink transfer larger than the driver's buffers) and one of 32769 (refused)")
	_ = fs.Parse(args)
	t := &tally{kind: *name}
	defer t.print()
	p := *name + "-"

	n, err := openNode(*dev, t)
	if !check(p+"node", err, "open "+*dev) {
		return false
	}
	r, err := expectOK(n, "ATE0")
	if !check(p+"ate0", err, fmt.Sprintf("ATE0 answered %q", r.final)) {
		n.close()
		return false
	}
	ati, err := expectOK(n, "ATI")
	var imei atResponse
	if err == nil {
		imei, err = expectOK(n, "AT+CGSN")
	}
	n.close()
	if !check(p+"ati", err, fmt.Sprintf("ati=%q imei=%q final=%q", strings.Join(ati.info, "|"), strings.Join(imei.info, "|"), ati.final)) {
		return false
	}

	if !checkReopened(*dev, t, p, *reopens, fmt.Sprintf("%d more sessions, AT answered OK in each", *reopens), func(n *node) error {
		_, err := expectOK(n, "AT")
		return err
	}) {
		return false
	}
	if !*long {
		return true
	}

	n, err = openNode(*dev, t)
	if !check(p+"node-long", err, "open "+*dev) {
		return false
	}
	defer n.close()
	if _, err := expectOK(n, "ATE1"); !check(p+"ate1", err, "echo on") {
		return false
	}
	// A line as long as the driver's MTU: the modem echoes all of it
	// and answers ERROR (over its line limit) in one downlink transfer
	// of 32 777 bytes, more than one 32 KiB receive buffer holds.
	line := "AT" + strings.Repeat("Z", atMTU-3)
	r, err = atCommand(n, line)
	if err == nil && r.final != "ERROR" {
		err = fmt.Errorf("answered %q, want ERROR", r.final)
	}
	if !check(p+"long-line", err, fmt.Sprintf("wrote=%d reads=%d bytes=%d final=%q", len(line)+1, r.reads, r.bytes, r.final)) {
		return false
	}
	// One byte more than the MTU: the driver refuses the write.
	err = n.write([]byte(line + "Z\r"))
	switch {
	case err == nil:
		err = errors.New("a write of 32769 bytes was accepted")
	case errors.Is(err, syscall.EMSGSIZE):
		err = nil
	}
	if !check(p+"oversize", err, fmt.Sprintf("write of %d bytes refused with EMSGSIZE", atMTU+1)) {
		return false
	}
	// The port still works.
	_, err = expectOK(n, "AT")
	return check(p+"after-oversize", err, "AT answered OK")
}
