package qmi

import (
	"bytes"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
)

func unhex(tb testing.TB, s string) []byte {
	tb.Helper()
	b, err := hex.DecodeString(strings.NewReplacer(" ", "", ":", "").Replace(s))
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// Frames as libqmi writes them (captured with qmicli -v against the mock,
// see docs/CONTROL.md): a CTL ALLOCATE_CID for DMS and a DMS GET_IDS.
const (
	ctlAllocateDMS = "01 0f 00 00 00 00 00 01 22 00 04 00 01 01 00 02"
	dmsGetIDs      = "01 0c 00 00 02 01 00 01 00 25 00 00 00"
)

func TestParseFrameGolden(t *testing.T) {
	f, err := ParseFrame(unhex(t, ctlAllocateDMS))
	if err != nil {
		t.Fatal(err)
	}
	if f.Service != CTL || f.Client != 0 || f.TID != 1 || f.Message != CTLAllocateCID || f.Type() != Request {
		t.Fatalf("frame %+v", f)
	}
	v, ok := f.TLVs.Find(0x01)
	if !ok || !bytes.Equal(v, []byte{byte(DMS)}) {
		t.Fatalf("TLV 0x01 = %x, %v", v, ok)
	}
	if f.Name() != "CTL ALLOCATE_CID" {
		t.Fatalf("name %q", f.Name())
	}

	f, err = ParseFrame(unhex(t, dmsGetIDs))
	if err != nil {
		t.Fatal(err)
	}
	if f.Service != DMS || f.Client != 1 || f.TID != 1 || f.Message != DMSGetIDs || len(f.TLVs) != 0 {
		t.Fatalf("frame %+v", f)
	}
}

func TestParseFrameErrors(t *testing.T) {
	cases := []struct {
		name  string
		frame string
		want  error
	}{
		{"empty", "", ErrShort},
		{"five bytes", "01 05 00 00 00", ErrShort},
		{"marker", "02 0f 00 00 00 00 00 01 22 00 04 00 01 01 00 02", ErrMarker},
		{"qmux length short", "01 0e 00 00 00 00 00 01 22 00 04 00 01 01 00 02", ErrQMUXLength},
		{"qmux length long", "01 10 00 00 00 00 00 01 22 00 04 00 01 01 00 02", ErrQMUXLength},
		{"ctl header cut", "01 09 00 00 00 00 00 01 22 00", ErrSDUHeader},
		{"service header cut", "01 0b 00 00 02 01 00 01 00 25 00 00", ErrSDUHeader},
		{"tlv length short", "01 0f 00 00 00 00 00 01 22 00 03 00 01 01 00 02", ErrTLVLength},
		{"tlv length long", "01 0f 00 00 00 00 00 01 22 00 05 00 01 01 00 02", ErrTLVLength},
		{"tlv value overruns", "01 0f 00 00 00 00 00 01 22 00 04 00 01 02 00 02", ErrTLVOverrun},
		{"tlv header cut", "01 0d 00 00 00 00 00 01 22 00 02 00 01 01", ErrTLVOverrun},
		{"tlv value short of fill", "01 10 00 00 00 00 00 01 22 00 05 00 01 01 00 02 07", ErrTLVOverrun},
	}
	all := []error{ErrShort, ErrMarker, ErrQMUXLength, ErrSDUHeader, ErrTLVLength, ErrTLVOverrun}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseFrame(unhex(t, c.frame))
			if !errors.Is(err, c.want) {
				t.Fatalf("err %v, want %v", err, c.want)
			}
			for _, other := range all {
				if other != c.want && errors.Is(err, other) {
					t.Fatalf("err %v also matches %v", err, other)
				}
			}
		})
	}
}

func TestFrameLen(t *testing.T) {
	cases := []struct {
		in   string
		n    int
		want error
	}{
		{"01 0f 00", 16, nil},
		{"01 0f", 0, ErrShort},
		{"7e 0f 00", 0, ErrMarker},
		{"01 04 00", 0, ErrQMUXLength},
		{"01 ff ff", MaxFrameLen, nil},
	}
	for _, c := range cases {
		n, err := FrameLen(unhex(t, c.in))
		if n != c.n || !errors.Is(err, c.want) {
			t.Errorf("FrameLen(%s) = %d, %v; want %d, %v", c.in, n, err, c.n, c.want)
		}
	}
}

