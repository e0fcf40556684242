// Package redlockotel records the life of redlock's locks as OpenTelemetry
// metrics and spans: a [redlock.Observer] to set with [redlock.WithObserver].
//
//	obs, err := redlockotel.NewObserver() // the global MeterProvider and TracerProvider
//	if err != nil { ... }
//	locker, err := redlock.New(masters, redlock.WithObserver(obs))
//
// # Metrics
//
// Durations are in seconds ("s"), with explicit bucket boundaries (a View
// of the SDK can change them) in three sets: latencies and waits (0.5 ms to
// a minute), holds (5 ms to an hour), and validity (1 ms to 5 minutes: the
// validity left of a lock, and the time since its last good renewal). The
// attributes are redlock.outcome, how the operation ended (a
// [redlock.Outcome]: obtained, extended, released, taken, unavailable,
// lost, cancelled), redlock.renewal (true for a watchdog's renewal, false
// for a caller's Extend), redlock.lost.reason (a [redlock.LostReason]:
// refused, ran_out, max_hold), and for a master server.address and
// server.port (its address as its go-redis client knows it, split as
// OpenTelemetry's conventions do). No metric carries the lock's key unless
// [WithKeyAttribute] asks for it: keys are unbounded (one per user, per
// file), series must not be.
//
//   - redlock.obtain.duration (histogram, s, latencies; redlock.outcome):
//     an Obtain's wait, from the call until it returned, every attempt
//     included;
//   - redlock.obtains (observable counter, {obtain}; redlock.outcome):
//     Obtains, also Do's;
//   - redlock.obtain.attempts (observable counter, {attempt};
//     redlock.outcome): the attempts they made; more attempts than obtains
//     means contention;
//   - redlock.extend.duration (histogram, s, latencies; redlock.outcome,
//     redlock.renewal): an Extend's or a renewal's latency;
//   - redlock.extend.validity_left (histogram, s, validity;
//     redlock.outcome, redlock.renewal): the validity left when it started;
//   - redlock.extends (observable counter, {extend}; redlock.outcome,
//     redlock.renewal);
//   - redlock.hold.duration (histogram, s, holds; redlock.outcome): how long
//     a lock was held, from its Obtain until its Release;
//   - redlock.releases (observable counter, {release}; redlock.outcome);
//   - redlock.lost.locks (counter, {lock}; redlock.lost.reason): locks a
//     watchdog declared lost while their work ran;
//   - redlock.lost.since_renewal (histogram, s, validity;
//     redlock.lost.reason): how long after the last good renewal (or the
//     Obtain) a lock was declared lost;
//   - redlock.master.transitions (counter, {transition}; server.address,
//     server.port, redlock.master.state: up or down): a master stopped
//     answering, or answers again;
//   - redlock.master.up (gauge, {master}; server.address, server.port): 0
//     once a master stopped answering, 1 once it answers again, as the last
//     Client that saw it change reported. A master has no series until it
//     first stops answering.
//   - redlock.renewals.behind (up-down counter, {client}): 1 while a
//     Client's renewals are behind (a renewal waited more than 100ms past
//     its time for its turn, redlock.BacklogEvent: more locks held than it
//     renews in time), 0 once none
//     waits; summed over the Clients of the MeterProvider;
//   - redlock.renewals.backlogs (counter, {backlog}): the times renewals
//     fell behind;
//   - redlock.master.down (up-down counter, {master}; redlock.master):
//     deprecated, use redlock.master.up: 1 while the master does not
//     answer, per Client (two Clients that both find it down count 2).
//
// The counters count the same calls as the histograms beside them (a
// Prometheus user gets both, as _total and _count), for dashboards that
// read counters only. Those of obtains, attempts, extends and releases are
// observable counters: the Observer adds each event to sums of its own and
// reports them when a reader collects. A reader gets the sums a
// synchronous counter would give it, except that their points carry no
// exemplars, that a delta reader also gets a point (0) for a series that
// did not move, that a View or temporality selector that picks
// instruments by kind sees them as observable counters. The Observers of
// one MeterProvider share the sums, which last as long as the provider: a
// Client that closed, its Observer dropped, leaves its counts in them.
//
// # Spans
//
// The library tells an Observer about an operation after it ended, with the
// caller's context. Each span is made then, as a child of the span in that
// context, with a start time of now minus the operation's duration, so that
// it covers the operation: redlock.obtain (the wait), redlock.extend (a
// caller's Extend), redlock.renewal (a watchdog's), redlock.release (the
// Release, from the call until it returned) and redlock.lost (from the last
// good renewal, or the Obtain, until the work was told). A Do makes a
// redlock.obtain, its renewals, a redlock.lost if the lock was lost while
// fn ran, and a redlock.release, all children of the span in Do's context.
// Every span has redlock.key and redlock.outcome; the spans of Obtain,
// Extend, renewal and Release have the answers of the masters, whatever
// the outcome: redlock.masters (addresses), redlock.masters.answers (in
// the same order: "ok", or what went wrong) and redlock.masters.agreed. A
// span of an operation that did not succeed has status Error, the error as
// its description, and error.type set to its outcome. With a noop
// TracerProvider (go.opentelemetry.io/otel/trace/noop) the Observer makes
// no span at all.
//
// # go-redis hooks
//
// The spans that a go-redis tracing hook (redisotel) makes for the
// commands are not children of these spans, which did not exist yet while
// the commands ran: they are their siblings, children of the caller's span.
// The library hands a master's go-redis client the caller's context values
// with a batch of commands that carries one caller's request alone. A batch
// that carries several callers' requests (calls to one master at the same
// moment share a pipeline, and so do renewals that fall due together)
// carries none, and neither do the releases that clean up after a failed
// Obtain attempt, a Release called with a context already done, and the
// Releases that a master's lane sends again after a stall: their command
// spans start traces of their own.
package redlockotel

