// Package redistest starts and controls real redis-server processes on free
// loopback ports, for tests, benchmarks and chaos scenarios.
//
// The core API ([NewServer], [NewServers], [NewCluster] and the [Server]
// methods) does not use package testing, so the bench and chaos modules can
// call it from any code; [Start], [Require], [Clients] and [StartCluster] are
// thin helpers for tests on top of it.
//
// Every server gets its own port and temporary directory, listens on
// 127.0.0.1 only, runs with --enable-debug-command local (for DEBUG SLEEP) and,
// on Linux, dies with the thread that started it (Pdeathsig SIGKILL), so a
// test binary that panics or times out leaves no server behind. Directories
// left by such a binary are removed by the next [NewServer] in any process.
//
// A Server's methods are safe for concurrent use. No goroutine started here
// outlives [Server.Close].
package redistest

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// EnvBinary names the environment variable that overrides the redis-server path.
const EnvBinary = "REDIS_SERVER"

const (
	// startTimeout bounds one (re)start, including retries after a lost port race.
	// A server is normally ready in about 100 ms; the margin is for busy CI machines.
	startTimeout = 10 * time.Second
	// probeTimeout bounds one readiness probe (dial, PING, INFO).
	probeTimeout = 500 * time.Millisecond
	logName      = "redis.log"
	stdoutName   = "stdout.log" // stdout and stderr: config errors appear here, not in the log
	tailLines    = 25
	sentinelConf = "sentinel.conf"
	// syncTimeout bounds NewReplica's wait for its first sync.
	syncTimeout = 10 * time.Second
)

// ErrClosed is returned by the methods of a Server after Close.
var ErrClosed = errors.New("redistest: server closed")

// errNotRunning is returned by Stop and Cont when the server was killed.
var errNotRunning = errors.New("redistest: server not running")

// Binary returns the redis-server to run: $REDIS_SERVER if set, else redis-server
// looked up in PATH. The error says how to get one.
func Binary() (string, error) {
	if p := os.Getenv(EnvBinary); p != "" {
		path, err := exec.LookPath(p)
		if err != nil {
			return "", fmt.Errorf("redistest: %s=%q: %w", EnvBinary, p, err)
		}
		return path, nil
	}
	path, err := exec.LookPath("redis-server")
	if err != nil {
		return "", fmt.Errorf("redistest: redis-server not found in PATH (install it, e.g. apt-get install redis-server, set %s, or run ./scripts/test.sh, which installs it): %w", EnvBinary, err)
	}
	return path, nil
}

// Options configures a server. The zero value is a plain master without persistence.
type Options struct {
	Persist bool     // appendonly yes, appendfsync always; else --save "" --appendonly no
	Env     []string // extra environment ("K=V"), e.g. LD_PRELOAD for a clock shim
	Args    []string // extra redis-server arguments, appended last so they win
	Cluster bool     // cluster-enabled yes, with its own bus port (used by NewCluster)
	// Sentinel, when not empty, runs the server as a Redis Sentinel
	// (redis-server sentinel.conf --sentinel): its config file in Dir
	// holds these directives ("sentinel monitor m 127.0.0.1 6379 1", ...),
	// and Sentinel rewrites it as it learns.
	Sentinel []string
}

// A Server is one redis-server process with a fixed port and directory that
// survive [Server.Restart]. Create it with [NewServer]; the zero value is not usable.
type Server struct {
	bin     string
	port    int
	busPort int // cluster bus port; 0 unless Options.Cluster
	dir     string

	mu      sync.Mutex
	opts    Options // Persist follows Restart, Env follows SetEnv
	p       *proc   // nil while killed
	stopped bool    // SIGSTOPped
	closed  bool
	pending *pendingRestart // the RestartAfter not yet done, if any
	bgErr   error           // the last RestartAfter's error, for WaitRestart and Close
	bg      sync.WaitGroup  // RestartAfter goroutines
}

// proc is one run of redis-server; a goroutine reaps it and closes exited.
type proc struct {
	cmd    *exec.Cmd
	exited chan struct{}
	err    error // from Wait; read only after exited is closed
}

