package transcript

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
)

// Limits of what Read accepts: a transcript is an untrusted file.
const (
	// MaxLine is the longest line, in bytes.
	MaxLine = 64 << 10
	// MaxRecords is the largest number of records.
	MaxRecords = 20_000_000
	// MaxFields is the largest number of fields of one record.
	MaxFields = 64
	// MaxString is the longest name, field name or field value.
	MaxString = 256
)

// Read reads a transcript: one Record per line as JSON (blank lines are
// skipped), returned in the order of their sequence numbers. Errors wrap
// ErrMalformed (with the line) or the reader's error.
func Read(rd io.Reader) ([]Record, error) {
	sc := bufio.NewScanner(rd)
	sc.Buffer(make([]byte, 0, 4096), MaxLine)
	var recs []Record
	line := 0
	for sc.Scan() {
		line++
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		if len(recs) == MaxRecords {
			return nil, fmt.Errorf("%w: more than %d records", ErrMalformed, MaxRecords)
		}
		rec, err := parseLine(b)
		if err != nil {
			return nil, fmt.Errorf("%w: line %d: %w", ErrMalformed, line, err)
		}
		recs = append(recs, rec)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("%w: line %d longer than %d bytes", ErrMalformed, line+1, MaxLine)
		}
		return nil, fmt.Errorf("transcript: %w", err)
	}
	slices.SortStableFunc(recs, func(a, b Record) int {
		switch {
		case a.Seq < b.Seq:
			return -1
		case a.Seq > b.Seq:
			return 1
		}
		return 0
	})
	for i := 1; i < len(recs); i++ {
		if recs[i].Seq == recs[i-1].Seq {
			return nil, fmt.Errorf("%w: sequence number %d twice", ErrMalformed, recs[i].Seq)
		}
	}
	return recs, nil
}

// parseLine decodes and checks one record.
func parseLine(b []byte) (Record, error) {
	var rec Record
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rec); err != nil {
		return rec, err
	}
	if dec.More() {
		return rec, errors.New("more than one JSON value")
	}
	if !knownKinds[rec.Kind] {
		return rec, fmt.Errorf("unknown kind %q", rec.Kind)
	}
	if len(rec.Name) > MaxString {
		return rec, fmt.Errorf("name longer than %d bytes", MaxString)
	}
	if len(rec.Fields) > MaxFields {
		return rec, fmt.Errorf("%d fields, at most %d", len(rec.Fields), MaxFields)
	}
	for k, v := range rec.Fields {
		if k == "" || len(k) > MaxString || len(v) > MaxString {
			return rec, fmt.Errorf("field %.20q: empty or longer than %d bytes", k, MaxString)
		}
	}
	return rec, nil
}
