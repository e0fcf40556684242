package main

import (
	"math"
	"testing"
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

func TestMatrixFilter(t *testing.T) {
	o := options{masters: []int{1, 3, 5}, goroutines: []int{1, 16, 64}, hotKeys: 16}
	all, err := matrix(o)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(all), 18; got != want {
		t.Errorf("cells = %d, want %d", got, want)
	}
	o.cells = "n5-g64"
	some, err := matrix(o)
	if err != nil {
		t.Fatal(err)
	}
	if len(some) != 2 || some[0].Name() != "n5-g64-uncontended" || some[1].Name() != "n5-g64-contended" {
		t.Errorf("n5-g64 cells = %v", some)
	}
	o.cells = "nothing"
	if _, err := matrix(o); err == nil {
		t.Error("a filter matching no cell gave no error")
	}
}