import (
	"context"
	"fmt"
	"net"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/redlock-go/redlock"
)

// ScopeName is the instrumentation scope of the meter and the tracer.
const ScopeName = "github.com/redlock-go/redlock/redlockotel"

// Attribute keys.
const (
	KeyOutcome     = attribute.Key("redlock.outcome")
	KeyRenewal     = attribute.Key("redlock.renewal")
	KeyMasterState = attribute.Key("redlock.master.state")
	KeyLockKey     = attribute.Key("redlock.key")
	KeyLostReason  = attribute.Key("redlock.lost.reason") // refused, ran_out or max_hold

	// A master, as OpenTelemetry's conventions name a server: the host
	// and the port of its address.
	KeyServerAddress = attribute.Key("server.address")
	KeyServerPort    = attribute.Key("server.port")

	// KeyMaster is a master's whole address, on redlock.master.down only.
	//
	// Deprecated: the other metrics name a master by KeyServerAddress and
	// KeyServerPort.
	KeyMaster = attribute.Key("redlock.master")

	// Span attributes only.
	KeyAttempts      = attribute.Key("redlock.attempts")
	KeyFence         = attribute.Key("redlock.fence")
	KeyMasters       = attribute.Key("redlock.masters")         // each master's address
	KeyAnswers       = attribute.Key("redlock.masters.answers") // each master's answer, in the order of redlock.masters
	KeyAgreed        = attribute.Key("redlock.masters.agreed")  // how many answered yes
	KeyValidityStart = attribute.Key("redlock.validity.before") // seconds of validity when an Extend started
	KeyValidityEnd   = attribute.Key("redlock.validity.after")  // seconds of validity when it returned
	KeyHeld          = attribute.Key("redlock.held")            // seconds since the Obtain
	KeySinceRenewal  = attribute.Key("redlock.since_renewal")   // seconds since the last good renewal
	KeyErrorType     = attribute.Key("error.type")
)

// Bucket boundaries, in seconds.
var (
	// latencyBuckets suit waits for a lock and the round trips to masters:
	// a local master answers in well under a millisecond, a wait with
	// retries can last a minute.
	latencyBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}
	// holdBuckets suit how long locks are held: a cache rebuild, a job,
	// a leader for an hour.
	holdBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 1800, 3600}
	// validityBuckets suit the validity left of a lock, and the time since
	// its last good renewal (a TTL of ms to minutes).
	validityBuckets = []float64{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300}
)

// An Option configures [NewObserver].
type Option func(*config)

