package main

import (
	"context"
	"encoding/csv"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
)

// releaseScript is the usual compare-and-delete release (the Redis
// documentation's). The harness needs its own copy only to give
// redis-benchmark the same work a release does; the contenders use their own.
//
//	KEYS[1]  lock key
//	ARGV[1]  owner token
//	returns  1 deleted, 0 not ours or absent
const releaseScript = `if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("DEL", KEYS[1]) else return 0 end`

// A ceiling is what redis-benchmark -P reaches on one master for the two
// commands of a cycle, in the same run: the N=1 upper bound for a client.
type ceiling struct {
	Skipped      string  `json:"skipped,omitempty"`
	Clients      int     `json:"clients"`
	Pipeline     int     `json:"pipeline"`
	Requests     int     `json:"requests"`
	SHA          string  `json:"release_sha"`
	SetRPS       float64 `json:"set_nx_px_per_sec"`
	EvalshaRPS   float64 `json:"evalsha_release_per_sec"`
	CyclesPerSec float64 `json:"cycles_per_sec"` // one SET plus one EVALSHA per cycle: 1/(1/set + 1/evalsha)
}

// measureCeiling runs redis-benchmark against master 0: SET NX PX with random
// keys, then EVALSHA of the release script over the same key space (so most
// releases find a key to delete). Requests equals the key range.
func measureCeiling(ctx context.Context, ms *masterSet, clients, pipeline, requests int) (*ceiling, error) {
	c := &ceiling{Clients: clients, Pipeline: pipeline, Requests: requests}
	bin, err := exec.LookPath("redis-benchmark")
	if err != nil {
		c.Skipped = "redis-benchmark not found (Debian: apt-get install redis-tools)"
		return c, nil
	}
	if err := ms.flush(ctx, 1); err != nil {
		return nil, err
	}
	sha, err := ms.admin[0].ScriptLoad(ctx, releaseScript).Result()
	if err != nil {
		return nil, fmt.Errorf("SCRIPT LOAD: %w", err)
	}
	c.SHA = sha
	host, port, ok := strings.Cut(ms.servers[0].Addr(), ":")
	if !ok {
		return nil, fmt.Errorf("bad address %q", ms.servers[0].Addr())
	}
	run := func(cmd ...string) (float64, error) {
		args := append([]string{"-h", host, "-p", port, "-c", strconv.Itoa(clients),
			"-n", strconv.Itoa(requests), "-P", strconv.Itoa(pipeline),
			"-r", strconv.Itoa(requests), "--csv"}, cmd...)
		out, err := exec.CommandContext(ctx, bin, args...).Output()
		if err != nil {
			return 0, fmt.Errorf("redis-benchmark %s: %w", cmd[0], err)
		}
		return parseBenchmarkCSV(out)
	}
	if c.SetRPS, err = run("SET", "bench:rb:__rand_int__", "tok", "NX", "PX", "60000"); err != nil {
		return nil, err
	}
	if c.EvalshaRPS, err = run("EVALSHA", sha, "1", "bench:rb:__rand_int__", "tok"); err != nil {
		return nil, err
	}
	if c.SetRPS > 0 && c.EvalshaRPS > 0 {
		c.CyclesPerSec = 1 / (1/c.SetRPS + 1/c.EvalshaRPS)
	}
	return c, ms.flush(ctx, 1)
}

// parseBenchmarkCSV returns the rps of the one test in redis-benchmark --csv output:
//
//	"test","rps","avg_latency_ms",...
//	"SET key tok NX PX 60000","500000.00","1.843",...
func parseBenchmarkCSV(out []byte) (float64, error) {
	r := csv.NewReader(strings.NewReader(string(out)))
	r.FieldsPerRecord = -1
	recs, err := r.ReadAll()
	if err != nil {
		return 0, fmt.Errorf("redis-benchmark output: %w", err)
	}
	col := -1
	for _, rec := range recs {
		if col < 0 {
			for i, f := range rec {
				if f == "rps" {
					col = i
				}
			}
			continue
		}
		if col < len(rec) {
			v, err := strconv.ParseFloat(rec[col], 64)
			if err != nil {
				return 0, fmt.Errorf("redis-benchmark rps %q: %w", rec[col], err)
			}
			return v, nil
		}
	}
	return 0, fmt.Errorf("redis-benchmark output has no rps: %q", out)
}
