// Package sysfs is gomhi's control plane: one tree of attributes — the
// device's MRU, MTU, state, execution environment, channels and counters —
// modelled on /sys/bus/mhi/devices and the MHI debugfs. Each attribute has a
// type, validation and permissions. The same tree is served as a FUSE file
// tree (package sysfs/fusefs) and as the generic-netlink family "mhi"
// (package sysfs/genl); neither holds state of its own. The name is the
// model's: this is gomhi's own tree, never the kernel's /sys (which
// pcigeneric reads and writes to find and bind modems).
package sysfs

import (
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Sentinel errors. Servers map them to EINVAL, EACCES/EPERM, ENOENT, EBUSY.
var (
	// ErrInvalid: the value is malformed or out of range.
	ErrInvalid = errors.New("sysfs: invalid value")
	// ErrReadOnly: the attribute cannot be written.
	ErrReadOnly = errors.New("sysfs: attribute is read-only")
	// ErrWriteOnly: the attribute cannot be read.
	ErrWriteOnly = errors.New("sysfs: attribute is write-only")
	// ErrNotFound: no attribute or directory at that path.
	ErrNotFound = errors.New("sysfs: no such attribute")
	// ErrBusy: the device cannot apply the value in its current state.
	ErrBusy = errors.New("sysfs: device busy")
)

// Type is an attribute's value type.
type Type int

// Attribute types.
const (
	Uint   Type = iota // unsigned decimal integer
	String             // text
	Action             // write-only trigger: writing "1" performs it
)

var typeNames = []string{"uint", "string", "action"}

// String returns "uint", "string" or "action".
func (t Type) String() string {
	if int(t) < len(typeNames) {
		return typeNames[t]
	}
	return fmt.Sprintf("type(%d)", int(t))
}

// Attr is one attribute: a file of the tree.
type Attr struct {
	Name string
	Type Type
	// Mode holds the permission bits (0444 read-only, 0644 read-write,
	// 0200 write-only), as sysfs shows them.
	Mode fs.FileMode
	// Min and Max bound a writable Uint attribute (inclusive).
	Min, Max uint64
	// Doc says what the attribute is, for the documentation; the
	// Prometheus exposition uses it as the HELP text.
	Doc string
	// Metric says whether and how the Prometheus exposition (Collector)
	// shows a Uint attribute: not at all (NotAMetric), as a gauge or as a
	// counter.
	Metric MetricKind
	// Unit is the unit of the value: none (a count), UnitBytes or
	// UnitMilliseconds (exposed in seconds, Prometheus's base unit).
	Unit Unit
	// MetricName, if set, is the name part the exposition uses instead of
	// Name (where Name would mislead: tx_agg_closed_bytes counts
	// aggregates closed by the byte limit, not bytes).
	MetricName string

	get func() (string, error)
	set func(string) error
}

// MetricKind is how the Prometheus exposition shows an attribute.
type MetricKind int

// Metric kinds.
const (
	NotAMetric MetricKind = iota // not exposed
	Gauge                        // a value that goes up and down
	Counter                      // a count that only grows while the process runs
)

// Unit is the unit of an attribute's value.
type Unit string

// Units. A count has none.
const (
	UnitBytes        Unit = "bytes"
	UnitMilliseconds Unit = "milliseconds"
)

// AsMetric marks a Uint attribute as exposed to Prometheus as kind, its
// value in unit, and returns it.
func (a *Attr) AsMetric(kind MetricKind, unit Unit) *Attr {
	a.Metric, a.Unit = kind, unit
	return a
}

// Readable reports whether the attribute can be read.
func (a *Attr) Readable() bool { return a.Mode&0o444 != 0 }

// Writable reports whether the attribute can be written.
func (a *Attr) Writable() bool { return a.Mode&0o222 != 0 }

// Read returns the attribute's current value as text, without a trailing
// newline (servers add one, as sysfs does).
func (a *Attr) Read() (string, error) {
	if !a.Readable() || a.get == nil {
		return "", fmt.Errorf("%s: %w", a.Name, ErrWriteOnly)
	}
	return a.get()
}

// Write parses and applies a value. Surrounding white space (the newline of
// `echo`) is ignored. Errors wrap ErrReadOnly, ErrInvalid or ErrBusy and
// name the valid range.
func (a *Attr) Write(v string) error {
	if !a.Writable() || a.set == nil {
		return fmt.Errorf("%s: %w", a.Name, ErrReadOnly)
	}
	v = strings.TrimSpace(v)
	switch a.Type {
	case Uint:
		n, err := strconv.ParseUint(v, 0, 64)
		if err != nil {
			return fmt.Errorf("%s: %q is not an unsigned integer (valid range %d..%d): %w", a.Name, v, a.Min, a.Max, ErrInvalid)
		}
		if n < a.Min || n > a.Max {
			return fmt.Errorf("%s: %d outside the valid range %d..%d: %w", a.Name, n, a.Min, a.Max, ErrInvalid)
		}
	case Action:
		if v != "1" {
			return fmt.Errorf("%s: write 1 to trigger, not %q: %w", a.Name, v, ErrInvalid)
		}
	}
	return a.set(v)
}

// Dir is a directory of the tree.
type Dir struct {
	Name  string
	mu    sync.RWMutex
	attrs []*Attr
	dirs  []*Dir
}

// Attrs returns the directory's attributes, sorted by name.
func (d *Dir) Attrs() []*Attr {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return slices.Clone(d.attrs)
}

// Dirs returns the subdirectories, sorted by name.
func (d *Dir) Dirs() []*Dir {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return slices.Clone(d.dirs)
}

// Attr returns the attribute called name.
func (d *Dir) Attr(name string) (*Attr, bool) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	for _, a := range d.attrs {
		if a.Name == name {
			return a, true
		}
	}
	return nil, false
}