type pendingRestart struct {
	cancel chan struct{}
	done   chan struct{}
}

// NewServer starts a redis-server on a free loopback port in a new temporary
// directory and returns once it answers PING (within 10s, or an error that
// carries the tail of its log). The caller must call [Server.Close].
func NewServer(opts Options) (*Server, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	sweepStaleDirs()
	dir, err := os.MkdirTemp("", fmt.Sprintf("redistest-%d-*", os.Getpid()))
	if err != nil {
		return nil, fmt.Errorf("redistest: %w", err)
	}
	opts.Env = append([]string(nil), opts.Env...)
	opts.Args = append([]string(nil), opts.Args...)
	if len(opts.Sentinel) > 0 {
		conf := strings.Join(opts.Sentinel, "\n") + "\n"
		if err := os.WriteFile(filepath.Join(dir, sentinelConf), []byte(conf), 0o644); err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("redistest: %w", err)
		}
	}
	s := &Server{bin: bin, dir: dir, opts: opts}
	s.mu.Lock()
	err = s.startLocked(opts.Persist, true)
	s.mu.Unlock()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

// NewServers starts n servers in parallel with the same options. On error it
// closes those that started and returns nil.
func NewServers(n int, opts Options) ([]*Server, error) {
	servers := make([]*Server, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { servers[i], errs[i] = NewServer(opts) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, s := range servers {
			if s != nil {
				s.Close()
			}
		}
		return nil, err
	}
	return servers, nil
}

// NewReplica starts a server as [NewServer] does, a replica of master
// (--replicaof, kept across restarts), and returns once master lists it
// online and it says its link to master is up (its first sync loaded),
// within 10s. It sets the master's
// repl-diskless-sync-delay to 0, so that the sync starts at once. The caller must call
// [Server.Close].
func NewReplica(master *Server, opts Options) (*Server, error) {
	// A diskless sync waits 5s by default for more replicas to join it.
	if _, err := do(master.Addr(), probeTimeout, "CONFIG", "SET", "repl-diskless-sync-delay", "0"); err != nil {
		return nil, fmt.Errorf("redistest: master %s: %w", master.Addr(), err)
	}
	opts.Args = append(append([]string(nil), opts.Args...), "--replicaof", "127.0.0.1", strconv.Itoa(master.Port()))
	s, err := NewServer(opts)
	if err != nil {
		return nil, err
	}
	port := "port=" + strconv.Itoa(s.Port()) + ","
	deadline := time.Now().Add(syncTimeout)
	for {
		// The master lists a replica of a diskless sync online once it has
		// sent the data, before the replica has loaded it: until the
		// replica says its link is up, it acknowledges nothing.
		info, err := do(master.Addr(), probeTimeout, "INFO", "replication")
		online := false
		if err == nil {
			for _, l := range strings.Split(info, "\n") {
				online = online || strings.HasPrefix(l, "slave") && strings.Contains(l, port) && strings.Contains(l, "state=online")
			}
		}
		if online {
			info, err = do(s.Addr(), probeTimeout, "INFO", "replication")
			if link, _ := infoField(info, "master_link_status"); err == nil && strings.TrimSpace(link) == "up" {
				// Its first acknowledgement can take tens of
				// milliseconds on a busy machine: wait for it here, not
				// in the caller's first WAIT.
				var n string
				if n, err = masterReplicas(master); err == nil {
					var acked string
					acked, err = doAll(master.Addr(), time.Until(deadline),
						[]string{"SET", "redistest:sync", "1"}, []string{"DEL", "redistest:sync"},
						[]string{"WAIT", n, strconv.FormatInt(max(1, time.Until(deadline).Milliseconds()-100), 10)})
					if err == nil && acked == n {
						return s, nil
					}
				}
			}
		}
		if time.Now().After(deadline) {
			s.Close()
			return nil, fmt.Errorf("redistest: replica %s of %s not online within %v (last: %v)", s.Addr(), master.Addr(), syncTimeout, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// masterReplicas returns how many replicas master has connected.
func masterReplicas(master *Server) (string, error) {
	info, err := do(master.Addr(), probeTimeout, "INFO", "replication")
	if err != nil {
		return "", err
	}
	n, _ := infoField(info, "connected_slaves")
	return strings.TrimSpace(n), nil
}

// Addr returns "127.0.0.1:port".
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// Port returns the TCP port, the same across restarts.
func (s *Server) Port() int { return s.port }

// BusPort returns the cluster bus port, or 0 if the server is not cluster-enabled.
func (s *Server) BusPort() int { return s.busPort }

// Dir returns the server's working directory (AOF files, nodes.conf, logs).
// Close removes it.
func (s *Server) Dir() string { return s.dir }

// LogPath returns the path of redis-server's log file; restarts append to it.
func (s *Server) LogPath() string { return filepath.Join(s.dir, logName) }

// Pid returns the current process id, or 0 while the server is killed.
func (s *Server) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.p == nil {
		return 0
	}
	return s.p.cmd.Process.Pid
}

// Kill sends SIGKILL and reaps the process. It cancels a pending
// [Server.RestartAfter]. Killing a killed server does nothing.
func (s *Server) Kill() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	s.cancelPendingLocked()
	return s.killLocked()
}

// Stop freezes the server with SIGSTOP and returns once the kernel reports it
// stopped (on Linux). The kernel still accepts TCP connections for it, so
// clients see timeouts, not refusals. Commands sent meanwhile run after [Server.Cont].
func (s *Server) Stop() error { return s.signal(stopSignal, true) }

// Cont resumes a server frozen by [Server.Stop] with SIGCONT.
func (s *Server) Cont() error { return s.signal(contSignal, false) }

func (s *Server) signal(sig os.Signal, stop bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if s.p == nil {
		return errNotRunning
	}
	if sig == nil {
		return errors.New("redistest: Stop and Cont need a Unix system")
	}
	pid := s.p.cmd.Process.Pid
	if err := s.p.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("redistest: %v to pid %d: %w", sig, pid, err)
	}
	s.stopped = stop
	return waitStopped(pid, stop)
}

// Restart kills the server if it runs, then starts it again on the same port and
// directory, with AOF persistence if persist is true, and waits for PING. What
// survives is only what the new process loads from Dir: with persist false nothing
// (the dataset is empty), with persist true whatever an AOF run wrote. It cancels
// a pending [Server.RestartAfter].
func (s *Server) Restart(persist bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	s.cancelPendingLocked()
	if err := s.killLocked(); err != nil {
		return err
	}
	return s.startLocked(persist, false)
}

// RestartAfter kills the server now and restarts it in the background after d,
// as [Server.Restart] would. A later Kill, Restart, RestartAfter or Close cancels
// the pending restart; [Server.WaitRestart] waits for it and returns its error.
func (s *Server) RestartAfter(d time.Duration, persist bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.cancelPendingLocked()
	if err := s.killLocked(); err != nil {
		s.bgErr = err
		return
	}
	pr := &pendingRestart{cancel: make(chan struct{}), done: make(chan struct{})}
	s.pending = pr
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		defer close(pr.done)
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-pr.cancel:
			return
		case <-t.C:
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.pending != pr { // cancelled while the timer fired
			return
		}
		s.pending = nil
		s.bgErr = s.startLocked(persist, false)
	}()
}

// WaitRestart waits for the pending [Server.RestartAfter], if any, and returns
// the error of the last background restart (clearing it).
func (s *Server) WaitRestart() error {
	s.mu.Lock()
	pr := s.pending
	s.mu.Unlock()
	if pr != nil {
		<-pr.done
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	err := s.bgErr
	s.bgErr = nil
	return err
}

// SetEnv replaces [Options.Env] for the next start; the running process keeps its environment.
func (s *Server) SetEnv(env []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.opts.Env = append([]string(nil), env...)
}

// Close kills the server (resuming it first if stopped), reaps it, cancels or
// waits for a pending restart and removes its directory. It is idempotent; later
// calls return nil. It returns a failed background restart's error too.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.cancelPendingLocked()
	err := s.killLocked()
	bgErr := s.bgErr
	s.mu.Unlock()
	s.bg.Wait() // a cancelled RestartAfter returns without starting anything
	return errors.Join(err, bgErr, os.RemoveAll(s.dir))
}

// Client returns a go-redis client for the server with fault-friendly defaults:
// no command retries (MaxRetries -1), one dial attempt (DialerRetries 1), 1s
// dial, read and write timeouts, PoolSize 8, no CLIENT SETINFO (redis 7.0 does
// not know it). opts may change any field. The caller closes the client.
//
// go-redis ignores a context's deadline on socket reads unless
// ContextTimeoutEnabled is set; the defaults leave it off, so that the tests
// of reads bounded by ReadTimeout alone need no option (redlock.New refuses
// such a client; [Clients] sets it).
// After PoolSize failed dials (a killed server), go-redis starts a redial probe
// that can outlive Close by about one second.
func (s *Server) Client(opts ...func(*redis.Options)) *redis.Client {
	o := &redis.Options{
		Addr:            s.Addr(),
		MaxRetries:      -1,
		DialerRetries:   1,
		DialTimeout:     time.Second,
		ReadTimeout:     time.Second,
		WriteTimeout:    time.Second,
		PoolSize:        8,
		DisableIdentity: true,
	}
	for _, f := range opts {
		f(o)
	}
	return redis.NewClient(o)
}

func (s *Server) cancelPendingLocked() {
	if s.pending != nil {
		close(s.pending.cancel)
		s.pending = nil
	}
}

func (s *Server) killLocked() error {
	p := s.p
	if p == nil {
		return nil
	}
	s.p = nil
	if s.stopped {
		p.cmd.Process.Signal(contSignal) // SIGKILL works on a stopped process; this is belt and braces
		s.stopped = false
	}
	if err := p.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("redistest: kill pid %d: %w", p.cmd.Process.Pid, err)
	}
	<-p.exited
	return nil
}

