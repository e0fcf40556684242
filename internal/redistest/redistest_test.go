//go:build unix

package redistest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if os.Getenv(envHelper) != "" {
		helperPanics()
		return
	}
	goleak.VerifyTestMain(m)
}

func TestStartParallel(t *testing.T) {
	start := time.Now()
	servers := Start(t, 5)
	t.Logf("5 servers in parallel: %v", time.Since(start))
	ports := map[int]bool{}
	for _, s := range servers {
		if ports[s.Port()] {
			t.Fatalf("port %d used twice", s.Port())
		}
		ports[s.Port()] = true
		if got, want := s.Addr(), "127.0.0.1:"+strconv.Itoa(s.Port()); got != want {
			t.Errorf("Addr() = %q, want %q", got, want)
		}
		if s.Pid() <= 0 {
			t.Errorf("Pid() = %d, want > 0", s.Pid())
		}
		if _, err := os.Stat(s.LogPath()); err != nil {
			t.Errorf("log: %v", err)
		}
	}
	ctx := context.Background()
	for i, c := range Clients(t, servers) {
		if err := c.Set(ctx, "k", i, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	// Each server has its own dataset.
	for i, s := range servers {
		if got := get(t, s, "k"); got != strconv.Itoa(i) {
			t.Errorf("server %d: k = %q, want %d", i, got, i)
		}
	}
}

func TestDebugSleepEnabled(t *testing.T) {
	s := Start(t, 1)[0]
	if _, err := do(s.Addr(), time.Second, "DEBUG", "SLEEP", "0"); err != nil {
		t.Fatalf("DEBUG SLEEP 0: %v", err)
	}
}

func TestStopCont(t *testing.T) {
	s := Start(t, 1)[0]
	c := s.Client(func(o *redis.Options) { o.ReadTimeout = 200 * time.Millisecond })
	defer c.Close()
	ctx := context.Background()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	pid := s.Pid()
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if got := procState(t, pid); got != 'T' {
		t.Errorf("state after Stop = %c, want T", got)
	}
	begin := time.Now()
	err := c.Get(ctx, "k").Err()
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Errorf("GET on a stopped server: err = %v, want a timeout", err)
	}
	if d := time.Since(begin); d > 900*time.Millisecond {
		t.Errorf("GET on a stopped server took %v, want about the 200ms read timeout", d)
	}
	if err := s.Cont(); err != nil {
		t.Fatal(err)
	}
	if got := get(t, s, "k"); got != "v" {
		t.Errorf("after Cont: k = %q, want v", got)
	}
	if got, err := c.Get(ctx, "k").Result(); err != nil || got != "v" {
		t.Errorf("after Cont, via the client: %q, %v; want v", got, err)
	}
}

func TestKillRestartForgets(t *testing.T) {
	s := Start(t, 1)[0]
	c := s.Client()
	defer c.Close()
	ctx := context.Background()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	port, oldPid := s.Port(), s.Pid()
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := s.Kill(); err != nil {
		t.Errorf("second Kill: %v", err)
	}
	if s.Pid() != 0 {
		t.Errorf("Pid() after Kill = %d, want 0", s.Pid())
	}
	if err := c.Ping(ctx).Err(); err == nil {
		t.Error("PING after Kill succeeded")
	}
	if err := s.Stop(); err == nil {
		t.Error("Stop after Kill: want an error")
	}
	begin := time.Now()
	if err := s.Restart(false); err != nil {
		t.Fatal(err)
	}
	t.Logf("restart took %v", time.Since(begin))
	if s.Port() != port || s.Pid() == oldPid || s.Pid() == 0 {
		t.Errorf("after Restart: port %d pid %d, want port %d and a new pid (old %d)", s.Port(), s.Pid(), port, oldPid)
	}
	if err := c.Get(ctx, "k").Err(); err != redis.Nil {
		t.Errorf("GET after a restart without persistence: err = %v, want redis.Nil", err)
	}
	// Restart also works on a running server.
	if err := s.Restart(false); err != nil {
		t.Fatal(err)
	}
	if err := c.Ping(ctx).Err(); err != nil {
		t.Errorf("PING: %v", err)
	}
}

func TestRestartPersistKeeps(t *testing.T) {
	s := Start(t, 1, Options{Persist: true})[0]
	c := s.Client()
	defer c.Close()
	ctx := context.Background()
	if err := c.Set(ctx, "k", "v", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.Restart(true); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Get(ctx, "k").Result(); err != nil || got != "v" {
		t.Errorf("after an AOF restart: k = %q, %v; want v", got, err)
	}
	if ttl := c.PTTL(ctx, "k").Val(); ttl <= 50*time.Second {
		t.Errorf("after an AOF restart: pttl = %v, want about 1m", ttl)
	}
	if _, err := os.Stat(filepath.Join(s.Dir(), "appendonlydir")); err != nil {
		t.Errorf("AOF dir: %v", err)
	}
	// Without persistence the AOF is not read, even though it is still in Dir.
	if err := s.Restart(false); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, "k").Err(); err != redis.Nil {
		t.Errorf("after Restart(false): err = %v, want redis.Nil", err)
	}
}

func TestRestartAfter(t *testing.T) {
	servers := Start(t, 2)
	s := servers[0]
	c := s.Client()
	defer c.Close()
	ctx := context.Background()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	begin := time.Now()
	const d = 300 * time.Millisecond
	s.RestartAfter(d, false)
	if err := c.Ping(ctx).Err(); err == nil {
		t.Error("PING right after RestartAfter succeeded, want the server down")
	}
	if err := s.WaitRestart(); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(begin); el < d {
		t.Errorf("restarted after %v, want >= %v", el, d)
	}
	if err := c.Get(ctx, "k").Err(); err != redis.Nil {
		t.Errorf("GET after restart: err = %v, want redis.Nil", err)
	}

	// A pending restart is cancelled by Close, which does not wait for it.
	other := servers[1]
	other.RestartAfter(time.Hour, false)
	begin = time.Now()
	if err := other.Close(); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(begin); el > 2*time.Second {
		t.Errorf("Close with a pending restart took %v", el)
	}
	if err := other.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := other.Restart(false); !errors.Is(err, ErrClosed) {
		t.Errorf("Restart after Close: %v, want ErrClosed", err)
	}
	if _, err := os.Stat(other.Dir()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("dir after Close: %v, want it removed", err)
	}
}

func TestKillCancelsRestartAfter(t *testing.T) {
	s := Start(t, 1)[0]
	s.RestartAfter(100*time.Millisecond, false)
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := s.WaitRestart(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	if s.Pid() != 0 {
		t.Errorf("Kill did not cancel the pending restart: pid %d", s.Pid())
	}
}

func TestCloseStopped(t *testing.T) {
	s, err := NewServer(Options{})
	if err != nil {
		t.Fatal(err)
	}
	pid := s.Pid()
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if alive(pid) {
		t.Errorf("pid %d alive after Close", pid)
	}
}

func TestSetEnv(t *testing.T) {
	// redis-server overwrites its environ with the process title unless told not to.
	opts := Options{Env: []string{"REDISTEST_MARK=one"}, Args: []string{"--set-proc-title", "no"}}
	s := Start(t, 1, opts)[0]
	if got := environ(t, s.Pid())["REDISTEST_MARK"]; got != "one" {
		t.Errorf("REDISTEST_MARK = %q, want one", got)
	}
	s.SetEnv([]string{"REDISTEST_MARK=two"})
	if got := environ(t, s.Pid())["REDISTEST_MARK"]; got != "one" {
		t.Errorf("before restart: REDISTEST_MARK = %q, want one", got)
	}
	if err := s.Restart(false); err != nil {
		t.Fatal(err)
	}
	if got := environ(t, s.Pid())["REDISTEST_MARK"]; got != "two" {
		t.Errorf("after restart: REDISTEST_MARK = %q, want two", got)
	}
}

func TestStartErrorShowsLog(t *testing.T) {
	Require(t)
	s, err := NewServer(Options{Args: []string{"--no-such-directive", "1"}})
	if err == nil {
		s.Close()
		t.Fatal("NewServer with a bad directive: want an error")
	}
	if !strings.Contains(err.Error(), "no-such-directive") {
		t.Errorf("error does not show redis-server's output: %v", err)
	}
}

func TestCluster(t *testing.T) {
	begin := time.Now()
	c := StartCluster(t, 3)
	t.Logf("3-master cluster ready in %v", time.Since(begin))
	cc := c.Client()
	defer cc.Close()
	ctx := context.Background()

	// One key per slot, through the cluster client.
	keys := make([]string, clusterSlots)
	for i, left := 0, clusterSlots; left > 0; i++ {
		k := "k" + strconv.Itoa(i)
		if slot := crc16(k) % clusterSlots; keys[slot] == "" {
			keys[slot] = k
			left--
		}
	}
	for _, k := range []string{keys[0], keys[5000], keys[clusterSlots-1]} {
		got, err := cc.ClusterKeySlot(ctx, k).Result()
		if err != nil || int(got) != int(crc16(k)%clusterSlots) {
			t.Fatalf("CLUSTER KEYSLOT %s = %d, %v; want %d", k, got, err, crc16(k)%clusterSlots)
		}
	}
	_, err := cc.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, k := range keys {
			p.Set(ctx, k, k, time.Minute)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("SET one key per slot: %v", err)
	}
	total := 0
	for i, s := range c.Servers {
		n, err := do(s.Addr(), time.Second, "DBSIZE")
		if err != nil {
			t.Fatal(err)
		}
		got, _ := strconv.Atoi(n)
		want := (i+1)*clusterSlots/len(c.Servers) - i*clusterSlots/len(c.Servers)
		if got != want {
			t.Errorf("node %d holds %d keys, want %d (its slots)", i, got, want)
		}
		total += got
	}
	if total != clusterSlots {
		t.Errorf("keys stored = %d, want %d", total, clusterSlots)
	}
	if got, err := cc.Get(ctx, keys[12345]).Result(); err != nil || got != keys[12345] {
		t.Errorf("GET %s = %q, %v", keys[12345], got, err)
	}
}

// crc16 is Redis Cluster's key hash (CRC16-CCITT/XMODEM) for keys without a hash tag.
func crc16(s string) int {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc)
}

const envHelper = "REDISTEST_HELPER_PANIC"

// helperPanics runs in a child test binary: it starts a server, reports its pid
// and directory, and panics without Close, as a test hit by -timeout would.
func helperPanics() {
	s, err := NewServer(Options{})
	if err != nil {
		fmt.Println("error", err)
		os.Exit(2)
	}
	fmt.Println(s.Pid(), s.Dir())
	os.Stdout.Sync()
	panic("redistest helper: dying without Close")
}

func TestPanicLeavesNothing(t *testing.T) {
	Require(t)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envHelper+"=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = nil
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(out).ReadString('\n')
	werr := cmd.Wait()
	var pid int
	var dir string
	if _, err := fmt.Sscan(line, &pid, &dir); err != nil {
		t.Fatalf("helper printed %q (wait: %v)", line, werr)
	}
	if werr == nil {
		t.Fatal("helper exited cleanly, want a panic")
	}
	deadline := time.Now().Add(2 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("redis-server pid %d outlived its panicking parent", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("helper's dir: %v, want it still there before the sweep", err)
	}
	Start(t, 1) // sweeps directories of dead owners
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stale dir %s after the next NewServer: %v, want it removed", dir, err)
	}
}

func TestRequireEnv(t *testing.T) {
	t.Setenv(EnvBinary, "/nonexistent/redis-server")
	if _, err := Binary(); err == nil {
		t.Fatal("Binary with a bad REDIS_SERVER: want an error")
	}
	t.Setenv(EnvRequire, "")
	ft := &fakeTB{TB: t}
	func() {
		defer func() { recover() }()
		Require(ft)
	}()
	if !ft.skipped || ft.failed {
		t.Errorf("Require without %s: skipped=%v failed=%v, want a skip", EnvRequire, ft.skipped, ft.failed)
	}
	t.Setenv(EnvRequire, "1")
	ft = &fakeTB{TB: t}
	func() {
		defer func() { recover() }()
		Require(ft)
	}()
	if ft.skipped || !ft.failed {
		t.Errorf("Require with %s=1: skipped=%v failed=%v, want a failure", EnvRequire, ft.skipped, ft.failed)
	}
}

// fakeTB records Skip and Fatal instead of ending the test.
type fakeTB struct {
	testing.TB
	skipped, failed bool
}

func (f *fakeTB) Helper() {}
func (f *fakeTB) Skipf(string, ...any) {
	f.skipped = true
	panic("skip")
}
func (f *fakeTB) Fatalf(string, ...any) {
	f.failed = true
	panic("fatal")
}

func get(t *testing.T, s *Server, key string) string {
	t.Helper()
	v, err := do(s.Addr(), time.Second, "GET", key)
	if err != nil {
		t.Fatalf("GET %s on %s: %v", key, s.Addr(), err)
	}
	return v
}

func procState(t *testing.T, pid int) byte {
	t.Helper()
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	return data[strings.LastIndexByte(string(data), ')')+2]
}

// alive reports whether pid exists and is not a zombie (a reparented child may
// wait a while to be reaped).
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return !errors.Is(err, os.ErrNotExist)
	}
	return data[strings.LastIndexByte(string(data), ')')+2] != 'Z'
}

