package docs_test

import (
	"go/ast"
	"go/parser"
	gotoken "go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// goDecls are the names a Go file or package declares: funcs, types,
// vars and consts by their name; methods, struct fields and interface
// methods as Type.Name.
type goDecls map[string]bool

// add records the top-level declarations of one parsed file.
func (d goDecls) add(f *ast.File) {
	for _, decl := range f.Decls {
		switch decl := decl.(type) {
		case *ast.FuncDecl:
			if decl.Recv == nil || len(decl.Recv.List) == 0 {
				d[decl.Name.Name] = true
				continue
			}
			d[recvType(decl.Recv.List[0].Type)+"."+decl.Name.Name] = true
		case *ast.GenDecl:
			for _, spec := range decl.Specs {
				switch spec := spec.(type) {
				case *ast.TypeSpec:
					d[spec.Name.Name] = true
					d.addMembers(spec.Name.Name, spec.Type)
				case *ast.ValueSpec:
					for _, n := range spec.Names {
						d[n.Name] = true
					}
				}
			}
		}
	}
}

// addMembers records a struct's fields and an interface's methods as
// typ.Name.
func (d goDecls) addMembers(typ string, e ast.Expr) {
	var fields *ast.FieldList
	switch e := e.(type) {
	case *ast.StructType:
		fields = e.Fields
	case *ast.InterfaceType:
		fields = e.Methods
	default:
		return
	}
	for _, f := range fields.List {
		for _, n := range f.Names {
			d[typ+"."+n.Name] = true
		}
		if len(f.Names) == 0 { // embedded: the type's name is the field's
			if name := recvType(f.Type); name != "" {
				d[typ+"."+name] = true
			}
		}
	}
}

// recvType is the bare type name of a receiver or embedded field:
// *T, T[K], pkg.T all give T.
func recvType(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.StarExpr:
		return recvType(e.X)
	case *ast.IndexExpr:
		return recvType(e.X)
	case *ast.IndexListExpr:
		return recvType(e.X)
	case *ast.SelectorExpr:
		return e.Sel.Name
	case *ast.Ident:
		return e.Name
	}
	return ""
}

// has reports whether name (Name, Type.Name) is declared; a bare name
// is also found as any type's member, as the docs name a method or a
// field by itself where its type is plain from the sentence.
func (d goDecls) has(name string) bool {
	if d[name] {
		return true
	}
	if strings.Contains(name, ".") {
		return false
	}
	for k := range d {
		if strings.HasSuffix(k, "."+name) {
			return true
		}
	}
	return false
}

// goCode is the module's non-test Go code, parsed: by file, by package
// directory, and the directories by package name; and the names of the
// tests, benchmarks and examples of its test files.
type goCode struct {
	files map[string]goDecls  // "node/node.go"
	dirs  map[string]goDecls  // "node", "segment/mysql"
	names map[string][]string // "kvlease" → ["mono/kvlease"]
	tests map[string]bool     // "TestSameNameRefused"
}

