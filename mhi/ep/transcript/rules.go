package transcript

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// ErrRules is wrapped by the errors of ParseRules and LoadRules.
var ErrRules = errors.New("transcript: bad rules")

// Rule explains the differences it matches. Every attribute but Reason is
// a condition; one left empty matches anything.
type Rule struct {
	// Kind is the difference's kind.
	Kind DiffKind `yaml:"kind"`
	// Field is the field or register that differs.
	Field string `yaml:"field"`
	// Phase is the phase; "channel-start" also matches "channel-start#2".
	Phase string `yaml:"phase"`
	// Where is a path.Match pattern on the difference's stream
	// ("element:ch*").
	Where string `yaml:"where"`
	// Channels lists the channels it applies to: the channel the
	// difference's stream names (element:ch101, event:er2/ch101) or its
	// record's chan field.
	Channels []int `yaml:"channels"`
	// A and B are regular expressions the difference's A and B (a
	// record's text, or a field's value) must match: "^0$", "^irq
	// vector=0$"; one with A only never matches a difference that has no A
	// (an extra record).
	A string `yaml:"a"`
	B string `yaml:"b"`
	// Reason says why the difference is expected.
	Reason string `yaml:"reason"`
}

// Rules are the explained differences (docs/transcript-rules.yaml).
type Rules struct {
	Rules []Rule `yaml:"rules"`
}

// LoadRules reads the rules file at path.
func LoadRules(file string) (*Rules, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("transcript: rules: %w", err)
	}
	rs, err := ParseRules(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return rs, nil
}

// ParseRules parses a rules file: YAML, a list "rules" of Rule; unknown
// keys, unknown kinds, bad patterns and rules without a reason are errors.
func ParseRules(b []byte) (*Rules, error) {
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	var rs Rules
	if err := dec.Decode(&rs); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: %w", ErrRules, err)
	}
	for i, r := range rs.Rules {
		switch {
		case strings.TrimSpace(r.Reason) == "":
			return nil, fmt.Errorf("%w: rule %d has no reason", ErrRules, i+1)
		case r.Kind != "" && !diffKinds[r.Kind]:
			return nil, fmt.Errorf("%w: rule %d: unknown kind %q", ErrRules, i+1, r.Kind)
		}
		if _, err := path.Match(r.Where, ""); err != nil {
			return nil, fmt.Errorf("%w: rule %d: where %q: %w", ErrRules, i+1, r.Where, err)
		}
		for _, re := range []string{r.A, r.B} {
			if _, err := regexp.Compile(re); err != nil {
				return nil, fmt.Errorf("%w: rule %d: %w", ErrRules, i+1, err)
			}
		}
	}
	return &rs, nil
}

// Explain returns the reason of the first rule that matches d, or "". A
// nil Rules explains nothing.
func (rs *Rules) Explain(d Difference) string {
	if rs == nil {
		return ""
	}
	for _, r := range rs.Rules {
		if r.matches(d) {
			return r.Reason
		}
	}
	return ""
}

func (r Rule) matches(d Difference) bool {
	if r.Kind != "" && r.Kind != d.Kind || r.Field != "" && r.Field != d.Field {
		return false
	}
	if r.Phase != "" && r.Phase != d.Phase && !strings.HasPrefix(d.Phase, r.Phase+"#") {
		return false
	}
	if r.Where != "" {
		if ok, _ := path.Match(r.Where, d.Where); !ok {
			return false
		}
	}
	if !matchesText(r.A, d.A) || !matchesText(r.B, d.B) {
		return false
	}
	if len(r.Channels) == 0 {
		return true
	}
	ch, ok := channelOf(d)
	if !ok {
		return false
	}
	for _, c := range r.Channels {
		if c == ch {
			return true
		}
	}
	return false
}

var (
	streamChannel = regexp.MustCompile(`(?:^|[:/])ch([0-9]+)$`)
	fieldChannel  = regexp.MustCompile(`\bchan=([0-9]+)\b`)
)

// matchesText reports whether text matches the regular expression re ("":
// anything). ParseRules has checked re; a bad one matches nothing.
func matchesText(re, text string) bool {
	if re == "" {
		return true
	}
	ok, err := regexp.MatchString(re, text)
	return err == nil && ok
}

// channelOf finds the channel a difference is about: in its stream, or in
// the chan field of its records.
func channelOf(d Difference) (int, bool) {
	for _, m := range [][]string{streamChannel.FindStringSubmatch(d.Where),
		fieldChannel.FindStringSubmatch(d.A), fieldChannel.FindStringSubmatch(d.B)} {
		if m != nil {
			n, err := strconv.Atoi(m[1])
			return n, err == nil
		}
	}
	return 0, false
}
