package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/internal/redistest"
)

// cluster starts n masters and returns the --masters value and a client
// per master.
func cluster(t *testing.T, n int) (string, []redis.UniversalClient) {
	t.Helper()
	servers := redistest.Start(t, n)
	addrs := make([]string, n)
	for i, s := range servers {
		addrs[i] = s.Addr()
	}
	return strings.Join(addrs, ","), redistest.Clients(t, servers)
}

// lockFlags are short-lived locks for fast tests; the node timeout is
// generous for a busy machine.
func lockFlags(masters, key string) []string {
	return []string{"run", "--masters", masters, "--key", key, "--ttl", "1s", "--node-timeout", "300ms"}
}

func args(flags []string, rest ...string) []string {
	return append(append([]string{}, flags...), rest...)
}

// assertFree checks that key is gone from every master.
func assertFree(t *testing.T, clients []redis.UniversalClient, key string) {
	t.Helper()
	for i, c := range clients {
		if n, err := c.Exists(ctxT(t), key).Result(); err != nil || n != 0 {
			t.Errorf("master %d: EXISTS %s = %d, %v; want 0 (released)", i, key, n, err)
		}
	}
}

func TestConcurrentRunsOneSkips(t *testing.T) {
	t.Parallel()
	masters, clients := cluster(t, 3)
	dir := t.TempDir()
	started, stop, other := filepath.Join(dir, "started"), filepath.Join(dir, "stop"), filepath.Join(dir, "other")
	flags := lockFlags(masters, "job")

	a := start(t, nil, args(flags, "--", "sh", "-c", holdScript, "sh", started, stop)...)
	waitFile(t, a, started)

	code, _, stderr := runRedlock(t, nil, args(flags, "--", "touch", other)...)
	if code != exitNotObtained {
		t.Errorf("second run: exit %d, want %d; stderr:\n%s", code, exitNotObtained, stderr)
	}
	if exists(other) {
		t.Error("second run started its command without the lock")
	}
	if lines := strings.Count(stderr, "\n"); lines != 1 || !strings.Contains(stderr, "not obtained") {
		t.Errorf("second run: stderr = %q, want one line saying not obtained", stderr)
	}

	touch(t, stop)
	if code := a.wait(t); code != 0 {
		t.Errorf("first run: exit %d, want 0; stderr:\n%s", code, a.stderr.String())
	}
	assertFree(t, clients, "job")

	// Released: the next run gets it.
	if code, _, stderr := runRedlock(t, nil, args(flags, "--", "touch", other)...); code != 0 || !exists(other) {
		t.Errorf("run after release: exit %d, ran %v; stderr:\n%s", code, exists(other), stderr)
	}
}

func TestWait(t *testing.T) {
	t.Parallel()
	masters, _ := cluster(t, 3)
	dir := t.TempDir()
	started, stop, ran := filepath.Join(dir, "started"), filepath.Join(dir, "stop"), filepath.Join(dir, "ran")
	flags := lockFlags(masters, "job")

	a := start(t, nil, args(flags, "--", "sh", "-c", holdScript, "sh", started, stop)...)
	waitFile(t, a, started)

	// A short wait runs out while the lock is held.
	if code, _, stderr := runRedlock(t, nil, args(flags, "--wait", "300ms", "--", "touch", ran)...); code != exitNotObtained || exists(ran) {
		t.Errorf("short wait: exit %d, ran %v; want %d without running; stderr:\n%s", code, exists(ran), exitNotObtained, stderr)
	}

	// A long one gets the lock once the holder is done.
	b := start(t, nil, args(flags, "--wait", "30s", "--", "touch", ran)...)
	touch(t, stop)
	if code := a.wait(t); code != 0 {
		t.Errorf("holder: exit %d; stderr:\n%s", code, a.stderr.String())
	}
	if code := b.wait(t); code != 0 || !exists(ran) {
		t.Errorf("waiter: exit %d, ran %v; want 0 and ran; stderr:\n%s", code, exists(ran), b.stderr.String())
	}
}