func environ(t *testing.T, pid int) map[string]string {
	t.Helper()
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	env := map[string]string{}
	for _, kv := range strings.Split(string(data), "\x00") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	return env
}

// TestProxy: the proxy forwards, delays the connections open when asked
// (only those), and cuts a connection's client side while what it sent
// still reaches the server.
func TestProxy(t *testing.T) {
	s := Start(t, 1)[0]
	p, err := NewProxy(s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx := context.Background()
	slow := redis.NewClient(&redis.Options{Addr: p.Addr(), PoolSize: 1, MaxRetries: -1, DisableIdentity: true, ReadTimeout: 5 * time.Second})
	defer slow.Close()
	if err := slow.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	p.DelayOpen(200*time.Millisecond, 0)
	fresh := redis.NewClient(&redis.Options{Addr: p.Addr(), PoolSize: 1, MaxRetries: -1, DisableIdentity: true})
	defer fresh.Close()
	start := time.Now()
	if err := fresh.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 150*time.Millisecond {
		t.Fatalf("a connection opened after DelayOpen was delayed (%v)", took)
	}
	start = time.Now()
	if err := slow.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 200*time.Millisecond {
		t.Fatalf("the delayed connection answered in %v", took)
	}
	// Cut mid-stream: the client gives up, the SET still lands.
	set := make(chan error, 1)
	go func() { set <- slow.Set(ctx, "k", "v", 0).Err() }()
	time.Sleep(50 * time.Millisecond)
	if n := p.CutOpen(); n == 0 {
		t.Fatal("nothing to cut")
	}
	if err := <-set; err == nil {
		t.Fatal("SET on a cut connection reported success")
	}
	deadline := time.Now().Add(2 * time.Second)
	for get(t, s, "k") != "v" {
		if time.Now().After(deadline) {
			t.Fatal("the SET sent before the cut never reached the server")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestProxyPending: Pending counts what a delay holds back, and is zero
// once it has been delivered.
func TestProxyPending(t *testing.T) {
	s := Start(t, 1)[0]
	p, err := NewProxy(s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: p.Addr(), PoolSize: 1, MaxRetries: -1, DisableIdentity: true, ReadTimeout: 5 * time.Second})
	defer c.Close()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	// The proxy counts the PING's reply delivered once its write to the
	// client returned, which may be after the client read it.
	Within(t, time.Second, func() error {
		if n := p.Pending(); n != 0 {
			return fmt.Errorf("Pending %d with nothing on its way", n)
		}
		return nil
	})
	p.DelayOpen(300*time.Millisecond, 0)
	set := make(chan error, 1)
	go func() { set <- c.Set(ctx, "k", "v", 0).Err() }()
	Within(t, 200*time.Millisecond, func() error {
		if n := p.Pending(); n == 0 {
			return fmt.Errorf("Pending %d while a SET is held back", n)
		}
		return nil
	})
	if v := get(t, s, "k"); v != "" {
		t.Fatalf("the delayed SET arrived early: %q", v)
	}
	Within(t, 2*time.Second, func() error {
		if n := p.Pending(); n != 0 {
			return fmt.Errorf("Pending %d after the delay", n)
		}
		return nil
	})
	if v := get(t, s, "k"); v != "v" {
		t.Fatalf("Pending is 0 but the SET has not landed: %q", v)
	}
	if err := <-set; err != nil {
		t.Fatal(err)
	}
}

// TestReplicaAndSentinel: NewReplica returns a synced replica that gets
// the master's writes; a Sentinel server monitors the master and knows the
// replica.
func TestReplicaAndSentinel(t *testing.T) {
	ctx := context.Background()
	master := Start(t, 1)[0]
	replica := StartReplica(t, master)
	mc, rc := master.Client(), replica.Client()
	defer mc.Close()
	defer rc.Close()
	if err := mc.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := mc.Wait(ctx, 1, time.Second).Result(); err != nil || n != 1 {
		t.Fatalf("WAIT 1: %d replicas (%v)", n, err)
	}
	if got := get(t, replica, "k"); got != "v" {
		t.Fatalf("the replica holds %q, want v", got)
	}
	s, err := NewServer(Options{Sentinel: []string{fmt.Sprintf("sentinel monitor m 127.0.0.1 %d 1", master.Port())}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	sc := redis.NewSentinelClient(&redis.Options{Addr: s.Addr(), DisableIdentity: true, Protocol: 2})
	defer sc.Close()
	Eventually(t, func() error {
		rs, err := sc.Replicas(ctx, "m").Result()
		if err != nil {
			return err
		}
		for _, r := range rs {
			if r["port"] == strconv.Itoa(replica.Port()) {
				return nil
			}
		}
		return fmt.Errorf("the Sentinel knows replicas %v", rs)
	})
}
