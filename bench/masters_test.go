package main

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redlock-go/redlock/internal/redistest"
)

// The benchmark against masters it did not start: it leaves every key
// outside its prefix as it was, never flushes, leaves no key of its own
// behind, and refuses to run beside another run's keys unless told.
func TestExternalMasters(t *testing.T) {
	servers := redistest.Start(t, 3)
	clients := redistest.Clients(t, servers)
	ctx := context.Background()
	logOut = io.Discard
	t.Cleanup(func() { logOut = os.Stderr })
	var addrs []string
	for _, s := range servers {
		addrs = append(addrs, s.Addr())
	}
	// Someone else's keys: one under another prefix, one that only starts
	// like ours.
	if err := clients[0].Set(ctx, "app:keep", "v", time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	if err := clients[1].Set(ctx, "redlock-benchmarks", "w", 0).Err(); err != nil {
		t.Fatal(err)
	}
	opts := func(cells, contenders string) options {
		o := options{masterSpecs: strings.Join(addrs, ","), prefix: "redlock-bench:", cells: cells, contenders: contenders,
			ttl: 10 * time.Second, duration: 200 * time.Millisecond, repeats: 1, warmup: -1, hold: -1, out: t.TempDir()}
		if err := o.finish(""); err != nil {
			t.Fatal(err)
		}
		return o
	}
	check := func(when string) {
		t.Helper()
		if v, err := clients[0].Get(ctx, "app:keep").Result(); err != nil || v != "v" {
			t.Errorf("%s: app:keep = %q, %v", when, v, err)
		}
		if ttl := clients[0].TTL(ctx, "app:keep").Val(); ttl < 59*time.Minute {
			t.Errorf("%s: app:keep TTL %v", when, ttl)
		}
		if v, err := clients[1].Get(ctx, "redlock-benchmarks").Result(); err != nil || v != "w" {
			t.Errorf("%s: redlock-benchmarks = %q, %v", when, v, err)
		}
		for i, c := range clients {
			info := c.Info(ctx, "commandstats").Val()
			for _, cmd := range []string{"cmdstat_flushall", "cmdstat_flushdb"} {
				if strings.Contains(info, cmd) {
					t.Errorf("%s: master %d ran %s", when, i, cmd)
				}
			}
		}
	}
	ownKeys := func() []string {
		var keys []string
		for _, c := range clients {
			keys = append(keys, c.Keys(ctx, "redlock-bench:*").Val()...)
		}
		return keys
	}

	// A run on masters without keys under the prefix: one contender in
	// one cell (every contender runs beside another run's key below).
	if code, err := run(ctx, opts("^n1-g1-uncontended$", "^redlock$")); err != nil || code != 0 {
		t.Fatalf("run: %d, %v", code, err)
	}
	check("after a run")
	if keys := ownKeys(); len(keys) > 0 {
		t.Errorf("keys left behind: %q", keys)
	}

	// Another run's key under the prefix: refused, and the key stays.
	cells := "^n1-g1-uncontended$|^n3-g16-contended$"
	if err := clients[2].Set(ctx, "redlock-bench:0badc0de:7:u0:1", "theirs", time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	code, err := run(ctx, opts(cells, ""))
	if code != 2 || err == nil || !strings.Contains(err.Error(), "-allow-existing-keys") {
		t.Errorf("run beside another run's keys: %d, %v; want a refusal", code, err)
	}
	o := opts(cells, "")
	o.allowExisting = true
	if code, err := run(ctx, o); err != nil || code != 0 {
		t.Fatalf("run with -allow-existing-keys: %d, %v", code, err)
	}
	// Every contender made cycles and no error (allocations are not
	// checked: -race changes them).
	data, err := os.ReadFile(filepath.Join(o.out, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Meta  meta
		Cells []cellReport
	}
	if err := json.Unmarshal(data, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Cells) != 2 || rep.Meta.Own || len(rep.Meta.Masters.Masters) != 3 || rep.Meta.Masters.Masters[0].Version == "" || rep.Meta.Masters.Masters[0].RTTus <= 0 {
		t.Errorf("report: %d cells, meta %+v", len(rep.Cells), rep.Meta)
	}
	for _, cr := range rep.Cells {
		want := 0
		for _, c := range contenders {
			if c.supports(cell{N: cr.N, G: cr.G, Contended: cr.Contended, HotKeys: cr.HotKeys}) {
				want++
			}
		}
		if len(cr.Contenders) != want {
			t.Errorf("%s: %d contenders ran, want all %d", cr.Name, len(cr.Contenders), want)
		}
		for _, s := range cr.Contenders {
			if s.Cycles == 0 || s.Errors > 0 {
				t.Errorf("%s %s: %d cycles, %d errors (%s)", cr.Name, s.Name, s.Cycles, s.Errors, s.FirstErr)
			}
		}
	}
	check("after a run beside another's keys")
	if keys := ownKeys(); len(keys) != 1 || keys[0] != "redlock-bench:0badc0de:7:u0:1" {
		t.Errorf("keys under the prefix after the run: %q, want only the other run's", keys)
	}
}
