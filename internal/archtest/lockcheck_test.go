package archtest

// The engine of TestLockOrder (lockorder_test.go): it loads packages from
// source with go/types, finds every lock taken while another is held
// (following static calls) and reads the `lockorder:` lines. See the doc
// comment of TestLockOrder for what it sees and what it cannot.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/gomhi/gomhi/mhi/testenv"
)

// lockID names a lock by the package, the type and the field that hold
// it: "mhi.Controller.mu", "mhinet.txPath.mu" (a package-level mutex is
// "pkg.name").
type lockID string

// listedPkg is what `go list -export -deps -json` says about one package.
type listedPkg struct {
	ImportPath string
	Name       string
	Dir        string
	GoFiles    []string
	Export     string
	DepOnly    bool
	Error      *struct{ Err string }
}

// goList runs `go list` with args in the module's directory and decodes
// each package it prints as a T.
func goList[T any](t *testing.T, args ...string) []T {
	t.Helper()
	gocmd, err := exec.LookPath("go")
	if err != nil {
		gocmd = filepath.Join(runtime.GOROOT(), "bin", "go")
		if _, serr := os.Stat(gocmd); serr != nil {
			testenv.Need(t, "the go command (in PATH or GOROOT/bin)", errors.Join(err, serr))
		}
	}
	cmd := exec.Command(gocmd, append([]string{"list"}, args...)...)
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	var pkgs []T
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p T
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

// goListExport lists patterns and their dependencies, dependencies first,
// with the export data of each (compiling what the build cache lacks).
func goListExport(t *testing.T, patterns ...string) []listedPkg {
	t.Helper()
	pkgs := goList[listedPkg](t, append([]string{"-e", "-export", "-deps", "-json=ImportPath,Name,Dir,GoFiles,Export,DepOnly,Error"}, patterns...)...)
	for _, p := range pkgs {
		if p.Error != nil {
			t.Fatalf("go list %s: %s", p.ImportPath, p.Error.Err)
		}
	}
	return pkgs
}

// srcPkg is one package under analysis: its syntax and its types.
type srcPkg struct {
	path  string
	name  string
	files []*ast.File
	types *types.Package
}

// mixedImporter returns the packages type-checked from source, and the
// others from their export data, so that a call from one analysed package
// into another resolves to the very object the callee's declaration
// defines.
type mixedImporter struct {
	src map[string]*types.Package
	gc  types.Importer
}

func (m *mixedImporter) Import(path string) (*types.Package, error) {
	if p := m.src[path]; p != nil {
		return p, nil
	}
	return m.gc.Import(path)
}

// newMixedImporter imports from source what src holds (filled in as the
// packages are checked) and everything else from the export files listed.
func newMixedImporter(fset *token.FileSet, listed []listedPkg) *mixedImporter {
	export := map[string]string{}
	for _, p := range listed {
		export[p.ImportPath] = p.Export
	}
	lookup := func(path string) (io.ReadCloser, error) {
		f, ok := export[path]
		if !ok || f == "" {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(f)
	}
	return &mixedImporter{src: map[string]*types.Package{}, gc: importer.ForCompiler(fset, "gc", lookup)}
}

// loadSource parses and type-checks, from source, the packages matching
// patterns (non-test files), in dependency order.
func loadSource(t *testing.T, fset *token.FileSet, info *types.Info, patterns ...string) []*srcPkg {
	t.Helper()
	listed := goListExport(t, patterns...)
	imp := newMixedImporter(fset, listed)
	var out []*srcPkg
	names := map[string]string{}
	for _, lp := range listed {
		if lp.DepOnly {
			continue
		}
		if other, dup := names[lp.Name]; dup {
			t.Fatalf("packages %s and %s are both named %s: lock names would be ambiguous", other, lp.ImportPath, lp.Name)
		}
		names[lp.Name] = lp.ImportPath
		p := &srcPkg{path: lp.ImportPath, name: lp.Name}
		for _, f := range lp.GoFiles {
			af, err := parser.ParseFile(fset, filepath.Join(lp.Dir, f), nil, parser.ParseComments|parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			p.files = append(p.files, af)
		}
		conf := types.Config{Importer: imp}
		tp, err := conf.Check(lp.ImportPath, fset, p.files, info)
		if err != nil {
			t.Fatalf("type-checking %s: %v", lp.ImportPath, err)
		}
		p.types = tp
		imp.src[lp.ImportPath] = tp
		out = append(out, p)
	}
	return out
}

func newInfo() *types.Info {
	return &types.Info{
		Types:      map[ast.Expr]types.TypeAndValue{},
		Defs:       map[*ast.Ident]types.Object{},
		Uses:       map[*ast.Ident]types.Object{},
		Selections: map[*ast.SelectorExpr]*types.Selection{},
	}
}

// nesting is one lock taken while another is held.
type nesting struct {
	outer, inner lockID
	fn           string    // the function that holds outer
	outerPos     token.Pos // where fn took outer
	innerPos     token.Pos // where inner is taken: the Lock call, or fn's call that leads to it
	lockPos      token.Pos // the Lock call of inner (in a callee when via is set)
	via          []string  // the calls from fn down to that Lock call
}

// acquire is a lock a function takes, directly or in a callee, as its
// summary gives it to callers.
type acquire struct {
	id lockID
	// released are locks the function had released at that point without
	// taking them: its caller's, which the caller no longer holds then.
	released []lockID
	lockPos  token.Pos
	via      []string
}

// summary is what a call to a function does to its caller's locks.
type summary struct {
	acquires    []acquire
	netHeld     []lockID // taken and still held when it returns
	netReleased []lockID // the caller's, released and not taken again
	// okOnly are the locks of netHeld that a function whose last result
	// is an error holds only when it returns nil there (held on success,
	// released on failure): a caller's `if err != nil` branch does not
	// hold them.
	okOnly []lockID
}

// heldLock is a lock held at some point of a function.
type heldLock struct {
	id       lockID
	pos      token.Pos
	deferred bool // its unlock is deferred: held to the function's end
}

// lockState is what a function holds, and which of its caller's locks it
// released, at one point of its body.
type lockState struct {
	held     []heldLock
	released []lockID
}

func (s lockState) clone() lockState {
	return lockState{held: slices.Clone(s.held), released: slices.Clone(s.released)}
}

func (s lockState) index(id lockID) int {
	for i := len(s.held) - 1; i >= 0; i-- {
		if s.held[i].id == id {
			return i
		}
	}
	return -1
}

// merge joins the states of paths that meet: a lock is held if any path
// may hold it, a caller's lock released only if every path released it.
func merge(states []lockState) lockState {
	if len(states) == 0 {
		return lockState{}
	}
	out := states[0].clone()
	for _, s := range states[1:] {
		for _, h := range s.held {
			if out.index(h.id) < 0 {
				out.held = append(out.held, h)
			}
		}
		out.released = slices.DeleteFunc(out.released, func(id lockID) bool { return !slices.Contains(s.released, id) })
	}
	return out
}

// analyzer finds the nestings of the packages it was given.
type analyzer struct {
	fset  *token.FileSet
	info  *types.Info
	pkgs  []*srcPkg
	decls map[*types.Func]*ast.FuncDecl
	funcs []*types.Func // decls' keys in source order
	// owner names the type whose struct declares a field ("mhi.Channel";
	// fields of anonymous structs inside it: "mhi.Channel.x").
	owner map[*types.Var]string
	// locks are the mutex fields and variables of the analysed packages.
	locks map[lockID]token.Pos
	// impls are the analysed types implementing an interface, for calls
	// through it.
	impls    map[*types.Interface][]*types.Named
	sums     map[*types.Func]*summary
	busy     map[*types.Func]bool
	closures map[*types.Var]*ast.FuncLit
	found    []nesting
	seen     map[string]bool
	// unnamed are lock calls on a mutex that is not a field of a named
	// type nor a package variable (a parameter, a local): not checked.
	unnamed []token.Pos
}

func newAnalyzer(fset *token.FileSet, info *types.Info, pkgs []*srcPkg) *analyzer {
	a := &analyzer{fset: fset, info: info, pkgs: pkgs,
		decls: map[*types.Func]*ast.FuncDecl{}, owner: map[*types.Var]string{}, locks: map[lockID]token.Pos{},
		impls: map[*types.Interface][]*types.Named{}, sums: map[*types.Func]*summary{}, busy: map[*types.Func]bool{},
		closures: map[*types.Var]*ast.FuncLit{}, seen: map[string]bool{}}
	for _, p := range pkgs {
		for _, f := range p.files {
			for _, d := range f.Decls {
				switch d := d.(type) {
				case *ast.FuncDecl:
					if fn, ok := info.Defs[d.Name].(*types.Func); ok && d.Body != nil {
						a.decls[fn] = d
						a.funcs = append(a.funcs, fn)
					}
				case *ast.GenDecl:
					// A package variable set to a literal: calls of it walk
					// the literal.
					for _, sp := range d.Specs {
						if vs, ok := sp.(*ast.ValueSpec); ok && len(vs.Names) == len(vs.Values) {
							for i, name := range vs.Names {
								lit, ok := ast.Unparen(vs.Values[i]).(*ast.FuncLit)
								if v, isVar := info.Defs[name].(*types.Var); ok && isVar {
									a.closures[v] = lit
								}
							}
						}
					}
				}
			}
		}
		scope := p.types.Scope()
		for _, name := range scope.Names() {
			switch obj := scope.Lookup(name).(type) {
			case *types.TypeName:
				if st, ok := obj.Type().Underlying().(*types.Struct); ok && !obj.IsAlias() {
					a.addFields(p.name+"."+name, st)
				}
			case *types.Var:
				if isMutex(obj.Type()) {
					a.locks[lockID(p.name+"."+name)] = obj.Pos()
				}
			}
		}
	}
	return a
}

func (a *analyzer) addFields(owner string, st *types.Struct) {
	for i := range st.NumFields() {
		f := st.Field(i)
		a.owner[f] = owner
		if isMutex(f.Type()) {
			a.locks[lockID(owner+"."+f.Name())] = f.Pos()
		}
		if inner, ok := f.Type().(*types.Struct); ok {
			a.addFields(owner+"."+f.Name(), inner)
		}
	}
}

// isMutex reports whether t is sync.Mutex or sync.RWMutex (or a pointer
// to one).
func isMutex(t types.Type) bool {
	if p, ok := t.(*types.Pointer); ok {
		t = p.Elem()
	}
	n, ok := t.(*types.Named)
	if !ok || n.Obj().Pkg() == nil || n.Obj().Pkg().Path() != "sync" {
		return false
	}
	return n.Obj().Name() == "Mutex" || n.Obj().Name() == "RWMutex"
}

// lockName names the lock x designates, or reports that it has no name.
func (a *analyzer) lockName(x ast.Expr) (lockID, bool) {
	x = ast.Unparen(x)
	if u, ok := x.(*ast.UnaryExpr); ok && u.Op == token.AND {
		x = ast.Unparen(u.X)
	}
	var obj types.Object
	switch x := x.(type) {
	case *ast.SelectorExpr:
		if sel := a.info.Selections[x]; sel != nil {
			if sel.Kind() != types.FieldVal {
				return "", false
			}
			v := sel.Obj().(*types.Var).Origin()
			if o, ok := a.owner[v]; ok {
				return lockID(o + "." + v.Name()), true
			}
			return "", false
		}
		obj = a.info.Uses[x.Sel] // pkg.Var
	case *ast.Ident:
		obj = a.info.Uses[x]
	}
	if v, ok := obj.(*types.Var); ok && v.Pkg() != nil && v.Parent() == v.Pkg().Scope() {
		return lockID(v.Pkg().Name() + "." + v.Name()), true
	}
	return "", false
}

// position formats pos relative to the module.
func (a *analyzer) position(pos token.Pos) string {
	p := a.fset.Position(pos)
	if abs, err := filepath.Abs(root); err == nil {
		if rel, err := filepath.Rel(abs, p.Filename); err == nil {
			p.Filename = rel
		}
	}
	return fmt.Sprintf("%s:%d", p.Filename, p.Line)
}

// funcName is fn's name relative to the module: "(*mhi.Controller).PowerUp".
func funcName(fn *types.Func) string {
	return strings.ReplaceAll(fn.FullName(), module+"/", "")
}

// run walks every function and function literal of the packages, in
// source order (which decides where a call cycle is cut).
func (a *analyzer) run() {
	for _, fn := range a.funcs {
		a.summary(fn)
	}
	for _, p := range a.pkgs {
		for _, f := range p.files {
			ast.Inspect(f, func(n ast.Node) bool {
				if lit, ok := n.(*ast.FuncLit); ok {
					w := &walker{a: a, fn: "func literal at " + a.position(lit.Pos()), sum: &summary{}}
					w.body(lit.Body)
				}
				return true
			})
		}
	}
}

// summary returns what a call of fn does; it walks fn's body once
// (recording its nestings). A recursive call finds an empty summary.
func (a *analyzer) summary(fn *types.Func) *summary {
	fn = fn.Origin()
	if s, ok := a.sums[fn]; ok {
		return s
	}
	decl, ok := a.decls[fn]
	if !ok || a.busy[fn] {
		return &summary{}
	}
	a.busy[fn] = true
	w := &walker{a: a, fn: funcName(fn), sig: fn.Signature(), sum: &summary{}}
	w.body(decl.Body)
	delete(a.busy, fn)
	a.sums[fn] = w.sum
	return w.sum
}

// implementations returns the analysed named types whose values or
// pointers implement iface.
func (a *analyzer) implementations(iface *types.Interface) []*types.Named {
	if impls, ok := a.impls[iface]; ok {
		return impls
	}
	var impls []*types.Named
	for _, p := range a.pkgs {
		scope := p.types.Scope()
		for _, name := range scope.Names() {
			tn, ok := scope.Lookup(name).(*types.TypeName)
			if !ok || tn.IsAlias() {
				continue
			}
			n, ok := tn.Type().(*types.Named)
			if !ok || n.TypeParams() != nil || types.IsInterface(n) {
				continue
			}
			if types.Implements(n, iface) || types.Implements(types.NewPointer(n), iface) {
				impls = append(impls, n)
			}
		}
	}
	a.impls[iface] = impls
	return impls
}

func (a *analyzer) record(n nesting) {
	key := fmt.Sprintf("%s|%s|%d|%d", n.outer, n.inner, n.outerPos, n.innerPos)
	if a.seen[key] {
		return
	}
	a.seen[key] = true
	a.found = append(a.found, n)
}

// walker walks one function body in order, tracking the locks it holds.
type walker struct {
	a   *analyzer
	fn  string
	sig *types.Signature // nil: unknown
	st  lockState
	sum *summary
	// exits collect the states at break and continue of the enclosing
	// loops, switches and selects (innermost last), returns those at
	// return statements.
	exits   []*[]lockState
	returns []lockState
	// deferRel are the caller's locks a deferred unlock releases when
	// the function returns.
	deferRel []lockID
	// failed are the states at returns of a non-nil error (see
	// summary.okOnly); errHeld maps an error variable to the locks the
	// call that set it holds only when it is nil.
	failed  []lockState
	errHeld map[*types.Var][]lockID
}

// body walks a function body and completes the summary.
func (w *walker) body(b *ast.BlockStmt) {
	if !w.block(b.List) {
		w.returns = append(w.returns, w.st)
	}
	end := merge(w.returns)
	for _, h := range end.held {
		if !h.deferred {
			w.sum.netHeld = append(w.sum.netHeld, h.id)
			if len(w.failed) > 0 && len(w.failed) < len(w.returns) && !slices.ContainsFunc(w.failed, func(s lockState) bool { return s.index(h.id) >= 0 }) {
				w.sum.okOnly = append(w.sum.okOnly, h.id)
			}
		}
	}
	w.sum.netReleased = end.released
	for _, id := range w.deferRel {
		if !slices.Contains(w.sum.netReleased, id) {
			w.sum.netReleased = append(w.sum.netReleased, id)
		}
	}
}

// block walks statements in order and reports whether the last one
// leaves the block otherwise than by its end.
func (w *walker) block(list []ast.Stmt) (left bool) {
	for _, s := range list {
		if w.stmt(s) {
			return true
		}
	}
	return false
}

// branches walks alternative paths from the current state: the state
// after them is the merge of those that end normally (and of the current
// state when there may be no path taken: an if without else, a switch
// without default).
func (w *walker) branches(paths []func() bool, orNone bool) (left bool) {
	start := w.st
	var ends []lockState
	if orNone {
		ends = append(ends, start)
	}
	for _, p := range paths {
		w.st = start.clone()
		if !p() {
			ends = append(ends, w.st)
		}
	}
	if len(ends) == 0 {
		w.st = start
		return true
	}
	w.st = merge(ends)
	return false
}

// breakable runs f with a collector for break (and continue) states and
// merges them into the state after it.
func (w *walker) breakable(f func() bool) bool {
	var exits []lockState
	w.exits = append(w.exits, &exits)
	left := f()
	w.exits = w.exits[:len(w.exits)-1]
	if !left {
		exits = append(exits, w.st)
	}
	if len(exits) == 0 {
		return true
	}
	w.st = merge(exits)
	return false
}

// loop walks a loop body twice (the second time from the merge of the
// entry and the first pass's end, for locks carried across iterations).
func (w *walker) loop(body *ast.BlockStmt, post ast.Stmt) {
	entry := w.st
	ends := []lockState{entry}
	for range 2 {
		w.st = merge(ends)
		w.breakable(func() bool {
			if w.block(body.List) {
				return true
			}
			if post != nil {
				w.stmt(post)
			}
			return false
		})
		ends = append(ends, w.st)
	}
	w.st = merge(ends)
}

func (w *walker) stmt(s ast.Stmt) (left bool) {
	switch s := s.(type) {
	case *ast.BlockStmt:
		return w.block(s.List)
	case *ast.ExprStmt:
		w.expr(s.X)
		if c, ok := ast.Unparen(s.X).(*ast.CallExpr); ok {
			if id, ok := ast.Unparen(c.Fun).(*ast.Ident); ok && id.Name == "panic" {
				if _, ok := w.a.info.Uses[id].(*types.Builtin); ok {
					return true
				}
			}
		}
	case *ast.AssignStmt:
		for _, e := range s.Rhs {
			w.expr(e)
		}
		for _, e := range s.Lhs {
			w.expr(e)
		}
		if len(s.Lhs) == len(s.Rhs) {
			for i, l := range s.Lhs {
				w.noteClosure(l, s.Rhs[i])
			}
		}
		w.noteErr(s)
	case *ast.DeclStmt:
		if gd, ok := s.Decl.(*ast.GenDecl); ok {
			for _, sp := range gd.Specs {
				if vs, ok := sp.(*ast.ValueSpec); ok {
					for i, e := range vs.Values {
						w.expr(e)
						if len(vs.Names) == len(vs.Values) {
							w.noteClosure(vs.Names[i], e)
						}
					}
				}
			}
		}
	case *ast.IncDecStmt:
		w.expr(s.X)
	case *ast.SendStmt:
		w.expr(s.Chan)
		w.expr(s.Value)
	case *ast.ReturnStmt:
		for _, e := range s.Results {
			w.expr(e)
		}
		w.returns = append(w.returns, w.st.clone())
		if w.failedReturn(s) {
			w.failed = append(w.failed, w.st.clone())
		}
		return true
	case *ast.GoStmt:
		// The call runs on another goroutine, holding nothing of ours;
		// only its arguments are evaluated here.
		if sel, ok := ast.Unparen(s.Call.Fun).(*ast.SelectorExpr); ok {
			w.expr(sel.X)
		}
		for _, e := range s.Call.Args {
			w.expr(e)
		}
	case *ast.DeferStmt:
		w.deferred(s.Call)
	case *ast.LabeledStmt:
		return w.stmt(s.Stmt)
	case *ast.BranchStmt:
		switch s.Tok {
		case token.BREAK, token.CONTINUE:
			if n := len(w.exits); n > 0 {
				*w.exits[n-1] = append(*w.exits[n-1], w.st.clone())
			}
			return true
		case token.GOTO:
			return true
		}
	case *ast.IfStmt:
		if s.Init != nil {
			w.stmt(s.Init)
		}
		w.expr(s.Cond)
		onThen, onElse := w.errBranch(s.Cond)
		paths := []func() bool{func() bool { w.drop(onThen); return w.block(s.Body.List) }}
		if s.Else != nil {
			paths = append(paths, func() bool { w.drop(onElse); return w.stmt(s.Else) })
		} else {
			paths = append(paths, func() bool { w.drop(onElse); return false })
		}
		return w.branches(paths, false)
	case *ast.ForStmt:
		if s.Init != nil {
			w.stmt(s.Init)
		}
		w.expr(s.Cond)
		w.loop(s.Body, s.Post)
		if s.Cond == nil && !w.hasBreak(s.Body) {
			return true // for {} without break: left by return only
		}
	case *ast.RangeStmt:
		w.expr(s.X)
		w.loop(s.Body, nil)
	case *ast.SwitchStmt:
		if s.Init != nil {
			w.stmt(s.Init)
		}
		w.expr(s.Tag)
		return w.clauses(s.Body, true)
	case *ast.TypeSwitchStmt:
		if s.Init != nil {
			w.stmt(s.Init)
		}
		w.stmt(s.Assign)
		return w.clauses(s.Body, true)
	case *ast.SelectStmt:
		return w.clauses(s.Body, false)
	}
	return false
}

// failedReturn reports whether r returns a non-nil error: the function's
// last result is an error and r's is not the literal nil.
func (w *walker) failedReturn(r *ast.ReturnStmt) bool {
	if w.sig == nil || w.sig.Results().Len() == 0 || len(r.Results) != w.sig.Results().Len() {
		return false
	}
	if !types.Identical(w.sig.Results().At(w.sig.Results().Len()-1).Type(), types.Universe.Lookup("error").Type()) {
		return false
	}
	last, ok := ast.Unparen(r.Results[len(r.Results)-1]).(*ast.Ident)
	if ok && last.Name == "nil" {
		_, isNil := w.a.info.Uses[last].(*types.Nil)
		return !isNil
	}
	return true
}

// noteErr remembers, for `x, err := f()`, the locks f holds only when
// err is nil.
func (w *walker) noteErr(s *ast.AssignStmt) {
	if len(s.Rhs) != 1 || len(s.Lhs) == 0 {
		return
	}
	c, ok := ast.Unparen(s.Rhs[0]).(*ast.CallExpr)
	if !ok {
		return
	}
	id, ok := s.Lhs[len(s.Lhs)-1].(*ast.Ident)
	if !ok {
		return
	}
	obj := w.a.info.Defs[id]
	if obj == nil {
		obj = w.a.info.Uses[id]
	}
	v, ok := obj.(*types.Var)
	if !ok {
		return
	}
	delete(w.errHeld, v)
	if _, _, fns, _ := w.callee(c); len(fns) == 1 {
		if okOnly := w.a.summary(fns[0]).okOnly; len(okOnly) > 0 {
			if w.errHeld == nil {
				w.errHeld = map[*types.Var][]lockID{}
			}
			w.errHeld[v] = okOnly
		}
	}
}

// errBranch returns the locks not held in the then and else branches of
// `if err != nil` (or `== nil`) after a call that holds them on success.
func (w *walker) errBranch(cond ast.Expr) (onThen, onElse []lockID) {
	b, ok := ast.Unparen(cond).(*ast.BinaryExpr)
	if !ok || (b.Op != token.NEQ && b.Op != token.EQL) {
		return nil, nil
	}
	x, ok1 := ast.Unparen(b.X).(*ast.Ident)
	y, ok2 := ast.Unparen(b.Y).(*ast.Ident)
	if !ok1 || !ok2 || y.Name != "nil" {
		return nil, nil
	}
	v, ok := w.a.info.Uses[x].(*types.Var)
	if !ok {
		return nil, nil
	}
	if b.Op == token.NEQ {
		return w.errHeld[v], nil
	}
	return nil, w.errHeld[v]
}

// drop forgets held locks (a path on which they are not held).
func (w *walker) drop(ids []lockID) {
	for _, id := range ids {
		if i := w.st.index(id); i >= 0 {
			w.st.held = slices.Delete(w.st.held, i, i+1)
		}
	}
}

// clauses walks the clauses of a switch or select as alternatives.
func (w *walker) clauses(body *ast.BlockStmt, isSwitch bool) bool {
	hasDefault := false
	var paths []func() bool
	for _, c := range body.List {
		switch c := c.(type) {
		case *ast.CaseClause:
			if c.List == nil {
				hasDefault = true
			}
			paths = append(paths, func() bool {
				for _, e := range c.List {
					w.expr(e)
				}
				return w.block(c.Body)
			})
		case *ast.CommClause:
			paths = append(paths, func() bool {
				if c.Comm != nil {
					w.stmt(c.Comm)
				}
				return w.block(c.Body)
			})
		}
	}
	return w.breakable(func() bool { return w.branches(paths, isSwitch && !hasDefault) })
}

// hasBreak reports whether body has a break that leaves its loop.
func (w *walker) hasBreak(body *ast.BlockStmt) bool {
	found := false
	ast.Inspect(body, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.FuncLit, *ast.ForStmt, *ast.RangeStmt, *ast.SwitchStmt, *ast.TypeSwitchStmt, *ast.SelectStmt:
			// A break inside these leaves them, not our loop (a labelled
			// one may leave ours: counted).
			ast.Inspect(n, func(m ast.Node) bool {
				if b, ok := m.(*ast.BranchStmt); ok && b.Tok == token.BREAK && b.Label != nil {
					found = true
				}
				return true
			})
			return false
		case *ast.BranchStmt:
			if n.Tok == token.BREAK {
				found = true
			}
		}
		return true
	})
	return found
}

// noteClosure remembers a variable set to a function literal, so that a
// call of the variable walks the literal.
func (w *walker) noteClosure(lhs ast.Expr, rhs ast.Expr) {
	lit, ok := ast.Unparen(rhs).(*ast.FuncLit)
	if !ok {
		return
	}
	id, ok := lhs.(*ast.Ident)
	if !ok {
		return
	}
	obj := w.a.info.Defs[id]
	if obj == nil {
		obj = w.a.info.Uses[id]
	}
	if v, ok := obj.(*types.Var); ok {
		w.a.closures[v] = lit
	}
}

// expr walks the calls in e in evaluation order (function literals are
// not entered: their bodies run when called).
func (w *walker) expr(e ast.Node) {
	if e == nil {
		return
	}
	ast.Inspect(e, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.FuncLit:
			return false
		case *ast.CallExpr:
			w.callExpr(n)
			return false
		}
		return true
	})
}

