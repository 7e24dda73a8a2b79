package transcript_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"testing"

	"github.com/gomhi/gomhi/mhi/ep/transcript"
)

// FuzzRead: Read never panics and fails only with ErrMalformed; what it
// accepts is in sequence order without duplicates, compares with itself
// without a difference, prints, and reads back the same after writing.
func FuzzRead(f *testing.F) {
	whole, err := os.ReadFile(fixture)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(whole)
	lines := bytes.SplitAfter(whole, []byte("\n"))
	f.Add(bytes.Join(lines[:40], nil))
	// The fixture's lines backwards: Read orders them by seq.
	var rev []byte
	for i := len(lines) - 1; i >= 0; i-- {
		rev = append(rev, lines[i]...)
	}
	f.Add(rev)
	for _, s := range []string{
		"", "\n\n", "{}", "null", "[]", `{"seq":1,"kind":"state","fields":{"state":"M0"}}`,
		`{"seq":1,"kind":"state"}` + "\n" + `{"seq":1,"kind":"ee"}`,
		`{"seq":1,"kind":"bogus"}`, `{"seq":1,"kind":"irq","extra":1}`, `{"seq":-1,"kind":"irq"}`,
		`{"seq":1,"kind":"irq"} {"seq":2,"kind":"irq"}`, `{"seq":1,"kind":"reg-write","name":"MHICTRL","fields":{"value":"0x2"}}`,
		`{"seq":2,"kind":"element","name":"cmd","fields":{"type":"START_CHAN_CMD","chan":"100"}}` + "\n" +
			`{"seq":3,"kind":"element","name":"cmd","fields":{"type":"RESET_CHAN_CMD","chan":"100"}}`,
		`{"seq":1,"kind":"context","name":"ch1","fields":{"":"x"}}`,
		`{"seq":1,"kind":"dma-map","fields":{"size":"0x4000000","flags":"0x3"}}` + "\n" +
			`{"seq":9,"kind":"dma-unmap","fields":{"size":"0x0","flags":"0x2"}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		recs, err := transcript.Read(bytes.NewReader(b))
		if err != nil {
			if !errors.Is(err, transcript.ErrMalformed) {
				t.Fatalf("unnamed error %v", err)
			}
			return
		}
		for i := 1; i < len(recs); i++ {
			if recs[i].Seq <= recs[i-1].Seq {
				t.Fatalf("records %d and %d out of order: %d, %d", i-1, i, recs[i-1].Seq, recs[i].Seq)
			}
		}
		res := transcript.Diff(recs, recs, nil)
		if len(res.Differences) != 0 || res.Unexplained != 0 {
			t.Fatalf("self-diff: %+v", res.Differences)
		}
		if err := transcript.WriteText(io.Discard, res); err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		for _, r := range recs {
			line, err := json.Marshal(r)
			if err != nil {
				t.Fatal(err)
			}
			out.Write(append(line, '\n'))
		}
		again, err := transcript.Read(&out)
		if err != nil {
			t.Fatalf("written back, not read: %v", err)
		}
		if len(again) != len(recs) {
			t.Fatalf("%d records read back, want %d", len(again), len(recs))
		}
		if res := transcript.Diff(recs, again, nil); len(res.Differences) != 0 {
			t.Fatalf("read back differs: %+v", res.Differences)
		}
	})
}
