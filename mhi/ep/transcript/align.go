package transcript

import "strings"

// maxLCSCells bounds the table of the longest-common-subsequence
// alignment; longer groups are aligned position by position.
const maxLCSCells = 4 << 20

// lcs marks the items of a and b that belong to a longest common
// subsequence of their keys.
func lcs(a, b []item) (inA, inB []bool) {
	inA, inB = make([]bool, len(a)), make([]bool, len(b))
	if len(a)*len(b) > maxLCSCells {
		for i := range min(len(a), len(b)) {
			inA[i] = a[i].key == b[i].key
			inB[i] = inA[i]
		}
		return inA, inB
	}
	w := len(b) + 1
	t := make([]int32, (len(a)+1)*w)
	for i := len(a) - 1; i >= 0; i-- {
		for j := len(b) - 1; j >= 0; j-- {
			if a[i].key == b[j].key {
				t[i*w+j] = t[(i+1)*w+j+1] + 1
			} else {
				t[i*w+j] = max(t[(i+1)*w+j], t[i*w+j+1])
			}
		}
	}
	for i, j := 0, 0; i < len(a) && j < len(b); {
		switch {
		case a[i].key == b[j].key:
			inA[i], inB[j] = true, true
			i++
			j++
		case t[(i+1)*w+j] >= t[i*w+j+1]:
			i++
		default:
			j++
		}
	}
	return inA, inB
}

// unmatched returns the items not marked.
func unmatched(items []item, marked []bool) []item {
	var out []item
	for i, it := range items {
		if !marked[i] {
			out = append(out, it)
		}
	}
	return out
}

// orderKind is the kind of a record found elsewhere in the order of its
// stream.
func orderKind(stream string) DiffKind {
	switch {
	case stream == "reg-write":
		return DiffRegisterOrder
	case stream == "cmd":
		return DiffCommandOrder
	case strings.HasPrefix(stream, "doorbell:"):
		return DiffDoorbellOrder
	}
	return DiffStateOrder
}

// identity is what two records must share to be compared field by field.
func identity(rec *Record) string {
	if c, ok := rec.Fields["for"]; ok {
		// A command's doorbell or completion (commandsRung).
		return string(rec.Kind) + " " + rec.Name + " for " + c
	}
	switch rec.Kind {
	case KindRegWrite, KindRegRead, KindDoorbell, KindContext:
		return string(rec.Kind) + " " + rec.Name
	case KindElement, KindEvent:
		if chn, ok := rec.Fields["chan"]; ok && rec.Name == "cmd" {
			// A command for another channel is another command.
			return string(rec.Kind) + " " + rec.Fields["type"] + " chan=" + chn
		}
		return string(rec.Kind) + " " + rec.Fields["type"]
	}
	return string(rec.Kind)
}

// fieldKind is the kind of a difference in a field of rec.
func fieldKind(rec *Record) DiffKind {
	switch rec.Kind {
	case KindElement:
		return DiffElementField
	case KindEvent:
		return DiffEventField
	case KindDoorbell:
		return DiffDoorbellField
	case KindContext:
		return DiffContextField
	case KindRegWrite:
		return DiffRegisterValue
	case KindDMAMap, KindDMAUnmap:
		return DiffDMAField
	}
	return DiffStateValue
}

// take removes and returns the first item of *list that ok accepts.
func take(list *[]item, ok func(item) bool) (item, bool) {
	for j, it := range *list {
		if ok(it) {
			*list = append((*list)[:j], (*list)[j+1:]...)
			return it, true
		}
	}
	return item{}, false
}

// compareSequences aligns the records of one stream and phase in order:
// what is not in a common subsequence is a record moved (the same record
// elsewhere), a record changed (one of the same identity with other
// fields), or a record missing or extra.
func compareSequences(k groupKey, a, b []item) []Difference {
	inA, inB := lcs(a, b)
	ua, ub := unmatched(a, inA), unmatched(b, inB)
	var ds []Difference
	var restA []item
	for _, x := range ua {
		if y, ok := take(&ub, func(y item) bool { return y.key == x.key }); ok {
			ds = append(ds, Difference{Kind: orderKind(k.stream), Phase: k.phase, Where: k.stream,
				Field: identity(x.rec), A: x.rec.String(), B: y.rec.String()})
			continue
		}
		restA = append(restA, x)
	}
	var missing []item
	for _, x := range restA {
		y, ok := take(&ub, func(y item) bool { return identity(y.rec) == identity(x.rec) })
		if !ok {
			missing = append(missing, x)
			continue
		}
		ds = append(ds, fieldDiffs(k, x.rec, y.rec)...)
	}
	return append(ds, missingExtra(k, missing, ub)...)
}

// fieldDiffs reports each field in which two records of the same identity
// differ (a register's value as the register).
func fieldDiffs(k groupKey, a, b *Record) []Difference {
	kind := fieldKind(a)
	if kind == DiffRegisterValue {
		return []Difference{{Kind: kind, Phase: k.phase, Where: k.stream, Field: a.Name,
			A: a.Fields["value"], B: b.Fields["value"]}}
	}
	var ds []Difference
	for _, f := range unionKeys(a.Fields, b.Fields) {
		if k.stream == "cmd" && (f == "slot" || f == "cmd") {
			continue // positions, left out of the comparison (classify)
		}
		if a.Fields[f] != b.Fields[f] {
			ds = append(ds, Difference{Kind: kind, Phase: k.phase, Where: k.stream, Field: f,
				A: a.Fields[f], B: b.Fields[f]})
		}
	}
	return ds
}

// compareShapes compares the data records of one stream by their shape:
// which distinct records occur, not how many. A shape of A that differs
// from one of B in a single field is reported as that field's difference.
func compareShapes(k groupKey, a, b []item) []Difference {
	onlyA, onlyB := distinctOnly(a, b)
	var ds []Difference
	var missing []item
	for _, x := range onlyA {
		var field string
		y, ok := take(&onlyB, func(y item) bool {
			field = singleField(x.rec, y.rec)
			return field != ""
		})
		if !ok {
			missing = append(missing, x)
			continue
		}
		ds = append(ds, Difference{Kind: fieldKind(x.rec), Phase: k.phase, Where: k.stream, Field: field,
			A: x.rec.Fields[field], B: y.rec.Fields[field]})
	}
	return append(ds, missingExtra(k, missing, onlyB)...)
}

// singleField names the one shape field in which a and b differ, or ""
// when they are of different identity or differ in more (or none).
// Interrupts, whose one field is the vector, are never paired.
func singleField(a, b *Record) string {
	if a.Kind == KindIRQ || identity(a) != identity(b) {
		return ""
	}
	diff := ""
	for _, f := range unionKeys(a.Fields, b.Fields) {
		if f == "slot" || f == "len" && a.Kind == KindEvent || f == "tre" {
			continue // not part of the shape
		}
		if a.Fields[f] != b.Fields[f] {
			if diff != "" {
				return ""
			}
			diff = f
		}
	}
	return diff
}
