package main

import (
	"slices"
	"time"
)

// A cellReport is one cell's results: a summary per contender and every run.
type cellReport struct {
	Name       string             `json:"name"`
	N          int                `json:"masters"`
	Cluster    bool               `json:"cluster,omitempty"`
	Shards     int                `json:"shards_per_cluster,omitempty"`
	G          int                `json:"goroutines"`
	Contended  bool               `json:"contended"`
	HotKeys    int                `json:"hot_keys,omitempty"`
	LatencyUs  float64            `json:"added_latency_us_each_way,omitempty"`
	RTTus      float64            `json:"ping_rtt_us"` // median PING round trip to the first master, as the contenders see it
	Contenders []contenderSummary `json:"contenders"`
	Runs       []runJSON          `json:"runs"`
	runs       map[string][]*runResult
}

// A contenderSummary aggregates a contender's repeats in one cell. Rates are
// medians over repeats; ratios are medians of the per-repeat ratios (each
// measured side by side); latencies come from all repeats' samples together;
// per-cycle and per-attempt figures are totals over all repeats divided by
// all cycles or attempts.
type contenderSummary struct {
	Name            string  `json:"name"`
	Repeats         int     `json:"repeats"`
	CyclesPerSec    float64 `json:"cycles_per_sec"`
	TakenPerSec     float64 `json:"taken_per_sec"`
	DecisionsPerSec float64 `json:"decisions_per_sec"` // cycles + taken
	// Throughput is what the ratios compare: cycles/s when uncontended,
	// decisions/s (cycles + refusals by other owners) when contended.
	Throughput float64 `json:"throughput"`
	// Ratio holds this contender's throughput divided by each other
	// contender's in the same repeat, median over repeats.
	Ratio            map[string]float64 `json:"throughput_ratio_to,omitempty"`
	P50              int64              `json:"lock_p50_ns"`
	P99              int64              `json:"lock_p99_ns"`
	P999             int64              `json:"lock_p999_ns"`
	AllocsPerCycle   float64            `json:"allocs_per_cycle"`
	AllocsPerAttempt float64            `json:"allocs_per_attempt"`
	BytesPerCycle    float64            `json:"bytes_per_cycle"`
	ClientCPU        float64            `json:"client_cpu_us_per_cycle"`
	// ServerCPU is the Redis CPU per cycle, summed over every server behind
	// the cell; -1 when INFO was not allowed.
	ServerCPU float64 `json:"redis_cpu_us_per_cycle"`
	// PerRedisCore is 1 / ServerCPU: lock cycles per second one Redis core sustains.
	PerRedisCore   float64 `json:"cycles_per_redis_core_sec,omitempty"`
	WritesPerCycle float64 `json:"proxy_writes_per_cycle,omitempty"`
	// CommandsPerCycle is the Redis commands a cycle costs over all servers
	// (a script's own calls included); ReadsPerCycle the reads from client
	// sockets the servers made per cycle: the fewer, the deeper the batches
	// they received (a cycle sends two commands to each master).
	CommandsPerCycle float64   `json:"redis_commands_per_cycle,omitempty"`
	ReadsPerCycle    float64   `json:"redis_reads_per_cycle,omitempty"`
	ShardCPU         []float64 `json:"shard_cpu_share,omitempty"`   // cluster cells: each shard's share of the Redis CPU
	ShardCalls       []float64 `json:"shard_calls_share,omitempty"` // cluster cells: each shard's share of the commands
	Attempts         uint64    `json:"attempts"`
	Cycles           uint64    `json:"cycles"`
	Taken            uint64    `json:"taken"`
	Errors           uint64    `json:"errors"`
	FirstErr         string    `json:"first_error,omitempty"`
	Overlaps         uint64    `json:"overlaps"`
	// Contended cells: the hand-over gap (a holder's release call to the
	// next grant of the same key), the hold (grant to release call) and
	// the release call's own time, over all repeats.
	GapP50     int64 `json:"handover_gap_p50_ns,omitempty"`
	GapP99     int64 `json:"handover_gap_p99_ns,omitempty"`
	HoldP50    int64 `json:"hold_p50_ns,omitempty"`
	ReleaseP50 int64 `json:"release_p50_ns,omitempty"`
}

// runJSON is one measured run as the JSON file records it.
type runJSON struct {
	Contender string    `json:"contender"`
	Repeat    int       `json:"repeat"`
	Position  int       `json:"position"`
	ElapsedS  float64   `json:"elapsed_s"`
	Attempts  uint64    `json:"attempts"`
	Cycles    uint64    `json:"cycles"`
	Taken     uint64    `json:"taken"`
	Errors    uint64    `json:"errors"`
	Overlaps  uint64    `json:"overlaps"`
	Mallocs   uint64    `json:"mallocs"`
	Bytes     uint64    `json:"bytes"`
	ClientCPU float64   `json:"client_cpu_s"`
	ServerCPU []float64 `json:"redis_cpu_s,omitempty"`
	Calls     []uint64  `json:"redis_commands,omitempty"`
	Reads     []uint64  `json:"redis_reads,omitempty"`
	Writes    uint64    `json:"proxy_writes,omitempty"`
	P50       int64     `json:"lock_p50_ns"`
	P99       int64     `json:"lock_p99_ns"`
	P999      int64     `json:"lock_p999_ns"`
}

