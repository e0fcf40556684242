// Command apirecord prints the exported API of a module's public packages,
// one line per exported identifier, sorted, in the manner of the Go
// project's api/go1.*.txt files:
//
//	pkg github.com/redlock-go/redlock, func New(...redis.UniversalClient) (*Client, error)
//	pkg github.com/redlock-go/redlock, method (*Client) Close() error
//	pkg github.com/redlock-go/redlock, type Event interface, unexported methods
//
// scripts/check-api.sh compares its output with the record under api/, so
// that the API changes only on purpose.
//
// Usage:
//
//	go run ./internal/tools/apirecord [DIR]
//
// DIR is the directory of the module (default "."). Its public packages are
// those that go list ./... finds there, except main packages and those with
// an "internal" element in their path, and directories of tests only
// (TestModuleAPIReadsExportDataAndSkipsADirectoryOfTestsOnly). For a module
// without one it prints nothing: scripts/check-api.sh asks each module that
// has no record. Their types come from the export data that go list -export
// builds (the standard library only: the library's go.mod gains no
// requirement).
//
// What a line shows, and why:
//   - Parameter names are left out (renaming one is no change of API);
//     parameter and result types, type parameters and their constraints are in.
//   - A constant's line has its type and value: a changed default is a
//     change a caller sees. The value is exact, but for a floating-point
//     one, shown to float64 precision, the shortest decimal that reads back
//     as the same float64 (TestRecordShowsAFloatConstantToFloat64Precision).
//   - An exported type's methods are its whole method set, promoted ones
//     included, with the receiver (T) or (*T) that has them.
//   - A struct's exported fields and embedded types each have a line, and
//     so do the exported fields promoted from an embedded type that is not
//     exported, whose own lines would show them nowhere
//     (TestRecordShowsFieldsPromotedFromAnUnexportedEmbeddedType).
//   - An interface's methods each have a line, and "unexported methods" says
//     that no type outside the package can implement it. A constraint (an
//     interface that is more than a method set) has a line for each type it
//     embeds (TestRecordShowsWhatAConstraintEmbeds).
//   - A generic alias shows its type parameters
//     (TestRecordShowsAGenericAliasTypeParameters).
//
// The output depends only on what a caller can name: not on comments,
// parameter names or unexported code (TestRecordOfASmallPackage pins the
// format).
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"go/constant"
	"go/importer"
	"go/token"
	"go/types"
	"io"
	"math"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
)

func main() {
	dir := "."
	switch len(os.Args) {
	case 1:
	case 2:
		dir = os.Args[1]
	default:
		fmt.Fprintln(os.Stderr, "usage: apirecord [MODULE_DIR]")
		os.Exit(2)
	}
	lines, err := moduleAPI(dir)
	if err != nil {
		fmt.Fprintf(os.Stderr, "apirecord: %v\n", err)
		os.Exit(1)
	}
	for _, l := range lines {
		fmt.Println(l)
	}
}

// listed is what go list prints of one package.
type listed struct {
	ImportPath string
	Name       string
	Export     string
	GoFiles    []string
	CgoFiles   []string
}

// goList runs go list -json in dir and decodes the packages it prints.
func goList(dir string, args ...string) ([]listed, error) {
	cmd := exec.Command("go", append([]string{"list", "-json=ImportPath,Name,Export,GoFiles,CgoFiles"}, args...)...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list %s in %s: %w\n%s", strings.Join(args, " "), dir, err, stderr.Bytes())
	}
	var pkgs []listed
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p listed
		if err := dec.Decode(&p); err == io.EOF {
			return pkgs, nil
		} else if err != nil {
			return nil, fmt.Errorf("go list output: %w", err)
		}
		pkgs = append(pkgs, p)
	}
}

