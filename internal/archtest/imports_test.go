package archtest

import (
	"bytes"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
)

// module is the module path; rules and the graph name packages relative
// to it ("mhi/ep").
const module = "github.com/gomhi/gomhi"

// root is the module's directory, seen from this package's.
const root = "../.."

// A rule forbids the non-test code of some packages to link others.
// Patterns are relative to the module: "mhi" is that package alone,
// "mhi/..." is it and every package under it, "..." is the whole module.
// A rule is checked against what a package links (its transitive
// imports), so a forbidden package cannot come in through a third one.
type rule struct {
	// name is the rule as docs/ARCHITECTURE.md states it.
	name string
	// pkgs are the packages the rule binds; forbid what they may not link,
	// but for allow (a narrower pattern carved out of forbid).
	pkgs, forbid, allow []string
	// except names the packages pkgs matches that the rule does not bind,
	// each with the reason. An exception that is no longer needed fails
	// the test, so that it is removed.
	except map[string]string
}

// mockSide is the mock modem: the device side, the cellular modem behind
// it, its IP data function, the fake host of their tests and what joins
// it to a host in one process.
var mockSide = []string{"mhi/ep", "mhi/ep/eptest", "mhi/ep/ipdata", "mhi/ep/modem", "mhi/inproc", "pcigeneric/mock"}

// rules are the import rules of docs/ARCHITECTURE.md ("Imports").
var rules = []rule{
	{name: "the host stack stands alone: it links only the wire package it shares with the mock",
		pkgs: []string{"mhi"}, forbid: []string{"..."}, allow: []string{"mhi/wire"}},
	{name: "the wire package is neutral: host and mock both use it, it uses nothing of ours",
		pkgs: []string{"mhi/wire"}, forbid: []string{"..."}},
	{name: "the mock modem does not link the host stack",
		pkgs: []string{"mhi/ep/..."}, forbid: []string{"mhi"}},
	// While mhi/ep/modem imports mhi/ep (for Function and Pipe) the
	// compiler's import cycle check enforces this too; the rule keeps it
	// should the modem come to need only interfaces of its own.
	{name: "the endpoint does not link the modem behind it: its functions plug in",
		pkgs: []string{"mhi/ep"}, forbid: []string{"mhi/ep/modem"}},
	{name: "the endpoint does not link the IP data function: it plugs in as a Function",
		pkgs: []string{"mhi/ep"}, forbid: []string{"mhi/ep/ipdata", "mhi/ep/eptest"}},
	{name: "the codecs are neutral: host and mock both use them, they use nothing of ours but the framing type",
		pkgs: []string{"mhi/proto/..."}, forbid: []string{"..."}, allow: []string{"mhi/proto/framing"}},
	{name: "nothing under mhi/ uses the network layer",
		pkgs: []string{"mhi/..."}, forbid: []string{"mhinet/..."}},
	{name: "the bus and the mock modem do not use the network layer",
		pkgs: []string{"pcigeneric/..."}, forbid: []string{"mhinet/..."}},
	{name: "the device table does not link the mock modem",
		pkgs: []string{"pcigeneric"}, forbid: mockSide},
	// mhinet/... binds every package of the network layer, so that a
	// harness joining the mock to the host (which links both) cannot
	// settle there: harnesses live under cmd/mhictl/internal.
	{name: "the host side does not link the mock modem",
		pkgs: []string{"mhi/ctrlport", "mhi/loopback", "mhi/slab", "mhinet/...",
			"pcigeneric/pciaddr", "pcigeneric/vfio", "pcigeneric/vfiouser/client",
			"sysfs", "sysfs/fusefs", "sysfs/genl"},
		forbid: mockSide,
		except: map[string]string{
			"mhinet/mhinettest": "a helper for other packages' tests: it joins the embedded mock modem (pcigeneric/mock), or a bare endpoint, to a host controller and a network device",
		}},
	// The server (pcigeneric/vfiouser) serves the mock; what it shares
	// with the client is a leaf, so the client gets none of the server.
	{name: "the vfio-user protocol uses nothing of ours: the server and the client share it",
		pkgs: []string{"pcigeneric/vfiouser/protocol"}, forbid: []string{"..."}},
	{name: "the control plane does not depend on the bus",
		pkgs: []string{"sysfs/..."}, forbid: []string{"pcigeneric/..."},
		except: map[string]string{
			"sysfs/sysfstest": "a helper for other packages' tests: it serves an attribute tree over an embedded mock modem (pcigeneric/mock)",
		}},
}

// pkgInfo is what `go list -json` says about one package.
type pkgInfo struct {
	ImportPath string
	Imports    []string // direct, non-test
	Deps       []string // transitive, non-test
	Error      *struct{ Err string }
}

