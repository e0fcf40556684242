package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

// envBeRedlock makes the test binary behave as the redlock command, so the
// end-to-end tests run the real main (with -race when the tests do) without
// a separate build.
const envBeRedlock = "REDLOCK_TEST_BE_REDLOCK"

func TestMain(m *testing.M) {
	if os.Getenv(envBeRedlock) == "1" {
		main()
		return
	}
	redis.SetLogger(quiet{})
	goleak.VerifyTestMain(m)
}

// timeout bounds every wait in these tests: generous, for a busy machine
// under -race. No test asserts how fast something happened.
const timeout = 30 * time.Second

// A proc is one redlock process.
type proc struct {
	cmd            *exec.Cmd
	stdout, stderr syncBuffer
	exited         chan struct{}
	err            error
}

// A syncBuffer is a bytes.Buffer that the test may read while the
// process writes to it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// start runs redlock with args; env adds to a clean environment (no
// REDLOCK_* variables from the caller's).
func start(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	return startAs(t, nil, env, args...)
}

// startAs is start with the process attributes attr (nil: the default).
func startAs(t *testing.T, attr *syscall.SysProcAttr, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(redlockBin(t), args...), exited: make(chan struct{})}
	p.cmd.SysProcAttr = attr
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "REDLOCK_") {
			p.cmd.Env = append(p.cmd.Env, kv)
		}
	}
	p.cmd.Env = append(p.cmd.Env, envBeRedlock+"=1")
	p.cmd.Env = append(p.cmd.Env, env...)
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	p.cmd.WaitDelay = 5 * time.Second // a stray grandchild holding the pipes
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
	})
	return p
}

// redlockBin is the program that behaves as redlock with envBeRedlock=1.
func redlockBin(t *testing.T) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return self
}

// wait returns redlock's exit status.
func (p *proc) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-p.exited:
	case <-time.After(timeout):
		t.Fatalf("redlock %q did not exit within %v; stderr:\n%s", p.cmd.Args[1:], timeout, p.stderr.String())
	}
	var ee *exec.ExitError
	if p.err != nil && !errors.As(p.err, &ee) {
		t.Fatalf("redlock: %v", p.err)
	}
	return p.cmd.ProcessState.ExitCode()
}

// running reports whether the process has not exited yet.
func (p *proc) running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// runRedlock runs redlock to its end.
func runRedlock(t *testing.T, env []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	p := start(t, env, args...)
	code = p.wait(t)
	return code, p.stdout.String(), p.stderr.String()
}

// waitFor polls cond until it holds. It fails the test, saying what it
// waited for, after timeout or, when p is not nil, once p has exited.
func waitFor(t *testing.T, p *proc, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if p != nil && !p.running() && !cond() {
			t.Fatalf("redlock exited (%v) before %s; stderr:\n%s", p.err, what, p.stderr.String())
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, timeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitFile waits until path exists, or p exits, or the timeout.
func waitFile(t *testing.T, p *proc, path string) {
	t.Helper()
	waitFor(t, p, filepath.Base(path)+" appeared", func() bool { return exists(path) })
}

func touch(t *testing.T, path string) {
	t.Helper()
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// holdScript creates $1, then runs until $2 exists.
const holdScript = `touch "$1"; while [ ! -e "$2" ]; do sleep 0.02; done`

func signalProc(t *testing.T, p *proc, sig syscall.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	return ctx
}
