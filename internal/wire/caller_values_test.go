package wire

import (
	"context"
	"testing"
)

// uncomparableCtx is a context whose type == cannot compare.
type uncomparableCtx struct {
	context.Context
	tags []string
}

// TestBatchCarriesItsOneCallersValues: a batch whose requests all carry one
// caller's context runs with that context's values (a go-redis hook then
// sees the caller's span as its parent, also when a Release's last request
// shares the batch with the same caller's next call); a batch of several
// callers' requests carries none; a context type == cannot compare never
// panics the lane.
func TestBatchCarriesItsOneCallersValues(t *testing.T) {
	type key struct{}
	a := context.WithValue(context.Background(), key{}, "a")
	b := context.WithValue(context.Background(), key{}, "b")
	req := func(ctx context.Context) *request {
		r := &request{}
		r.op.Vals = ctx
		return r
	}
	if got := oneCaller([]*request{req(a)}); got != a {
		t.Errorf("one request: %v, want its caller's context", got)
	}
	if got := oneCaller([]*request{req(a), req(a), req(a)}); got != a {
		t.Errorf("three requests of one caller: %v, want its context", got)
	}
	if got := oneCaller([]*request{req(a), req(b)}); got != nil {
		t.Errorf("two callers: %v, want none", got)
	}
	u := uncomparableCtx{Context: a, tags: []string{"x"}}
	if got := oneCaller([]*request{req(u), req(u)}); got != nil {
		t.Errorf("an uncomparable context: %v, want none", got)
	}
	c := &deadlineCtx{vals: oneCaller([]*request{req(a), req(a)})}
	if v := c.Value(key{}); v != "a" {
		t.Errorf("the batch's context gives %v for the caller's value, want a", v)
	}
}
