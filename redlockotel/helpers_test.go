package redlockotel_test

import (
	"context"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/internal/redistest"
	"github.com/redlock-go/redlock/redlockotel"
)

// quiet drops go-redis's log lines: a frozen master makes it log.
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

// TestMain fails the tests if a goroutine outlives them: the providers, the
// lock clients and the redis clients must all be shut down.
func TestMain(m *testing.M) {
	redis.SetLogger(quiet{})
	goleak.VerifyTestMain(m)
}

// telemetry is an Observer recording into the SDK's in-memory reader and
// span recorder.
type telemetry struct {
	reader *sdkmetric.ManualReader
	mp     *sdkmetric.MeterProvider
	spans  *tracetest.SpanRecorder
	tp     *sdktrace.TracerProvider
	obs    *redlockotel.Observer
}

// newTelemetry returns the providers and an Observer on them, shut down in
// t.Cleanup (after the Clients made later in the test are closed).
func newTelemetry(t *testing.T, opts ...redlockotel.Option) *telemetry {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	t.Cleanup(func() {
		ctx := context.Background()
		if err := tp.Shutdown(ctx); err != nil {
			t.Errorf("tracer provider shutdown: %v", err)
		}
		if err := mp.Shutdown(ctx); err != nil {
			t.Errorf("meter provider shutdown: %v", err)
		}
	})
	obs, err := redlockotel.NewObserver(append([]redlockotel.Option{
		redlockotel.WithMeterProvider(mp), redlockotel.WithTracerProvider(tp)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return &telemetry{reader: reader, mp: mp, spans: sr, tp: tp, obs: obs}
}

// caller starts the span of the test's own work, the parent of the lock's.
func (tel *telemetry) caller(ctx context.Context) (context.Context, trace.Span) {
	return tel.tp.Tracer("test").Start(ctx, "caller")
}

// collect reads every metric recorded so far.
func (tel *telemetry) collect(t *testing.T) metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := tel.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	m := metrics{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != redlockotel.ScopeName {
			t.Fatalf("metrics of scope %q, want only %q", sm.Scope.Name, redlockotel.ScopeName)
		}
		for _, x := range sm.Metrics {
			m[x.Name] = x
		}
	}
	return m
}

// metrics are the collected metrics by name.
type metrics map[string]metricdata.Metrics

// get returns the metric named name, failing the test if there is none.
func (m metrics) get(t *testing.T, name string) metricdata.Metrics {
	t.Helper()
	x, ok := m[name]
	if !ok {
		t.Fatalf("no metric %s among %v", name, slices.Sorted(maps.Keys(m)))
	}
	return x
}

// sum returns the value of the counter or up-down counter name for exactly
// the attributes attrs: 0 when no such point was recorded.
func (m metrics) sum(t *testing.T, name string, attrs ...attribute.KeyValue) int64 {
	t.Helper()
	x, ok := m[name]
	if !ok {
		return 0
	}
	s, ok := x.Data.(metricdata.Sum[int64])
	if !ok {
		t.Fatalf("%s is a %T, want a Sum[int64]", name, x.Data)
	}
	want := attribute.NewSet(attrs...)
	for _, dp := range s.DataPoints {
		if dp.Attributes.Equals(&want) {
			return dp.Value
		}
	}
	return 0
}

// gauge returns the value of the int64 gauge name for exactly the
// attributes attrs, and whether such a point was recorded.
func (m metrics) gauge(t *testing.T, name string, attrs ...attribute.KeyValue) (int64, bool) {
	t.Helper()
	x, ok := m[name]
	if !ok {
		return 0, false
	}
	g, ok := x.Data.(metricdata.Gauge[int64])
	if !ok {
		t.Fatalf("%s is a %T, want a Gauge[int64]", name, x.Data)
	}
	want := attribute.NewSet(attrs...)
	for _, dp := range g.DataPoints {
		if dp.Attributes.Equals(&want) {
			return dp.Value, true
		}
	}
	return 0, false
}

// hist returns the histogram point of name for exactly the attributes
// attrs; Count is 0 when none was recorded.
func (m metrics) hist(t *testing.T, name string, attrs ...attribute.KeyValue) metricdata.HistogramDataPoint[float64] {
	t.Helper()
	x, ok := m[name]
	if !ok {
		return metricdata.HistogramDataPoint[float64]{}
	}
	h, ok := x.Data.(metricdata.Histogram[float64])
	if !ok {
		t.Fatalf("%s is a %T, want a Histogram[float64]", name, x.Data)
	}
	want := attribute.NewSet(attrs...)
	for _, dp := range h.DataPoints {
		if dp.Attributes.Equals(&want) {
			return dp
		}
	}
	return metricdata.HistogramDataPoint[float64]{}
}

// points returns every attribute set recorded for name.
func (m metrics) points(name string) []attribute.Set {
	var sets []attribute.Set
	switch d := m[name].Data.(type) {
	case metricdata.Sum[int64]:
		for _, dp := range d.DataPoints {
			sets = append(sets, dp.Attributes)
		}
	case metricdata.Histogram[float64]:
		for _, dp := range d.DataPoints {
			sets = append(sets, dp.Attributes)
		}
	case metricdata.Gauge[int64]:
		for _, dp := range d.DataPoints {
			sets = append(sets, dp.Attributes)
		}
	}
	return sets
}

// Metric attributes.
func outcome(o redlock.Outcome) attribute.KeyValue { return redlockotel.KeyOutcome.String(string(o)) }
func renewal(r bool) attribute.KeyValue            { return redlockotel.KeyRenewal.Bool(r) }
func master(addr string) attribute.KeyValue        { return redlockotel.KeyMaster.String(addr) }
func state(s string) attribute.KeyValue            { return redlockotel.KeyMasterState.String(s) }

// server returns the attributes that name the master s: server.address
// and server.port.
func server(s *redistest.Server) []attribute.KeyValue {
	return []attribute.KeyValue{redlockotel.KeyServerAddress.String("127.0.0.1"), redlockotel.KeyServerPort.Int(s.Port())}
}

// named returns the ended spans named name, in the order they ended.
func (tel *telemetry) named(name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range tel.spans.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

// attr returns the span's attribute k, and whether it has it.
func attr(s sdktrace.ReadOnlySpan, k attribute.Key) (attribute.Value, bool) {
	for _, kv := range s.Attributes() {
		if kv.Key == k {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

// childOf fails the test unless span s is a child of parent.
func childOf(t *testing.T, s sdktrace.ReadOnlySpan, parent trace.Span) {
	t.Helper()
	p := parent.SpanContext()
	if s.Parent().TraceID() != p.TraceID() || s.Parent().SpanID() != p.SpanID() || s.SpanContext().TraceID() != p.TraceID() {
		t.Errorf("span %s: parent %s/%s, want the caller's %s/%s", s.Name(),
			s.Parent().TraceID(), s.Parent().SpanID(), p.TraceID(), p.SpanID())
	}
}

// descendantOf fails t unless s's parent, or one of its ancestors among
// spans, is parent.
func descendantOf(t *testing.T, s sdktrace.ReadOnlySpan, spans []sdktrace.ReadOnlySpan, parent trace.Span) {
	t.Helper()
	p := parent.SpanContext()
	for cur := s; cur.SpanContext().TraceID() == p.TraceID(); {
		if cur.Parent().SpanID() == p.SpanID() {
			return
		}
		i := slices.IndexFunc(spans, func(x sdktrace.ReadOnlySpan) bool { return x.SpanContext().SpanID() == cur.Parent().SpanID() })
		if i < 0 {
			break
		}
		cur = spans[i]
	}
	t.Errorf("span %s: parent %s/%s, want the caller's %s/%s or a span below it", s.Name(),
		s.Parent().TraceID(), s.Parent().SpanID(), p.TraceID(), p.SpanID())
}

// cluster starts n redis-server processes and returns their clients
// (PINGed) and a Client over them observed by tel.
func cluster(t *testing.T, n int, tel *telemetry, opts ...redlock.Option) ([]*redistest.Server, []redis.UniversalClient, *redlock.Client) {
	t.Helper()
	servers := redistest.Start(t, n)
	clients := redistest.Clients(t, servers)
	return servers, clients, observed(t, clients, tel, opts...)
}

// observed returns a Client over clients observed by tel, closed in
// t.Cleanup.
func observed(t *testing.T, clients []redis.UniversalClient, tel *telemetry, opts ...redlock.Option) *redlock.Client {
	t.Helper()
	opts = append([]redlock.Option{redlock.WithNodeTimeout(500 * time.Millisecond), redlock.WithObserver(tel.obs)}, opts...)
	c, err := redlock.New(clients, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// addrs returns the servers' addresses.
func addrs(servers []*redistest.Server) []string {
	out := make([]string, len(servers))
	for i, s := range servers {
		out[i] = s.Addr()
	}
	return out
}

// tracingHook starts a span for every command or pipeline, as a go-redis
// tracing hook (redisotel) does: a child of the span in the command's
// context.
type tracingHook struct{ tracer trace.Tracer }

func (h tracingHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h tracingHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		ctx, span := h.tracer.Start(ctx, "redis."+cmd.Name(), trace.WithSpanKind(trace.SpanKindClient))
		defer span.End()
		return next(ctx, cmd)
	}
}
func (h tracingHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		ctx, span := h.tracer.Start(ctx, "redis.pipeline", trace.WithSpanKind(trace.SpanKindClient))
		defer span.End()
		return next(ctx, cmds)
	}
}