type config struct {
	mp      metric.MeterProvider
	tp      trace.TracerProvider
	withKey bool
}

// WithMeterProvider records the metrics with mp instead of the global
// MeterProvider (otel.GetMeterProvider).
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) { c.mp = mp }
}

// WithTracerProvider records the spans with tp instead of the global
// TracerProvider (otel.GetTracerProvider). A noop provider
// (go.opentelemetry.io/otel/trace/noop) turns spans off, and the Observer
// then makes none.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) { c.tp = tp }
}

// WithKeyAttribute puts the lock's key (redlock.key) on the metrics of
// obtains, extends, releases and lost locks. Each key then makes series of
// its own, whose counts are kept as long as the MeterProvider lives: use it
// only for a small, fixed set of keys. Spans always carry the key.
func WithKeyAttribute() Option {
	return func(c *config) { c.withKey = true }
}

// An Observer records the events of redlock Clients as metrics and spans.
// It is safe for concurrent use, and may serve several Clients.
//
// With metrics alone (a noop TracerProvider) it starts no span, and
// recording an event allocates nothing, unless WithKeyAttribute puts the
// key on the metrics (an attribute set per event).
type Observer struct {
	// Rules of cost, measured by BenchmarkObserve and
	// BenchmarkObservedLocks:
	//   - The attribute sets of every known outcome, renewal and lost
	//     reason are made once, by NewObserver, and a master's on its first
	//     event; with a noop TracerProvider no span is started: recording
	//     an event allocates nothing
	//     (TestMetricsAloneAllocateNothingPerEvent), without
	//     WithKeyAttribute (whose sets, with the key, are made per event).
	//   - The event counters (redlock.obtains, redlock.obtain.attempts,
	//     redlock.extends, redlock.releases) are observable: an event adds
	//     to the sums kept with its attribute set (an atomic add, where a
	//     synchronous counter's Add costs the SDK an attribute lookup and
	//     an exemplar offer), and report gives the sums to the
	//     MeterProvider when a reader collects. A cumulative reader sees
	//     the points a synchronous counter would give it: a series from the
	//     first event counted in it, summed over the Observers that share
	//     the provider; a delta reader also gets 0 for a series that did
	//     not move (TestCountersSumTheEventsOfEveryObserverOfAProvider).
	//     Their points carry no exemplars. The Observers of one meter
	//     share one tally, and one callback that holds the tally, not an
	//     Observer: a dropped Observer is garbage
	//     (TestADroppedObserverIsCollected), its counts stay in the sums,
	//     which never fall while the provider lives
	//     (TestADroppedObserverLeavesTheSumsOfTheOthersMonotonic), and
	//     neither memory nor collection grows with the Observers made.
	//   - A span gets its attributes in one call. The masters' addresses,
	//     and answers that are all "ok", are attributes made once for the
	//     last set of masters seen, used only for events with those very
	//     masters (TestSpansCoverTheirEventAndCarryTheMastersAnswers).

	tracer  trace.Tracer // nil: spans off
	withKey bool

	obtainDur      metric.Float64Histogram
	extendDur      metric.Float64Histogram
	validityLeft   metric.Float64Histogram
	holdDur        metric.Float64Histogram
	lost           metric.Int64Counter
	lostSince      metric.Float64Histogram
	masterTransits metric.Int64Counter
	masterUp       metric.Int64Gauge
	masterDown     metric.Int64UpDownCounter // deprecated
	behind         metric.Int64UpDownCounter
	backlogs       metric.Int64Counter

	t       *tally                // the metric attribute sets of events, and their counts; shared by the Observers of the meter
	reasons [len(reasons)]measure // by lost reason, without a key; read-only
	masters sync.Map              // address -> *masterSets
	spanned atomic.Pointer[mastersAttrs]
}

var _ redlock.Observer = (*Observer)(nil)

