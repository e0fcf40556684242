package main

import (
	"context"
	"math"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.uber.org/goleak"
)

// TestMain fails the tests if run leaves a goroutine behind: the HTTP
// server, the meter provider, the lock client, the redis clients and the
// miniredis servers must all be closed.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestServesLockMetrics runs two rounds of the workload, scrapes /metrics
// over HTTP as Prometheus would, and checks the lock series: their names,
// types and labels, and counts that agree with what the workload did.
func TestServesLockMetrics(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := config{workers: 10, entries: 2, work: 800 * time.Millisecond, ttl: 2 * time.Second, rounds: 2, every: 10 * time.Millisecond}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	out := &buffer{}
	done := make(chan error, 1)
	go func() { done <- run(ctx, cfg, ln, out) }()

	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(out.String(), "rounds done") {
		if time.Now().After(deadline) {
			t.Fatalf("the rounds did not finish; output:\n%s", out.String())
		}
		select {
		case err := <-done:
			t.Fatalf("run returned early: %v\n%s", err, out.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	fams := scrape(t, "http://"+ln.Addr().String()+"/metrics")
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}

	// What the workload did, from its output: each entry rebuilt once a round.
	rounds := regexp.MustCompile(`(?m)^round \d+: (\d+) rebuilt`).FindAllStringSubmatch(out.String(), -1)
	if len(rounds) != cfg.rounds {
		t.Fatalf("%d rounds in the output, want %d:\n%s", len(rounds), cfg.rounds, out.String())
	}
	for _, r := range rounds {
		if n, _ := strconv.Atoi(r[1]); n != cfg.entries {
			t.Errorf("a round rebuilt %d entries, want %d:\n%s", n, cfg.entries, out.String())
		}
	}

	obtained := value(t, fams, "redlock_obtains_total", dto.MetricType_COUNTER, "redlock_outcome", "obtained")
	taken := value(t, fams, "redlock_obtains_total", dto.MetricType_COUNTER, "redlock_outcome", "taken")
	if obtained < float64(cfg.rounds*cfg.entries) || taken == 0 {
		t.Errorf("redlock_obtains_total: obtained %g, taken %g; want at least one obtained per entry and round (%d), and some taken",
			obtained, taken, cfg.rounds*cfg.entries)
	}
	if total := obtained + taken; total > float64(cfg.rounds*cfg.workers*cfg.entries) {
		t.Errorf("%g obtains, more than the %d requests", total, cfg.rounds*cfg.workers*cfg.entries)
	}
	if got := value(t, fams, "redlock_obtain_attempts_total", dto.MetricType_COUNTER, "redlock_outcome", "obtained"); got != obtained {
		t.Errorf("redlock_obtain_attempts_total{obtained} = %g, want %g (one attempt each)", got, obtained)
	}
	wait := histogram(t, fams, "redlock_obtain_duration_seconds", "redlock_outcome", "taken")
	if float64(wait.GetSampleCount()) != taken {
		t.Errorf("redlock_obtain_duration_seconds{taken} counts %d, redlock_obtains_total %g", wait.GetSampleCount(), taken)
	}
	var bounds []float64
	for _, b := range wait.GetBucket() {
		if !math.IsInf(b.GetUpperBound(), 1) {
			bounds = append(bounds, b.GetUpperBound())
		}
	}
	if len(bounds) == 0 || bounds[0] != 0.0005 || bounds[len(bounds)-1] != 60 {
		t.Errorf("redlock_obtain_duration_seconds's buckets %v, want 0.5ms to 60s", bounds)
	}
	// Every obtained lock was released (on a loaded machine a Release may
	// find the masters unavailable: another outcome, still counted), and
	// held at least as long as its rebuild.
	if got := value(t, fams, "redlock_releases_total", dto.MetricType_COUNTER, "redlock_outcome", "released"); got == 0 {
		t.Error("redlock_releases_total{released} = 0")
	}
	var releases, holds, held float64
	for _, m := range fams["redlock_releases_total"].GetMetric() {
		releases += m.GetCounter().GetValue()
	}
	for _, m := range fams["redlock_hold_duration_seconds"].GetMetric() {
		holds += float64(m.GetHistogram().GetSampleCount())
		held += m.GetHistogram().GetSampleSum()
	}
	if releases != obtained || holds != obtained {
		t.Errorf("%g releases and %g holds, want one per obtained lock (%g)", releases, holds, obtained)
	}
	if rebuilds := float64(cfg.rounds*cfg.entries) * cfg.work.Seconds(); held < rebuilds {
		t.Errorf("locks held %gs in all, less than the rebuilds' %gs", held, rebuilds)
	}
	if got := value(t, fams, "redlock_extends_total", dto.MetricType_COUNTER, "redlock_outcome", "extended", "redlock_renewal", "true"); got == 0 {
		t.Error("redlock_extends_total{extended,renewal}: no renewal, though each rebuild outlasts a third of the TTL")
	}
	histogram(t, fams, "redlock_extend_duration_seconds", "redlock_outcome", "extended", "redlock_renewal", "true")
	histogram(t, fams, "redlock_extend_validity_left_seconds", "redlock_outcome", "extended", "redlock_renewal", "true")

	// Bounded labels: never the lock's key; the scope on every series.
	for name, f := range fams {
		if !strings.HasPrefix(name, "redlock_") {
			continue
		}
		for _, m := range f.GetMetric() {
			if label(m, "redlock_key") != "" {
				t.Errorf("%s carries the lock key", name)
			}
			if got := label(m, "otel_scope_name"); got != "github.com/redlock-go/redlock/redlockotel" {
				t.Errorf("%s: otel_scope_name %q", name, got)
			}
		}
	}
}

func TestRunRejectsBadConfig(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := run(t.Context(), config{workers: 0, entries: 1}, ln, &buffer{}); err == nil {
		t.Error("run with 0 workers succeeded, want an error")
	}
}

// scrape GETs url and parses the Prometheus text format.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
	defer client.CloseIdleConnections()
	resp, err := client.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return fams
}

// series returns the one series of family name whose labels include the
// pairs in kv, failing the test if the family is not of type typ or has
// no such series.
func series(t *testing.T, fams map[string]*dto.MetricFamily, name string, typ dto.MetricType, kv ...string) *dto.Metric {
	t.Helper()
	f, ok := fams[name]
	if !ok {
		var names []string
		for n := range fams {
			if strings.HasPrefix(n, "redlock_") {
				names = append(names, n)
			}
		}
		t.Fatalf("no %s among the scraped series %v", name, names)
	}
	if f.GetType() != typ {
		t.Fatalf("%s is a %v, want a %v", name, f.GetType(), typ)
	}
next:
	for _, m := range f.GetMetric() {
		for i := 0; i+1 < len(kv); i += 2 {
			if label(m, kv[i]) != kv[i+1] {
				continue next
			}
		}
		return m
	}
	t.Fatalf("no %s series with %v", name, kv)
	return nil
}

// value returns the value of a counter series (see series).
func value(t *testing.T, fams map[string]*dto.MetricFamily, name string, typ dto.MetricType, kv ...string) float64 {
	t.Helper()
	return series(t, fams, name, typ, kv...).GetCounter().GetValue()
}

// histogram returns a histogram series (see series).
func histogram(t *testing.T, fams map[string]*dto.MetricFamily, name string, kv ...string) *dto.Histogram {
	t.Helper()
	return series(t, fams, name, dto.MetricType_HISTOGRAM, kv...).GetHistogram()
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// buffer is an io.Writer safe for the test to read while run writes.
type buffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (b *buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