// moduleAPI returns the sorted API lines of the public packages of the
// module in dir.
func moduleAPI(dir string) ([]string, error) {
	all, err := goList(dir, "./...")
	if err != nil {
		return nil, err
	}
	// A directory of tests only (or of files for other platforms) has no
	// package to import.
	var public []string
	for _, p := range all {
		if p.Name != "main" && !slices.Contains(strings.Split(p.ImportPath, "/"), "internal") &&
			len(p.GoFiles)+len(p.CgoFiles) > 0 {
			public = append(public, p.ImportPath)
		}
	}
	if len(public) == 0 {
		return nil, nil
	}
	built, err := goList(dir, append([]string{"-export"}, public...)...)
	if err != nil {
		return nil, err
	}
	exports := map[string]string{}
	for _, p := range built {
		exports[p.ImportPath] = p.Export
	}
	// The export data of a package holds every declaration its own API
	// refers to, so only the packages themselves are looked up.
	imp := importer.ForCompiler(token.NewFileSet(), "gc", func(path string) (io.ReadCloser, error) {
		f, ok := exports[path]
		if !ok || f == "" {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(f)
	})
	var lines []string
	for _, path := range public {
		pkg, err := imp.Import(path)
		if err != nil {
			return nil, fmt.Errorf("reading the export data of %s: %w", path, err)
		}
		lines = append(lines, packageAPI(pkg)...)
	}
	slices.Sort(lines)
	return slices.Compact(lines), nil
}

// packageAPI returns the API lines of pkg, sorted.
func packageAPI(pkg *types.Package) []string {
	w := &writer{pkg: pkg}
	scope := pkg.Scope()
	for _, name := range scope.Names() {
		if !token.IsExported(name) {
			continue
		}
		switch obj := scope.Lookup(name).(type) {
		case *types.Const:
			w.emit("const %s %s = %s", name, w.typ(obj.Type()), constValue(obj.Val()))
		case *types.Var:
			w.emit("var %s %s", name, w.typ(obj.Type()))
		case *types.Func:
			sig := obj.Type().(*types.Signature)
			w.emit("func %s%s%s", name, w.typeParams(sig.TypeParams()), w.signature(sig))
		case *types.TypeName:
			w.typeName(obj)
		}
	}
	slices.Sort(w.lines)
	return w.lines
}

// constValue is v in full (String shortens long strings and rounds floats
// to six digits).
func constValue(v constant.Value) string {
	switch v.Kind() {
	case constant.String:
		return v.ExactString()
	case constant.Float:
		return floatValue(v)
	case constant.Complex:
		return "(" + floatValue(constant.Real(v)) + " + " + floatValue(constant.Imag(v)) + "i)"
	}
	return v.String()
}

// floatValue is v as the shortest decimal that reads back as the float64
// nearest v (beyond float64's range, as String shows it).
func floatValue(v constant.Value) string {
	f, _ := constant.Float64Val(v)
	if math.IsInf(f, 0) {
		return v.String()
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}

// writer collects the lines of one package.
type writer struct {
	pkg   *types.Package
	lines []string
}

func (w *writer) emit(format string, args ...any) {
	w.lines = append(w.lines, "pkg "+w.pkg.Path()+", "+fmt.Sprintf(format, args...))
}

// typeName emits an exported type: its kind, then a line for each exported
// field, embedded type or method.
func (w *writer) typeName(obj *types.TypeName) {
	name := obj.Name()
	if obj.IsAlias() {
		var params string
		if a, ok := obj.Type().(*types.Alias); ok {
			params = w.typeParams(a.TypeParams())
		}
		w.emit("type %s%s = %s", name, params, w.typ(types.Unalias(obj.Type())))
		return
	}
	named := obj.Type().(*types.Named)
	head := "type " + name + w.typeParams(named.TypeParams())
	switch u := named.Underlying().(type) {
	case *types.Struct:
		w.emit("%s struct", head)
		for f := range u.Fields() {
			switch {
			case f.Embedded():
				w.emit("type %s struct, embedded %s", name, w.typ(f.Type()))
			case f.Exported():
				w.emit("type %s struct, %s %s", name, f.Name(), w.typ(f.Type()))
			}
		}
		w.promoted(named, u, map[*types.Named]bool{})
	case *types.Interface:
		var names []string
		unexported := false
		for m := range u.Methods() {
			if !m.Exported() {
				unexported = true
				continue
			}
			names = append(names, m.Name())
			w.emit("type %s interface, %s%s", name, m.Name(), w.signature(m.Type().(*types.Signature)))
		}
		for e := range u.EmbeddedTypes() {
			// An embedded method set is in the methods above; what a
			// constraint embeds (comparable, a union, another constraint)
			// is in no method.
			if _, ok := e.Underlying().(*types.Interface); !ok || !u.IsMethodSet() {
				w.emit("type %s interface, embedded %s", name, w.typ(e))
			}
		}
		if unexported {
			w.emit("type %s interface, unexported methods", name)
		}
		if len(names) == 0 {
			w.emit("%s interface {}", head)
		} else {
			w.emit("%s interface { %s }", head, strings.Join(names, ", "))
		}
		return
	default:
		w.emit("%s %s", head, w.typ(u))
	}
	// The method set of *T holds that of T: a method in both has the
	// receiver T.
	valueSet := types.NewMethodSet(named)
	for sel := range types.NewMethodSet(types.NewPointer(named)).Methods() {
		m := sel.Obj().(*types.Func)
		if !m.Exported() {
			continue
		}
		recv := "*" + name
		if valueSet.Lookup(m.Pkg(), m.Name()) != nil {
			recv = name
		}
		w.emit("method (%s) %s%s", recv, m.Name(), w.signature(m.Type().(*types.Signature)))
	}
}

// promoted emits the exported fields that named gets from the types that
// s embeds and that are not exported, at any depth, each as a field of
// named: those that a selector on named reaches (not shadowed, not
// ambiguous).
func (w *writer) promoted(named *types.Named, s *types.Struct, seen map[*types.Named]bool) {
	for f := range s.Fields() {
		if !f.Embedded() {
			continue
		}
		t := types.Unalias(f.Type())
		if p, ok := t.(*types.Pointer); ok {
			t = types.Unalias(p.Elem())
		}
		e, ok := t.(*types.Named)
		if !ok || e.Obj().Exported() || seen[e] {
			continue
		}
		seen[e] = true
		es, ok := e.Underlying().(*types.Struct)
		if !ok {
			continue
		}
		for g := range es.Fields() {
			if !g.Exported() {
				continue
			}
			obj, _, _ := types.LookupFieldOrMethod(named, true, w.pkg, g.Name())
			if v, ok := obj.(*types.Var); !ok || v.Origin() != g.Origin() {
				continue
			}
			if g.Embedded() {
				w.emit("type %s struct, embedded %s", named.Obj().Name(), w.typ(g.Type()))
			} else {
				w.emit("type %s struct, %s %s", named.Obj().Name(), g.Name(), w.typ(g.Type()))
			}
		}
		w.promoted(named, es, seen)
	}
}

// typeParams is "[P1 C1, P2 C2]", or "" for none.
func (w *writer) typeParams(list *types.TypeParamList) string {
	if list.Len() == 0 {
		return ""
	}
	var parts []string
	for tp := range list.TypeParams() {
		parts = append(parts, tp.Obj().Name()+" "+w.typ(tp.Constraint()))
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// signature is "(P1, P2) R" or "(P1) (R1, R2)", without names.
func (w *writer) signature(sig *types.Signature) string {
	var params []string
	for i := range sig.Params().Len() {
		t := sig.Params().At(i).Type()
		if sig.Variadic() && i == sig.Params().Len()-1 {
			params = append(params, "..."+w.typ(t.(*types.Slice).Elem()))
		} else {
			params = append(params, w.typ(t))
		}
	}
	s := "(" + strings.Join(params, ", ") + ")"
	switch n := sig.Results().Len(); n {
	case 0:
		return s
	case 1:
		return s + " " + w.typ(sig.Results().At(0).Type())
	default:
		var results []string
		for v := range sig.Results().Variables() {
			results = append(results, w.typ(v.Type()))
		}
		return s + " (" + strings.Join(results, ", ") + ")"
	}
}

// typ writes t without parameter names: a type of this package by its name,
// one of another package as pkgname.Name.
func (w *writer) typ(t types.Type) string {
	switch t := t.(type) {
	case *types.Basic:
		return t.Name()
	case *types.Alias, *types.Named:
		obj := t.(interface{ Obj() *types.TypeName }).Obj()
		s := obj.Name()
		if obj.Pkg() != nil && obj.Pkg() != w.pkg {
			s = obj.Pkg().Name() + "." + s
		}
		if args := t.(interface{ TypeArgs() *types.TypeList }).TypeArgs(); args.Len() > 0 {
			var parts []string
			for a := range args.Types() {
				parts = append(parts, w.typ(a))
			}
			s += "[" + strings.Join(parts, ", ") + "]"
		}
		return s
	case *types.TypeParam:
		return t.Obj().Name()
	case *types.Pointer:
		return "*" + w.typ(t.Elem())
	case *types.Slice:
		return "[]" + w.typ(t.Elem())
	case *types.Array:
		return fmt.Sprintf("[%d]%s", t.Len(), w.typ(t.Elem()))
	case *types.Map:
		return "map[" + w.typ(t.Key()) + "]" + w.typ(t.Elem())
	case *types.Chan:
		switch t.Dir() {
		case types.SendOnly:
			return "chan<- " + w.typ(t.Elem())
		case types.RecvOnly:
			return "<-chan " + w.typ(t.Elem())
		}
		return "chan " + w.typ(t.Elem())
	case *types.Signature:
		return "func" + w.signature(t)
	case *types.Struct:
		var fields []string
		for f := range t.Fields() {
			if f.Embedded() {
				fields = append(fields, w.typ(f.Type()))
			} else {
				fields = append(fields, f.Name()+" "+w.typ(f.Type()))
			}
		}
		if len(fields) == 0 {
			return "struct{}"
		}
		return "struct{ " + strings.Join(fields, "; ") + " }"
	case *types.Interface:
		if t.IsImplicit() { // a constraint written as [T ~int | ~string]
			return w.typ(t.EmbeddedType(0))
		}
		var parts []string
		for e := range t.EmbeddedTypes() {
			parts = append(parts, w.typ(e))
		}
		for m := range t.ExplicitMethods() {
			parts = append(parts, m.Name()+w.signature(m.Type().(*types.Signature)))
		}
		if len(parts) == 0 {
			return "any"
		}
		return "interface{ " + strings.Join(parts, "; ") + " }"
	case *types.Union:
		var terms []string
		for term := range t.Terms() {
			s := w.typ(term.Type())
			if term.Tilde() {
				s = "~" + s
			}
			terms = append(terms, s)
		}
		return strings.Join(terms, " | ")
	}
	return types.TypeString(t, types.RelativeTo(w.pkg))
}
