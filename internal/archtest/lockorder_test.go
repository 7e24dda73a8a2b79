package archtest

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"slices"
	"strings"
	"testing"
)

// lockPackages are the packages whose lock order TestLockOrder checks:
// the host stack, the network device on it, and the mock modem (with any
// package split out of it).
var lockPackages = []string{"./mhi", "./mhinet", "./mhi/ep/..."}

// TestLockOrder checks every lock nesting in lockPackages against the
// lock order their sources declare.
//
// The order is declared where the locks are, in `//` comment lines of the
// form
//
//	// lockorder: Controller.life → Controller.chanOps → Channel.mu
//
// each a chain of locks named by type and field ("pkg.Type.field" for a
// lock of another analysed package; the arrows are optional): a lock of
// the chain may be held while a later one is taken, never the other way
// round. The chains together give a partial order (their transitive
// closure). The test fails when a chain names something that is no mutex
// field, when the chains make a cycle, and when a mutex field of the
// packages is in no chain (a lock that nests with nothing gets a line of
// its name alone), so that the doc and the check cannot drift apart.
//
// The test parses and type-checks the packages' non-test files (go/ast,
// go/types) and walks every function and function literal in statement
// order, tracking which locks are held: `x.Lock()` and `x.RLock()` take
// one, `x.Unlock()` and `x.RUnlock()` release it, a deferred unlock holds
// it to the function's end (TryLock takes it without waiting, so without
// a nesting). A lock is named by the type whose struct declares the field
// and the field's name, so every Channel's mu is "mhi.Channel.mu". After
// a branch a lock is held if any path that falls through may hold it;
// loops are walked twice. Calls to functions and methods of the analysed
// packages are followed at any depth, also from one analysed package into
// another (mhinet into mhi): what the callee takes counts as taken at the
// call, and what it leaves held or releases (a helper that locks for its
// caller, a "…Locked" function that drops the caller's lock) changes what
// the caller holds after it; a function whose last result is an error and
// that returns holding a lock only with a nil error (txPath.begin) is not
// taken to hold it in the caller's `if err != nil` branch. A call through
// an interface follows every analysed type that implements it
// (class-hierarchy analysis). Every lock taken while another is held (a
// nesting) must come after it in the declared order; the test fails,
// naming the function, the two locks, where each is taken and the calls
// in between, when the order puts them the other way round, when no chain
// orders them, and when a lock is taken while a lock of the same name is
// held (the same lock again, or a second object of the same type: no
// order between two of them can be declared). With -v it lists the
// chains and every nesting it found.
//
// What it cannot see, and the declared order must therefore state by
// hand (and a reviewer check):
//   - calls of function values: the handlers and callbacks a client hands
//     in (mhi.Channel's completion handler, the status listeners,
//     mhinet's Receiver, RxPool.onPut, the Modem's subscribers, the MBIM
//     and QMI PacketStatistics), method values, and functions held in
//     variables other than a literal assigned in the same package; their
//     locks are taken under whatever the caller holds, unseen;
//   - calls into packages that are not analysed, and interface calls whose
//     implementations live there (mhi.Transport, ep.HostMemory);
//   - goroutines: `go f()` starts f holding nothing, which is right, but
//     waits on another goroutine while holding a lock (a channel send or
//     receive, WaitGroup.Wait, a sync.Cond) are not modelled, so neither
//     are deadlocks that go through them;
//   - locks that are not fields of a named type nor package variables (a
//     *sync.Mutex parameter, a local): listed with -v, not checked;
//   - paths are not evaluated: a lock taken under a condition counts as
//     held after the branch, so the check may refuse a nesting no run
//     makes (restructure, or declare it), and recursion is cut (a function
//     in a call cycle sees an empty summary of the call that closes it).
func TestLockOrder(t *testing.T) {
	fset := token.NewFileSet()
	info := newInfo()
	pkgs := loadSource(t, fset, info, lockPackages...)
	a := newAnalyzer(fset, info, pkgs)
	order, errs := a.readOrder()
	for _, err := range errs {
		t.Error(err)
	}
	a.run()
	bad := order.check(a)
	for _, msg := range bad {
		t.Error(msg)
	}
	if testing.Verbose() {
		for _, line := range order.report(a) {
			t.Log(line)
		}
		for _, pos := range a.unnamed {
			t.Logf("not checked: a lock call on an unnamed mutex at %s", a.position(pos))
		}
	}
}

// lockOrder is the declared order: the chains and their closure.
type lockOrder struct {
	chains [][]lockID
	where  []string                   // each chain's position
	after  map[lockID]map[lockID]bool // after[a][b]: b may be taken while a is held
}