// NewObserver returns an Observer that records with the global providers,
// or those the options name. An error means an instrument could not be
// created.
func NewObserver(opts ...Option) (*Observer, error) {
	var cfg config
	for _, opt := range opts {
		opt(&cfg)
	}
	if cfg.mp == nil {
		cfg.mp = otel.GetMeterProvider()
	}
	if cfg.tp == nil {
		cfg.tp = otel.GetTracerProvider()
	}
	m := cfg.mp.Meter(ScopeName)
	o := &Observer{withKey: cfg.withKey}
	if _, off := cfg.tp.(noop.TracerProvider); !off {
		o.tracer = cfg.tp.Tracer(ScopeName)
	}
	o.makeSets()
	var err error
	note := func(name string, e error) {
		if e != nil && err == nil {
			err = fmt.Errorf("redlockotel: %s: %w", name, e)
		}
	}
	hist := func(name, desc string, buckets []float64) metric.Float64Histogram {
		h, e := m.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc), metric.WithExplicitBucketBoundaries(buckets...))
		note(name, e)
		return h
	}
	counter := func(name, unit, desc string) metric.Int64Counter {
		c, e := m.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		note(name, e)
		return c
	}
	o.obtainDur = hist("redlock.obtain.duration", "How long an Obtain waited, from the call until it returned, every attempt included.", latencyBuckets)
	o.extendDur = hist("redlock.extend.duration", "How long an Extend or a watchdog's renewal took.", latencyBuckets)
	o.validityLeft = hist("redlock.extend.validity_left", "The lock's validity left when an Extend or a renewal started.", validityBuckets)
	o.holdDur = hist("redlock.hold.duration", "How long a lock was held, from its Obtain to its Release.", holdBuckets)
	o.lost = counter("redlock.lost.locks", "{lock}", "Locks a watchdog declared lost while work ran, by reason.")
	o.lostSince = hist("redlock.lost.since_renewal", "How long after the last good renewal (or the Obtain) a lock was declared lost.", validityBuckets)
	o.backlogs = counter("redlock.renewals.backlogs", "{backlog}", "Times a Client's renewals fell behind: a renewal waited more than 100ms past its time for its turn.")
	o.masterTransits = counter("redlock.master.transitions", "{transition}", "Masters that stopped answering (down) or answer again (up).")
	up, e := m.Int64Gauge("redlock.master.up", metric.WithUnit("{master}"),
		metric.WithDescription("1 once a master answers again, 0 once it stopped answering."))
	note("redlock.master.up", e)
	o.masterUp = up
	down, e := m.Int64UpDownCounter("redlock.master.down", metric.WithUnit("{master}"),
		metric.WithDescription("Deprecated: use redlock.master.up. 1 while a master does not answer, 0 once it answers again (per Client)."))
	note("redlock.master.down", e)
	o.masterDown = down
	behind, e := m.Int64UpDownCounter("redlock.renewals.behind", metric.WithUnit("{client}"),
		metric.WithDescription("1 while a Client's renewals are behind (more locks held than it renews in time), 0 once none waits."))
	note("redlock.renewals.behind", e)
	o.behind = behind
	if err != nil {
		return nil, err
	}
	if o.t, err = tallyOf(m); err != nil {
		return nil, err
	}
	return o, nil
}

// Transient reports true: the Observer keeps nothing of an event once
// Observe returns (spans and measurements get copies of its values), so
// that a Client may reuse its events (redlock.TransientObserver). A type
// that embeds the Observer inherits Transient: if it keeps events, it must
// say so with a Transient of its own that reports false.
// (TestTheObserverIsTransient)
func (o *Observer) Transient() bool { return true }

// Observe records e. It ignores the events it does not know.
func (o *Observer) Observe(ctx context.Context, e redlock.Event) {
	switch e := e.(type) {
	case *redlock.ObtainEvent:
		o.obtain(ctx, e)
	case *redlock.ExtendEvent:
		o.extend(ctx, e)
	case *redlock.ReleaseEvent:
		o.release(ctx, e)
	case *redlock.LostEvent:
		o.lose(ctx, e)
	case *redlock.MasterEvent:
		o.master(ctx, e)
	case *redlock.BacklogEvent:
		o.backlog(ctx, e)
	}
}

func (o *Observer) backlog(ctx context.Context, e *redlock.BacklogEvent) {
	if e.Behind {
		o.backlogs.Add(ctx, 1)
		o.behind.Add(ctx, 1)
		return
	}
	o.behind.Add(ctx, -1)
}

// Each event's span is started first, so that the histograms' measurements
// are made in its context: an exemplar then links a metric to the span.

