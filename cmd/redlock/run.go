package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock"
)

const runSynopsis = `Usage: redlock run --masters ADDR[,ADDR...] --key KEY [--ttl 30s] [--wait 10s] [flags] -- COMMAND [ARGS...]

Runs COMMAND while holding the lock on KEY, renewed every ttl/3, and
releases it when COMMAND ends. If the lock is not obtained (after --wait),
COMMAND does not start and redlock exits 75. If the lock is lost while
COMMAND runs, COMMAND's process group gets SIGTERM, then SIGKILL after
--grace, and redlock exits 76. SIGINT, SIGTERM and SIGHUP sent to redlock go
to COMMAND's process group; redlock then waits for COMMAND. Otherwise redlock
exits with COMMAND's status (128+S when signal S killed it).

COMMAND runs in its own process group with REDLOCK_KEY, REDLOCK_TOKEN and,
with --fencing only, REDLOCK_FENCE in its environment, and no
REDLOCK_MASTERS or REDLOCK_PASSWORD.`

// runCmd is `redlock run`.
func runCmd(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	fset := flag.NewFlagSet("run", flag.ContinueOnError)
	var cf connFlags
	cf.register(fset)
	key := fset.String("key", "", "the lock's key (required)")
	ttl := fset.Duration("ttl", 30*time.Second, "the lock's time to live; renewed every ttl/3 while COMMAND runs")
	wait := fset.Duration("wait", 0, "how long to keep trying to obtain the lock (retries about every wait/10, 50ms to 1s, jittered); 0: one attempt")
	grace := fset.Duration("grace", 10*time.Second, "after the lock is lost, how long COMMAND has between SIGTERM and SIGKILL")
	fencing := fset.Bool("fencing", false, "give the lock a fencing token, passed to COMMAND as $REDLOCK_FENCE")
	if code, ok := parse(fset, args, runSynopsis, stdout, stderr); !ok {
		return code
	}
	command := fset.Args()
	var err error
	switch {
	case *key == "":
		err = usagef("--key is required")
	case *ttl <= 0:
		err = usagef("--ttl must be > 0, got %v", *ttl)
	case *wait < 0:
		err = usagef("--wait must be >= 0, got %v", *wait)
	case *grace < 0:
		err = usagef("--grace must be >= 0, got %v", *grace)
	case len(command) == 0:
		err = usagef("no command given (redlock run [flags] -- COMMAND [ARGS...])")
	}
	if err != nil {
		return usageFail(stderr, "run", err)
	}
	opts, err := cf.options(getenv)
	if err != nil {
		return usageFail(stderr, "run", err)
	}
	var lopts []redlock.Option
	if cf.prefix != "" {
		lopts = append(lopts, redlock.WithKeyPrefix(cf.prefix))
	}
	if cf.nodeTimeout > 0 {
		lopts = append(lopts, redlock.WithNodeTimeout(cf.nodeTimeout))
	}
	if *fencing {
		lopts = append(lopts, redlock.WithFencing())
	}
	// Catch the signals before anything else: one that arrives while
	// redlock connects or waits for the lock ends that at once, one that
	// arrives later goes to the command.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, forwarded...)
	defer signal.Stop(sigs)
	r := &runner{key: *key, ttl: *ttl, wait: *wait, grace: *grace, command: command, stderr: stderr, sigs: sigs}
	var clients []*redis.Client
	var dialErrs []error
	s := interruptible(sigs, func(ctx context.Context) { clients, dialErrs = dial(ctx, opts) })
	defer closeAll(clients)
	if s != nil {
		r.errorf("%v while connecting to the masters; the command did not start", s)
		return 128 + signum(s)
	}
	for i, err := range dialErrs {
		if errors.Is(err, errPlaintext) {
			r.errorf("master %s %v; the command did not start", opts[i].Addr, err)
			return exitFailure
		}
	}
	masters := make([]redis.UniversalClient, len(clients))
	for i, c := range clients {
		masters[i] = c
	}
	var lc *redlock.Client
	if len(masters) == 1 {
		lc, err = redlock.NewSingle(masters[0], lopts...)
	} else {
		lc, err = redlock.New(masters, lopts...)
	}
	if err != nil {
		return usageFail(stderr, "run", err)
	}
	defer lc.Close()
	return r.run(lc)
}

type runner struct {
	key     string
	ttl     time.Duration
	wait    time.Duration
	grace   time.Duration
	command []string
	stderr  io.Writer
	sigs    <-chan os.Signal // the signals to forward
}

// errorf prints one line on stderr. Errors among args lose the library's
// "redlock: " prefix (the line has it once), and control characters are
// escaped, so that a master's answer cannot forge lines or drive the
// terminal.
func (r *runner) errorf(format string, args ...any) {
	for i, a := range args {
		if err, ok := a.(error); ok {
			args[i] = errText(err)
		}
	}
	fmt.Fprintf(r.stderr, "redlock: %s\n", escapeControl(fmt.Sprintf(format, args...)))
}

// errText is err's message without the "redlock: " that the library puts
// before its errors, also those it wraps.
func errText(err error) string {
	s := strings.TrimPrefix(err.Error(), "redlock: ")
	s = strings.ReplaceAll(s, ": redlock: ", ": ")
	return strings.ReplaceAll(s, "(redlock: ", "(")
}

