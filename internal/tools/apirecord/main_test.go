package main

import (
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
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
