package transcript

import (
	"bufio"
	"fmt"
	"io"
	"slices"
	"strings"
)

// DiffKind is the kind of a Difference.
type DiffKind string

// The kinds of Difference.
const (
	DiffRegisterOrder DiffKind = "register-order" // the same write, elsewhere in the phase's order
	DiffRegisterValue DiffKind = "register-value" // a register written with another value
	DiffContextField  DiffKind = "context-field"  // a context field other than the ring length
	DiffRingSize      DiffKind = "ring-size"      // a context's ring length
	DiffElementField  DiffKind = "element-field"  // a field of a posted element (TRE, command)
	DiffEventField    DiffKind = "event-field"    // a field of an event the device posted
	DiffDoorbellField DiffKind = "doorbell-field" // a doorbell's slot or half order
	DiffStateValue    DiffKind = "state-value"    // another state or EE at the same point
	DiffCommandOrder  DiffKind = "command-order"  // the same command or completion, elsewhere
	DiffStateOrder    DiffKind = "state-order"    // the same state change, elsewhere
	DiffDoorbellOrder DiffKind = "doorbell-order" // the same doorbell, elsewhere
	DiffDMAField      DiffKind = "dma-field"      // a DMA map's size or flags
	DiffMissing       DiffKind = "missing"        // in A only
	DiffExtra         DiffKind = "extra"          // in B only
)

// diffKinds are the kinds a rule may name.
var diffKinds = map[DiffKind]bool{
	DiffRegisterOrder: true, DiffRegisterValue: true, DiffContextField: true, DiffRingSize: true,
	DiffElementField: true, DiffEventField: true, DiffDoorbellField: true, DiffStateValue: true,
	DiffCommandOrder: true, DiffStateOrder: true, DiffDoorbellOrder: true, DiffDMAField: true,
	DiffMissing: true, DiffExtra: true,
}

// Difference is one way in which transcript B differs from A.
type Difference struct {
	Kind DiffKind `json:"kind"`
	// Phase is where it is (PhaseData for the data channels' shapes).
	Phase string `json:"phase"`
	// Where is the stream: "reg-write", "reg-read", "cmd", "state",
	// "context:ch100", "element:ch101", "doorbell:er1", "event:er2/ch101",
	// "irq".
	Where string `json:"where"`
	// Field names the register or field that differs ("" for missing and
	// extra records).
	Field string `json:"field,omitempty"`
	// A and B are what each transcript has ("" where it has nothing).
	A string `json:"a"`
	B string `json:"b"`
	// ExplainedBy is the reason of the rule that explains the difference,
	// or "".
	ExplainedBy string `json:"explained_by"`
}

// Result is what Diff found.
type Result struct {
	// Compared is the number of records compared: the larger of the two
	// transcripts' counts of records that enter the comparison.
	Compared int `json:"compared"`
	// Differences lists every difference, explained or not.
	Differences []Difference `json:"differences"`
	// Unexplained counts the differences no rule explains.
	Unexplained int `json:"unexplained"`
}

// groupKey names a group of items compared together.
type groupKey struct{ phase, stream string }

// group splits items into groups, in the order of their first item.
func group(items []item, order *[]groupKey, groups map[groupKey][]item) {
	for _, it := range items {
		k := groupKey{it.phase, it.stream}
		if _, ok := groups[k]; !ok {
			groups[k] = nil
			*order = append(*order, k)
		}
		groups[k] = append(groups[k], it)
	}
}

// Diff compares transcript b with transcript a and explains what it can
// with rules (nil: nothing is explained).
func Diff(a, b []Record, rules *Rules) Result {
	ia, ib := prepare(a), prepare(b)
	if !hasStream(ia, "dma") || !hasStream(ib, "dma") {
		// A transport without DMA maps (in process) reports none: maps
		// are compared only between two that have them.
		ia, ib = dropStream(ia, "dma"), dropStream(ib, "dma")
	}
	var order []groupKey
	ga, gb := map[groupKey][]item{}, map[groupKey][]item{}
	group(ia, &order, ga)
	var orderB []groupKey
	group(ib, &orderB, gb)
	for _, k := range orderB {
		if _, ok := ga[k]; !ok {
			order = append(order, k)
		}
	}
	res := Result{Compared: max(len(ia), len(ib)), Differences: []Difference{}}
	for _, k := range order {
		var ds []Difference
		switch {
		case k.phase == PhaseData || k.phase == PhaseDMA:
			ds = compareShapes(k, ga[k], gb[k])
		case k.stream == "reg-read":
			ds = compareSets(k, ga[k], gb[k])
		case strings.HasPrefix(k.stream, "context:"):
			ds = compareContexts(k, ga[k], gb[k])
		default:
			ds = compareSequences(k, ga[k], gb[k])
		}
		res.Differences = append(res.Differences, ds...)
	}
	for i := range res.Differences {
		d := &res.Differences[i]
		d.ExplainedBy = rules.Explain(*d)
		if d.ExplainedBy == "" {
			res.Unexplained++
		}
	}
	return res
}

