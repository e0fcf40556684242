package main

import (
	"net"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redlock-go/redlock/internal/redistest"
)

// oneLinePerMessage checks redlock's stderr: every line names redlock once,
// not again for each error it wraps ("redlock: redlock: ...").
func oneLinePerMessage(t *testing.T, stderr string) {
	t.Helper()
	for _, line := range strings.Split(strings.TrimSuffix(stderr, "\n"), "\n") {
		if strings.Count(line, "redlock: ") > 1 {
			t.Errorf("stderr line repeats its prefix: %q", line)
		}
	}
}

// silent accepts TCP connections and never answers, as a master that
// hangs would; it returns its address and the connections it accepted.
func silent(t *testing.T) (string, <-chan net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	conns := make(chan net.Conn, 64)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns <- c
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		for len(conns) > 0 {
			(<-conns).Close()
		}
	})
	return ln.Addr().String(), conns
}

// A signal that arrives while redlock connects to the masters ends it at
// once, not once the connection gives up.
func TestSignalWhileConnecting(t *testing.T) {
	t.Parallel()
	addr, conns := silent(t)
	ran := filepath.Join(t.TempDir(), "ran")
	a := start(t, nil, "run", "--masters", addr, "--key", "k", "--wait", "60s", "--", "touch", ran)
	// redlock listens for signals before it connects: once its connection
	// shows, a SIGTERM ends its connecting rather than killing it.
	select {
	case <-conns:
	case <-time.After(timeout):
		t.Fatalf("redlock did not connect; stderr:\n%s", a.stderr.String())
	}
	sent := time.Now()
	signalProc(t, a, syscall.SIGTERM)
	code := a.wait(t)
	took := time.Since(sent)
	if code != 128+int(syscall.SIGTERM) || exists(ran) {
		t.Errorf("exit %d, ran %v; want %d without running; stderr:\n%s", code, exists(ran), 128+int(syscall.SIGTERM), a.stderr.String())
	}
	if !strings.Contains(a.stderr.String(), "while connecting") {
		t.Errorf("stderr does not say redlock was connecting:\n%s", a.stderr.String())
	}
	// The connection, left alone, gives up after dialTimeout: redlock did
	// not wait for that.
	if took >= dialTimeout {
		t.Errorf("redlock exited %v after the signal, no sooner than the connection's own timeout (%v)", took, dialTimeout)
	}
	oneLinePerMessage(t, a.stderr.String())
}

// --tls against a plaintext master fails soon, saying so, for run and for
// status.
func TestTLSAgainstAPlaintextMaster(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t, 1)[0]
	ran := filepath.Join(t.TempDir(), "ran")
	for _, a := range [][]string{
		{"run", "--masters", s.Addr(), "--tls", "--key", "k", "--", "touch", ran},
		{"run", "--masters", "rediss://" + s.Addr(), "--key", "k", "--", "touch", ran},
		{"status", "--masters", s.Addr(), "--tls", "--key", "k"},
	} {
		began := time.Now()
		code, stdout, stderr := runRedlock(t, nil, a...)
		took := time.Since(began)
		if code != exitFailure || exists(ran) {
			t.Errorf("%q: exit %d, ran %v; want %d without running; stderr:\n%s", a, code, exists(ran), exitFailure, stderr)
		}
		if out := stdout + stderr; !strings.Contains(out, "plaintext") || strings.Contains(out, "deadline") {
			t.Errorf("%q: the output does not say the master speaks plaintext:\n%s%s", a, stdout, stderr)
		}
		// Waiting for the TLS handshake alone would take dialTimeout.
		if took >= dialTimeout {
			t.Errorf("%q took %v, no sooner than the connection's own timeout (%v)", a, took, dialTimeout)
		}
		oneLinePerMessage(t, stderr)
	}
}