func (w *walker) callExpr(c *ast.CallExpr) {
	if lit, ok := ast.Unparen(c.Fun).(*ast.FuncLit); ok {
		for _, e := range c.Args {
			w.expr(e)
		}
		w.inline(lit)
		return
	}
	w.expr(c.Fun)
	for _, e := range c.Args {
		w.expr(e)
	}
	w.call(c)
}

// inline walks a function literal called here, as part of this function.
func (w *walker) inline(lit *ast.FuncLit) {
	saved, savedExits, savedFailed, savedSig := w.returns, w.exits, w.failed, w.sig
	w.returns, w.exits, w.failed, w.sig = nil, nil, nil, nil
	if !w.block(lit.Body.List) {
		w.returns = append(w.returns, w.st)
	}
	w.st = merge(w.returns)
	w.returns, w.exits, w.failed, w.sig = saved, savedExits, savedFailed, savedSig
}

// lockOp is a method of sync.Mutex or sync.RWMutex.
type lockOp int

const (
	notLockOp lockOp = iota
	opLock
	opUnlock
	opTryLock
)

// callee resolves the function a call calls: a lock operation on a named
// lock, a function or method of the analysed packages (every analysed
// implementation for a call through an interface), or a literal held in
// a variable.
func (w *walker) callee(c *ast.CallExpr) (op lockOp, lock lockID, fns []*types.Func, lit *ast.FuncLit) {
	switch fun := ast.Unparen(c.Fun).(type) {
	case *ast.SelectorExpr:
		sel := w.a.info.Selections[fun]
		if sel == nil {
			if fn, ok := w.a.info.Uses[fun.Sel].(*types.Func); ok {
				return notLockOp, "", []*types.Func{fn}, nil
			}
			return notLockOp, "", nil, nil
		}
		fn, ok := sel.Obj().(*types.Func)
		if !ok || sel.Kind() == types.FieldVal {
			return notLockOp, "", nil, nil
		}
		if recv := fn.Signature().Recv(); recv != nil && isMutex(recv.Type()) {
			switch fn.Name() {
			case "Lock", "RLock":
				op = opLock
			case "Unlock", "RUnlock":
				op = opUnlock
			case "TryLock", "TryRLock":
				op = opTryLock
			default:
				return notLockOp, "", nil, nil
			}
			id, named := w.a.lockName(fun.X)
			if !named {
				w.a.unnamed = append(w.a.unnamed, c.Pos())
				return notLockOp, "", nil, nil
			}
			return op, id, nil, nil
		}
		if iface, ok := sel.Recv().Underlying().(*types.Interface); ok {
			for _, n := range w.a.implementations(iface) {
				obj, _, _ := types.LookupFieldOrMethod(types.NewPointer(n), true, fn.Pkg(), fn.Name())
				if m, ok := obj.(*types.Func); ok {
					fns = append(fns, m)
				}
			}
			return notLockOp, "", fns, nil
		}
		return notLockOp, "", []*types.Func{fn}, nil
	case *ast.Ident:
		switch obj := w.a.info.Uses[fun].(type) {
		case *types.Func:
			return notLockOp, "", []*types.Func{obj}, nil
		case *types.Var:
			return notLockOp, "", nil, w.a.closures[obj]
		}
	case *ast.IndexExpr: // generic function instantiation
		if id, ok := fun.X.(*ast.Ident); ok {
			if fn, ok := w.a.info.Uses[id].(*types.Func); ok {
				return notLockOp, "", []*types.Func{fn}, nil
			}
		}
	}
	return notLockOp, "", nil, nil
}

