package main

import "slices"

// A cellReport is one cell's results: a summary per contender and every run.
type cellReport struct {
	Name       string             `json:"name"`
	N          int                `json:"masters"`
	G          int                `json:"goroutines"`
	Contended  bool               `json:"contended"`
	Contenders []contenderSummary `json:"contenders"`
	Runs       []runJSON          `json:"runs"`
	runs       map[string][]*runResult
}

// A contenderSummary aggregates a contender's repeats in one cell. Rates are
// medians over repeats; ratios are medians of the per-repeat ratios (each
// measured side by side); latencies come from all repeats' samples together;
// per-op figures are totals over all repeats divided by all attempts.
type contenderSummary struct {
	Name           string  `json:"name"`
	Repeats        int     `json:"repeats"`
	CyclesPerSec   float64 `json:"cycles_per_sec"`
	FailedPerSec   float64 `json:"failed_per_sec"`
	AttemptsPerSec float64 `json:"attempts_per_sec"`
	// Throughput is what the ratios compare: cycles/s when uncontended, attempts/s when contended.
	Throughput  float64 `json:"throughput"`
	VsRedsync   float64 `json:"vs_redsync,omitempty"`   // 0: no redsync in the cell
	VsRedislock float64 `json:"vs_redislock,omitempty"` // 0: no redislock in the cell
	P50         int64   `json:"lock_p50_ns"`
	P99         int64   `json:"lock_p99_ns"`
	P999        int64   `json:"lock_p999_ns"`
	AllocsPerOp float64 `json:"allocs_per_op"`
	BytesPerOp  float64 `json:"bytes_per_op"`
	ClientCPU   float64 `json:"client_cpu_us_per_op"`
	ServerCPU   float64 `json:"server_cpu_us_per_op"`
	Cycles      uint64  `json:"cycles"`
	Failures    uint64  `json:"failures"`
	Errors      uint64  `json:"errors"`
	FirstErr    string  `json:"first_error,omitempty"`
	Overlaps    uint64  `json:"overlaps"`
}

// runJSON is one measured run as the JSON file records it.
type runJSON struct {
	Contender string  `json:"contender"`
	Repeat    int     `json:"repeat"`
	Position  int     `json:"position"`
	ElapsedS  float64 `json:"elapsed_s"`
	Cycles    uint64  `json:"cycles"`
	Failures  uint64  `json:"failures"`
	Errors    uint64  `json:"errors"`
	Overlaps  uint64  `json:"overlaps"`
	Mallocs   uint64  `json:"mallocs"`
	Bytes     uint64  `json:"bytes"`
	ClientCPU float64 `json:"client_cpu_s"`
	ServerCPU float64 `json:"server_cpu_s"`
	P50       int64   `json:"lock_p50_ns"`
	P99       int64   `json:"lock_p99_ns"`
	P999      int64   `json:"lock_p999_ns"`
}

func throughput(r *runResult, contended bool) float64 {
	s := r.Elapsed.Seconds()
	if s <= 0 {
		return 0
	}
	if contended {
		return float64(r.Attempts()) / s
	}
	return float64(r.Cycles) / s
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// summarize builds a cellReport from the runs of one cell; order lists the
// contenders as they should appear.
func summarize(cl cell, order []string, runs []*runResult) cellReport {
	cr := cellReport{Name: cl.Name(), N: cl.N, G: cl.G, Contended: cl.Contended, runs: map[string][]*runResult{}}
	byRepeat := map[int]map[string]*runResult{}
	for _, r := range runs {
		cr.runs[r.Contender] = append(cr.runs[r.Contender], r)
		if byRepeat[r.Repeat] == nil {
			byRepeat[r.Repeat] = map[string]*runResult{}
		}
		byRepeat[r.Repeat][r.Contender] = r
		cr.Runs = append(cr.Runs, runJSON{
			Contender: r.Contender, Repeat: r.Repeat, Position: r.Position,
			ElapsedS: r.Elapsed.Seconds(), Cycles: r.Cycles, Failures: r.Failures,
			Errors: r.Errors, Overlaps: r.Overlaps, Mallocs: r.Mallocs, Bytes: r.Bytes,
			ClientCPU: r.ClientCPU, ServerCPU: r.ServerCPU,
			P50: int64(r.Lat.Quantile(0.5)), P99: int64(r.Lat.Quantile(0.99)), P999: int64(r.Lat.Quantile(0.999)),
		})
	}
	ratio := func(name, base string) float64 {
		var rs []float64
		for _, rep := range byRepeat {
			a, b := rep[name], rep[base]
			if a == nil || b == nil {
				continue
			}
			if tb := throughput(b, cl.Contended); tb > 0 {
				rs = append(rs, throughput(a, cl.Contended)/tb)
			}
		}
		return median(rs)
	}
	for _, name := range order {
		rr := cr.runs[name]
		if len(rr) == 0 {
			continue
		}
		s := contenderSummary{Name: name, Repeats: len(rr)}
		var cyc, fail, att, tp []float64
		var lat histogram
		var mallocs, bytes uint64
		var ccpu, scpu float64
		for _, r := range rr {
			sec := r.Elapsed.Seconds()
			cyc = append(cyc, float64(r.Cycles)/sec)
			fail = append(fail, float64(r.Failures)/sec)
			att = append(att, float64(r.Attempts())/sec)
			tp = append(tp, throughput(r, cl.Contended))
			lat.Merge(&r.Lat)
			mallocs += r.Mallocs
			bytes += r.Bytes
			ccpu += r.ClientCPU
			scpu += r.ServerCPU
			s.Cycles += r.Cycles
			s.Failures += r.Failures
			s.Errors += r.Errors
			s.Overlaps += r.Overlaps
			if s.FirstErr == "" {
				s.FirstErr = r.FirstErr
			}
		}
		s.CyclesPerSec, s.FailedPerSec, s.AttemptsPerSec, s.Throughput = median(cyc), median(fail), median(att), median(tp)
		s.P50, s.P99, s.P999 = int64(lat.Quantile(0.5)), int64(lat.Quantile(0.99)), int64(lat.Quantile(0.999))
		if ops := float64(s.Cycles + s.Failures); ops > 0 {
			s.AllocsPerOp = float64(mallocs) / ops
			s.BytesPerOp = float64(bytes) / ops
			s.ClientCPU = ccpu / ops * 1e6
			s.ServerCPU = scpu / ops * 1e6
		}
		if name != "redsync" {
			s.VsRedsync = ratio(name, "redsync")
		}
		if name != "redislock" {
			s.VsRedislock = ratio(name, "redislock")
		}
		cr.Contenders = append(cr.Contenders, s)
	}
	return cr
}

func (cr *cellReport) contender(name string) *contenderSummary {
	for i := range cr.Contenders {
		if cr.Contenders[i].Name == name {
			return &cr.Contenders[i]
		}
	}
	return nil
}
