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
// It is measured in every repeat of the n1-g64-uncontended cell, beside the
// contenders (or once before the N=1 cells when that cell is not selected);
// the rates here are medians over those measurements.
type ceiling struct {
	Skipped      string       `json:"skipped,omitempty"`
	Clients      int          `json:"clients"`
	Pipeline     int          `json:"pipeline"`
	Requests     int          `json:"requests"`
	SHA          string       `json:"release_sha"`
	SetRPS       float64      `json:"set_nx_px_per_sec"`
	EvalshaRPS   float64      `json:"evalsha_release_per_sec"`
	CyclesPerSec float64      `json:"cycles_per_sec"` // one SET plus one EVALSHA per cycle: 1/(1/set + 1/evalsha)
	Runs         []ceilingRun `json:"runs,omitempty"`
	keys         string       // redis-benchmark's keys start with it
}

// A ceilingRun is one measurement; Repeat is -1 when it was not taken within a cell's repeat.
type ceilingRun struct {
	Repeat       int     `json:"repeat"`
	SetRPS       float64 `json:"set_nx_px_per_sec"`
	EvalshaRPS   float64 `json:"evalsha_release_per_sec"`
	CyclesPerSec float64 `json:"cycles_per_sec"`
}

// add records one measurement and updates the medians.
func (c *ceiling) add(r ceilingRun) {
	c.Runs = append(c.Runs, r)
	var set, ev, cyc []float64
	for _, r := range c.Runs {
		set, ev, cyc = append(set, r.SetRPS), append(ev, r.EvalshaRPS), append(cyc, r.CyclesPerSec)
	}
	c.SetRPS, c.EvalshaRPS, c.CyclesPerSec = median(set), median(ev), median(cyc)
}

// forRepeat returns the ceiling measured in repeat rp, or the median when there is none.
func (c *ceiling) forRepeat(rp int) float64 {
	for _, r := range c.Runs {
		if r.Repeat == rp {
			return r.CyclesPerSec
		}
	}
	return c.CyclesPerSec
}

// newCeiling prepares the measurement on master 0: it finds redis-benchmark
// (or records why it is skipped) and loads the release script.
func newCeiling(ctx context.Context, ms *masterSet, clients, pipeline, requests int, keys string) (*ceiling, error) {
	c := &ceiling{Clients: clients, Pipeline: pipeline, Requests: requests, keys: keys}
	if !ms.owned {
		c.Skipped = "only on servers the harness started"
		return c, nil
	}
	if _, err := exec.LookPath("redis-benchmark"); err != nil {
		c.Skipped = "redis-benchmark not found (Debian: apt-get install redis-tools)"
		return c, nil
	}
	sha, err := ms.admin[0].ScriptLoad(ctx, releaseScript).Result()
	if err != nil {
		return nil, fmt.Errorf("SCRIPT LOAD: %w", err)
	}
	c.SHA = sha
	return c, nil
}

// measure runs redis-benchmark against master 0: SET NX PX with random keys,
// then EVALSHA of the release script over the same key space (so most
// releases find a key to delete). Requests equals the key range.
func (c *ceiling) measure(ctx context.Context, ms *masterSet, repeat int) (ceilingRun, error) {
	r := ceilingRun{Repeat: repeat}
	// FLUSHALL (the harness's own server) keeps the script cache; load it
	// again all the same in case the server lost it.
	if err := ms.admin[0].FlushAll(ctx).Err(); err != nil {
		return r, err
	}
	if err := ms.admin[0].ScriptLoad(ctx, releaseScript).Err(); err != nil {
		return r, fmt.Errorf("SCRIPT LOAD: %w", err)
	}
	host, port, ok := strings.Cut(ms.opts[0].Addr, ":")
	if !ok {
		return r, fmt.Errorf("bad address %q", ms.opts[0].Addr)
	}
	run := func(cmd ...string) (float64, error) {
		args := append([]string{"-h", host, "-p", port, "-c", strconv.Itoa(c.Clients),
			"-n", strconv.Itoa(c.Requests), "-P", strconv.Itoa(c.Pipeline),
			"-r", strconv.Itoa(c.Requests), "--csv"}, cmd...)
		out, err := exec.CommandContext(ctx, "redis-benchmark", args...).Output()
		if err != nil {
			return 0, fmt.Errorf("redis-benchmark %s: %w", cmd[0], err)
		}
		return parseBenchmarkCSV(out)
	}
	var err error
	if r.SetRPS, err = run("SET", c.keys+"__rand_int__", "tok", "NX", "PX", "60000"); err != nil {
		return r, err
	}
	if r.EvalshaRPS, err = run("EVALSHA", c.SHA, "1", c.keys+"__rand_int__", "tok"); err != nil {
		return r, err
	}
	if r.SetRPS > 0 && r.EvalshaRPS > 0 {
		r.CyclesPerSec = 1 / (1/r.SetRPS + 1/r.EvalshaRPS)
	}
	c.add(r)
	return r, ms.admin[0].FlushAll(ctx).Err()
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