// callName is how a call appears in a report: its function expression.
func callName(c *ast.CallExpr) string { return types.ExprString(c.Fun) }

func (w *walker) call(c *ast.CallExpr) {
	op, id, fns, lit := w.callee(c)
	switch op {
	case opLock:
		w.take(id, c.Pos(), c.Pos(), nil, nil)
		return
	case opTryLock:
		// It never waits: no nesting, but the lock may be held after.
		w.st.held = append(w.st.held, heldLock{id: id, pos: c.Pos()})
		return
	case opUnlock:
		w.release(id)
		return
	}
	if lit != nil {
		w.inline(lit)
		return
	}
	if len(fns) == 0 {
		return
	}
	name := callName(c)
	for _, fn := range fns {
		s := w.a.summary(fn)
		for _, acq := range s.acquires {
			w.take(acq.id, c.Pos(), acq.lockPos, append([]string{name}, acq.via...), acq.released)
		}
	}
	if len(fns) != 1 {
		return // through an interface: which one runs is unknown
	}
	s := w.a.summary(fns[0])
	for _, id := range s.netReleased {
		w.release(id)
	}
	for _, id := range s.netHeld {
		w.reacquire(id, c.Pos())
	}
}

// take records id taken at pos (lockPos: the Lock call itself, in a
// callee when via is set) against every lock held but those the callee
// had released, and adds it to the summary; a direct Lock also holds it.
func (w *walker) take(id lockID, pos, lockPos token.Pos, via []string, calleeReleased []lockID) {
	for _, h := range w.st.held {
		if slices.Contains(calleeReleased, h.id) {
			continue
		}
		w.a.record(nesting{outer: h.id, inner: id, fn: w.fn, outerPos: h.pos, innerPos: pos, lockPos: lockPos, via: via})
	}
	released := slices.Clone(w.st.released)
	for _, r := range calleeReleased {
		if w.st.index(r) < 0 && !slices.Contains(released, r) {
			released = append(released, r)
		}
	}
	w.addAcquire(acquire{id: id, released: released, lockPos: lockPos, via: via})
	if via == nil {
		w.reacquire(id, pos)
	}
}