func throughput(r *runResult, contended bool) float64 {
	s := r.Elapsed.Seconds()
	if s <= 0 {
		return 0
	}
	if contended {
		return float64(r.Decisions()) / s
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

// per divides, or returns 0 when there is nothing to divide by.
func per(v float64, n uint64) float64 {
	if n == 0 {
		return 0
	}
	return v / float64(n)
}

// summarize builds a cellReport from the runs of one cell; order lists the
// contenders as they should appear.
func summarize(cl cell, rttUs float64, order []string, runs []*runResult) cellReport {
	cr := cellReport{Name: cl.Name(), N: cl.N, Cluster: cl.Cluster, Shards: cl.Shards, G: cl.G, Contended: cl.Contended, HotKeys: cl.HotKeys,
		LatencyUs: float64(cl.Latency) / float64(time.Microsecond), RTTus: rttUs, runs: map[string][]*runResult{}}
	byRepeat := map[int]map[string]*runResult{}
	for _, r := range runs {
		cr.runs[r.Contender] = append(cr.runs[r.Contender], r)
		if byRepeat[r.Repeat] == nil {
			byRepeat[r.Repeat] = map[string]*runResult{}
		}
		byRepeat[r.Repeat][r.Contender] = r
		cr.Runs = append(cr.Runs, runJSON{
			Contender: r.Contender, Repeat: r.Repeat, Position: r.Position,
			ElapsedS: r.Elapsed.Seconds(), Attempts: r.Attempts, Cycles: r.Cycles, Taken: r.Taken,
			Errors: r.Errors, Overlaps: r.Overlaps, Mallocs: r.Mallocs, Bytes: r.Bytes,
			ClientCPU: r.ClientCPU, ServerCPU: r.ServerCPU, Calls: r.Calls, Reads: r.Reads, Writes: r.Writes,
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
		var cyc, taken, dec, tp []float64
		var lat, gap, hold, release histogram
		var mallocs, bytes, writes uint64
		var ccpu, scpu float64
		var shardCPU []float64
		var shardCalls []uint64
		var calls, reads uint64
		for _, r := range rr {
			sec := r.Elapsed.Seconds()
			cyc = append(cyc, float64(r.Cycles)/sec)
			taken = append(taken, float64(r.Taken)/sec)
			dec = append(dec, float64(r.Decisions())/sec)
			tp = append(tp, throughput(r, cl.Contended))
			lat.Merge(&r.Lat)
			gap.Merge(&r.Gap)
			hold.Merge(&r.Hold)
			release.Merge(&r.Release)
			mallocs += r.Mallocs
			bytes += r.Bytes
			writes += r.Writes
			ccpu += r.ClientCPU
			if v := r.serverCPU(); v >= 0 && scpu >= 0 {
				scpu += v
				if shardCPU == nil {
					shardCPU, shardCalls = make([]float64, len(r.ServerCPU)), make([]uint64, len(r.Calls))
				}
				for i := range r.ServerCPU {
					shardCPU[i] += r.ServerCPU[i]
					shardCalls[i] += r.Calls[i]
					calls += r.Calls[i]
					if i < len(r.Reads) {
						reads += r.Reads[i]
					}
				}
			} else {
				scpu = -1
			}
			s.Attempts += r.Attempts
			s.Cycles += r.Cycles
			s.Taken += r.Taken
			s.Errors += r.Errors
			s.Overlaps += r.Overlaps
			if s.FirstErr == "" {
				s.FirstErr = r.FirstErr
			}
		}
		s.CyclesPerSec, s.TakenPerSec, s.DecisionsPerSec, s.Throughput = median(cyc), median(taken), median(dec), median(tp)
		s.P50, s.P99, s.P999 = int64(lat.Quantile(0.5)), int64(lat.Quantile(0.99)), int64(lat.Quantile(0.999))
		s.GapP50, s.GapP99, s.HoldP50 = int64(gap.Quantile(0.5)), int64(gap.Quantile(0.99)), int64(hold.Quantile(0.5))
		s.ReleaseP50 = int64(release.Quantile(0.5))
		s.AllocsPerCycle = per(float64(mallocs), s.Cycles)
		s.AllocsPerAttempt = per(float64(mallocs), s.Attempts)
		s.BytesPerCycle = per(float64(bytes), s.Cycles)
		s.ClientCPU = per(ccpu*1e6, s.Cycles)
		s.ServerCPU = -1
		if scpu >= 0 {
			s.ServerCPU = per(scpu*1e6, s.Cycles)
			if s.ServerCPU > 0 {
				s.PerRedisCore = 1e6 / s.ServerCPU
			}
			s.CommandsPerCycle = per(float64(calls), s.Cycles)
			s.ReadsPerCycle = per(float64(reads), s.Cycles)
			if cl.Cluster {
				s.ShardCPU, s.ShardCalls = shares(shardCPU), shares(toFloats(shardCalls))
			}
		}
		if cl.Latency > 0 {
			s.WritesPerCycle = per(float64(writes), s.Cycles)
		}
		for _, other := range order {
			if other == name || cr.runs[other] == nil {
				continue
			}
			if r := ratio(name, other); r > 0 {
				if s.Ratio == nil {
					s.Ratio = map[string]float64{}
				}
				s.Ratio[other] = r
			}
		}
		cr.Contenders = append(cr.Contenders, s)
	}
	return cr
}

func toFloats(xs []uint64) []float64 {
	out := make([]float64, len(xs))
	for i, x := range xs {
		out[i] = float64(x)
	}
	return out
}

// shares returns each value's share of the sum.
func shares(xs []float64) []float64 {
	var sum float64
	for _, x := range xs {
		sum += x
	}
	if sum <= 0 {
		return nil
	}
	out := make([]float64, len(xs))
	for i, x := range xs {
		out[i] = x / sum
	}
	return out
}

func (cr *cellReport) contender(name string) *contenderSummary {
	for i := range cr.Contenders {
		if cr.Contenders[i].Name == name {
			return &cr.Contenders[i]
		}
	}
	return nil
}