func TestRunLongerThanTTLIsRenewed(t *testing.T) {
	t.Parallel()
	masters, clients := cluster(t, 3)
	dir := t.TempDir()
	flags := lockFlags(masters, "long")
	// The command outlives several TTLs (1s), counted by the renewals it
	// survives rather than by a clock: it ends once the key's TTL has been
	// reset above what is left three times.
	started, stop := filepath.Join(dir, "started"), filepath.Join(dir, "stop")
	a := start(t, nil, args(flags, "--", "sh", "-c", holdScript, "sh", started, stop)...)
	waitFile(t, a, started)

	ctx := ctxT(t)
	renewals := 0
	last, err := clients[0].PTTL(ctx, "long").Result()
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(timeout)
	for renewals < 4 {
		if !a.running() || time.Now().After(deadline) {
			t.Fatalf("saw %d renewals; want 4; stderr:\n%s", renewals, a.stderr.String())
		}
		ttl, err := clients[0].PTTL(ctx, "long").Result()
		if err != nil {
			t.Fatal(err)
		}
		if ttl <= 0 {
			t.Fatalf("key expired or vanished (PTTL %v) while the command ran", ttl)
		}
		if ttl > last {
			renewals++
		}
		last = ttl
		// Each renewal happens once a third of the TTL has passed; a
		// contender is refused all along.
		if code, _, stderr := runRedlock(t, nil, args(flags, "--", "true")...); code != exitNotObtained {
			t.Fatalf("contender: exit %d, want %d; stderr:\n%s", code, exitNotObtained, stderr)
		}
	}
	touch(t, stop)
	if code := a.wait(t); code != 0 {
		t.Errorf("exit %d, want 0 (renewed, never lost); stderr:\n%s", code, a.stderr.String())
	}
	assertFree(t, clients, "long")
}

// intrude overwrites key on every master, as another owner would after the
// lock had lapsed.
func intrude(t *testing.T, clients []redis.UniversalClient, key string) {
	t.Helper()
	for i, c := range clients {
		if err := c.Set(ctxT(t), key, "intruder", 0).Err(); err != nil {
			t.Fatalf("master %d: %v", i, err)
		}
	}
}

func TestLostLockTerminatesTheCommand(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		script string
	}{
		// Dies of the SIGTERM.
		{"term", `touch "$1"; while :; do sleep 0.05; done`},
		// Ignores SIGTERM, as does its sleep: only the SIGKILL after
		// --grace ends it.
		{"kill", `trap "" TERM; touch "$1"; while :; do sleep 0.05; done`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			masters, clients := cluster(t, 3)
			started := filepath.Join(t.TempDir(), "started")
			a := start(t, nil, args(lockFlags(masters, "lost"), "--grace", "200ms", "--", "sh", "-c", tc.script, "sh", started)...)
			waitFile(t, a, started)
			intrude(t, clients, "lost")
			if code := a.wait(t); code != exitLost {
				t.Errorf("exit %d, want %d; stderr:\n%s", code, exitLost, a.stderr.String())
			}
			if !strings.Contains(a.stderr.String(), "lost") {
				t.Errorf("stderr does not say the lock was lost:\n%s", a.stderr.String())
			}
			// The intruder's keys are not redlock's to delete.
			for i, c := range clients {
				if v, err := c.Get(ctxT(t), "lost").Result(); v != "intruder" {
					t.Errorf("master %d: lost = %q, %v; want the intruder's value", i, v, err)
				}
			}
		})
	}
}