func (o *Observer) obtain(ctx context.Context, e *redlock.ObtainEvent) {
	ctx, span := o.start(ctx, "redlock.obtain", e.Wait)
	attrs := o.attrs(e.Key, e.Outcome, renewalNone)
	o.obtainDur.Record(ctx, e.Wait.Seconds(), attrs.rec...)
	attrs.counts[countObtains].add(1)
	attrs.counts[countAttempts].add(int64(e.Attempts))
	if span == nil {
		return
	}
	kv := append(make([]attribute.KeyValue, 0, spanAttrs), KeyAttempts.Int(e.Attempts))
	if e.Fence != 0 {
		kv = append(kv, KeyFence.Int64(e.Fence))
	}
	o.end(span, e.Key, e.Outcome, redlock.Obtained, e.Masters, e.Err, kv)
}

func (o *Observer) extend(ctx context.Context, e *redlock.ExtendEvent) {
	r, name := renewalFalse, "redlock.extend"
	if e.Renewal {
		r, name = renewalTrue, "redlock.renewal"
	}
	ctx, span := o.start(ctx, name, e.Latency)
	attrs := o.attrs(e.Key, e.Outcome, r)
	o.extendDur.Record(ctx, e.Latency.Seconds(), attrs.rec...)
	o.validityLeft.Record(ctx, e.Before.Seconds(), attrs.rec...)
	attrs.counts[countExtends].add(1)
	if span == nil {
		return
	}
	kv := append(make([]attribute.KeyValue, 0, spanAttrs), KeyRenewal.Bool(e.Renewal), KeyValidityStart.Float64(e.Before.Seconds()), KeyValidityEnd.Float64(e.After.Seconds()))
	o.end(span, e.Key, e.Outcome, redlock.Extended, e.Masters, e.Err, kv)
}

func (o *Observer) release(ctx context.Context, e *redlock.ReleaseEvent) {
	ctx, span := o.start(ctx, "redlock.release", e.Latency)
	attrs := o.attrs(e.Key, e.Outcome, renewalNone)
	o.holdDur.Record(ctx, e.Held.Seconds(), attrs.rec...)
	attrs.counts[countReleases].add(1)
	if span == nil {
		return
	}
	kv := append(make([]attribute.KeyValue, 0, spanAttrs), KeyHeld.Float64(e.Held.Seconds()))
	o.end(span, e.Key, e.Outcome, redlock.Released, e.Masters, e.Err, kv)
}

func (o *Observer) lose(ctx context.Context, e *redlock.LostEvent) {
	// The span covers the time from the last good renewal (or the
	// Obtain) until the work was told.
	ctx, span := o.start(ctx, "redlock.lost", e.SinceRenewal)
	attrs, ok := measure{}, false
	if i := reasonIndex(e.Reason); i >= 0 && !o.withKey {
		attrs, ok = o.reasons[i], true
	}
	if !ok {
		kv := []attribute.KeyValue{KeyLostReason.String(string(e.Reason))}
		if o.withKey {
			kv = append(kv, KeyLockKey.String(e.Key))
		}
		attrs = measureOf(attribute.NewSet(kv...))
	}
	o.lost.Add(ctx, 1, attrs.add...)
	o.lostSince.Record(ctx, e.SinceRenewal.Seconds(), attrs.rec...)
	if span == nil {
		return
	}
	kv := append(make([]attribute.KeyValue, 0, spanAttrs), KeyHeld.Float64(e.Held.Seconds()), KeySinceRenewal.Float64(e.SinceRenewal.Seconds()), KeyLostReason.String(string(e.Reason)))
	o.end(span, e.Key, redlock.Lost, "", nil, e.Cause, kv)
}

func (o *Observer) master(ctx context.Context, e *redlock.MasterEvent) {
	ms := o.masterOf(e.Addr)
	if e.Up {
		o.masterTransits.Add(ctx, 1, ms.up.add...)
		o.masterUp.Record(ctx, 1, ms.server.rec...)
		o.masterDown.Add(ctx, -1, ms.legacy.add...)
	} else {
		o.masterTransits.Add(ctx, 1, ms.down.add...)
		o.masterUp.Record(ctx, 0, ms.server.rec...)
		o.masterDown.Add(ctx, 1, ms.legacy.add...)
	}
}

