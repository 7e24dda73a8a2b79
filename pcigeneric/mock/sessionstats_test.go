package mock

import (
	"testing"

	"github.com/gomhi/gomhi/mhi/ep/ipdata"
	"github.com/gomhi/gomhi/mhi/proto/framing"
	"github.com/gomhi/gomhi/pcigeneric"
)

// TestFunctionsSessionStats: the mock's per-session counters are the
// data function's, with the model's numbering base in Wire.
func TestFunctionsSessionStats(t *testing.T) {
	var none Functions
	if none.SessionStats() != nil || none.SessionStatsOf(3).Session != 3 {
		t.Fatal("without a data function")
	}
	_, fns, err := NewConfig(pcigeneric.EntriesFor("telit-fn990")[0],
		ModemOptions{IPData: &ipdata.Config{Format: framing.NTB16, Session: 112}})
	if err != nil {
		t.Fatal(err)
	}
	if rows := fns.SessionStats(); len(rows) != 0 {
		t.Fatalf("rows before any traffic: %+v", rows)
	}
	if s := fns.SessionStatsOf(2); s.Session != 2 || s.Wire != 114 || s.ULPackets != 0 {
		t.Fatalf("SessionStatsOf(2) = %+v", s)
	}
}
