package transcript_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/gomhi/gomhi/mhi/ep/transcript"
)

// rulesFile is the repository's rules file.
var rulesFile = filepath.Join("..", "..", "..", "docs", "transcript-rules.yaml")

// The scenario's transcripts are recorded once for all the tests.
var (
	baseOnce         sync.Once
	baseA, baseB     []byte
	baseMRU          []byte
	baseErr          string
	defaultScenario  = scenario{model: "qcom-sdx55m", mru: 32768, packets: 6}
	smallMRUScenario = scenario{model: "qcom-sdx55m", mru: 16384, packets: 6}
)

// transcripts returns two recordings of the default scenario and one of
// the same scenario at another MRU.
func transcripts(t *testing.T) (a, b, mru []byte) {
	t.Helper()
	baseOnce.Do(func() {
		baseA = recordScenario(t, defaultScenario)
		baseB = recordScenario(t, defaultScenario)
		baseMRU = recordScenario(t, smallMRUScenario)
	})
	if baseA == nil {
		t.Fatal("the scenario's recording failed")
	}
	return baseA, baseB, baseMRU
}

func read(t *testing.T, b []byte) []transcript.Record {
	t.Helper()
	recs, err := transcript.Read(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

func rules(t *testing.T) *transcript.Rules {
	t.Helper()
	rs, err := transcript.LoadRules(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

// report renders a result's differences for a failure message.
func report(res transcript.Result) string {
	var b strings.Builder
	for _, d := range res.Differences {
		j, _ := json.Marshal(d)
		b.Write(j)
		b.WriteByte('\n')
	}
	return b.String()
}

// The scenario's record covers what the comparison is about: every phase
// of the scenario, the data channels, hundreds of records.
func TestScenarioRecord(t *testing.T) {
	a, _, _ := transcripts(t)
	recs := read(t, a)
	if len(recs) < 150 {
		t.Fatalf("%d records", len(recs))
	}
	kinds := map[transcript.Kind]int{}
	for _, r := range recs {
		kinds[r.Kind]++
		if strings.Contains(r.String(), "=0x") && r.Kind == transcript.KindElement && r.Fields["ptr"] != "0x0" {
			t.Errorf("an address in %s", r)
		}
	}
	for _, k := range []transcript.Kind{transcript.KindRegRead, transcript.KindRegWrite, transcript.KindContext,
		transcript.KindElement, transcript.KindDoorbell, transcript.KindEvent, transcript.KindState,
		transcript.KindEE, transcript.KindIRQ} {
		if kinds[k] == 0 {
			t.Errorf("no %s record", k)
		}
	}
}

func TestSelfDiffIsEmpty(t *testing.T) {
	a, _, _ := transcripts(t)
	recs := read(t, a)
	res := transcript.Diff(recs, recs, nil)
	if len(res.Differences) != 0 || res.Unexplained != 0 {
		t.Fatalf("self-diff:\n%s", report(res))
	}
	if res.Compared < 150 {
		t.Fatalf("compared %d", res.Compared)
	}
}

// Two runs of the same scenario leave transcripts with no difference,
// without any rule: on the SDX55 (IP_HW0, raw IP) and on the FN990
// (IP_HW0_MBIM, NTB16).
func TestTwoRunsDiffClean(t *testing.T) {
	a, b, _ := transcripts(t)
	res := transcript.Diff(read(t, a), read(t, b), nil)
	if len(res.Differences) != 0 {
		t.Fatalf("two runs differ:\n%s", report(res))
	}
	fn990 := scenario{model: "telit-fn990", mru: 32768, packets: 6}
	res = transcript.Diff(read(t, recordScenario(t, fn990)), read(t, recordScenario(t, fn990)), nil)
	if len(res.Differences) != 0 {
		t.Fatalf("two runs on the FN990 differ:\n%s", report(res))
	}
}

// A fifth of the events cut out: unexplained differences, even with the
// rules.
func TestCutFifthIsUnexplained(t *testing.T) {
	a, _, _ := transcripts(t)
	recs := read(t, a)
	var cut []transcript.Record
	for i, r := range recs {
		if i%5 != 2 {
			cut = append(cut, r)
		}
	}
	res := transcript.Diff(recs, cut, rules(t))
	if res.Unexplained == 0 {
		t.Fatalf("a fifth cut out, nothing unexplained:\n%s", report(res))
	}
	missing := 0
	for _, d := range res.Differences {
		if d.Kind == transcript.DiffMissing {
			missing++
		}
	}
	if missing == 0 {
		t.Fatalf("nothing missing:\n%s", report(res))
	}
}

// One context field changed: an unexplained context-field difference
// (ring-size for the ring length), and nothing else.
func TestContextFieldChangedIsUnexplained(t *testing.T) {
	a, _, _ := transcripts(t)
	for _, tc := range []struct {
		field string
		kind  transcript.DiffKind
	}{{"erindex", transcript.DiffContextField}, {"rlen", transcript.DiffRingSize}} {
		recs := read(t, a)
		changed := read(t, a)
		for i := range changed {
			if changed[i].Kind == transcript.KindContext && changed[i].Name == "ch101" {
				changed[i].Fields[tc.field] += "7"
				break
			}
		}
		res := transcript.Diff(recs, changed, rules(t))
		if len(res.Differences) != 1 || res.Unexplained != 1 {
			t.Fatalf("%s changed:\n%s", tc.field, report(res))
		}
		d := res.Differences[0]
		if d.Kind != tc.kind || d.Field != tc.field || d.Where != "context:ch101" || d.ExplainedBy != "" {
			t.Fatalf("%s changed: %+v", tc.field, d)
		}
	}
}

// Two MRUs: the downlink buffers' length differs, and the rules file
// explains it; without the rules it is unexplained.
func TestMRUChangeIsExplained(t *testing.T) {
	a, _, mru := transcripts(t)
	ra, rm := read(t, a), read(t, mru)
	res := transcript.Diff(ra, rm, rules(t))
	if len(res.Differences) == 0 || res.Unexplained != 0 {
		t.Fatalf("MRU 32768 against 16384 with the rules:\n%s", report(res))
	}
	for _, d := range res.Differences {
		if d.Kind != transcript.DiffElementField || d.Field != "len" || d.Phase != transcript.PhaseData {
			t.Errorf("not the MRU: %+v", d)
		}
	}
	if res := transcript.Diff(ra, rm, nil); res.Unexplained == 0 {
		t.Fatal("MRU change without rules: nothing unexplained")
	}
}

// The repository's rules file parses.
func TestRulesFileParses(t *testing.T) {
	if _, err := os.Stat(rulesFile); err != nil {
		t.Fatal(err)
	}
	if len(rules(t).Rules) == 0 {
		t.Fatal("no rules")
	}
}

// updateFixture rewrites testdata/sdx55.jsonl from a fresh recording:
// go test -run TestFixtureCurrent ./mhi/ep/transcript -args -update-fixture
var updateFixture = flag.Bool("update-fixture", false, "rewrite testdata/sdx55.jsonl from a fresh recording of the scenario")

// fixture is a recording of the default scenario, checked in: the seed of
// FuzzRead, the input of mhictl's transcript tests, and the pinned record
// of how gomhi's host drives the modem.
const fixture = "testdata/sdx55.jsonl"

// TestFixtureCurrent: a fresh recording of the scenario compares clean with
// the checked-in one, without rules. When gomhi's host or the mock modem
// changes what the device observes on purpose, rewrite it (-update-fixture)
// and say what changed in the commit.
func TestFixtureCurrent(t *testing.T) {
	a, _, _ := transcripts(t)
	if *updateFixture {
		if err := os.WriteFile(fixture, a, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(fixture)
	if err != nil {
		t.Fatal(err)
	}
	res := transcript.Diff(read(t, b), read(t, a), nil)
	if len(res.Differences) != 0 {
		t.Fatalf("the scenario's record (B) differs from %s (A); if on purpose, rewrite it with -update-fixture:\n%s", fixture, report(res))
	}
}

func TestRulesRejected(t *testing.T) {
	for _, tc := range []struct{ name, yaml string }{
		{"no reason", "rules:\n  - kind: missing\n"},
		{"unknown kind", "rules:\n  - kind: nonsense\n    reason: r\n"},
		{"unknown key", "rules:\n  - kinds: missing\n    reason: r\n"},
		{"bad pattern", "rules:\n  - where: \"[\"\n    reason: r\n"},
		{"bad regexp", "rules:\n  - a: \"(\"\n    reason: r\n"},
		{"not yaml", "rules: [\n"},
	} {
		if _, err := transcript.ParseRules([]byte(tc.yaml)); !errors.Is(err, transcript.ErrRules) {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
	rs, err := transcript.ParseRules(nil)
	if err != nil || len(rs.Rules) != 0 {
		t.Fatalf("empty rules: %v %+v", rs, err)
	}
}

func TestRuleMatching(t *testing.T) {
	rs, err := transcript.ParseRules([]byte(`rules:
  - kind: element-field
    field: len
    phase: channel-start
    channels: [101]
    reason: the one
  - where: "context:er*"
    reason: the other
  - where: irq
    a: "^irq vector=0$"
    reason: the shared vector
  - kind: register-value
    field: MHICFG
    a: "^0x2040280$"
    b: "^0x2060280$"
    reason: the table
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		d    transcript.Difference
		want string
	}{
		{transcript.Difference{Kind: transcript.DiffElementField, Field: "len", Phase: "channel-start#2", Where: "element:ch101"}, "the one"},
		{transcript.Difference{Kind: transcript.DiffElementField, Field: "len", Phase: "channel-start", Where: "event:er2/ch101"}, "the one"},
		{transcript.Difference{Kind: transcript.DiffElementField, Field: "len", Phase: "channel-start", Where: "cmd", A: "element chan=101 type=START_CHAN_CMD"}, "the one"},
		{transcript.Difference{Kind: transcript.DiffElementField, Field: "len", Phase: "channel-start", Where: "element:ch100"}, ""},
		{transcript.Difference{Kind: transcript.DiffElementField, Field: "len", Phase: "channel-startx", Where: "element:ch101"}, ""},
		{transcript.Difference{Kind: transcript.DiffElementField, Field: "flags", Phase: "channel-start", Where: "element:ch101"}, ""},
		{transcript.Difference{Kind: transcript.DiffContextField, Field: "msivec", Phase: "power-up", Where: "context:er1"}, "the other"},
		{transcript.Difference{Kind: transcript.DiffContextField, Field: "msivec", Phase: "power-up", Where: "context:ch1"}, ""},
		{transcript.Difference{Kind: transcript.DiffMissing, Phase: "data", Where: "irq", A: "irq vector=0"}, "the shared vector"},
		{transcript.Difference{Kind: transcript.DiffMissing, Phase: "data", Where: "irq", A: "irq vector=10"}, ""},
		{transcript.Difference{Kind: transcript.DiffExtra, Phase: "data", Where: "irq", B: "irq vector=0"}, ""},
		{transcript.Difference{Kind: transcript.DiffRegisterValue, Field: "MHICFG", Where: "reg-write", A: "0x2040280", B: "0x2060280"}, "the table"},
		{transcript.Difference{Kind: transcript.DiffRegisterValue, Field: "MHICFG", Where: "reg-write", A: "0x2040280", B: "0x2070280"}, ""},
	} {
		if got := rs.Explain(tc.d); got != tc.want {
			t.Errorf("%+v: explained by %q, want %q", tc.d, got, tc.want)
		}
	}
	var none *transcript.Rules
	if none.Explain(transcript.Difference{Kind: transcript.DiffMissing}) != "" {
		t.Fatal("nil rules explained something")
	}
}

// DMA maps are compared between two transcripts that have them, and left
// out against one without (the in-process transport has none).
func TestDMAMapsCompared(t *testing.T) {
	a, _, _ := transcripts(t)
	base := read(t, a)
	withMap := func(size string) []transcript.Record {
		recs := read(t, a)
		m := transcript.Record{Seq: 0, Kind: transcript.KindDMAMap, Fields: map[string]string{"size": size, "flags": "0x3"}}
		return append([]transcript.Record{m}, recs...)
	}
	if res := transcript.Diff(base, withMap("0x4000000"), nil); len(res.Differences) != 0 {
		t.Fatalf("maps on one side only:\n%s", report(res))
	}
	res := transcript.Diff(withMap("0x4000000"), withMap("0x8000000"), nil)
	if len(res.Differences) != 1 || res.Differences[0].Kind != transcript.DiffDMAField || res.Differences[0].Field != "size" {
		t.Fatalf("map sizes differ:\n%s", report(res))
	}
}
