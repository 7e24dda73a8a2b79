package lab

import (
	"io"
	"reflect"
	"strings"
	"testing"
)

// TestServerReport: the served modem's JSON event log becomes its report:
// the exit counters, vfio-user errors, the last IP data counters and the
// per-session rows of ip_data_final, sorted by session; a malformed
// per-session list yields none.
func TestServerReport(t *testing.T) {
	log := strings.Join([]string{
		`{"msg":"listen","socket":"/tmp/x.sock"}`,
		`not json`,
		`{"msg":"error","err":"bad region"}`,
		`{"msg":"ip_data_final","stats":{"Answered":3},"sessions":[` +
			`{"session":2,"wire":2,"ul_packets":5,"ul_bytes":420,"dl_packets":5,"dl_bytes":420,"dropped_gated":0},` +
			`{"session":0,"wire":0,"ul_packets":22,"ul_bytes":1776,"dl_packets":20,"dl_bytes":1680,"dropped_gated":2}]}`,
		`{"msg":"exit","sessions":1,"messages":7,"malformed":0,"dma_faults":0,"interrupts":9}`,
	}, "\n")
	s := &server{done: make(chan struct{}), log: io.Discard}
	listening := make(chan struct{})
	s.read(strings.NewReader(log), listening)
	select {
	case <-listening:
	default:
		t.Fatal("listen did not close the listening channel")
	}
	r := s.report
	want := []SessionReport{
		{Session: 0, Wire: 0, ULPackets: 22, ULBytes: 1776, DLPackets: 20, DLBytes: 1680, DroppedGated: 2},
		{Session: 2, Wire: 2, ULPackets: 5, ULBytes: 420, DLPackets: 5, DLBytes: 420},
	}
	if !reflect.DeepEqual(r.IPSessions, want) {
		t.Errorf("IPSessions %+v, want %+v", r.IPSessions, want)
	}
	if r.Messages != 7 || r.Interrupts != 9 || r.VFIOUserErrors != 1 || r.IPData["Answered"] != 3.0 {
		t.Errorf("report %+v", r)
	}

	s = &server{done: make(chan struct{}), log: io.Discard}
	s.read(strings.NewReader(`{"msg":"ip_data_final","stats":{},"sessions":[{"session":"zero"}]}`), nil)
	if s.report.IPSessions != nil {
		t.Errorf("a malformed per-session list gave %+v, want none", s.report.IPSessions)
	}
}