func TestSignalForwarding(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		script string
		sig    syscall.Signal
		want   int
	}{
		// The command traps SIGTERM and exits 0: redlock exits 0.
		{"trapped", `trap 'touch "$2"; exit 0' TERM; touch "$1"; while :; do sleep 0.05; done`, syscall.SIGTERM, 0},
		// The command dies of the signal: redlock reports 128+signal.
		{"killed", `touch "$1"; exec sleep 60`, syscall.SIGTERM, 128 + int(syscall.SIGTERM)},
		{"interrupt", `trap 'touch "$2"; exit 7' INT; touch "$1"; while :; do sleep 0.05; done`, syscall.SIGINT, 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			masters, clients := cluster(t, 3)
			dir := t.TempDir()
			started, trapped := filepath.Join(dir, "started"), filepath.Join(dir, "trapped")
			a := start(t, nil, args(lockFlags(masters, "sig"), "--", "sh", "-c", tc.script, "sh", started, trapped)...)
			waitFile(t, a, started)
			signalProc(t, a, tc.sig)
			if code := a.wait(t); code != tc.want {
				t.Errorf("exit %d, want %d; stderr:\n%s", code, tc.want, a.stderr.String())
			}
			if strings.Contains(tc.script, "trap") && !exists(trapped) {
				t.Error("the command's trap did not run")
			}
			assertFree(t, clients, "sig")
		})
	}
}

