// Command metrics serves the lock metrics of a running workload to
// Prometheus, through redlockotel and OpenTelemetry's Prometheus exporter.
//
//	go run .                           # 5 in-process Redis masters; metrics on http://localhost:9464/metrics
//	go run . -listen :9090 -rounds 10  # stop the workload after 10 rounds, keep serving until Ctrl-C
//	go run . -masters h1:6379,h2:6379,h3:6379
//
// The workload is the cache-rebuild example's, in rounds: every -every,
// -entries cache entries go stale at once and each of -workers goroutines
// (standing for replicas) asks for each of them. A worker that finds an
// entry stale tries its lock once; the winner rebuilds the entry (-work of
// simulated effort) under Lock.Do, which renews the lock while the rebuild
// runs and releases it after, and the others serve the stale value. Every
// lock operation is counted and timed by the redlockotel Observer:
//
//	curl -s localhost:9464/metrics | grep ^redlock_
//
// shows redlock_obtains_total{redlock_outcome="obtained"} (one per entry
// and round), {redlock_outcome="taken"} (the workers that served the stale
// value), redlock_obtain_duration_seconds, redlock_hold_duration_seconds,
// redlock_extends_total{redlock_renewal="true"} and the others that
// redlockotel's README lists. The program is a module of its own, so that
// the library's go.mod needs neither OpenTelemetry nor Prometheus.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/otlptranslator"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/examples/internal/servers"
	"github.com/redlock-go/redlock/redlockotel"
)

// config is what the flags set.
type config struct {
	masters []string      // real Redis masters; none: start 5 miniredis
	workers int           // concurrent workers, standing for replicas
	entries int           // cache entries that go stale each round
	work    time.Duration // how long one rebuild takes
	ttl     time.Duration // lock TTL; Lock.Do renews it every ttl/3
	rounds  int           // rounds to run; 0: until interrupted
	every   time.Duration // pause between rounds
}

func main() {
	var cfg config
	var masters, listen string
	flag.StringVar(&listen, "listen", "localhost:9464", "`address` to serve /metrics on")
	flag.StringVar(&masters, "masters", "", "comma-separated `addresses` of real Redis masters (one address: single-instance lock)\n(default: 5 in-process miniredis servers)")
	flag.IntVar(&cfg.workers, "workers", 20, "concurrent workers, standing for replicas")
	flag.IntVar(&cfg.entries, "entries", 4, "cache entries that go stale each round")
	flag.DurationVar(&cfg.work, "work", 500*time.Millisecond, "how long one rebuild takes")
	flag.DurationVar(&cfg.ttl, "ttl", time.Second, "lock TTL, renewed every ttl/3 while a rebuild runs")
	flag.IntVar(&cfg.rounds, "rounds", 0, "rounds of the workload to run, then only serve /metrics (0: no end)")
	flag.DurationVar(&cfg.every, "every", 2*time.Second, "pause between rounds")
	flag.Parse()
	if masters != "" {
		cfg.masters = strings.Split(masters, ",")
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	ln, err := net.Listen("tcp", listen)
	if err == nil {
		err = run(ctx, cfg, ln, os.Stdout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "metrics:", err)
		os.Exit(1)
	}
}

// run serves /metrics on ln and runs the workload until ctx ends (after
// cfg.rounds rounds it only serves). It closes ln and everything it opened
// before it returns.
func run(ctx context.Context, cfg config, ln net.Listener, out io.Writer) (err error) {
	defer ln.Close()
	if cfg.workers < 1 || cfg.entries < 1 || cfg.work < 0 || cfg.rounds < 0 {
		return errors.New("need -workers >= 1, -entries >= 1, -work >= 0 and -rounds >= 0")
	}

	// OpenTelemetry's Prometheus exporter is a reader of a MeterProvider:
	// it turns the metrics into Prometheus series when the registry is
	// scraped. Its own registry keeps this program's series apart from the
	// global one's.
	reg := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(reg),
		otelprom.WithTranslationStrategy(otlptranslator.UnderscoreEscapingWithSuffixes))
	if err != nil {
		return err
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	defer func() { err = errors.Join(err, mp.Shutdown(context.Background())) }()
	obs, err := redlockotel.NewObserver(redlockotel.WithMeterProvider(mp))
	if err != nil {
		return err
	}

	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err = errors.Join(err, srv.Shutdown(sctx))
		if e := <-served; !errors.Is(e, http.ErrServerClosed) {
			err = errors.Join(err, e)
		}
	}()
	fmt.Fprintf(out, "serving metrics on http://%s/metrics\n", ln.Addr())

	var set servers.Set
	defer set.Close() // deferred before locks.Close, so it runs after it
	masters, where, err := set.Masters(ctx, cfg.masters, 5)
	if err != nil {
		return err
	}
	opts := []redlock.Option{redlock.WithKeyPrefix("metrics-example:"), redlock.WithObserver(obs)}
	var locks *redlock.Client
	if len(masters) == 1 {
		locks, err = redlock.NewSingle(masters[0], opts...)
	} else {
		locks, err = redlock.New(masters, opts...)
	}
	if err != nil {
		return err
	}
	defer locks.Close()
	fmt.Fprintf(out, "%s; each round %d workers ask for %d stale entries at once\n", where, cfg.workers, cfg.entries)

	w := &workload{cfg: cfg, locks: locks}
	for round := 1; cfg.rounds == 0 || round <= cfg.rounds; round++ {
		r, err := w.round(ctx, round)
		if ctx.Err() != nil {
			return nil // interrupted
		}
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "round %d: %d rebuilt, %d served stale, %d served fresh\n", round, r.rebuilt, r.stale, r.fresh)
		if sleep(ctx, cfg.every) != nil {
			return nil
		}
	}
	fmt.Fprintf(out, "%d rounds done; serving /metrics until interrupted\n", cfg.rounds)
	<-ctx.Done()
	return nil
}

