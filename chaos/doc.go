// Package chaos is the fault-injection harness and scenario suite for redlock.
//
// The harness has four parts: real redis-server processes (through
// internal/redistest), toxiproxy in-process for per-client network faults
// (net.go), an LD_PRELOAD clock shim for one master's wall clock (clock.go,
// clockshim.c), and the safety instruments (ledger.go, fenced.go, counter.go,
// prober.go, residual.go). The scenarios live in the _test.go files; run them
// with `go test -race` in this directory, which prints a results table and
// writes out/results.json. See README.md.
package chaos