// masterSets are the attribute sets of one master's metrics.
type masterSets struct {
	up, down measure // server.address, server.port and redlock.master.state
	server   measure // server.address and server.port
	legacy   measure // redlock.master
}

// masterOf returns the attribute sets of the master at addr, made on its
// first event.
func (o *Observer) masterOf(addr string) *masterSets {
	if v, ok := o.masters.Load(addr); ok {
		return v.(*masterSets)
	}
	server := []attribute.KeyValue{KeyServerAddress.String(addr)}
	if host, port, err := net.SplitHostPort(addr); err == nil {
		server[0] = KeyServerAddress.String(host)
		if p, err := strconv.Atoi(port); err == nil {
			server = append(server, KeyServerPort.Int(p))
		}
	}
	with := func(state string) measure {
		return measureOf(attribute.NewSet(append(server[:len(server):len(server)], KeyMasterState.String(state))...))
	}
	ms := &masterSets{up: with("up"), down: with("down"), server: measureOf(attribute.NewSet(server...)),
		legacy: measureOf(attribute.NewSet(KeyMaster.String(addr)))}
	v, _ := o.masters.LoadOrStore(addr, ms)
	return v.(*masterSets)
}

var internal = trace.WithSpanKind(trace.SpanKindInternal)

// spanAttrs is how many attributes a span gets at most: an extend's three,
// and the six end adds (the key, the outcome, the masters' three and
// error.type).
const spanAttrs = 3 + 6

// start starts a span named name that began d ago, as a child of the span
// in ctx; with spans off it returns ctx and a nil span. The options and
// attributes a span is given are its own, never reused: a tracer may keep
// them (TestSpansOfATracerThatKeepsItsArgumentsKeepTheirOwnAttributes).
func (o *Observer) start(ctx context.Context, name string, d time.Duration) (context.Context, trace.Span) {
	if o.tracer == nil {
		return ctx, nil
	}
	return o.tracer.Start(ctx, name, trace.WithTimestamp(time.Now().Add(-d)), internal)
}

// end gives the span its key, outcome, the attributes in kv, the masters'
// answers and its status, unless it records nothing, and ends it. ok is
// the outcome of success.
func (o *Observer) end(span trace.Span, key string, out, ok redlock.Outcome, masters []redlock.NodeError, err error, kv []attribute.KeyValue) {
	defer span.End()
	if !span.IsRecording() {
		return
	}
	kv = append(kv, KeyLockKey.String(key), KeyOutcome.String(string(out)))
	if len(masters) > 0 {
		kv = append(kv, o.mastersAttrs(masters)...)
	}
	if out != ok {
		kv = append(kv, KeyErrorType.String(string(out)))
	}
	span.SetAttributes(kv...)
	if out != ok {
		desc := string(out)
		if err != nil {
			desc = err.Error()
		}
		span.SetStatus(codes.Error, desc)
	}
}

// mastersAttrs are the attributes of one set of masters: their addresses,
// and their answers when all are "ok", made once.
type mastersAttrs struct {
	addrs []string
	kv    [3]attribute.KeyValue // redlock.masters, and all-ok redlock.masters.answers and redlock.masters.agreed
}

// mastersAttrs returns the span attributes of the masters' answers. The
// addresses, and answers that are all "ok", are those of the last set of
// masters seen when they match it.
func (o *Observer) mastersAttrs(masters []redlock.NodeError) []attribute.KeyValue {
	ma := o.spanned.Load()
	if ma == nil || !sameAddrs(ma.addrs, masters) {
		addrs := make([]string, len(masters))
		oks := make([]string, len(masters))
		for i, n := range masters {
			addrs[i], oks[i] = n.Addr, "ok"
		}
		ma = &mastersAttrs{addrs: addrs, kv: [3]attribute.KeyValue{KeyMasters.StringSlice(addrs),
			KeyAnswers.StringSlice(oks), KeyAgreed.Int(len(masters))}}
		o.spanned.Store(ma)
	}
	agreed := 0
	for _, n := range masters {
		if n.Err == nil {
			agreed++
		}
	}
	if agreed == len(masters) {
		return ma.kv[:]
	}
	answers := make([]string, len(masters))
	for i, n := range masters {
		if n.Err == nil {
			answers[i] = "ok"
		} else {
			answers[i] = strings.TrimPrefix(n.Err.Error(), "redlock: ")
		}
	}
	return []attribute.KeyValue{ma.kv[0], KeyAnswers.StringSlice(answers), KeyAgreed.Int(agreed)}
}