// listModule returns the module's packages by path relative to the
// module, with their imports and links restricted to the module.
func listModule(t *testing.T) map[string]*pkgInfo {
	t.Helper()
	pkgs := map[string]*pkgInfo{}
	for _, p := range goList[pkgInfo](t, "-e", "-json=ImportPath,Imports,Deps,Error", module+"/...") {
		if p.Error != nil {
			t.Fatalf("go list %s: %s", p.ImportPath, p.Error.Err)
		}
		rel, ok := relative(p.ImportPath)
		if !ok {
			t.Fatalf("go list returned %s, outside %s", p.ImportPath, module)
		}
		p.Imports, p.Deps = ours(p.Imports), ours(p.Deps)
		pkgs[rel] = &p
	}
	if len(pkgs) == 0 {
		t.Fatal("go list found no packages")
	}
	return pkgs
}

// relative returns path relative to the module, and whether it is in it.
func relative(path string) (string, bool) {
	if path == module {
		return ".", true
	}
	rel, ok := strings.CutPrefix(path, module+"/")
	return rel, ok
}

// ours keeps the module's packages of paths, relative to the module.
func ours(paths []string) []string {
	var out []string
	for _, p := range paths {
		if rel, ok := relative(p); ok {
			out = append(out, rel)
		}
	}
	return out
}

// matches reports whether package pkg (relative) matches pattern.
func matches(pattern, pkg string) bool {
	if pattern == "..." {
		return true
	}
	if dir, ok := strings.CutSuffix(pattern, "/..."); ok {
		return pkg == dir || strings.HasPrefix(pkg, dir+"/")
	}
	return pkg == pattern
}

func matchesAny(patterns []string, pkg string) bool {
	return slices.ContainsFunc(patterns, func(p string) bool { return matches(p, pkg) })
}

// chain returns the shortest import chain from one package to another
// through the module's packages ("a → b → c").
func chain(pkgs map[string]*pkgInfo, from, to string) string {
	prev := map[string]string{from: ""}
	queue := []string{from}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if p == to {
			var path []string
			for ; p != ""; p = prev[p] {
				path = append(path, p)
			}
			slices.Reverse(path)
			return strings.Join(path, " → ")
		}
		if info := pkgs[p]; info != nil {
			for _, q := range info.Imports {
				if _, seen := prev[q]; !seen {
					prev[q] = p
					queue = append(queue, q)
				}
			}
		}
	}
	return from + " → … → " + to
}

// violations returns, for every package r binds, what it links that r
// forbids, as "pkg links dep (chain)"; and the packages of r.except that
// link nothing forbidden.
func violations(pkgs map[string]*pkgInfo, r rule) (bad []string, staleExcept []string) {
	for _, name := range slices.Sorted(maps.Keys(pkgs)) {
		if !matchesAny(r.pkgs, name) {
			continue
		}
		var found []string
		for _, dep := range pkgs[name].Deps {
			if dep != name && matchesAny(r.forbid, dep) && !matchesAny(r.allow, dep) {
				found = append(found, fmt.Sprintf("%s links %s (%s)", name, dep, chain(pkgs, name, dep)))
			}
		}
		if _, ok := r.except[name]; ok {
			if len(found) == 0 {
				staleExcept = append(staleExcept, name)
			}
			continue
		}
		bad = append(bad, found...)
	}
	return bad, staleExcept
}

// TestForbiddenImports checks every rule against the module as it is.
func TestForbiddenImports(t *testing.T) {
	pkgs := listModule(t)
	for _, r := range rules {
		t.Run(r.name, func(t *testing.T) {
			// A rule whose patterns match nothing (a package renamed or
			// moved) would pass without checking anything.
			for _, p := range slices.Concat(r.pkgs, r.forbid, r.allow) {
				if !slices.ContainsFunc(slices.Collect(maps.Keys(pkgs)), func(n string) bool { return matches(p, n) }) {
					t.Errorf("pattern %q matches no package of the module: update the rule", p)
				}
			}
			for name := range r.except {
				if _, ok := pkgs[name]; !ok || !matchesAny(r.pkgs, name) {
					t.Errorf("exception %s is not a package the rule binds", name)
				}
			}
			bad, stale := violations(pkgs, r)
			for _, b := range bad {
				t.Errorf("forbidden import: %s", b)
			}
			for _, s := range stale {
				t.Errorf("exception %s links nothing the rule forbids any more: remove it", s)
			}
		})
	}
}