// interruptible runs f with a context that a signal from sigs cancels,
// and returns that signal, or nil.
func interruptible(sigs <-chan os.Signal, f func(ctx context.Context)) os.Signal {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	got := make(chan os.Signal, 1)
	go func() {
		select {
		case s := <-sigs:
			cancel()
			got <- s
		case <-done:
			got <- nil
		}
	}()
	f(ctx)
	close(done)
	return <-got
}

func (r *runner) run(lc *redlock.Client) int {
	sigs := r.sigs
	lock, code, ok := r.obtain(lc)
	if !ok {
		return code
	}
	work, stop, err := lock.KeepAlive(context.Background())
	if err != nil {
		_ = r.release(lock)
		r.errorf("%v", err)
		return exitFailure
	}
	status, ran := r.supervise(lock, work, sigs)
	stop()
	// stop has ended the watchdog: a loss it reported is in the cause now,
	// and nothing can report one after.
	lost := errors.Is(context.Cause(work), redlock.ErrLockLost)
	rerr := r.release(lock)
	switch {
	case lost:
		return exitLost
	case errors.Is(rerr, redlock.ErrLockLost):
		// The command ran to its end, but the lock was no longer ours when
		// it did: its work may have overlapped another holder's.
		r.errorf("the command exited (status %d), but the lock on %q was found lost at release: %v", status, r.key, rerr)
		return exitLost
	case !ran:
		return status
	case rerr != nil:
		r.errorf("warning: releasing the lock on %q: %v (the keys left expire within --ttl)", r.key, rerr)
	}
	return status
}

// obtain takes the lock; on failure it reports why and returns the exit
// status.
func (r *runner) obtain(lc *redlock.Client) (*redlock.Lock, int, bool) {
	var oopts []redlock.ObtainOption
	if r.wait > 0 {
		oopts = append(oopts, redlock.WithRetry(redlock.LinearBackoff(min(max(r.wait/10, 50*time.Millisecond), time.Second))))
	}
	var lock *redlock.Lock
	var err error
	s := interruptible(r.sigs, func(ctx context.Context) {
		if r.wait > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, r.wait)
			defer cancel()
		}
		lock, err = lc.Obtain(ctx, r.key, r.ttl, oopts...)
	})
	if s != nil {
		if lock != nil {
			_ = r.release(lock)
		}
		r.errorf("%v while waiting for the lock on %q; the command did not start", s, r.key)
		return nil, 128 + signum(s), false
	}
	switch {
	case err == nil:
		return lock, 0, true
	case errors.Is(err, redlock.ErrInvalidArgument):
		r.errorf("%v", err)
		return nil, exitUsage, false
	case errors.Is(err, redlock.ErrTaken):
		// At least one master named another owner: the lock is held. This
		// is the expected outcome for all but one of many replicas.
		r.errorf("lock %q not obtained: held by another owner; the command did not start", r.key)
		return nil, exitNotObtained, false
	default:
		// No master said "taken": too few of them answered. That is a
		// failure to report, not a lock to skip.
		r.errorf("lock %q not obtained, the command did not start: %v", r.key, err)
		return nil, exitFailure, false
	}
}

// release releases the lock, bounded by the node timeout.
func (r *runner) release(lock *redlock.Lock) error {
	return lock.Release(context.Background())
}

// Variables redlock reads or sets: none reaches the job unless set for it.
const (
	envKey   = "REDLOCK_KEY"
	envToken = "REDLOCK_TOKEN"
	envFence = "REDLOCK_FENCE"
)

// jobEnv is the job's environment: redlock's own, without the masters and
// password it was given and without an outer run's REDLOCK_* variables,
// with this lock's.
func jobEnv(environ []string, key string, lock *redlock.Lock) []string {
	env := make([]string, 0, len(environ)+3)
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		switch name {
		case envMasters, envPassword, envKey, envToken, envFence:
			continue
		}
		env = append(env, kv)
	}
	env = append(env, envKey+"="+key, envToken+"="+lock.Token())
	if f := lock.Fence(); f > 0 {
		env = append(env, envFence+"="+strconv.FormatInt(f, 10))
	}
	return env
}

// supervise starts the command and waits for it to end, forwarding
// signals and terminating it if the lock is lost. It returns the exit
// status to report and whether the command ran.
func (r *runner) supervise(lock *redlock.Lock, work context.Context, sigs <-chan os.Signal) (int, bool) {
	cmd := exec.Command(r.command[0], r.command[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = jobEnv(os.Environ(), r.key, lock)
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		r.errorf("%v", err)
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
			return exitNotFound, false
		}
		return exitCannotExec, false
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	lost := work.Done()
	var kill <-chan time.Time
	for {
		select {
		case s := <-sigs:
			if err := signalGroup(cmd.Process, s); err != nil && !errors.Is(err, os.ErrProcessDone) {
				r.errorf("forwarding %v: %v", s, err)
			}
		case <-lost:
			lost = nil
			r.errorf("lock %q lost while the command ran (%v); sending SIGTERM, SIGKILL in %v", r.key, context.Cause(work), r.grace)
			_ = signalGroup(cmd.Process, terminate)
			t := time.NewTimer(r.grace)
			defer t.Stop()
			kill = t.C
		case <-kill:
			kill = nil
			r.errorf("the command did not exit within --grace %v; sending SIGKILL", r.grace)
			_ = signalGroup(cmd.Process, killSignal)
		case <-exited:
			return exitStatus(cmd.ProcessState), true
		}
	}
}