// startLocked starts a process and waits until it answers. With newPorts it picks
// fresh ports (first start, or a lost race for a port); otherwise it keeps the
// server's ports and retries while they are taken, until startTimeout.
func (s *Server) startLocked(persist, newPorts bool) error {
	s.opts.Persist = persist
	deadline := time.Now().Add(startTimeout)
	for attempt := 1; ; attempt++ {
		if newPorts {
			if err := s.pickPorts(); err != nil {
				return err
			}
		}
		p, logOff, err := s.spawn()
		if err != nil {
			return err
		}
		err = s.waitReady(p, deadline)
		if err == nil {
			s.p = p
			s.stopped = false
			return nil
		}
		p.cmd.Process.Kill()
		<-p.exited
		out := s.outputSince(logOff)
		if strings.Contains(out, "Address already in use") && time.Now().Before(deadline) {
			if !newPorts {
				time.Sleep(50 * time.Millisecond) // someone holds our port; it is usually brief
			}
			continue
		}
		return fmt.Errorf("redistest: redis-server on %s (dir %s, attempt %d): %w\n--- redis-server output ---\n%s",
			s.Addr(), s.dir, attempt, err, out)
	}
}

func (s *Server) pickPorts() error {
	var err error
	if s.port, err = freePort(); err != nil {
		return err
	}
	s.busPort = 0
	if s.opts.Cluster {
		// The default bus port, port+10000, may be taken or above 65535.
		for s.busPort == 0 || s.busPort == s.port {
			if s.busPort, err = freePort(); err != nil {
				return err
			}
		}
	}
	return nil
}