func TestSignalWhileWaiting(t *testing.T) {
	t.Parallel()
	servers := redistest.Start(t, 1)
	clients := redistest.Clients(t, servers)
	lc, err := redlock.NewSingle(clients[0])
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	lock, err := lc.Obtain(ctxT(t), "w", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release(ctxT(t))

	ran := filepath.Join(t.TempDir(), "ran")
	b := start(t, nil, args(lockFlags(servers[0].Addr(), "w"), "--wait", "60s", "--", "touch", ran)...)
	// redlock connects after it listens for signals: once its connection
	// shows, a SIGTERM ends its wait rather than killing it.
	deadline := time.Now().Add(timeout)
	for {
		list, err := clients[0].ClientList(ctxT(t)).Result()
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(list, "name=redlock ") {
			break
		}
		if !b.running() || time.Now().After(deadline) {
			t.Fatalf("redlock's connection did not show; stderr:\n%s", b.stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	signalProc(t, b, syscall.SIGTERM)
	code := b.wait(t)
	if code != 128+int(syscall.SIGTERM) || exists(ran) {
		t.Errorf("waiter: exit %d, ran %v; want %d without running; stderr:\n%s", code, exists(ran), 128+int(syscall.SIGTERM), b.stderr.String())
	}
	if v, err := clients[0].Get(ctxT(t), "w").Result(); v != lock.Token() {
		t.Errorf("the holder's key = %q, %v; want its token", v, err)
	}
}

func TestEnvironment(t *testing.T) {
	t.Parallel()
	// One master: the single-instance lock.
	masters, clients := cluster(t, 1)
	dir := t.TempDir()
	out, started, stop := filepath.Join(dir, "out"), filepath.Join(dir, "started"), filepath.Join(dir, "stop")
	script := `printf '%s|%s|%s|%s' "$REDLOCK_KEY" "$REDLOCK_TOKEN" "${REDLOCK_FENCE-unset}" "$EXTRA" > "$1"; shift; ` + holdScript
	for i, tc := range []struct {
		fencing bool
		fence   string
	}{{false, "unset"}, {true, "1"}, {true, "2"}} {
		for _, f := range []string{out, started, stop} {
			_ = os.Remove(f)
		}
		flags := []string{"run", "--key", "env", "--prefix", "app:", "--ttl", "1s", "--node-timeout", "300ms"}
		if tc.fencing {
			flags = append(flags, "--fencing")
		}
		// The masters come from the environment, and the environment reaches the command.
		a := start(t, []string{"REDLOCK_MASTERS=" + masters, "EXTRA=kept"}, args(flags, "--", "sh", "-c", script, "sh", out, started, stop)...)
		waitFile(t, a, started)
		got := strings.Split(readFile(t, out), "|")
		if len(got) != 4 {
			t.Fatalf("run %d: child saw %q", i, got)
		}
		token, err := clients[0].Get(ctxT(t), "app:env").Result()
		if err != nil {
			t.Fatalf("run %d: GET app:env: %v", i, err)
		}
		if got[0] != "env" || got[1] != token || got[2] != tc.fence || got[3] != "kept" {
			t.Errorf("run %d: child saw KEY=%q TOKEN=%q FENCE=%q EXTRA=%q; want env, %q (the key's value), %s, kept", i, got[0], got[1], got[2], got[3], token, tc.fence)
		}
		touch(t, stop)
		if code := a.wait(t); code != 0 {
			t.Errorf("run %d: exit %d; stderr:\n%s", i, code, a.stderr.String())
		}
	}
}

func TestExitStatus(t *testing.T) {
	t.Parallel()
	masters, clients := cluster(t, 3)
	for _, tc := range []struct {
		command []string
		want    int
	}{
		{[]string{"true"}, 0},
		{[]string{"sh", "-c", "exit 3"}, 3},
		{[]string{"sh", "-c", "kill -KILL $$"}, 128 + int(syscall.SIGKILL)},
		{[]string{"redlock-test-no-such-command"}, exitNotFound},
		{[]string{"/"}, exitCannotExec},
	} {
		code, _, stderr := runRedlock(t, nil, args(lockFlags(masters, "exit"), append([]string{"--"}, tc.command...)...)...)
		if code != tc.want {
			t.Errorf("%q: exit %d, want %d; stderr:\n%s", tc.command, code, tc.want, stderr)
		}
		assertFree(t, clients, "exit")
	}
}

func TestNoQuorumIsAFailure(t *testing.T) {
	t.Parallel()
	servers := redistest.Start(t, 3)
	masters := servers[0].Addr() + "," + servers[1].Addr() + "," + servers[2].Addr()
	for _, s := range servers[1:] {
		if err := s.Kill(); err != nil {
			t.Fatal(err)
		}
	}
	ran := filepath.Join(t.TempDir(), "ran")
	code, _, stderr := runRedlock(t, nil, args(lockFlags(masters, "nq"), "--", "touch", ran)...)
	if code != exitFailure || exists(ran) {
		t.Errorf("exit %d, ran %v; want %d without running; stderr:\n%s", code, exists(ran), exitFailure, stderr)
	}
	if !strings.Contains(stderr, servers[1].Addr()) {
		t.Errorf("stderr does not name the dead master %s:\n%s", servers[1].Addr(), stderr)
	}
}

func TestAuth(t *testing.T) {
	t.Parallel()
	// The default user stays open (redistest pings it); alice needs a password.
	s := redistest.Start(t, 1, redistest.Options{Args: []string{"--user", "alice", "on", ">s3cret", "~*", "&*", "+@all"}})[0]
	for _, tc := range []struct {
		name    string
		env     []string
		masters string
		flags   []string
		want    int
	}{
		{"url", nil, "redis://alice:s3cret@" + s.Addr(), nil, 0},
		{"flags", nil, s.Addr(), []string{"--user", "alice", "--password", "s3cret"}, 0},
		{"env", []string{"REDLOCK_PASSWORD=s3cret"}, s.Addr(), []string{"--user", "alice"}, 0},
		{"wrong", nil, s.Addr(), []string{"--user", "alice", "--password", "nope"}, exitFailure},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := append([]string{"run", "--masters", tc.masters, "--key", "auth-" + tc.name}, tc.flags...)
			code, _, stderr := runRedlock(t, tc.env, append(a, "--", "true")...)
			if code != tc.want {
				t.Errorf("exit %d, want %d; stderr:\n%s", code, tc.want, stderr)
			}
			if strings.Contains(stderr, "s3cret") {
				t.Errorf("stderr shows the password:\n%s", stderr)
			}
		})
	}
}