func TestBuildRoundTrip(t *testing.T) {
	cases := []Header{
		{QMUXFlags: QMUXFromModem, Service: CTL, Type: Response, TID: 7, Message: CTLAllocateCID},
		{QMUXFlags: QMUXFromModem, Service: CTL, Type: Indication, TID: 0, Message: CTLSync},
		{QMUXFlags: QMUXFromHost, Service: CTL, Type: Request, TID: 255, Message: CTLGetVersionInfo},
		{QMUXFlags: QMUXFromModem, Service: WDS, Client: 3, Type: Response, TID: 0x1234, Message: WDSStartNetwork},
		{QMUXFlags: QMUXFromModem, Service: WDS, Client: BroadcastClient, Type: Indication, Message: WDSGetPacketServiceStatus},
		{QMUXFlags: QMUXFromHost, Service: NAS, Client: 9, Type: Request, Compound: true, TID: 0xFFFF, Message: NASGetServingSystem},
	}
	for _, h := range cases {
		t.Run(h.Service.String()+"/"+h.Type.String(), func(t *testing.T) {
			var b Builder
			prefix := []byte("junk")
			b.Start(prefix, h)
			b.Result(Failure(ErrCallFailed))
			b.TLVString(0x14, "internet")
			b.TLVU8(0x19, 4)
			b.TLVU16(0x10, 0xBEEF)
			b.TLVU32(0x01, 0xDEADBEEF)
			b.Begin(0x12)
			b.Put16(1)
			b.Put16(1)
			b.PutString8("gomhi")
			b.Put64(1 << 40)
			b.End()
			b.TLV(0x20, nil)
			out, err := b.Finish()
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(out[:4], []byte("junk")) {
				t.Fatalf("prefix clobbered: %q", out[:4])
			}
			f, err := ParseFrame(out[4:])
			if err != nil {
				t.Fatal(err)
			}
			if f.QMUXFlags != h.QMUXFlags || f.Service != h.Service || f.Client != h.Client ||
				f.Type() != h.Type || f.TID != h.TID || f.Message != h.Message || f.Compound() != (h.Compound && h.Service != CTL) {
				t.Fatalf("parsed %+v (type %v), built from %+v", f, f.Type(), h)
			}
			if n := f.TLVs.Count(); n != 7 {
				t.Fatalf("%d TLVs, want 7", n)
			}
			r, err := f.TLVs.Result()
			if err != nil || r != Failure(ErrCallFailed) || r.OK() {
				t.Fatalf("result %+v, %v", r, err)
			}
			var pe *ProtocolError
			if !errors.As(r.Err(), &pe) || pe.Code != ErrCallFailed {
				t.Fatalf("Err() = %v", r.Err())
			}
			if v, _ := f.TLVs.Find(0x14); string(v) != "internet" {
				t.Fatalf("APN %q", v)
			}
			v, _ := f.TLVs.Find(0x12)
			rd := NewReader(v)
			mcc, mnc, desc, big := rd.U16(), rd.U16(), rd.String8(), rd.U64()
			if err := rd.Finish(); err != nil || mcc != 1 || mnc != 1 || string(desc) != "gomhi" || big != 1<<40 {
				t.Fatalf("PLMN %d %d %q %d, %v", mcc, mnc, desc, big, err)
			}
			v, _ = f.TLVs.Find(0x01)
			rd = NewReader(v)
			if x := rd.U32(); x != 0xDEADBEEF || rd.Finish() != nil {
				t.Fatalf("u32 %x", x)
			}
			if v, ok := f.TLVs.Find(0x20); !ok || len(v) != 0 {
				t.Fatalf("empty TLV %x %v", v, ok)
			}
			if _, ok := f.TLVs.Find(0x99); ok {
				t.Fatal("found absent TLV")
			}
		})
	}
}