// hasStream reports whether an item of items is in stream.
func hasStream(items []item, stream string) bool {
	return slices.ContainsFunc(items, func(it item) bool { return it.stream == stream })
}

// dropStream returns items without those of stream.
func dropStream(items []item, stream string) []item {
	return slices.DeleteFunc(items, func(it item) bool { return it.stream == stream })
}

// missingExtra reports the items only a has as missing, those only b has
// as extra.
func missingExtra(k groupKey, a, b []item) []Difference {
	var ds []Difference
	for _, it := range a {
		ds = append(ds, Difference{Kind: DiffMissing, Phase: k.phase, Where: k.stream, A: it.rec.String()})
	}
	for _, it := range b {
		ds = append(ds, Difference{Kind: DiffExtra, Phase: k.phase, Where: k.stream, B: it.rec.String()})
	}
	return ds
}

// compareSets compares which keys occur, not how often nor in which order
// (the host's register reads: its polls depend on timing).
func compareSets(k groupKey, a, b []item) []Difference {
	onlyA, onlyB := distinctOnly(a, b)
	return missingExtra(k, onlyA, onlyB)
}

// distinctOnly returns the distinct keys of a that b lacks and those of b
// that a lacks, each by its first item, in key order.
func distinctOnly(a, b []item) (onlyA, onlyB []item) {
	ka, kb := uniqueKeys(a), uniqueKeys(b)
	for key := range ka {
		if _, ok := kb[key]; ok {
			delete(ka, key)
			delete(kb, key)
		}
	}
	return sortedItems(ka), sortedItems(kb)
}

// uniqueKeys maps each key of items to its first item.
func uniqueKeys(items []item) map[string]item {
	m := map[string]item{}
	for _, it := range items {
		if _, ok := m[it.key]; !ok {
			m[it.key] = it
		}
	}
	return m
}

// sortedItems returns the items of m in key order.
func sortedItems(m map[string]item) []item {
	out := make([]item, 0, len(m))
	for _, k := range sortedKeys(m) {
		out = append(out, m[k])
	}
	return out
}

// compareContexts compares the contexts of one ring read in one phase,
// the first with the first: field by field.
func compareContexts(k groupKey, a, b []item) []Difference {
	n := min(len(a), len(b))
	var ds []Difference
	for i := range n {
		fa, fb := a[i].rec.Fields, b[i].rec.Fields
		for _, f := range unionKeys(fa, fb) {
			if fa[f] == fb[f] {
				continue
			}
			kind := DiffContextField
			if f == "rlen" {
				kind = DiffRingSize
			}
			ds = append(ds, Difference{Kind: kind, Phase: k.phase, Where: k.stream, Field: f, A: fa[f], B: fb[f]})
		}
	}
	return append(ds, missingExtra(k, a[n:], b[n:])...)
}

// unionKeys returns the keys of a and b, in order.
func unionKeys(a, b map[string]string) []string {
	keys := sortedKeys(a)
	for _, k := range sortedKeys(b) {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

// WriteText writes res for a reader: one line per difference, unexplained
// ones first, then a summary line.
func WriteText(w io.Writer, res Result) error {
	bw := bufio.NewWriter(w)
	for _, explained := range []bool{false, true} {
		for _, d := range res.Differences {
			if (d.ExplainedBy != "") != explained {
				continue
			}
			status := "unexplained"
			if explained {
				status = "explained"
			}
			fmt.Fprintf(bw, "%-11s %-14s %-15s %s", status, d.Kind, d.Phase, d.Where)
			if d.Field != "" {
				fmt.Fprintf(bw, " %s", d.Field)
			}
			fmt.Fprintf(bw, ": A %q, B %q\n", d.A, d.B)
			if explained {
				fmt.Fprintf(bw, "            (%s)\n", strings.Join(strings.Fields(d.ExplainedBy), " "))
			}
		}
	}
	fmt.Fprintf(bw, "compared %d records: %d differences, %d unexplained\n",
		res.Compared, len(res.Differences), res.Unexplained)
	return bw.Flush()
}