// workload is the cache-rebuild example's, in rounds.
type workload struct {
	cfg   config
	locks *redlock.Client
	mu    sync.Mutex
	fresh map[string]bool // the cache: which entries are fresh
}

// tally counts what the requests of one round ended in.
type tally struct{ rebuilt, stale, fresh int64 }

// round makes every entry stale, lets every worker ask for every entry at
// once, and counts what they did.
func (w *workload) round(ctx context.Context, n int) (tally, error) {
	w.mu.Lock()
	w.fresh = map[string]bool{}
	w.mu.Unlock()
	var rebuilt, stale, fresh atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, w.cfg.workers*w.cfg.entries)
	for range w.cfg.workers {
		for e := range w.cfg.entries {
			key := fmt.Sprintf("product:%d", e+1)
			wg.Go(func() {
				switch did, err := w.serve(ctx, key); {
				case err != nil:
					errs <- fmt.Errorf("round %d, %s: %w", n, key, err)
				case did == "rebuilt":
					rebuilt.Add(1)
				case did == "stale":
					stale.Add(1)
				default:
					fresh.Add(1)
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	return tally{rebuilt.Load(), stale.Load(), fresh.Load()}, errors.Join(all...)
}

// serve is one worker's request for one entry: it rebuilds the entry if it
// gets the lock, and serves the stale value if another worker holds it.
func (w *workload) serve(ctx context.Context, key string) (string, error) {
	if w.isFresh(key) {
		return "fresh", nil
	}
	lock, err := w.locks.Obtain(ctx, "rebuild:"+key, w.cfg.ttl)
	switch {
	case errors.Is(err, redlock.ErrTaken):
		return "stale", nil // another worker rebuilds it
	case err != nil:
		return "", err // masters unavailable: an outage, not contention
	}
	did := "fresh"
	// Lock.Do renews the lock while the rebuild runs, cancels its context
	// if the lock is lost, and releases the lock when it returns.
	err = lock.Do(ctx, func(ctx context.Context) error {
		if w.isFresh(key) { // rebuilt since we looked
			return nil
		}
		if err := sleep(ctx, w.cfg.work); err != nil { // the expensive part
			return err
		}
		w.mu.Lock()
		w.fresh[key] = true
		w.mu.Unlock()
		did = "rebuilt"
		return nil
	})
	return did, err
}

func (w *workload) isFresh(key string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.fresh[key]
}

// sleep waits for d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}