func TestBuilderErrors(t *testing.T) {
	cases := []struct {
		name string
		run  func(b *Builder)
		want error
	}{
		{"put before start", func(b *Builder) { b.TLVU8(1, 1) }, ErrBuilder},
		{"ctl tid", func(b *Builder) { b.Start(nil, Header{Service: CTL, TID: 256}) }, ErrBuilder},
		{"put outside tlv", func(b *Builder) { b.Start(nil, Header{Service: DMS}); b.Put8(1) }, ErrBuilder},
		{"nested begin", func(b *Builder) { b.Start(nil, Header{Service: DMS}); b.Begin(1); b.Begin(2) }, ErrBuilder},
		{"end without begin", func(b *Builder) { b.Start(nil, Header{Service: DMS}); b.End() }, ErrBuilder},
		{"left open", func(b *Builder) { b.Start(nil, Header{Service: DMS}); b.Begin(1) }, ErrBuilder},
		{"long string8", func(b *Builder) {
			b.Start(nil, Header{Service: DMS})
			b.Begin(1)
			b.PutString8(strings.Repeat("x", 256))
			b.End()
		}, ErrTooLarge},
		{"tlv too large", func(b *Builder) {
			b.Start(nil, Header{Service: DMS})
			b.TLV(1, make([]byte, 0x10000))
		}, ErrTooLarge},
		{"frame too large", func(b *Builder) {
			b.Start(nil, Header{Service: DMS})
			b.TLV(1, make([]byte, 0xFFF0))
			b.TLV(2, make([]byte, 0x100))
		}, ErrTooLarge},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var b Builder
			c.run(&b)
			if _, err := b.Finish(); !errors.Is(err, c.want) {
				t.Fatalf("Finish: %v, want %v", err, c.want)
			}
		})
	}
}

func TestBuilderReuse(t *testing.T) {
	buf := make([]byte, 0, 256)
	var b Builder
	for i := range 3 {
		b.Start(buf[:0], Header{Service: DMS, Client: 1, Type: Response, TID: uint16(i), Message: DMSGetModel})
		b.Result(Success)
		b.TLVString(0x01, "FN990")
		out, err := b.Finish()
		if err != nil {
			t.Fatal(err)
		}
		if &out[0] != &buf[:1][0] {
			t.Fatal("builder reallocated a large enough buffer")
		}
		if _, err := ParseFrame(out); err != nil {
			t.Fatal(err)
		}
	}
	if n := testing.AllocsPerRun(100, func() {
		b.Start(buf[:0], Header{Service: DMS, Client: 1, Type: Response, TID: 1, Message: DMSGetModel})
		b.Result(Success)
		b.TLVString(0x01, "FN990")
		_, _ = b.Finish()
	}); n != 0 {
		t.Fatalf("%v allocations per built frame", n)
	}
}

func TestReader(t *testing.T) {
	r := NewReader([]byte{1, 2, 0, 3, 0, 0, 0, 2, 'h', 'i', 9})
	if r.U8() != 1 || r.U16() != 2 || r.U32() != 3 || string(r.String8()) != "hi" || r.Len() != 1 {
		t.Fatal("decoded wrong values")
	}
	if err := r.Finish(); !errors.Is(err, ErrValue) {
		t.Fatalf("left-over byte: %v", err)
	}
	r = NewReader([]byte{1})
	if r.U16() != 0 || !errors.Is(r.Err(), ErrValue) || r.U8() != 0 || r.Rest() != nil {
		t.Fatal("short read not sticky")
	}
	r = NewReader([]byte{5, 'a'})
	if r.String8() != nil || !errors.Is(r.Finish(), ErrValue) {
		t.Fatal("overlong string prefix accepted")
	}
}

func TestResultTLV(t *testing.T) {
	if _, err := TLVs(nil).Result(); !errors.Is(err, ErrNoResult) {
		t.Fatalf("no result: %v", err)
	}
	short := TLVs{0x02, 0x02, 0x00, 0, 0}
	if _, err := short.Result(); !errors.Is(err, ErrValue) {
		t.Fatalf("short result: %v", err)
	}
	tl := TLVs{0x02, 0x04, 0x00, 1, 0, 71, 0}
	r, err := tl.Result()
	if err != nil || r.Status != StatusFailure || r.Code != ErrInvalidQMICommand {
		t.Fatalf("%+v %v", r, err)
	}
}

func TestNames(t *testing.T) {
	cases := []struct{ got, want string }{
		{CTL.String(), "CTL"}, {WDA.String(), "WDA"}, {Service(0x2B).String(), "Service(0x2b)"},
		{DMS.MessageName(DMSGetIDs), "GET_IDS"}, {WDS.MessageName(WDSStartNetwork), "START_NETWORK"},
		{NAS.MessageName(NASGetServingSystem), "GET_SERVING_SYSTEM"}, {CTL.MessageName(CTLSync), "SYNC"},
		{NAS.MessageName(GetSupportedMessages), "GET_SUPPORTED_MESSAGES"}, {DMS.MessageName(0x5555), "0x5555"},
		{ErrInvalidQMICommand.String(), "InvalidQmiCommand"}, {ErrClientIDsExhausted.String(), "ClientIdsExhausted"},
		{ErrorCode(999).String(), "ErrorCode(999)"}, {Indication.String(), "indication"},
	}
	for _, c := range cases {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}
