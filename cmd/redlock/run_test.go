package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
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

// lockFlags are short-lived locks for fast tests. The node timeout is
// generous for a busy machine, and so is the TTL: the job gets SIGTERM
// once renewals are late by a third of it (the default --grace).
func lockFlags(masters, key string) []string {
	return []string{"run", "--masters", masters, "--key", key, "--ttl", testTTL.String(), "--node-timeout", "300ms"}
}

const testTTL = 3 * time.Second

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
	// The command outlives several TTLs, counted by the renewals it
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

// waitExpired waits until key is gone from the master c.
func waitExpired(t *testing.T, c redis.UniversalClient, key string) {
	t.Helper()
	waitFor(t, nil, key+" expired", func() bool {
		n, err := c.Exists(ctxT(t), key).Result()
		if err != nil {
			t.Fatal(err)
		}
		return n == 0
	})
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
			oneLinePerMessage(t, a.stderr.String())
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

// envOf reads a file the job wrote with env -0 into a map, failing on a
// name that appears twice.
func envOf(t *testing.T, path string) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, kv := range strings.Split(strings.TrimSuffix(readFile(t, path), "\x00"), "\x00") {
		name, value, _ := strings.Cut(kv, "=")
		if _, dup := env[name]; dup {
			t.Errorf("%s appears twice in the job's environment", name)
		}
		env[name] = value
	}
	return env
}

// The job gets REDLOCK_KEY, REDLOCK_TOKEN and, with --fencing only,
// REDLOCK_FENCE; none of the masters, password or an outer run's
// variables; the rest of redlock's environment as it is.
func TestEnvironment(t *testing.T) {
	t.Parallel()
	// One master, with a user whose password must stay out of the job's
	// environment.
	s := redistest.Start(t, 1, redistest.Options{Args: []string{"--user", "alice", "on", ">s3cret", "~*", "&*", "+@all"}})[0]
	clients := redistest.Clients(t, []*redistest.Server{s})
	dir := t.TempDir()
	out, started, stop := filepath.Join(dir, "out"), filepath.Join(dir, "started"), filepath.Join(dir, "stop")
	script := `env -0 > "$1"; shift; ` + holdScript
	// What an outer redlock run and the caller leave in the environment.
	outer := []string{"REDLOCK_FENCE=999", "REDLOCK_KEY=outer", "REDLOCK_TOKEN=outer-token", "EXTRA=kept"}
	for i, tc := range []struct {
		fencing bool
		env     []string
		flags   []string
		fence   string // "" for none
	}{
		// The masters, with the password, from the environment.
		{false, []string{"REDLOCK_MASTERS=redis://alice:s3cret@" + s.Addr()}, nil, ""},
		{true, []string{"REDLOCK_MASTERS=redis://alice:s3cret@" + s.Addr()}, nil, "1"},
		// The password alone from the environment.
		{true, []string{"REDLOCK_MASTERS=" + s.Addr(), "REDLOCK_PASSWORD=s3cret"}, []string{"--user", "alice"}, "2"},
		{false, []string{"REDLOCK_PASSWORD=s3cret"}, []string{"--masters", s.Addr(), "--user", "alice"}, ""},
	} {
		for _, f := range []string{out, started, stop} {
			_ = os.Remove(f)
		}
		flags := append([]string{"run", "--key", "env", "--prefix", "app:", "--ttl", testTTL.String(), "--node-timeout", "300ms"}, tc.flags...)
		if tc.fencing {
			flags = append(flags, "--fencing")
		}
		a := start(t, append(append([]string{}, outer...), tc.env...), args(flags, "--", "sh", "-c", script, "sh", out, started, stop)...)
		waitFile(t, a, started)
		env := envOf(t, out)
		token, err := clients[0].Get(ctxT(t), "app:env").Result()
		if err != nil {
			t.Fatalf("run %d: GET app:env: %v", i, err)
		}
		if env["REDLOCK_KEY"] != "env" || env["REDLOCK_TOKEN"] != token || env["EXTRA"] != "kept" {
			t.Errorf("run %d: job saw KEY=%q TOKEN=%q EXTRA=%q; want env, %q (the key's value), kept", i, env["REDLOCK_KEY"], env["REDLOCK_TOKEN"], env["EXTRA"], token)
		}
		if fence, ok := env["REDLOCK_FENCE"]; fence != tc.fence || ok != (tc.fence != "") {
			t.Errorf("run %d: job saw REDLOCK_FENCE=%q (set %v); want %q", i, fence, ok, tc.fence)
		}
		for _, name := range []string{"REDLOCK_MASTERS", "REDLOCK_PASSWORD"} {
			if v, ok := env[name]; ok {
				t.Errorf("run %d: the job got %s=%q", i, name, v)
			}
		}
		if strings.Contains(readFile(t, out), "s3cret") {
			t.Errorf("run %d: the password is in the job's environment", i)
		}
		touch(t, stop)
		if code := a.wait(t); code != 0 {
			t.Errorf("run %d: exit %d; stderr:\n%s", i, code, a.stderr.String())
		}
	}
}