// readOrder reads the lockorder lines of the analysed packages.
func (a *analyzer) readOrder() (*lockOrder, []error) {
	o := &lockOrder{after: map[lockID]map[lockID]bool{}}
	var errs []error
	pkgNames := map[string]bool{}
	for _, p := range a.pkgs {
		pkgNames[p.name] = true
	}
	for _, p := range a.pkgs {
		for _, f := range p.files {
			for _, cg := range f.Comments {
				for _, c := range cg.List {
					text, ok := strings.CutPrefix(c.Text, "//")
					if !ok {
						continue
					}
					rest, ok := strings.CutPrefix(strings.TrimSpace(text), "lockorder:")
					if !ok {
						continue
					}
					where := a.position(c.Pos())
					var chain []lockID
					stale := false
					for _, tok := range strings.Fields(rest) {
						if tok == "→" || tok == "->" {
							continue
						}
						name := tok
						if pkg, _, _ := strings.Cut(tok, "."); !pkgNames[pkg] || strings.Count(tok, ".") < 2 {
							name = p.name + "." + tok
						}
						if _, ok := a.locks[lockID(name)]; !ok {
							errs = append(errs, fmt.Errorf("%s: lockorder names %s, which is no mutex field of an analysed package", where, name))
							stale = true
							continue
						}
						chain = append(chain, lockID(name))
					}
					if stale {
						continue
					}
					if len(chain) == 0 {
						errs = append(errs, fmt.Errorf("%s: a lockorder line names no lock", where))
						continue
					}
					o.chains = append(o.chains, chain)
					o.where = append(o.where, where)
				}
			}
		}
	}
	// Every lock is placed, so that a new one is ordered where it is
	// declared (a lock nothing nests with: a line of its name alone).
	placed := map[lockID]bool{}
	for _, ch := range o.chains {
		for _, id := range ch {
			placed[id] = true
		}
	}
	var unplaced []string
	for id := range a.locks {
		if !placed[id] {
			unplaced = append(unplaced, fmt.Sprintf("%s (%s)", id, a.position(a.locks[id])))
		}
	}
	slices.Sort(unplaced)
	for _, u := range unplaced {
		errs = append(errs, fmt.Errorf("the lock %s is in no lockorder line: state where it goes in the order", u))
	}
	// The closure: after[x] is every lock reachable from x.
	next := map[lockID][]lockID{}
	for _, ch := range o.chains {
		for i := 1; i < len(ch); i++ {
			next[ch[i-1]] = append(next[ch[i-1]], ch[i])
		}
	}
	for x := range next {
		reach := map[lockID]bool{}
		stack := slices.Clone(next[x])
		for len(stack) > 0 {
			y := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			if reach[y] {
				continue
			}
			reach[y] = true
			stack = append(stack, next[y]...)
		}
		o.after[x] = reach
		if reach[x] {
			errs = append(errs, fmt.Errorf("the lockorder lines make a cycle through %s", x))
		}
	}
	return o, errs
}

// verdict says what the declared order makes of one nesting: "" when it
// allows it.
func (o *lockOrder) verdict(n nesting) string {
	switch {
	case n.outer == n.inner:
		return "the same lock again, or a second one of the same type (no order between two of them is declared)"
	case o.after[n.outer][n.inner]:
		return ""
	case o.after[n.inner][n.outer]:
		return fmt.Sprintf("the declared order puts %s before %s", n.inner, n.outer)
	default:
		return "no lockorder line orders them"
	}
}

// describe says where a nesting happens.
func (a *analyzer) describe(n nesting) string {
	how := "at " + a.position(n.innerPos)
	if n.via != nil {
		how = fmt.Sprintf("at %s (via %s; Lock at %s)", a.position(n.innerPos), strings.Join(n.via, " → "), a.position(n.lockPos))
	}
	return fmt.Sprintf("%s takes %s %s while holding %s (taken at %s)", n.fn, n.inner, how, n.outer, a.position(n.outerPos))
}

// check returns a message for every nesting the order refuses.
func (o *lockOrder) check(a *analyzer) []string {
	var bad []string
	for _, n := range a.found {
		if v := o.verdict(n); v != "" {
			bad = append(bad, fmt.Sprintf("%s: %s", a.describe(n), v))
		}
	}
	slices.Sort(bad)
	return bad
}

// report lists the declared chains and every nesting found, for -v.
func (o *lockOrder) report(a *analyzer) []string {
	var out []string
	for i, ch := range o.chains {
		names := make([]string, len(ch))
		for j, id := range ch {
			names[j] = string(id)
		}
		out = append(out, fmt.Sprintf("declared at %s: %s", o.where[i], strings.Join(names, " → ")))
	}
	pairs := map[[2]lockID]int{}
	for _, n := range a.found {
		pairs[[2]lockID{n.outer, n.inner}]++
	}
	var lines []string
	for p, k := range pairs {
		status := "ok"
		if v := o.verdict(nesting{outer: p[0], inner: p[1]}); v != "" {
			status = "REFUSED: " + v
		}
		lines = append(lines, fmt.Sprintf("nesting %s → %s (%d places): %s", p[0], p[1], k, status))
	}
	slices.Sort(lines)
	return append(out, lines...)
}

// checkSource runs the checker on one package given as source (for the
// checker's own tests) and returns its complaints.
func checkSource(t *testing.T, src string) []string {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "demo.go", src, parser.ParseComments|parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	imp := newMixedImporter(fset, goListExport(t, "sync"))
	info := newInfo()
	tp, err := (&types.Config{Importer: imp}).Check("demo", fset, []*ast.File{f}, info)
	if err != nil {
		t.Fatal(err)
	}
	a := newAnalyzer(fset, info, []*srcPkg{{path: "demo", name: "demo", files: []*ast.File{f}, types: tp}})
	order, errs := a.readOrder()
	var out []string
	for _, err := range errs {
		out = append(out, err.Error())
	}
	a.run()
	return append(out, order.check(a)...)
}

