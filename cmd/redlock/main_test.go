package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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
	stdout, stderr bytes.Buffer
	exited         chan struct{}
	err            error
}

// start runs redlock with args; env adds to a clean environment (no
// REDLOCK_* variables from the caller's).
func start(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: exec.Command(self, args...), exited: make(chan struct{})}
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

// waitFile waits until path exists, or p exits, or the timeout.
func waitFile(t *testing.T, p *proc, path string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if _, err := os.Stat(path); err == nil {
			return
		}
		if p != nil && !p.running() {
			t.Fatalf("redlock exited (%v) before %s appeared; stderr:\n%s", p.err, filepath.Base(path), p.stderr.String())
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not appear within %v", path, timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
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