func parseModule(t *testing.T) goCode {
	t.Helper()
	c := goCode{files: map[string]goDecls{}, dirs: map[string]goDecls{}, names: map[string][]string{}, tests: map[string]bool{}}
	fset := gotoken.NewFileSet()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "bin" || d.Name() == "node_modules" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, ".go") {
			return nil
		}
		if strings.HasSuffix(p, "_test.go") {
			f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			for _, decl := range f.Decls {
				if fn, ok := decl.(*ast.FuncDecl); ok && fn.Recv == nil && testFuncRE.MatchString(fn.Name.Name) {
					c.tests[fn.Name.Name] = true
				}
			}
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		dir := path.Dir(rel)
		if c.files[rel] == nil {
			c.files[rel] = goDecls{}
		}
		c.files[rel].add(f)
		if c.dirs[dir] == nil {
			c.dirs[dir] = goDecls{}
			c.names[f.Name.Name] = append(c.names[f.Name.Name], dir)
		}
		c.dirs[dir].add(f)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// testFuncRE matches the functions go test runs.
var testFuncRE = regexp.MustCompile(`^(Test|Benchmark|Example|Fuzz)[A-Z_]`)

// resolve reports whether a Go name the docs give without a file is
// declared: pkg.Name or pkg.Type.Name in a package of that name, or
// Name or Type.Name in any package.
func (c goCode) resolve(name string) bool {
	if c.tests[name] {
		return true
	}
	if first, rest, ok := strings.Cut(name, "."); ok {
		for _, dir := range c.names[first] {
			if c.dirs[dir].has(rest) {
				return true
			}
		}
	}
	for _, d := range c.dirs {
		if d.has(name) {
			return true
		}
	}
	return false
}

// qualified reports whether name begins with a package's name
// (pkg.Name, pkg.Type.Name).
func (c goCode) qualified(name string) bool {
	first, _, ok := strings.Cut(name, ".")
	return ok && len(c.names[first]) > 0
}

var (
	// goNameRE is a Go name as the docs write it: Name, Type.Method,
	// pkg.Type.Method.
	goNameRE = regexp.MustCompile(`^[A-Za-z]\w*(?:\.[A-Za-z]\w*){0,2}$`)
	// repoPathRE is a path in the repository: dir/file.ext or dir/sub.
	repoPathRE = regexp.MustCompile(`^[a-z][\w.-]*(?:/[\w.-]+)+$`)
	// memberListRE is the models' table's "`Type` a/b/c" (or "`pkg`
	// a/b/c"): each of a, b, c is a member of Type (a name in pkg).
	memberListRE = regexp.MustCompile("`(\\w+)` ((?:\\w+/)+\\w+)")
	// fileNameRE is a file's name by the extensions the docs give.
	fileNameRE = regexp.MustCompile(`\.(?:go|pml|json|md|sh|c|trail)$`)
)

// isGoName tells the docs' Go names from their other code spans: an
// identifier or dotted identifier with no underscore (which config keys,
// SQL names and the models' -D flags have) that is not a NATS subject
// (leaf.…) and not a lone lower-case word (English, a package or a
// model's name: a name with a capital or a dot is code) nor a file's
// name (worker.pml).
func isGoName(s string) bool {
	if !goNameRE.MatchString(s) || strings.Contains(s, "_") || strings.HasPrefix(s, "leaf.") || fileNameRE.MatchString(s) {
		return false
	}
	return strings.Contains(s, ".") || strings.ToLower(s) != s
}

// Every file, function, method and type docs/protocol.md names as the
// place a check or a mechanism lives is in the code: a `path/file.go`
// exists, and each Go name after it in the same table cell is declared
// in that file (after a package directory, in that package; a name
// qualified by a package, in that package); every
// other Go name (`Func`, `Type.Method`, `pkg.Func`, `pkg.Type.Method`)
// is declared in the module; in the models' table, each name of
// "`Type` a/b/c" is a member of Type (or a name in package Type). A
// check moved or renamed without the document following it would leave
// an invariant with a wrong claim of what protects it.
func TestProtocolNamesRealCode(t *testing.T) {
	const doc = "docs/protocol.md"
	code := parseModule(t)
	names := 0
	for i, l := range prose(readRepo(t, doc)) {
		at := func(format string, args ...any) {
			t.Helper()
			t.Errorf("%s:%d: "+format, append([]any{doc, i + 1}, args...)...)
		}
		cells := []string{l}
		if strings.HasPrefix(l, "|") {
			cells = strings.Split(strings.Trim(l, "|"), " | ")
		}
		for _, cell := range cells {
			var scope goDecls // the file or package named last in this cell
			scopeName := ""
			for _, m := range codeSpanRE.FindAllString(cell, -1) {
				s := strings.Trim(m, "`")
				switch {
				case repoPathRE.MatchString(s):
					names++
					fi, err := os.Stat(filepath.Join(root, filepath.FromSlash(s)))
					if err != nil {
						at("names %s, which does not exist", s)
						scope, scopeName = goDecls{}, s // its names are not checked again
						continue
					}
					if fi.IsDir() {
						scope, scopeName = code.dirs[s], s
					} else if strings.HasSuffix(s, ".go") {
						scope, scopeName = code.files[s], s
					}
				case isGoName(s):
					names++
					switch {
					case scope == nil:
						if !code.resolve(s) {
							at("names `%s`, which no Go code of the module declares", s)
						}
					case len(scope) > 0 && code.qualified(s):
						if !code.resolve(s) { // pkg.Name beside a file: where pkg declares it
							at("names `%s`, which no Go code of the module declares", s)
						}
					case len(scope) > 0 && !scope.has(s):
						at("names `%s` with %s, which does not declare it", s, scopeName)
					}
				}
			}
			for _, m := range memberListRE.FindAllStringSubmatch(cell, -1) {
				for _, member := range strings.Split(m[2], "/") {
					names++
					if !code.resolve(m[1]+"."+member) && !pkgHas(code, m[1], member) {
						at("names %s of `%s`, which is not declared there", member, m[1])
					}
				}
			}
		}
	}
	if names < 100 {
		t.Errorf("%s names %d files and Go names: has the format changed?", doc, names)
	}
}

// pkgHas reports whether a package named pkg declares name, top-level or
// as any type's member.
func pkgHas(code goCode, pkg, name string) bool {
	for _, dir := range code.names[pkg] {
		if code.dirs[dir].has(name) {
			return true
		}
	}
	return false
}