// TestViolationsFindsTransitiveImport: the check sees a forbidden package
// that comes in through a third one, names the chain, and reports an
// exception that is no longer needed.
func TestViolationsFindsTransitiveImport(t *testing.T) {
	pkgs := map[string]*pkgInfo{
		"a":   {Imports: []string{"b"}, Deps: []string{"b", "c/d"}},
		"b":   {Imports: []string{"c/d"}, Deps: []string{"c/d"}},
		"c/d": {},
		"e":   {},
	}
	bad, stale := violations(pkgs, rule{pkgs: []string{"a", "b", "e"}, forbid: []string{"c/..."}, except: map[string]string{"b": "", "e": ""}})
	if want := []string{"a links c/d (a → b → c/d)"}; !slices.Equal(bad, want) {
		t.Errorf("violations = %q, want %q", bad, want)
	}
	if want := []string{"e"}; !slices.Equal(stale, want) {
		t.Errorf("stale exceptions = %q, want %q", stale, want)
	}
}

// TestViolationsHonoursAllow: a package an allow pattern carves out of
// forbid may be linked; anything else forbid matches may not, also when
// it comes in through the allowed package.
func TestViolationsHonoursAllow(t *testing.T) {
	pkgs := map[string]*pkgInfo{
		"a":   {Imports: []string{"a/w"}, Deps: []string{"a/w", "c"}},
		"a/w": {Imports: []string{"c"}, Deps: []string{"c"}},
		"c":   {},
	}
	bad, _ := violations(pkgs, rule{pkgs: []string{"a"}, forbid: []string{"..."}, allow: []string{"a/w"}})
	if want := []string{"a links c (a → a/w → c)"}; !slices.Equal(bad, want) {
		t.Errorf("violations = %q, want %q", bad, want)
	}
}

// The rules and the import graph in docs/ARCHITECTURE.md are generated
// from the rules above and from go list: this test fails when either is
// stale (GOMHI_UPDATE_DOCS=1 rewrites them).
func TestArchitectureDocImports(t *testing.T) {
	const path = root + "/docs/ARCHITECTURE.md"
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pkgs := listModule(t)
	sections := []struct{ marker, want string }{
		{"import-rules", rulesTable()},
		{"import-graph", graphTable(pkgs)},
	}
	changed := false
	for _, s := range sections {
		begin, end := "<!-- "+s.marker+":begin -->\n", "<!-- "+s.marker+":end -->"
		i, j := bytes.Index(doc, []byte(begin)), bytes.Index(doc, []byte(end))
		if i < 0 || j < i {
			t.Fatalf("%s lacks the markers %q … %q", path, begin, end)
		}
		if string(doc[i+len(begin):j]) == s.want {
			continue
		}
		if os.Getenv("GOMHI_UPDATE_DOCS") != "1" {
			t.Errorf("the %s section of %s is stale; run GOMHI_UPDATE_DOCS=1 go test ./internal/archtest -run TestArchitectureDocImports\nwant:\n%s", s.marker, path, s.want)
			continue
		}
		doc = append(append(append([]byte{}, doc[:i+len(begin)]...), s.want...), doc[j:]...)
		changed = true
	}
	if changed {
		if err := os.WriteFile(path, doc, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("rewrote the import sections of %s", path)
	}
}

// code formats package patterns as a Markdown list of code spans.
func code(names []string) string {
	var out []string
	for _, n := range names {
		if n == "..." {
			out = append(out, "anything else of the module")
			continue
		}
		out = append(out, "`"+n+"`")
	}
	return strings.Join(out, ", ")
}

// rulesTable is the Markdown of the rules for docs/ARCHITECTURE.md.
func rulesTable() string {
	var b strings.Builder
	b.WriteString("| rule | the non-test code of | may not link |\n|---|---|---|\n")
	for _, r := range rules {
		forbid := code(r.forbid)
		if len(r.allow) > 0 {
			forbid += " but " + code(r.allow)
		}
		fmt.Fprintf(&b, "| %s | %s | %s |\n", r.name, code(r.pkgs), forbid)
	}
	for _, r := range rules {
		for _, name := range slices.Sorted(maps.Keys(r.except)) {
			fmt.Fprintf(&b, "\nException to \"%s\": `%s`, %s.\n", r.name, name, r.except[name])
		}
	}
	return b.String()
}

// graphTable is the Markdown of the module's import graph (direct,
// non-test imports of the module's own packages).
func graphTable(pkgs map[string]*pkgInfo) string {
	var b strings.Builder
	b.WriteString("| package | imports of the module (non-test files) |\n|---|---|\n")
	for _, name := range slices.Sorted(maps.Keys(pkgs)) {
		imps := slices.Sorted(slices.Values(pkgs[name].Imports))
		list := code(imps)
		if list == "" {
			list = "—"
		}
		fmt.Fprintf(&b, "| `%s` | %s |\n", name, list)
	}
	return b.String()
}