// Dir returns the subdirectory called name.
func (d *Dir) Dir(name string) (*Dir, bool) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	for _, s := range d.dirs {
		if s.Name == name {
			return s, true
		}
	}
	return nil, false
}

// Mkdir returns the subdirectory called name, creating it if needed.
func (d *Dir) Mkdir(name string) *Dir {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, s := range d.dirs {
		if s.Name == name {
			return s
		}
	}
	s := &Dir{Name: name}
	d.dirs = append(d.dirs, s)
	slices.SortFunc(d.dirs, func(a, b *Dir) int { return strings.Compare(a.Name, b.Name) })
	return s
}

// Add adds attributes to the directory, replacing any of the same name.
func (d *Dir) Add(attrs ...*Attr) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, a := range attrs {
		d.attrs = slices.DeleteFunc(d.attrs, func(x *Attr) bool { return x.Name == a.Name })
		d.attrs = append(d.attrs, a)
	}
	slices.SortFunc(d.attrs, func(a, b *Attr) int { return strings.Compare(a.Name, b.Name) })
}

// Remove removes the subdirectory called name.
func (d *Dir) Remove(name string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.dirs = slices.DeleteFunc(d.dirs, func(x *Dir) bool { return x.Name == name })
}

// Tree is the attribute tree. Its root holds "devices".
type Tree struct {
	Root *Dir

	dumps dumpSources // RAM-dump access for the servers (rddm.go)
}

// NewTree returns an empty tree with a "devices" directory.
func NewTree() *Tree {
	t := &Tree{Root: &Dir{}}
	t.Root.Mkdir("devices")
	return t
}

// Lookup finds the attribute at a slash-separated path such as
// "devices/mhi0/mru".
func (t *Tree) Lookup(path string) (*Attr, error) {
	dir, name := pathSplit(path)
	d, err := t.LookupDir(dir)
	if err != nil {
		return nil, err
	}
	a, ok := d.Attr(name)
	if !ok {
		return nil, fmt.Errorf("%s: %w", path, ErrNotFound)
	}
	return a, nil
}

// LookupDir finds the directory at a slash-separated path ("" is the root).
func (t *Tree) LookupDir(path string) (*Dir, error) {
	d := t.Root
	for _, part := range strings.Split(strings.Trim(path, "/"), "/") {
		if part == "" {
			continue
		}
		s, ok := d.Dir(part)
		if !ok {
			return nil, fmt.Errorf("%s: %w", path, ErrNotFound)
		}
		d = s
	}
	return d, nil
}

// Get reads the attribute at path.
func (t *Tree) Get(path string) (string, error) {
	a, err := t.Lookup(path)
	if err != nil {
		return "", err
	}
	return a.Read()
}

// Set writes the attribute at path.
func (t *Tree) Set(path, value string) error {
	a, err := t.Lookup(path)
	if err != nil {
		return err
	}
	return a.Write(value)
}

// Walk calls fn for every attribute with its path, in sorted order.
func (t *Tree) Walk(fn func(path string, a *Attr)) {
	var walk func(prefix string, d *Dir)
	walk = func(prefix string, d *Dir) {
		for _, a := range d.Attrs() {
			fn(prefix+a.Name, a)
		}
		for _, s := range d.Dirs() {
			walk(prefix+s.Name+"/", s)
		}
	}
	walk("", t.Root)
}

func pathSplit(p string) (dir, name string) {
	p = strings.Trim(p, "/")
	i := strings.LastIndexByte(p, '/')
	if i < 0 {
		return "", p
	}
	return p[:i], p[i+1:]
}

// UintAttr builds a Uint attribute. A nil set makes it read-only (0444);
// with set it is read-write (0644) and values outside [min, max] are
// rejected before set is called.
func UintAttr(name, doc string, get func() uint64, set func(uint64) error, min, max uint64) *Attr {
	a := &Attr{Name: name, Type: Uint, Mode: 0o444, Doc: doc, Min: min, Max: max,
		get: func() (string, error) { return strconv.FormatUint(get(), 10), nil }}
	if set != nil {
		a.Mode = 0o644
		a.set = func(v string) error {
			n, _ := strconv.ParseUint(v, 0, 64) // Write validated it
			return set(n)
		}
	}
	return a
}

// StringAttr builds a read-only String attribute.
func StringAttr(name, doc string, get func() string) *Attr {
	return &Attr{Name: name, Type: String, Mode: 0o444, Doc: doc,
		get: func() (string, error) { return get(), nil }}
}

// ActionAttr builds a write-only Action attribute (0200).
func ActionAttr(name, doc string, do func() error) *Attr {
	return &Attr{Name: name, Type: Action, Mode: 0o200, Doc: doc,
		set: func(string) error { return do() }}
}
