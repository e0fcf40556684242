package redlockotel_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/redlockotel"
)

// keepingProvider is a TracerProvider that is not the SDK: its spans keep
// the slices Start and SetAttributes are given, as they are, and read them
// when they end (a lazy recorder, an exporter that formats at the end).
// The trace API does not ask an implementation to copy them.
type keepingProvider struct {
	embedded.TracerProvider
	mu    sync.Mutex
	spans []*keepingSpan
}

func (p *keepingProvider) Tracer(string, ...trace.TracerOption) trace.Tracer {
	return keepingTracer{p: p}
}

type keepingTracer struct {
	embedded.Tracer
	p *keepingProvider
}

func (t keepingTracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	_, inner := noop.NewTracerProvider().Tracer("").Start(ctx, name)
	s := &keepingSpan{Span: inner, name: name, opts: opts}
	t.p.mu.Lock()
	t.p.spans = append(t.p.spans, s)
	t.p.mu.Unlock()
	return trace.ContextWithSpan(ctx, s), s
}

type keepingSpan struct {
	trace.Span
	name  string
	opts  []trace.SpanStartOption // as given to Start
	attrs []attribute.KeyValue    // as given to SetAttributes
}

func (s *keepingSpan) IsRecording() bool                      { return true }
func (s *keepingSpan) SetAttributes(kv ...attribute.KeyValue) { s.attrs = kv }

// key returns the span's redlock.key as its attributes say now.
func (s *keepingSpan) key() string {
	for _, kv := range s.attrs {
		if kv.Key == redlockotel.KeyLockKey {
			return kv.Value.AsString()
		}
	}
	return ""
}

// TestSpansOfATracerThatKeepsItsArgumentsKeepTheirOwnAttributes: with a
// tracer that keeps the slices it is given (nothing in the trace API says
// it must copy them), each span still carries its own event's key and
// start options once later events were observed.
func TestSpansOfATracerThatKeepsItsArgumentsKeepTheirOwnAttributes(t *testing.T) {
	tp := &keepingProvider{}
	obs, err := redlockotel.NewObserver(redlockotel.WithTracerProvider(tp), redlockotel.WithMeterProvider(metricnoop.NewMeterProvider()))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	keys := []string{"first", "second", "third"}
	for _, k := range keys {
		obs.Observe(ctx, &redlock.ObtainEvent{Key: k, Attempts: 1, Wait: time.Millisecond, Outcome: redlock.Obtained})
	}
	if len(tp.spans) != len(keys) {
		t.Fatalf("%d spans, want %d", len(tp.spans), len(keys))
	}
	for i, s := range tp.spans {
		if got := s.key(); got != keys[i] {
			t.Errorf("span %d (%s) carries redlock.key %q, want %q: attributes %v", i, s.name, got, keys[i], s.attrs)
		}
		for j, o := range s.opts {
			if o == nil {
				t.Errorf("span %d (%s): start option %d is nil once the span ended", i, s.name, j)
			}
		}
	}
}
