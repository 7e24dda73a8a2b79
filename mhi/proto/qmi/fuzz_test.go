package qmi

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
)

func fuzzSeeds(f *testing.F) {
	f.Add(unhex(f, ctlAllocateDMS))
	f.Add(unhex(f, dmsGetIDs))
	f.Add(unhex(f, "01 0f 00 00 00 00 00 01 22 00 04 00 01 01 00 02"))
	f.Add(unhex(f, "01 17 00 80 00 00 01 01 22 00 0c 00 02 04 00 00 00 00 00 01 02 00 02 01"))
	f.Add(unhex(f, "01 1c 00 00 01 02 00 05 00 20 00 10 00 14 08 00 69 6e 74 65 72 6e 65 74 19 01 00 04"))
	f.Add([]byte{})
	f.Add([]byte{Marker})
	f.Add([]byte{Marker, 0xff, 0xff, 0, 0, 0})
}

// FuzzParseQMUX: ParseFrame never panics; an accepted frame satisfies
// libqmi's invariants and rebuilds to the same bytes; FrameLen agrees with
// the QMUX length.
func FuzzParseQMUX(f *testing.F) {
	fuzzSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		fr, err := ParseFrame(data)
		if n, lerr := FrameLen(data); lerr == nil && err == nil && n != len(data) {
			t.Fatalf("FrameLen %d for an accepted frame of %d bytes", n, len(data))
		}
		if err != nil {
			known := false
			for _, e := range []error{ErrShort, ErrMarker, ErrQMUXLength, ErrSDUHeader, ErrTLVLength, ErrTLVOverrun} {
				known = known || errors.Is(err, e)
			}
			if !known {
				t.Fatalf("unnamed error %v", err)
			}
			return
		}
		if int(binary.LittleEndian.Uint16(data[1:3])) != len(data)-1 {
			t.Fatal("accepted a frame whose QMUX length is not len-1")
		}
		if err := fr.TLVs.Validate(); err != nil {
			t.Fatalf("accepted TLVs that do not validate: %v", err)
		}
		// Rebuild from the parsed fields and TLVs.
		var b Builder
		h := Header{QMUXFlags: fr.QMUXFlags, Service: fr.Service, Client: fr.Client, TID: fr.TID, Message: fr.Message}
		b.Start(nil, h)
		for tl := fr.TLVs; ; {
			typ, v, rest, ok, err := tl.Next()
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				break
			}
			b.TLV(typ, v)
			tl = rest
		}
		out, err := b.Finish()
		if err != nil {
			t.Fatal(err)
		}
		// The SDU flags byte may carry bits Header does not model; copy it.
		sduFlags := QMUXHeaderLen
		out[sduFlags] = data[sduFlags]
		if !bytes.Equal(out, data) {
			t.Fatalf("rebuilt\n%x\nfrom\n%x", out, data)
		}
	})
}

// FuzzTLVs: iteration never panics, stays inside the area, and agrees with
// Validate, Count and Find.
func FuzzTLVs(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0x02, 0x04, 0x00, 0, 0, 0, 0})
	f.Add([]byte{0x01, 0x02, 0x00, 0x01, 0x05, 0x10, 0x00, 0x00})
	f.Add([]byte{0x01, 0xff, 0xff})
	f.Add([]byte{0x01, 0x00})
	f.Fuzz(func(t *testing.T, data []byte) {
		tl := TLVs(data)
		n, total := 0, 0
		var firstErr error
		seen := map[uint8][]byte{}
		for {
			typ, v, rest, ok, err := tl.Next()
			if err != nil {
				if !errors.Is(err, ErrTLVOverrun) {
					t.Fatalf("unnamed error %v", err)
				}
				firstErr = err
				break
			}
			if !ok {
				break
			}
			if cap(v) != len(v) {
				t.Fatal("value view can be appended into the next TLV")
			}
			total += TLVHeaderLen + len(v)
			if total+len(rest) != len(data) {
				t.Fatal("iteration lost bytes")
			}
			if _, dup := seen[typ]; !dup {
				seen[typ] = v
			}
			n++
			tl = rest
		}
		if (firstErr == nil) != (tl.Validate() == nil && TLVs(data).Validate() == nil) {
			t.Fatalf("Validate disagrees with iteration (%v)", firstErr)
		}
		if c := TLVs(data).Count(); c != n {
			t.Fatalf("Count %d, iterated %d", c, n)
		}
		for typ, v := range seen {
			got, ok := TLVs(data).Find(typ)
			if !ok || !bytes.Equal(got, v) {
				t.Fatalf("Find(0x%02x) = %x %v, want %x", typ, got, ok, v)
			}
		}
		_, _ = TLVs(data).Result()
		r := NewReader(data)
		_ = r.U8()
		_ = r.String8()
		_ = r.U32()
		_ = r.Finish()
	})
}