// A redlock run inside another's job sees only its own lock's variables:
// without --fencing, no REDLOCK_FENCE from the outer run.
func TestNestedRun(t *testing.T) {
	t.Parallel()
	masters, _ := cluster(t, 1)
	dir := t.TempDir()
	out := filepath.Join(dir, "inner.env")
	// The inner run needs its own --masters: the outer one's are not passed on.
	inner := `"$1" run --masters "$2" --key inner --ttl 3s --node-timeout 300ms -- sh -c 'env -0 > "$0"' "$3"`
	code, _, stderr := runRedlock(t, []string{"REDLOCK_MASTERS=" + masters},
		"run", "--key", "outer", "--fencing", "--ttl", testTTL.String(), "--node-timeout", "300ms", "--", "sh", "-c", inner, "sh", redlockBin(t), masters, out)
	if code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, stderr)
	}
	env := envOf(t, out)
	if env["REDLOCK_KEY"] != "inner" || env["REDLOCK_TOKEN"] == "" {
		t.Errorf("inner job saw KEY=%q TOKEN=%q; want inner and its token", env["REDLOCK_KEY"], env["REDLOCK_TOKEN"])
	}
	if fence, ok := env["REDLOCK_FENCE"]; ok {
		t.Errorf("inner job without --fencing saw the outer run's REDLOCK_FENCE=%q", fence)
	}
	if v, ok := env["REDLOCK_MASTERS"]; ok {
		t.Errorf("inner job saw REDLOCK_MASTERS=%q", v)
	}
}

// A password in --masters or $REDLOCK_MASTERS appears in no message, also
// when its URL does not parse: the parser's messages repeat parts of it.
func TestPasswordsStayOutOfMessages(t *testing.T) {
	t.Parallel()
	// Each URL hides the secret "S3CRET" (or its digits 7301) somewhere
	// the URL parser or go-redis would quote it.
	// No URL names a host to look up: a mistake in this test must not
	// query a name server.
	for _, bad := range []string{
		"redis://u:S3/CRET@127.0.0.1:1",                    // the path starts inside the password: a bad port
		"redis://u:73/01@127.0.0.1:1",                      // ... or a bad database number
		"redis://u:S3%zzCRET@127.0.0.1:1",                  // a bad escape
		"redis://u:S3CRET@127.0.0.1:1/x",                   // a bad database number after a good password
		"redis://u:S3CRET@127.0.0.1:1?bogus=1",             // an unknown option
		"redis://u:S3CRET@127.0.0.1:1,,127.0.0.1:2",        // an empty master in the list
		"redis://u:S3CRET@[::1:1",                          // a bad host
		"bogus://u:S3CRET@127.0.0.1:1",                     // an unknown scheme
		"redis://u:S3CRET@127.0.0.1:1,127.0.0.1:1",         // a master listed twice
		"redis://u:S3CRET@127.0.0.1:1\x7f",                 // a control character
		"redis://u:S3CRET@127.0.0.1:1 redis://127.0.0.1:2", // a space
	} {
		for _, sub := range []string{"run", "status"} {
			for _, viaEnv := range []bool{false, true} {
				a := []string{sub, "--key", "k"}
				var env []string
				if viaEnv {
					env = []string{"REDLOCK_MASTERS=" + bad}
				} else {
					a = append(a, "--masters", bad)
				}
				if sub == "run" {
					a = append(a, "--", "true")
				}
				code, stdout, stderr := runRedlock(t, env, a...)
				if code != exitUsage {
					t.Errorf("%q (env %v): exit %d, want %d; stderr:\n%s", a, viaEnv, code, exitUsage, stderr)
				}
				for _, secret := range []string{"S3", "CRET", "73", "01"} {
					if strings.Contains(stdout+stderr, secret) {
						t.Errorf("%q (env %v): the output shows %q:\n%s%s", a, viaEnv, secret, stdout, stderr)
					}
				}
				if !strings.Contains(stderr, "--masters") {
					t.Errorf("%q (env %v): stderr does not name --masters:\n%s", a, viaEnv, stderr)
				}
			}
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
		oneLinePerMessage(t, stderr)
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
	oneLinePerMessage(t, stderr)
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

// When renewals keep failing, the job gets SIGTERM as soon as the lock's
// validity is down to --grace, so that it stops before the validity ends:
// it has finished the cleanup it does on SIGTERM by the time the key
// expires on the master and another holder can take it.
func TestJobToldWhileTheLockIsStillValid(t *testing.T) {
	t.Parallel()
	// redlock connects as alice; the test as the default user.
	s := redistest.Start(t, 1, redistest.Options{Args: []string{"--user", "alice", "on", ">s3cret", "~*", "&*", "+@all"}})[0]
	admin := redistest.Clients(t, []*redistest.Server{s})[0]
	dir := t.TempDir()
	started, termed, cleaned := filepath.Join(dir, "started"), filepath.Join(dir, "termed"), filepath.Join(dir, "cleaned")
	// The cleanup takes a fifth of --grace.
	script := `trap 'touch "$1/termed"; sleep 0.3; touch "$1/cleaned"; exit 0' TERM; touch "$1/started"; while :; do sleep 0.02; done`
	a := start(t, nil, "run", "--masters", "redis://alice:s3cret@"+s.Addr(), "--key", "early", "--ttl", "4s", "--grace", "1.5s", "--node-timeout", "300ms", "--", "sh", "-c", script, "sh", dir)
	waitFile(t, a, started)

	// Cut redlock off, as a partition would: its renewals fail from now
	// on, and the key runs out its TTL on the master.
	ctx := ctxT(t)
	if err := admin.Do(ctx, "ACL", "SETUSER", "alice", "off").Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.Do(ctx, "CLIENT", "KILL", "USER", "alice").Err(); err != nil {
		t.Fatal(err)
	}
	waitExpired(t, admin, "early")
	if !exists(cleaned) {
		t.Errorf("the key expired before the job had finished its cleanup (SIGTERM received: %v); stderr:\n%s", exists(termed), a.stderr.String())
	}
	if code := a.wait(t); code != exitLost {
		t.Errorf("exit %d, want %d; stderr:\n%s", code, exitLost, a.stderr.String())
	}
	if !strings.Contains(a.stderr.String(), "SIGTERM") {
		t.Errorf("stderr does not say the job was told:\n%s", a.stderr.String())
	}
	// Another holder gets the lock.
	if code, _, stderr := runRedlock(t, nil, "run", "--masters", s.Addr(), "--key", "early", "--", "true"); code != 0 {
		t.Errorf("next holder: exit %d; stderr:\n%s", code, stderr)
	}
}

// TestVerbose: --verbose logs the lock's life on stderr, and no password.
func TestVerbose(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t, 1, redistest.Options{Args: []string{"--user", "alice", "on", ">s3cret", "~*", "&*", "+@all"}})[0]
	code, _, stderr := runRedlock(t, nil, "run", "--masters", "redis://alice:s3cret@"+s.Addr(), "--key", "verbose", "--verbose", "--", "true")
	if code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, stderr)
	}
	for _, want := range []string{`msg="redlock: obtain" key=verbose outcome=obtained`, `msg="redlock: release" key=verbose outcome=released`} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	if strings.Contains(stderr, "s3cret") {
		t.Errorf("stderr shows the password:\n%s", stderr)
	}
}

