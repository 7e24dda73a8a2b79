package transcript_test

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/gomhi/gomhi/mhi/ep/transcript"
)

// linuxDir holds Linux's transcripts, recorded in the lab (docs/transcripts).
var linuxDir = filepath.Join("..", "..", "..", "docs", "transcripts")

// linuxTranscript reads Linux's transcript of kernel and model.
func linuxTranscript(t *testing.T, kernel, model string) []transcript.Record {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(linuxDir, "linux-"+kernel+"-"+model+".jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	return read(t, b)
}

// powerUpWrites lists the register writes until the host asks for M0 (the
// first MHICTRL write), as NAME=VALUE.
func powerUpWrites(recs []transcript.Record) []string {
	var out []string
	for _, r := range recs {
		if r.Kind != transcript.KindRegWrite {
			continue
		}
		out = append(out, r.Name+"="+r.Fields["value"])
		if r.Name == "MHICTRL" {
			break
		}
	}
	return out
}

// TestPowerUpWritesAsLinux: gomhi's host programs the device at power-up
// with the same register writes in the same order as Linux 6.1, 6.12 and
// 7.3 (the context bases, the address limits, then MHICFG's NER and NHWER
// as two read-modify-writes, then M0). The one allowed difference is
// MHICFG's value on the SDX55 against 6.1, whose table had four event
// rings where later kernels (and gomhi) have six.
func TestPowerUpWritesAsLinux(t *testing.T) {
	for _, model := range []string{"telit-fn990", "qcom-sdx55m"} {
		got := powerUpWrites(read(t, recordScenario(t, scenario{model: model, mru: 32768})))
		for _, kernel := range []string{"6.1", "6.12", "7.3"} {
			want := powerUpWrites(linuxTranscript(t, kernel, model))
			if kernel == "6.1" && model == "qcom-sdx55m" {
				for i, w := range want {
					want[i] = strings.Replace(w, "MHICFG=0x2040280", "MHICFG=0x2060280", 1)
				}
			}
			if !slices.Equal(got, want) {
				t.Errorf("%s against Linux %s: power-up writes\n got %v\nwant %v", model, kernel, got, want)
			}
		}
	}
}

// ringsRungAtResume lists the event rings whose doorbell the host rings
// between the M0 that ends an M3 and the next ring element the device
// reads, and the number of event rings the host programmed (MHICFG's NER).
func ringsRungAtResume(recs []transcript.Record) (rung []string, ner int) {
	m3, m0 := false, false
	for _, r := range recs {
		switch {
		case r.Kind == transcript.KindRegWrite && r.Name == "MHICFG":
			if v, err := strconv.ParseUint(strings.TrimPrefix(r.Fields["value"], "0x"), 16, 32); err == nil {
				ner = int(v >> 16 & 0xff)
			}
		case r.Kind == transcript.KindState && r.Fields["state"] == "M3":
			m3 = true
		case r.Kind == transcript.KindState && r.Fields["state"] == "M0" && m3:
			m0 = true
		case m0 && r.Kind == transcript.KindElement:
			return rung, ner
		case m0 && r.Kind == transcript.KindDoorbell && strings.HasPrefix(r.Name, "er") && !slices.Contains(rung, r.Name):
			rung = append(rung, r.Name)
		}
	}
	return rung, ner
}

// TestResumeRingsEventRingsAsLinux: on resume from M3 gomhi's host rings
// every event ring's doorbell, as Linux 6.1, 6.12 and 7.3 do
// (mhi_pm_m0_transition; their checked-in suspend transcripts): the
// device learns each ring's free space again whether or not it kept it in
// M3. gomhi used to ring only the rings it then processed events on.
func TestResumeRingsEventRingsAsLinux(t *testing.T) {
	check := func(what string, recs []transcript.Record) {
		rung, ner := ringsRungAtResume(recs)
		if ner == 0 || len(rung) != ner {
			t.Errorf("%s: event rings rung at resume %v, want all %d", what, rung, ner)
		}
	}
	for _, model := range []string{"telit-fn990", "qcom-sdx55m"} {
		for _, kernel := range []string{"6.1", "6.12", "7.3"} {
			check("Linux "+kernel+" on "+model, linuxTranscript(t, "suspend-"+kernel, model))
		}
		check("gomhi on "+model, read(t, recordScenario(t, scenario{model: model, mru: 32768, packets: 3, suspend: true})))
	}
}