func sameAddrs(addrs []string, masters []redlock.NodeError) bool {
	if len(addrs) != len(masters) {
		return false
	}
	for i, n := range masters {
		if addrs[i] != n.Addr {
			return false
		}
	}
	return true
}

type renewalAttr uint8

const (
	renewalNone renewalAttr = iota // the event has no such attribute
	renewalFalse
	renewalTrue
)

// A measure is a set of metric attributes, as the options Record, Add and
// Observe take: made once, they cost no allocation per measurement. With
// the event counters' counts for the set, unless nil.
type measure struct {
	rec    []metric.RecordOption
	add    []metric.AddOption
	obs    []metric.ObserveOption
	counts *[numCounted]count
}

func measureOf(set attribute.Set) measure {
	o := metric.WithAttributeSet(set)
	return measure{rec: []metric.RecordOption{o}, add: []metric.AddOption{o}, obs: []metric.ObserveOption{o}}
}

// The event counters, indexes of Observer.counted and of a measure's
// counts.
const (
	countObtains  = iota // redlock.obtains
	countAttempts        // redlock.obtain.attempts
	countExtends         // redlock.extends
	countReleases        // redlock.releases
	numCounted
)

// A count is one event counter's cumulative sum for one attribute set.
// It has a series from its first add on, even an add of 0, as a
// synchronous counter has from its first Add.
type count struct {
	n    atomic.Int64
	seen atomic.Bool
}

func (c *count) add(n int64) {
	if !c.seen.Load() {
		c.seen.Store(true)
	}
	c.n.Add(n)
}

// A tally is what the event counters' callback reads (report): the
// counters, and the attribute sets of events with their counts. The
// Observers of one meter share it (tallyOf), and its callback, registered
// once, lasts as long as the meter's provider: the counts of an Observer
// the program dropped stay in the sums, as a synchronous counter's would.
// It holds no Observer, so that a dropped Observer is garbage
// (TestADroppedObserverIsCollected,
// TestADroppedObserverLeavesTheSumsOfTheOthersMonotonic).
type tally struct {
	meter   metric.Meter                              // whose instruments counted are
	counted [numCounted]metric.Int64ObservableCounter // by count index (countObtains...)
	sets    [len(outcomes)][3]measure                 // by outcome index and renewalAttr, without a key; read-only
	other   sync.Map                                  // attribute.Distinct -> measure: the sets with a key or an unknown outcome
}

// tallies finds the tally of a meter by the meter's address, holding
// neither: the meter's provider holds the tally (its callback), and the
// tally its meter.
var tallies struct {
	sync.Mutex
	m map[uintptr]weak.Pointer[tally]
}

// tallyOf returns the tally of the Observers of m, made and registered
// with m on the first. A meter that is not a pointer (a noop meter) gets a
// tally per Observer, registered for as long as m's provider lives.
func tallyOf(m metric.Meter) (*tally, error) {
	v := reflect.ValueOf(m)
	if v.Kind() != reflect.Pointer || v.IsNil() {
		return newTally(m)
	}
	addr := v.Pointer()
	tallies.Lock()
	defer tallies.Unlock()
	if t := tallies.m[addr].Value(); t != nil && t.meter == m {
		return t, nil
	}
	t, err := newTally(m)
	if err != nil {
		return nil, err
	}
	if tallies.m == nil {
		tallies.m = make(map[uintptr]weak.Pointer[tally])
	}
	w := weak.Make(t)
	tallies.m[addr] = w
	runtime.AddCleanup(t, func(w weak.Pointer[tally]) {
		tallies.Lock()
		defer tallies.Unlock()
		if tallies.m[addr] == w {
			delete(tallies.m, addr)
		}
	}, w)
	return t, nil
}

