package modem

import (
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	"github.com/gomhi/gomhi/mhi/proto/at"
)

// This file holds the AT commands ModemManager 1.20 asks while it
// initialises a modem through its AT port (observed in
// pcigeneric/vfiouser's TestModemManager… logs): radio access selection
// (+WS46), the SIM's preferred operator list (+CPOL, +CPLS), the UE mode of
// operation (+CEMODE), time zone updates (+CTZU), extended signal quality
// (+CESQ), restricted SIM access (+CRSM) and, on a Telit identity, Telit's
// band selection (#BND).

// +WS46 values (3GPP 27.007 §5.9): UTRAN only, E-UTRAN only, UTRAN and
// E-UTRAN — the mock's radios are UMTS and LTE.
const (
	ws46UTRAN       = 22
	ws46EUTRAN      = 28
	ws46UTRANEUTRAN = 31
	// cemodeCSPS2 is +CEMODE's "CS/PS mode 2" (voice and data, data
	// centric): what ModemManager reads as the UE's EPS mode.
	cemodeCSPS2 = 2
)

// wsel answers +WS46.
func (a *AT) wsel(port *atPort, c *at.Command) atResult {
	switch c.Kind {
	case at.Read:
		port.info("+WS46: " + strconv.Itoa(a.ws46))
	case at.Test:
		port.info(fmt.Sprintf("+WS46: (%d,%d,%d)", ws46UTRAN, ws46EUTRAN, ws46UTRANEUTRAN))
	case at.Set:
		n, ok := oneInt(c, 0, 255)
		if !ok {
			return cmeErr(at.CMEIncorrectParameters)
		}
		if n != ws46UTRAN && n != ws46EUTRAN && n != ws46UTRANEUTRAN {
			return cmeErr(at.CMEOperationNotSupported)
		}
		a.ws46 = n
	default:
		return cmeErr(at.CMEOperationNotSupported)
	}
	return atOK
}

// cpol answers +CPOL: the SIM's preferred operator list, which is empty
// and read-only here (writing an entry is not modelled).
func (a *AT) cpol(port *atPort, c *at.Command) atResult {
	switch c.Kind {
	case at.Read:
		// An empty list: no information text, just OK.
	case at.Test:
		port.info("+CPOL: (1-16),(0-2)")
	case at.Set:
		as, ok := args(c)
		if !ok || len(as) > 2 {
			return cmeErr(at.CMEIncorrectParameters)
		}
		// "=,<format>" selects the format; an index alone deletes an
		// entry of the (empty) list. Both are accepted.
		if len(as) == 2 && !as[1].Empty() {
			if _, ok := intArg(as, 1, 0, 2); !ok {
				return cmeErr(at.CMEIncorrectParameters)
			}
		}
		if len(as) >= 1 && !as[0].Empty() {
			if _, ok := intArg(as, 0, 1, 16); !ok {
				return cmeErr(at.CMEIncorrectParameters)
			}
		}
	default:
		return cmeErr(at.CMEOperationNotSupported)
	}
	return atOK
}

// cpls answers +CPLS: only the user-controlled list (0) exists.
func (a *AT) cpls(port *atPort, c *at.Command) atResult {
	switch c.Kind {
	case at.Read:
		port.info("+CPLS: 0")
	case at.Test:
		port.info("+CPLS: (0)")
	case at.Set:
		n, ok := oneInt(c, 0, 2)
		if !ok {
			return cmeErr(at.CMEIncorrectParameters)
		}
		if n != 0 {
			return cmeErr(at.CMEOperationNotSupported)
		}
	default:
		return cmeErr(at.CMEOperationNotSupported)
	}
	return atOK
}

// setting answers a command that only stores one number in [lo, hi].
func (a *AT) setting(port *atPort, c *at.Command, name string, v *int, lo, hi int) atResult {
	switch c.Kind {
	case at.Read:
		port.info(name + ": " + strconv.Itoa(*v))
	case at.Test:
		port.info(fmt.Sprintf("%s: (%d-%d)", name, lo, hi))
	case at.Set:
		n, ok := oneInt(c, lo, hi)
		if !ok {
			return cmeErr(at.CMEIncorrectParameters)
		}
		*v = n
	default:
		return cmeErr(at.CMEOperationNotSupported)
	}
	return atOK
}

// cesq answers +CESQ: no GSM or UMTS measurement (99, 255), LTE RSRQ and
// RSRP derived from the Modem's RSSI as QMI's signal info does.
func (a *AT) cesq(port *atPort, c *at.Command) atResult {
	switch c.Kind {
	case at.Action:
		rsrq, rsrp := 255, 255
		if v := a.m.RSSI(); a.m.Radio() && v <= 31 {
			dbm := max(-113+2*v-31, -140) // RSRP, dBm
			rsrp = min(dbm+141, 97)       // 27.007: 0 is < -140 dBm, 97 is >= -44 dBm
			rsrq = 20                     // -10 dB: 0 is < -19.5 dB, one step per 0.5 dB
		}
		port.info(fmt.Sprintf("+CESQ: 99,99,255,255,%d,%d", rsrq, rsrp))
	case at.Test:
		port.info("+CESQ: (0-63,99),(0-7,99),(0-96,255),(0-49,255),(0-34,255),(0-97,255)")
	default:
		return cmeErr(at.CMEOperationNotSupported)
	}
	return atOK
}

