package transcript_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/gomhi/gomhi/mhi/ep/transcript"
)

// startChannels is a command ring on which the host starts chans in turn:
// for each, the doorbell, the command as the device reads it and its
// completion.
func startChannels(chans ...int) []transcript.Record {
	var recs []transcript.Record
	add := func(kind transcript.Kind, name string, f map[string]string) {
		recs = append(recs, transcript.Record{Seq: uint64(len(recs) + 1), Kind: kind, Name: name, Fields: f})
	}
	for i, ch := range chans {
		slot := strconv.Itoa(i)
		add(transcript.KindDoorbell, "cmd", map[string]string{"slot": strconv.Itoa(i + 1), "order": "hi-lo"})
		add(transcript.KindElement, "cmd", map[string]string{"slot": slot, "type": "START_CHAN_CMD", "chan": strconv.Itoa(ch), "ptr": "0x0"})
		add(transcript.KindEvent, "er0", map[string]string{"slot": strconv.Itoa(i + 2), "type": "CMD_COMPLETION_EVENT", "code": "SUCCESS", "cmd": "cmd#" + slot})
	}
	return recs
}

// TestCommandsAlignedByChannel: a host that starts two channels more
// before the common ones, and one that starts two others after them,
// differ by those commands only — each reported missing or extra with its
// doorbell and completion, all naming the channel — not by the common
// commands moved, nor by a command's slot or channel "changed" (a START
// for channel 46 paired with one for channel 12).
func TestCommandsAlignedByChannel(t *testing.T) {
	a := startChannels(46, 47, 100, 101)
	b := startChannels(100, 101, 12, 13)
	res := transcript.Diff(a, b, nil)
	n := map[transcript.DiffKind]int{}
	for _, d := range res.Differences {
		n[d.Kind]++
		rec := d.A + d.B
		if d.Kind != transcript.DiffMissing && d.Kind != transcript.DiffExtra {
			t.Errorf("unexpected %s %s %s: %q against %q", d.Kind, d.Where, d.Field, d.A, d.B)
		}
		want := "chan=4"
		if d.Kind == transcript.DiffExtra {
			want = "chan=1"
		}
		if !strings.Contains(rec, want) || strings.Contains(rec, "chan=10") {
			t.Errorf("%s names the wrong command: %q", d.Kind, rec)
		}
	}
	if n[transcript.DiffMissing] != 6 || n[transcript.DiffExtra] != 6 || len(res.Differences) != 12 {
		t.Fatalf("differences %v, want 6 missing and 6 extra:\n%s", n, report(res))
	}
}