// freePort returns a loopback port that was free a moment ago. Another process
// may take it before redis-server binds; startLocked retries then.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("redistest: find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

type logOffsets struct{ log, stdout int64 }

func (s *Server) args() []string {
	var a []string
	if len(s.opts.Sentinel) > 0 {
		a = append(a, filepath.Join(s.dir, sentinelConf), "--sentinel")
	}
	a = append(a,
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--protected-mode", "no",
		"--daemonize", "no",
		"--dir", s.dir,
		"--logfile", filepath.Join(s.dir, logName),
		"--enable-debug-command", "local",
		"--save", "")
	if s.opts.Persist {
		a = append(a, "--appendonly", "yes", "--appendfsync", "always")
	} else {
		a = append(a, "--appendonly", "no")
	}
	if s.opts.Cluster {
		a = append(a,
			"--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(s.dir, "nodes.conf"),
			"--cluster-port", strconv.Itoa(s.busPort))
	}
	return append(a, s.opts.Args...)
}

func (s *Server) spawn() (*proc, logOffsets, error) {
	var off logOffsets
	if fi, err := os.Stat(filepath.Join(s.dir, logName)); err == nil {
		off.log = fi.Size()
	}
	out, err := os.OpenFile(filepath.Join(s.dir, stdoutName), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, off, fmt.Errorf("redistest: %w", err)
	}
	defer out.Close() // the child has its own copy
	if fi, err := out.Stat(); err == nil {
		off.stdout = fi.Size()
	}
	cmd := exec.Command(s.bin, s.args()...)
	cmd.Dir = s.dir
	cmd.Env = append(os.Environ(), s.opts.Env...)
	cmd.Stdout = out // an *os.File: no copying goroutine
	cmd.Stderr = out
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return nil, off, fmt.Errorf("redistest: start %s: %w", s.bin, err)
	}
	p := &proc{cmd: cmd, exited: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()
	return p, off, nil
}