// TestLockOrderChecker shows that the checker refuses what it should and
// accepts what it should, on small packages.
func TestLockOrderChecker(t *testing.T) {
	const head = `package demo

import "sync"

// lockorder: A.mu → B.mu
type A struct {
	mu sync.Mutex
	b  *B
}

type B struct {
	mu sync.RWMutex
	a  *A
}

// lockorder: C.mu
type C struct{ mu sync.Mutex }

type I interface{ touch() }

func (b *B) touch() { b.mu.Lock(); b.mu.Unlock() }
func (a *A) touch() { a.mu.Lock(); a.mu.Unlock() }
`
	for _, tc := range []struct {
		name string
		src  string
		want []string // substrings, one per complaint
	}{
		{"declared order", `
func (a *A) f() { a.mu.Lock(); defer a.mu.Unlock(); a.b.touch() }`, nil},
		{"reversed, through a call", `
func (b *B) f() {
	b.mu.RLock()
	b.a.touch()
	b.mu.RUnlock()
}`, []string{"(*demo.B).f takes demo.A.mu at demo.go:26 (via b.a.touch; Lock at demo.go:22) while holding demo.B.mu (taken at demo.go:25): the declared order puts demo.A.mu before demo.B.mu"}},
		{"released before", `
func (b *B) f() {
	b.mu.Lock()
	b.mu.Unlock()
	b.a.touch()
}`, nil},
		{"deferred unlock holds to the end", `
func (b *B) f() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.a.touch()
}`, []string{"the declared order puts demo.A.mu before demo.B.mu"}},
		{"unlock on the early return only", `
func (b *B) f(x bool) {
	b.mu.Lock()
	if x {
		b.mu.Unlock()
		return
	}
	b.a.touch()
	b.mu.Unlock()
}`, []string{"the declared order puts demo.A.mu before demo.B.mu"}},
		{"a helper that locks for its caller", `
func (b *B) lock() { b.mu.Lock() }
func (b *B) f() {
	b.lock()
	b.a.mu.Lock()
}`, []string{"the declared order puts demo.A.mu before demo.B.mu"}},
		{"a Locked helper that drops the caller's lock", `
func (b *B) waitLocked() {
	b.mu.Unlock()
	b.a.touch()
	b.mu.Lock()
}
func (b *B) f() {
	b.mu.Lock()
	b.waitLocked()
	b.mu.Unlock()
}`, nil},
		{"held on success only", `
func (b *B) begin() (int, error) {
	if b == nil {
		return 0, nil
	}
	b.mu.Lock()
	if b.a == nil {
		b.mu.Unlock()
		return 0, errFailed
	}
	return 1, nil
}
func (b *B) end() { b.mu.Unlock() }
func (b *B) send() error {
	n, err := b.begin()
	if err != nil {
		return err
	}
	_ = n
	b.end()
	return nil
}
func (b *B) f() {
	b.send()
	b.send()
}
func (b *B) g() {
	if _, err := b.begin(); err == nil {
		b.a.touch()
		b.end()
	}
}

var errFailed error`, []string{"the declared order puts demo.A.mu before demo.B.mu"}},
		{"through an interface", `
func (b *B) f(i I) {
	b.mu.Lock()
	i.touch()
	b.mu.Unlock()
}`, []string{"the declared order puts demo.A.mu before demo.B.mu", "the same lock again"}},
		{"undeclared", `
func (c *C) f(a *A) {
	c.mu.Lock()
	a.mu.Lock()
}`, []string{"no lockorder line orders them"}},
		{"on another goroutine", `
func (b *B) f() {
	b.mu.Lock()
	go b.a.touch()
	go func() { b.a.touch() }()
	b.mu.Unlock()
}`, nil},
		{"a literal called in place", `
func (b *B) f() {
	b.mu.Lock()
	func() { b.a.touch() }()
	b.mu.Unlock()
}`, []string{"the declared order puts demo.A.mu before demo.B.mu"}},
		{"a stale name", `
// lockorder: C.mu → C.nothing
`, []string{"lockorder names demo.C.nothing, which is no mutex field"}},
		{"an unplaced lock", `
type D struct{ mu sync.Mutex }
`, []string{"the lock demo.D.mu (demo.go:24) is in no lockorder line"}},
		{"a cycle", `
// lockorder: B.mu → A.mu
`, []string{"cycle through demo.A.mu", "cycle through demo.B.mu"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := checkSource(t, head+tc.src)
			if len(got) != len(tc.want) {
				t.Fatalf("got %d complaints, want %d:\n%s", len(got), len(tc.want), strings.Join(got, "\n"))
			}
			slices.Sort(got)
			for i, w := range tc.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("complaint %q\ndoes not contain %q", got[i], w)
				}
			}
		})
	}
}
