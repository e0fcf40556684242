package main

import (
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestRecordOfASmallPackage pins the format of the record: one line per
// exported identifier, field and method, without parameter names, with a
// constant's value and a type's whole method set.
func TestRecordOfASmallPackage(t *testing.T) {
	const src = `package p

import (
	"context"
	"time"
)

const Limit = 64
const Default time.Duration = 2 * time.Second
const Name Kind = "p"
const hidden = 1

var ErrX error

type Kind string

type Base struct{ ID int }

func (Base) Describe() string { return "" }
func (*Base) Reset()          {}

type Job struct {
	Base
	Name    string
	secret  int
	Handler func(ctx context.Context, attempt int) error
}

func (j *Job) Run(ctx context.Context, opts ...Option) (ok bool, err error) { return }
func (j Job) Done() <-chan struct{}                                          { return nil }
func (j *Job) private()                                                      {}

type Option interface{ apply(*Job) }

type Runner interface {
	Run(context.Context, ...Option) (bool, error)
}

type Alias = Job

type Set[K comparable, V any] map[K][]V

func Map[T any, U ~int | ~string](in []T, f func(T) U) map[U]T { return nil }

func New(name string) *Job { return nil }

func helper() {}
`
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "p.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	conf := types.Config{Importer: importer.Default()}
	pkg, err := conf.Check("example.com/p", fset, []*ast.File{f}, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := `pkg example.com/p, const Default time.Duration = 2000000000
pkg example.com/p, const Limit untyped int = 64
pkg example.com/p, const Name Kind = "p"
pkg example.com/p, func Map[T any, U ~int | ~string]([]T, func(T) U) map[U]T
pkg example.com/p, func New(string) *Job
pkg example.com/p, method (*Base) Reset()
pkg example.com/p, method (*Job) Reset()
pkg example.com/p, method (*Job) Run(context.Context, ...Option) (bool, error)
pkg example.com/p, method (Base) Describe() string
pkg example.com/p, method (Job) Describe() string
pkg example.com/p, method (Job) Done() <-chan struct{}
pkg example.com/p, type Alias = Job
pkg example.com/p, type Base struct
pkg example.com/p, type Base struct, ID int
pkg example.com/p, type Job struct
pkg example.com/p, type Job struct, Handler func(context.Context, int) error
pkg example.com/p, type Job struct, Name string
pkg example.com/p, type Job struct, embedded Base
pkg example.com/p, type Kind string
pkg example.com/p, type Option interface {}
pkg example.com/p, type Option interface, unexported methods
pkg example.com/p, type Runner interface { Run }
pkg example.com/p, type Runner interface, Run(context.Context, ...Option) (bool, error)
pkg example.com/p, type Set[K comparable, V any] map[K][]V
pkg example.com/p, var ErrX error`
	got := packageAPI(pkg)
	if !slices.IsSorted(got) {
		t.Errorf("lines are not sorted")
	}
	if g := strings.Join(got, "\n"); g != want {
		t.Errorf("record:\n%s\n\nwant:\n%s", g, want)
	}
}

// apiOf type-checks src as the package example.com/p and returns its record.
func apiOf(t *testing.T, src string) string {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "p.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	conf := types.Config{Importer: importer.Default()}
	pkg, err := conf.Check("example.com/p", fset, []*ast.File{f}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(packageAPI(pkg), "\n")
}

// TestRecordShowsAFloatConstantToFloat64Precision: a default changed in its
// seventh digit or further is a change of the record, as it is of the
// program (constant.Value.String rounds to six digits).
func TestRecordShowsAFloatConstantToFloat64Precision(t *testing.T) {
	got := apiOf(t, `package p

const Big = 1234567.0
const Small = 0.010000001
const Drift = 0.01
const Huge = 1e400
const Half float32 = 0.5
const Z = 1.5 + 0.000001i
`)
	want := `pkg example.com/p, const Big untyped float = 1.234567e+06
pkg example.com/p, const Drift untyped float = 0.01
pkg example.com/p, const Half float32 = 0.5
pkg example.com/p, const Huge untyped float = 1e+400
pkg example.com/p, const Small untyped float = 0.010000001
pkg example.com/p, const Z untyped complex = (1.5 + 1e-06i)`
	if got != want {
		t.Errorf("record:\n%s\n\nwant:\n%s", got, want)
	}
}

// TestRecordShowsFieldsPromotedFromAnUnexportedEmbeddedType: a caller
// reaches job.ID whether ID is Job's own or its unexported embedded base's,
// so renaming base.ID changes Job's record. A field of an exported embedded
// type is on that type's own lines; a shadowed or ambiguous one is no
// field of Job.
func TestRecordShowsFieldsPromotedFromAnUnexportedEmbeddedType(t *testing.T) {
	got := apiOf(t, `package p

type inner struct{ Deep string }

type base struct {
	*inner
	ID     int
	Name   string
	hidden int
	Base
}

type other struct{ Dup int }
type more struct{ Dup int }

type Base struct{ Own bool }

type Job struct {
	base
	other
	more
	Name string
}
`)
	want := `pkg example.com/p, type Base struct
pkg example.com/p, type Base struct, Own bool
pkg example.com/p, type Job struct
pkg example.com/p, type Job struct, Deep string
pkg example.com/p, type Job struct, ID int
pkg example.com/p, type Job struct, Name string
pkg example.com/p, type Job struct, embedded Base
pkg example.com/p, type Job struct, embedded base
pkg example.com/p, type Job struct, embedded more
pkg example.com/p, type Job struct, embedded other`
	if got != want {
		t.Errorf("record:\n%s\n\nwant:\n%s", got, want)
	}
}

// TestRecordShowsWhatAConstraintEmbeds: comparable, a union or another
// constraint changes which type arguments a caller may pass, and is in no
// method.
func TestRecordShowsWhatAConstraintEmbeds(t *testing.T) {
	got := apiOf(t, `package p

import "fmt"

type Key interface{ comparable }
type Number interface{ ~int | ~float64 }
type Counted interface {
	Number
	fmt.Stringer
}
type Plain interface{ fmt.Stringer }
`)
	want := `pkg example.com/p, type Counted interface { String }
pkg example.com/p, type Counted interface, String() string
pkg example.com/p, type Counted interface, embedded Number
pkg example.com/p, type Counted interface, embedded fmt.Stringer
pkg example.com/p, type Key interface {}
pkg example.com/p, type Key interface, embedded comparable
pkg example.com/p, type Number interface {}
pkg example.com/p, type Number interface, embedded ~int | ~float64
pkg example.com/p, type Plain interface { String }
pkg example.com/p, type Plain interface, String() string`
	if got != want {
		t.Errorf("record:\n%s\n\nwant:\n%s", got, want)
	}
}

// TestRecordShowsAGenericAliasTypeParameters: an alias's constraint limits
// its callers as a type's does.
func TestRecordShowsAGenericAliasTypeParameters(t *testing.T) {
	got := apiOf(t, `package p

type List[T comparable] = []T
type Ints = List[int]
`)
	want := `pkg example.com/p, type Ints = []int
pkg example.com/p, type List[T comparable] = []T`
	if got != want {
		t.Errorf("record:\n%s\n\nwant:\n%s", got, want)
	}
}

// TestModuleAPIReadsExportDataAndSkipsADirectoryOfTestsOnly runs the whole
// command's path on a module: a directory with only _test.go files has no
// package to import and no API (it made apirecord fail), and a constant
// read from export data has the same line as one read from source.
func TestModuleAPIReadsExportDataAndSkipsADirectoryOfTestsOnly(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"go.mod":              "module example.com/m\n\ngo 1.26\n",
		"m.go":                "package m\n\nconst Big = 1234567.0\n\nconst Drift = 0.01\n",
		"onlytests/x_test.go": "package onlytests\n\nimport \"testing\"\n\nfunc TestX(*testing.T) {}\n",
		"internal/i/i.go":     "package i\n\nconst Hidden = 1\n",
	}
	for name, src := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	lines, err := moduleAPI(dir)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(lines, "\n")
	want := `pkg example.com/m, const Big untyped float = 1.234567e+06
pkg example.com/m, const Drift untyped float = 0.01`
	if got != want {
		t.Errorf("record:\n%s\n\nwant:\n%s", got, want)
	}
}