// newTally makes the event counters of m, the attribute sets without a
// key with their counts, and registers the callback that reports them.
func newTally(m metric.Meter) (*tally, error) {
	t := &tally{meter: m}
	for i, out := range outcomes {
		for _, r := range []renewalAttr{renewalNone, renewalFalse, renewalTrue} {
			ms := measureOf(makeSet("", false, out, r))
			ms.counts = new([numCounted]count)
			t.sets[i][r] = ms
		}
	}
	for _, c := range []struct {
		i                int
		name, unit, desc string
	}{
		{countObtains, "redlock.obtains", "{obtain}", "Obtains, by outcome."},
		{countAttempts, "redlock.obtain.attempts", "{attempt}", "Attempts the Obtains made, the first included."},
		{countExtends, "redlock.extends", "{extend}", "Extends and renewals, by outcome."},
		{countReleases, "redlock.releases", "{release}", "Releases, by outcome."},
	} {
		ctr, err := m.Int64ObservableCounter(c.name, metric.WithUnit(c.unit), metric.WithDescription(c.desc))
		if err != nil {
			return nil, fmt.Errorf("redlockotel: %s: %w", c.name, err)
		}
		t.counted[c.i] = ctr
	}
	if _, err := m.RegisterCallback(t.report, t.counted[0], t.counted[1], t.counted[2], t.counted[3]); err != nil {
		return nil, fmt.Errorf("redlockotel: counters' callback: %w", err)
	}
	return t, nil
}

// report observes the event counters' sums: the callback the MeterProvider
// calls when a reader collects.
func (t *tally) report(_ context.Context, obs metric.Observer) error {
	for i := range t.sets {
		for _, m := range t.sets[i] {
			t.reportSet(obs, m)
		}
	}
	t.other.Range(func(_, v any) bool {
		t.reportSet(obs, v.(measure))
		return true
	})
	return nil
}

// reportSet observes the counts of one attribute set that have a series.
func (t *tally) reportSet(obs metric.Observer, m measure) {
	for i := range m.counts {
		if c := &m.counts[i]; c.seen.Load() {
			obs.ObserveInt64(t.counted[i], c.n.Load(), m.obs...)
		}
	}
}

// outcomes are the outcomes whose attribute sets NewObserver makes once.
var outcomes = [...]redlock.Outcome{redlock.Obtained, redlock.Extended, redlock.Released, redlock.Taken,
	redlock.Unavailable, redlock.Lost, redlock.Cancelled}

// reasons are the lost reasons whose attribute sets NewObserver makes once.
var reasons = [...]redlock.LostReason{redlock.Refused, redlock.RanOut, redlock.MaxHold}

func outcomeIndex(out redlock.Outcome) int {
	for i, o := range outcomes {
		if o == out {
			return i
		}
	}
	return -1
}

func reasonIndex(r redlock.LostReason) int {
	for i, x := range reasons {
		if x == r {
			return i
		}
	}
	return -1
}

// makeSets makes the attribute sets of lost locks without a key, once
// (those of the event counters are their tally's: newTally).
func (o *Observer) makeSets() {
	for i, r := range reasons {
		o.reasons[i] = measureOf(attribute.NewSet(KeyLostReason.String(string(r))))
	}
}

// attrs returns the metric attributes of an event: its outcome, whether it
// is a renewal (for r other than renewalNone), and its key if asked for.
func (o *Observer) attrs(key string, out redlock.Outcome, r renewalAttr) measure {
	if !o.withKey {
		if i := outcomeIndex(out); i >= 0 {
			return o.t.sets[i][r]
		}
	}
	set := makeSet(key, o.withKey, out, r)
	if v, ok := o.t.other.Load(set.Equivalent()); ok {
		return v.(measure)
	}
	m := measureOf(set)
	m.counts = new([numCounted]count)
	v, _ := o.t.other.LoadOrStore(set.Equivalent(), m)
	return v.(measure)
}

func makeSet(key string, withKey bool, out redlock.Outcome, r renewalAttr) attribute.Set {
	kv := make([]attribute.KeyValue, 0, 3)
	kv = append(kv, KeyOutcome.String(string(out)))
	if r != renewalNone {
		kv = append(kv, KeyRenewal.Bool(r == renewalTrue))
	}
	if withKey {
		kv = append(kv, KeyLockKey.String(key))
	}
	return attribute.NewSet(kv...)
}
