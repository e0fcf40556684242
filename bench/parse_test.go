package main

import (
	"math"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseInfoCPU(t *testing.T) {
	info := "# CPU\r\nused_cpu_sys:0.295616\r\nused_cpu_user:1.398719\r\nused_cpu_sys_children:0.500000\r\nused_cpu_user_children:0.000000\r\nused_cpu_sys_main_thread:0.295574\r\n"
	got, err := parseInfoCPU(info)
	if err != nil {
		t.Fatal(err)
	}
	if want := 1.694335; math.Abs(got-want) > 1e-9 {
		t.Errorf("parseInfoCPU = %v, want %v", got, want)
	}
	for _, bad := range []string{"# CPU\r\nused_cpu_sys:1\r\n", "used_cpu_sys:x\r\nused_cpu_user:1\r\n", ""} {
		if _, err := parseInfoCPU(bad); err == nil {
			t.Errorf("parseInfoCPU(%q): no error", bad)
		}
	}
}

func TestParseBenchmarkCSV(t *testing.T) {
	out := `"test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
"SET bench:rb:__rand_int__ tok NX PX 60000","500000.00","1.843","0.584","1.623","3.367","4.495","6.391"
`
	got, err := parseBenchmarkCSV([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	if want := 500000.0; got != want {
		t.Errorf("rps = %v, want %v", got, want)
	}
	for _, bad := range []string{"", `"test","rps"` + "\n", `"test","rps"` + "\n" + `"SET","fast"` + "\n"} {
		if _, err := parseBenchmarkCSV([]byte(bad)); err == nil {
			t.Errorf("parseBenchmarkCSV(%q): no error", bad)
		}
	}
}

func TestInfoValue(t *testing.T) {
	info := "# Server\r\nredis_version:7.0.15\r\nredis_git_sha1:00000000\r\n"
	if got, want := infoValue(info, "redis_version"), "7.0.15"; got != want {
		t.Errorf("infoValue = %q, want %q", got, want)
	}
	if got := infoValue(info, "nope"); got != "" {
		t.Errorf("infoValue(nope) = %q, want empty", got)
	}
}

func TestMatrix(t *testing.T) {
	o := options{prefix: "p:", duration: time.Second, repeats: 1, warmup: -1, hold: -1}
	if err := o.finish("100us,500us"); err != nil {
		t.Fatal(err)
	}
	all, err := matrix(o)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range all {
		names = append(names, c.Name())
	}
	// 3 N x 3 goroutines x 2 modes, 5 latency cells per latency, 2 cluster cells.
	if got, want := len(all), 18+2*5+2; got != want {
		t.Errorf("cells = %d, want %d: %v", got, want, names)
	}
	for _, want := range []string{"n5-g64-uncontended", "n1-g1-uncontended-lat100us", "n5-g64-contended-lat500us", "c3x3-g64-contended"} {
		if !slices.Contains(names, want) {
			t.Errorf("no cell %s in %v", want, names)
		}
	}
	o.cells = "n5-g64"
	some, err := matrix(o)
	if err != nil {
		t.Fatal(err)
	}
	if len(some) != 6 || some[0].Name() != "n5-g64-uncontended" || some[1].Name() != "n5-g64-contended" {
		t.Errorf("n5-g64 cells = %v", some)
	}
	o.cells = "nothing"
	if _, err := matrix(o); err == nil {
		t.Error("a filter matching no cell gave no error")
	}
}

// With the user's masters: N up to their number, no latency or cluster cell.
func TestMatrixExternal(t *testing.T) {
	for _, tc := range []struct {
		masters string
		want    []int
	}{{"a:1", []int{1}}, {"a:1,b:2,c:3", []int{1, 3}}, {"a:1,b:2,c:3,d:4", []int{1, 3, 4}}, {"a:1,b:2,c:3,d:4,e:5,f:6,g:7", []int{1, 3, 5, 7}}} {
		o := options{masterSpecs: tc.masters, prefix: "p:", duration: time.Second, repeats: 1, warmup: -1, hold: -1}
		if err := o.finish("100us"); err != nil {
			t.Fatal(err)
		}
		cells, err := matrix(o)
		if err != nil {
			t.Fatal(err)
		}
		var ns []int
		for _, c := range cells {
			if c.Latency > 0 || c.Cluster {
				t.Errorf("%s: cell %s against the user's masters", tc.masters, c.Name())
			}
			if !slices.Contains(ns, c.N) {
				ns = append(ns, c.N)
			}
		}
		if !slices.Equal(ns, tc.want) || len(cells) != 6*len(tc.want) || !o.noCeiling {
			t.Errorf("%s: N %v in %d cells (ceiling skipped %v), want %v", tc.masters, ns, len(cells), o.noCeiling, tc.want)
		}
	}
}

func TestParseMaster(t *testing.T) {
	o, err := parseMaster("redis://bob:s3cret@db1:6380/2")
	if err != nil || o.Addr != "db1:6380" || o.Username != "bob" || o.Password != "s3cret" || o.DB != 2 || o.TLSConfig != nil {
		t.Errorf("redis URL: %+v, %v", o, err)
	}
	if o, err := parseMaster("rediss://:pw@db2:6379"); err != nil || o.TLSConfig == nil || o.Password != "pw" {
		t.Errorf("rediss URL: %+v, %v", o, err)
	}
	if o, err := parseMaster(" 10.0.0.1:7000 "); err != nil || o.Addr != "10.0.0.1:7000" {
		t.Errorf("host:port: %+v, %v", o, err)
	}
	for _, bad := range []string{"redis://bob:s3cret@db1:notaport/0", "redis://bob:s3cret@db1:6379/x", "justahost", "redis://bob:s3cret@db1:6379/0?bogus=1"} {
		_, err := parseMaster(bad)
		if err == nil {
			t.Errorf("%q: no error", bad)
			continue
		}
		if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%q: the error shows the password: %v", bad, err)
		}
	}
	if got := redactArgs([]string{"-masters", "redis://bob:s3cret@a:1,b:2,rediss://:pw@c:3"}); got != "-masters redis://bob:xxx@a:1,b:2,rediss://:xxx@c:3" {
		t.Errorf("redactArgs = %q", got)
	}
	// A password in the query, with an '@' in it; a password with an
	// unencoded '/' that leaves no URL to parse.
	for _, spec := range []string{"redis://a:1/0?password=ab@s3cret", "redis://bob:s3/cret@a:1", "bob:s3cret@a:1"} {
		if got := redactURL(spec); strings.Contains(got, "s3") || strings.Contains(got, "cret") {
			t.Errorf("redactURL(%q) = %q", spec, got)
		}
	}
}

func TestMatchPrefix(t *testing.T) {
	if got, want := matchPrefix(`a*b?[c]\:`), `a\*b\?\[c\]\\:*`; got != want {
		t.Errorf("matchPrefix = %q, want %q", got, want)
	}
}

func TestParseCommandCalls(t *testing.T) {
	info := "# Commandstats\r\ncmdstat_set:calls=10,usec=20,usec_per_call=2.00,rejected_calls=0,failed_calls=0\r\ncmdstat_evalsha:calls=7,usec=70,usec_per_call=10.00\r\nerrorstat_ERR:count=1\r\n"
	if got := parseCommandCalls(info); got != 17 {
		t.Errorf("parseCommandCalls = %d, want 17", got)
	}
}

func TestCellName(t *testing.T) {
	for _, tc := range []struct {
		c    cell
		want string
	}{
		{cell{N: 5, G: 64}, "n5-g64-uncontended"},
		{cell{N: 1, G: 1, Contended: true, Latency: 500 * time.Microsecond}, "n1-g1-contended-lat500us"},
		{cell{N: 3, Shards: 3, Cluster: true, G: 64}, "c3x3-g64-uncontended"},
	} {
		if got := tc.c.Name(); got != tc.want {
			t.Errorf("Name = %q, want %q", got, tc.want)
		}
	}
}

// The README lists every contender, so its table cannot go stale.
func TestReadmeListsContenders(t *testing.T) {
	data, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range contenders {
		if !strings.Contains(string(data), "| `"+c.Name+"` | "+strings.TrimSuffix(c.Kind, " library")) {
			t.Errorf("README.md has no row for %s (%s)", c.Name, c.Kind)
		}
	}
}
