package chaos

import (
	"context"
	"slices"
	"sync"
	"time"
)

// A Prober measures availability: one uncontended client obtains and
// releases a fresh key at a fixed interval and records each outcome.
type Prober struct {
	every   time.Duration
	timeout time.Duration
	probe   func(ctx context.Context, n int) error

	cancel context.CancelFunc
	done   chan struct{}

	mu     sync.Mutex
	events []Probe
	healed time.Time
}

// A Probe is one attempt.
type Probe struct {
	At      time.Time
	Latency time.Duration
	Err     error
}

// StartProber calls probe every interval (the n-th call gets n), each under
// a context bounded by timeout, at most maxProbes times, until Stop.
func StartProber(every, timeout time.Duration, maxProbes int, probe func(ctx context.Context, n int) error) *Prober {
	ctx, cancel := context.WithCancel(context.Background())
	p := &Prober{every: every, timeout: timeout, probe: probe, cancel: cancel, done: make(chan struct{})}
	go p.run(ctx, maxProbes)
	return p
}

func (p *Prober) run(ctx context.Context, maxProbes int) {
	defer close(p.done)
	t := time.NewTicker(p.every)
	defer t.Stop()
	for n := range maxProbes {
		pctx, cancel := context.WithTimeout(ctx, p.timeout)
		at := time.Now()
		err := p.probe(pctx, n)
		lat := time.Since(at)
		cancel()
		if ctx.Err() != nil {
			return // stopped mid-probe: the outcome says nothing about the masters
		}
		p.mu.Lock()
		p.events = append(p.events, Probe{At: at, Latency: lat, Err: err})
		p.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Healed marks now as the moment the fault was removed, for RecoveryAfter.
func (p *Prober) Healed() {
	p.mu.Lock()
	p.healed = time.Now()
	p.mu.Unlock()
}

// Stop ends probing and waits for the prober's goroutine.
func (p *Prober) Stop() {
	p.cancel()
	<-p.done
}

// Events returns the probes so far.
func (p *Prober) Events() []Probe {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.events)
}

// ProbeStats summarises probes.
type ProbeStats struct {
	Attempts, Successes int
	Availability        float64 // successes / attempts
	P50, P90, P99, Max  time.Duration
	// RecoveryMS is the time from Healed to the first success that started
	// at or after it, in ms; -1 without Healed or without such a success.
	RecoveryMS float64
}

// Stats summarises the probes that started in [from, to); zero times mean
// no bound.
func (p *Prober) Stats(from, to time.Time) ProbeStats {
	p.mu.Lock()
	healed := p.healed
	p.mu.Unlock()
	var s ProbeStats
	var lats []time.Duration
	s.RecoveryMS = -1
	for _, e := range p.Events() {
		if !healed.IsZero() && s.RecoveryMS < 0 && e.Err == nil && !e.At.Before(healed) {
			s.RecoveryMS = float64(e.At.Add(e.Latency).Sub(healed)) / 1e6
		}
		if (!from.IsZero() && e.At.Before(from)) || (!to.IsZero() && !e.At.Before(to)) {
			continue
		}
		s.Attempts++
		if e.Err == nil {
			s.Successes++
		}
		lats = append(lats, e.Latency)
	}
	if s.Attempts > 0 {
		s.Availability = float64(s.Successes) / float64(s.Attempts)
	}
	s.P50, s.P99, s.Max = Quantiles(lats)
	s.P90 = Quantile(lats, 0.9)
	return s
}

// Quantile returns the q-quantile of ds (0 for none).
func Quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	ds = slices.Clone(ds)
	slices.Sort(ds)
	return ds[min(len(ds)-1, int(q*float64(len(ds))))]
}

// Quantiles returns the median, the 99th percentile and the maximum.
func Quantiles(ds []time.Duration) (p50, p99, mx time.Duration) {
	if len(ds) == 0 {
		return 0, 0, 0
	}
	return Quantile(ds, 0.5), Quantile(ds, 0.99), Quantile(ds, 1)
}