// waitReady polls until the server answers PING and INFO reports our pid (not
// another server that won the race for the port), the process exits, or deadline.
func (s *Server) waitReady(p *proc, deadline time.Time) error {
	want := strconv.Itoa(p.cmd.Process.Pid)
	t := time.NewTimer(0)
	defer t.Stop()
	var last error
	for {
		select {
		case <-p.exited:
			return fmt.Errorf("exited before answering PING: %v", p.err)
		case <-t.C:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no PING answer within %v (last: %v)", startTimeout, last)
		}
		pong, err := do(s.Addr(), probeTimeout, "PING")
		if err == nil && pong == "PONG" {
			info, err := do(s.Addr(), probeTimeout, "INFO", "server")
			if pid, _ := infoField(info, "process_id"); err == nil && pid == want {
				return nil
			}
			last = fmt.Errorf("port %d answered by another process: %v", s.port, err)
		} else {
			last = err
		}
		t.Reset(10 * time.Millisecond)
	}
}

// outputSince returns the last lines redis-server wrote since the offsets.
func (s *Server) outputSince(off logOffsets) string {
	var b strings.Builder
	for _, f := range []struct {
		name string
		off  int64
	}{{logName, off.log}, {stdoutName, off.stdout}} {
		data, err := os.ReadFile(filepath.Join(s.dir, f.name))
		if err != nil || int64(len(data)) <= f.off {
			continue
		}
		lines := strings.Split(strings.TrimRight(string(data[f.off:]), "\n"), "\n")
		if len(lines) > tailLines {
			lines = lines[len(lines)-tailLines:]
		}
		fmt.Fprintf(&b, "[%s]\n%s\n", f.name, strings.Join(lines, "\n"))
	}
	if b.Len() == 0 {
		return "(no output)"
	}
	return b.String()
}

// sweepStaleDirs removes directories left by test binaries that died without
// Close (a panic or -timeout), recognized by the dead owner pid in their name.
func sweepStaleDirs() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "redistest-*-*"))
	for _, d := range dirs {
		owner, _, ok := strings.Cut(strings.TrimPrefix(filepath.Base(d), "redistest-"), "-")
		pid, err := strconv.Atoi(owner)
		if !ok || err != nil || pid <= 0 || pid == os.Getpid() {
			continue
		}
		if processGone(pid) {
			os.RemoveAll(d)
		}
	}
}