// SIM elementary files +CRSM reads (3GPP 31.102 / 51.011 file ids).
const (
	efICCID = 0x2FE2
	efECC   = 0x6FB7
	efGID1  = 0x6F3E
	efGID2  = 0x6F3F
	efSPN   = 0x6F46
	efAD    = 0x6FAD
)

// +CRSM commands and status words.
const (
	crsmReadBinary = 176
	swOK1          = 0x90 // 90 00: normal ending
	swNotFound1    = 0x6A // 6A 82: file not found
	swNotFound2    = 0x82
	swBadP1P2      = 0x6B // 6B 00: wrong parameters P1-P2 (offset)
	swBadINS       = 0x6D // 6D 00: instruction not supported
)

// simFile returns the contents of a transparent elementary file of the
// mock's SIM, or false when the SIM has no such file.
func (a *AT) simFile(id int) ([]byte, bool) {
	ident := a.m.Identity()
	switch id {
	case efICCID:
		return swappedBCD(ident.ICCID, 10), true
	case efECC: // 112 and 911, then unused entries
		b := []byte{0x11, 0xF2, 0xFF, 0x19, 0xF1, 0xFF}
		for len(b) < 15 {
			b = append(b, 0xFF)
		}
		return b, true
	case efGID1, efGID2: // present, no group identifier set
		return []byte{0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF}, true
	case efSPN: // display condition, then the name padded with 0xFF
		b := make([]byte, 17)
		for i := range b {
			b[i] = 0xFF
		}
		b[0] = 0x01
		copy(b[1:], ident.ProviderName) // GSM 7-bit default alphabet: ASCII letters, digits, space
		return b, true
	case efAD: // normal operation, MNC length
		mnc := len(ident.ProviderID) - 3
		if mnc != 3 {
			mnc = 2
		}
		return []byte{0x00, 0x00, 0x00, byte(mnc)}, true
	}
	return nil, false
}

// swappedBCD packs decimal digits two per byte, low nibble first, padded
// with F to n bytes (the SIM's ICCID encoding).
func swappedBCD(digits string, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = 0xFF
	}
	for i := 0; i < len(digits) && i/2 < n; i++ {
		d := digits[i] - '0'
		if d > 9 {
			d = 0xF
		}
		if i%2 == 0 {
			b[i/2] = b[i/2]&0xF0 | d
		} else {
			b[i/2] = b[i/2]&0x0F | d<<4
		}
	}
	return b
}

// crsm answers +CRSM=<command>,<fileid>,<P1>,<P2>,<P3>: READ BINARY of the
// files simFile knows; the SIM's status words come back in the
// information text, with OK, as the command defines.
func (a *AT) crsm(port *atPort, c *at.Command) atResult {
	switch c.Kind {
	case at.Test:
		return atOK
	case at.Set:
	default:
		return cmeErr(at.CMEOperationNotSupported)
	}
	as, ok := args(c)
	cmd, v1 := intArg(as, 0, 0, 255)
	if !ok || !v1 || len(as) > 7 {
		return cmeErr(at.CMEIncorrectParameters)
	}
	sw := func(sw1, sw2 int, data []byte) atResult {
		line := fmt.Sprintf("+CRSM: %d,%d", sw1, sw2)
		if data != nil {
			line += `,"` + strings.ToUpper(hex.EncodeToString(data)) + `"`
		}
		port.info(line)
		return atOK
	}
	if cmd != crsmReadBinary {
		return sw(swBadINS, 0, nil)
	}
	file, v1 := intArg(as, 1, 0, 0xFFFF)
	p1, v2 := intArg(as, 2, 0, 255)
	p2, v3 := intArg(as, 3, 0, 255)
	p3, v4 := intArg(as, 4, 0, 255)
	if !v1 || !v2 || !v3 || !v4 {
		return cmeErr(at.CMEIncorrectParameters)
	}
	data, found := a.simFile(file)
	if !found {
		return sw(swNotFound1, swNotFound2, nil)
	}
	off := p1<<8 | p2
	if off > len(data) {
		return sw(swBadP1P2, 0, nil)
	}
	data = data[off:]
	if p3 != 0 && p3 < len(data) {
		data = data[:p3]
	}
	return sw(swOK1, 0, data)
}

// telit answers Telit's '#' commands when the Modem's manufacturer is
// Telit: #BND, the band selection, in the format of the FN990 and LN920
// family (2G flags, 3G flags, LTE band mask and extended LTE band mask in
// hexadecimal). The mock's bands: UMTS band 1 (3G flag 0), LTE bands 1, 3,
// 7 and 20. Selecting bands is accepted and not modelled.
func (a *AT) telit(port *atPort, c *at.Command) atResult {
	if !strings.EqualFold(a.m.Identity().Manufacturer, "Telit") || !strings.EqualFold(string(c.Name), "BND") {
		return a.unknown(c)
	}
	lte := strings.ToUpper(strconv.FormatUint(dmsLTEBands, 16))
	switch c.Kind {
	case at.Read:
		port.info("#BND: 0,0," + lte + ",0")
	case at.Test:
		port.info("#BND: (0),(0),(" + lte + "),(0)")
	case at.Set:
		if _, ok := args(c); !ok {
			return cmeErr(at.CMEIncorrectParameters)
		}
	default:
		return cmeErr(at.CMEOperationNotSupported)
	}
	return atOK
}