// addAcquire adds an acquisition to the summary once per lock and set of
// released locks.
func (w *walker) addAcquire(acq acquire) {
	for _, old := range w.sum.acquires {
		if old.id == acq.id && slices.Equal(old.released, acq.released) {
			return
		}
	}
	w.sum.acquires = append(w.sum.acquires, acq)
}

// reacquire holds id: taken again if it is a caller's lock this function
// released, else held from pos.
func (w *walker) reacquire(id lockID, pos token.Pos) {
	if i := slices.Index(w.st.released, id); i >= 0 {
		w.st.released = slices.Delete(w.st.released, i, i+1)
		return
	}
	w.st.held = append(w.st.held, heldLock{id: id, pos: pos})
}

// release drops id: held here, or else the caller's.
func (w *walker) release(id lockID) {
	if i := w.st.index(id); i >= 0 {
		w.st.held = slices.Delete(w.st.held, i, i+1)
		return
	}
	if !slices.Contains(w.st.released, id) {
		w.st.released = append(w.st.released, id)
	}
}

// deferred handles a defer: an unlock holds its lock to the function's
// end; a deferred call or literal is walked now, against what is held
// now, and the locks it unlocks are held to the end.
func (w *walker) deferred(c *ast.CallExpr) {
	for _, e := range c.Args {
		w.expr(e)
	}
	markDeferred := func(id lockID) {
		if i := w.st.index(id); i >= 0 {
			w.st.held[i].deferred = true
		}
	}
	if lit, ok := ast.Unparen(c.Fun).(*ast.FuncLit); ok {
		saved := w.st.clone()
		w.inline(lit)
		after := w.st
		w.st = saved
		for _, h := range saved.held {
			if after.index(h.id) < 0 {
				markDeferred(h.id)
			}
		}
		return
	}
	op, id, fns, _ := w.callee(c)
	switch op {
	case opUnlock:
		if w.st.index(id) >= 0 {
			markDeferred(id)
		} else {
			w.deferRel = append(w.deferRel, id)
		}
		return
	case opLock, opTryLock:
		return
	}
	if sel, ok := ast.Unparen(c.Fun).(*ast.SelectorExpr); ok {
		w.expr(sel.X)
	}
	saved := w.st.clone()
	name := callName(c)
	var released []lockID
	for _, fn := range fns {
		s := w.a.summary(fn)
		for _, acq := range s.acquires {
			w.take(acq.id, c.Pos(), acq.lockPos, append([]string{"defer " + name}, acq.via...), acq.released)
		}
		released = append(released, s.netReleased...)
	}
	w.st = saved
	for _, id := range released {
		if w.st.index(id) >= 0 {
			markDeferred(id)
		} else {
			w.deferRel = append(w.deferRel, id)
		}
	}
}