// redlock run puts holder info in the lock's token: by default this host,
// redlock's pid and the command's base name; --holder-info sets other
// info, and --holder-info= none (the token is the random part alone).
// Inspect and redlock status show it while the job runs.
func TestHolderInfoOfRun(t *testing.T) {
	t.Parallel()
	masters, clients := cluster(t, 3)
	lc, err := redlock.New(clients)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lc.Close() }) // after the parallel subtests
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	for i, tc := range []struct {
		flags []string
		want  func(pid int) string
	}{
		{nil, func(pid int) string { return fmt.Sprintf("host=%s pid=%d cmd=sh", host, pid) }},
		{[]string{"--holder-info", "nightly backup ~!% é"}, func(int) string { return "nightly backup ~!% é" }},
		{[]string{"--holder-info="}, func(int) string { return "" }},
	} {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			started, stop := filepath.Join(dir, "started"), filepath.Join(dir, "stop")
			key := fmt.Sprint("holder", i)
			flags := append(lockFlags(masters, key), tc.flags...)
			a := start(t, nil, args(flags, "--", "sh", "-c", holdScript, "sh", started, stop)...)
			waitFile(t, a, started)
			want := tc.want(a.cmd.Process.Pid)
			redistest.Eventually(t, func() error { // Obtain returns at quorum; the third master follows
				st, err := lc.Inspect(ctxT(t), key)
				if err != nil {
					return err
				}
				token, n := st.Holder()
				if n != 3 {
					return fmt.Errorf("held on %d masters, want 3", n)
				}
				for j, m := range st.Masters {
					if m.HolderInfo != want {
						return fmt.Errorf("master %d: holder info %q, want %q", j, m.HolderInfo, want)
					}
				}
				if want == "" && (len(token) != 22 || strings.Contains(token, "~")) {
					return fmt.Errorf("token %q, want the random part alone", token)
				}
				_, out, _ := runRedlock(t, nil, "status", "--masters", masters, "--key", key)
				field := ""
				if want != "" {
					field = " holder=" + strconv.Quote(want)
				}
				if !strings.Contains(out, "(quorum 2)"+field+"\n") || (want == "" && strings.Contains(out, "holder=")) {
					return fmt.Errorf("status, want %q in the summary:\n%s", field, out)
				}
				return nil
			})
			touch(t, stop)
			if code := a.wait(t); code != 0 {
				t.Errorf("exit %d; stderr:\n%s", code, a.stderr.String())
			}
			assertFree(t, clients, key)
		})
	}
}
