package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock"
)

const runSynopsis = `Usage: redlock run --masters ADDR[,ADDR...] --key KEY [--ttl 30s] [--wait 10s] [flags] -- COMMAND [ARGS...]

Runs COMMAND while holding the lock on KEY, renewed every ttl/3, and
releases it once no process of the job is left. If the lock is not
obtained (after --wait), COMMAND does not start and redlock exits 75.

The job is COMMAND and every process it starts, also one that outlives
COMMAND or leaves its process group or session (setsid, a daemon). On
Linux redlock follows them all; elsewhere the job is COMMAND's process
group, and COMMAND alone is waited for. Each signal below goes to every
process of the job.

When the lock's remaining validity is down to --grace (renewals late or
failing), or when the lock is lost, the job gets SIGTERM, then SIGKILL
--grace later, by the time the validity ends; redlock exits 76. SIGINT,
SIGTERM and SIGHUP sent to redlock go to the job; redlock then waits for
it. Ctrl-Z (SIGTSTP, SIGTTIN, SIGTTOU) stops the job with SIGSTOP, then
redlock; SIGCONT to redlock continues both, but a job whose lock's
validity ran down to --grace meanwhile gets SIGTERM first. On Linux, if
redlock dies, even of SIGKILL, the job is killed. Otherwise redlock exits
with COMMAND's status (128+S when signal S killed it).

COMMAND gets REDLOCK_KEY, REDLOCK_TOKEN and, with --fencing only,
REDLOCK_FENCE in its environment, and no REDLOCK_MASTERS or
REDLOCK_PASSWORD.

The lock's token carries holder info, which 'redlock status' shows:
"host=HOST pid=PID cmd=NAME" (this host, redlock's pid, COMMAND's base
name) unless --holder-info says otherwise; --holder-info= puts none.

With --verbose, redlock logs the lock's life on stderr, one line per
event (key=value): the obtain and its attempts, every renewal, the
release, a lost lock, a master that stops or starts answering.`

// holderInfoMax is the most holder info, in bytes, that the library takes
// (redlock.WithHolderInfo): a longer --holder-info is a usage error, and
// the default is cut to it (TestHolderInfoOfRun).
const holderInfoMax = 256

// defaultHolderInfo is --holder-info when not given: the host, redlock's
// pid (the job's is not known when the lock is taken) and the base name of
// the command, cut to holderInfoMax bytes at a character's start. A host
// whose name is unknown is left out.
func defaultHolderInfo(host string, pid int, command string) string {
	s := fmt.Sprintf("pid=%d cmd=%s", pid, filepath.Base(command))
	if host != "" {
		s = "host=" + host + " " + s
	}
	if len(s) <= holderInfoMax {
		return s
	}
	n := holderInfoMax
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// defaultGrace is --grace when not given: a third of the TTL, which
// renewals every ttl/3 keep the validity well above, and at most 10s.
func defaultGrace(ttl time.Duration) time.Duration { return min(10*time.Second, ttl/3) }

// runCmd is `redlock run`.
func runCmd(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	fset := flag.NewFlagSet("run", flag.ContinueOnError)
	var cf connFlags
	cf.register(fset)
	key := fset.String("key", "", "the lock's key (required)")
	ttl := fset.Duration("ttl", 30*time.Second, "the lock's time to live; renewed every ttl/3 while the job runs")
	wait := fset.Duration("wait", 0, "how long to keep trying to obtain the lock (retries about every wait/10, 50ms to 1s, jittered); 0: one attempt")
	grace := fset.Duration("grace", 0, "the job gets SIGTERM once the lock's remaining validity is down to this, and SIGKILL this long after; at most ttl/2 (default ttl/3, at most 10s)")
	fencing := fset.Bool("fencing", false, "give the lock a fencing token, passed to the job as $REDLOCK_FENCE")
	verbose := fset.Bool("verbose", false, "log the lock's life on stderr: obtain, every renewal, release, a lost lock, masters that stop or start answering")
	holder := fset.String("holder-info", "", "who holds the lock, put in its token for 'redlock status' to show: at most 256 bytes, \"\" for none (default \"host=HOST pid=PID cmd=NAME\": this host, redlock's pid, COMMAND's base name)")
	if code, ok := parse(fset, args, runSynopsis, stdout, stderr); !ok {
		return code
	}
	graceSet, holderSet := false, false
	fset.Visit(func(f *flag.Flag) {
		graceSet = graceSet || f.Name == "grace"
		holderSet = holderSet || f.Name == "holder-info"
	})
	if !graceSet {
		*grace = defaultGrace(*ttl)
	}
	command := fset.Args()
	if !holderSet && len(command) > 0 {
		host, _ := os.Hostname()
		*holder = defaultHolderInfo(host, os.Getpid(), command[0])
	}
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
	case *grace > *ttl/2:
		err = usagef("--grace %v is more than half of --ttl %v: the job gets SIGTERM once the lock's validity is down to --grace, which renewals every ttl/3 must stay above", *grace, *ttl)
	case len(command) == 0:
		err = usagef("no command given (redlock run [flags] -- COMMAND [ARGS...])")
	case len(*holder) > holderInfoMax:
		err = usagef("--holder-info is %d bytes, more than the limit of %d", len(*holder), holderInfoMax)
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
	if *verbose {
		h := slog.NewTextHandler(escaping{stderr}, &slog.HandlerOptions{Level: slog.LevelDebug})
		lopts = append(lopts, redlock.WithObserver(redlock.SlogObserver(slog.New(h))))
	}
	// Catch the signals before anything else: one that arrives while
	// redlock connects or waits for the lock ends that at once, one that
	// arrives later goes to the job.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, forwarded...)
	defer signal.Stop(sigs)
	r := &runner{key: *key, ttl: *ttl, wait: *wait, grace: *grace, holder: *holder, command: command, stderr: stderr, sigs: sigs}
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
	holder  string // the lock's holder info; "" for none
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
	status, ran, termed := r.supervise(lock, work)
	stop()
	// stop has ended the watchdog: a loss it reported is in the cause now,
	// and nothing can report one after.
	lost := termed || errors.Is(context.Cause(work), redlock.ErrLockLost)
	rerr := r.release(lock)
	switch {
	case lost:
		return exitLost
	case errors.Is(rerr, redlock.ErrLockLost):
		// The job ran to its end, but the lock was no longer ours when
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
	if r.holder != "" {
		oopts = append(oopts, redlock.WithHolderInfo(r.holder))
	}
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
	case r.wait > 0 && errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, redlock.ErrUnavailable):
		// --wait ran out before the masters decided an attempt: say so
		// (each master's cause is in err), and do not skip silently.
		r.errorf("lock %q not obtained within --wait %v, the command did not start: %v", r.key, r.wait, err)
		return nil, exitFailure, false
	default:
		// No master said "taken": too few of them answered (each names
		// its cause: a refused connection, WRONGPASS, ...). That is a
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

// noteAfter is how long the job's processes may outlive COMMAND before
// redlock says why it still holds the lock.
const noteAfter = time.Second

// supervise starts the job and waits until no process of it is left,
// forwarding signals and terminating it when the lock can no longer be
// trusted. It returns the exit status to report, whether the job ran, and
// whether redlock terminated it for the lock's sake.
func (r *runner) supervise(lock *redlock.Lock, work context.Context) (status int, ran, termed bool) {
	// The stop signals are caught before the job starts: one that arrives
	// while it starts waits for it and stops it with redlock, rather than
	// stopping redlock alone, its renewals with it, while the job runs on
	// (TestCtrlZWhileTheJobStartsStopsTheJob).
	stops := make(chan os.Signal, 1)
	cont := make(chan os.Signal, 1)
	if len(stopSignals) > 0 {
		signal.Notify(stops, stopSignals...)
		signal.Notify(cont, contSignal)
		defer signal.Stop(stops)
		defer signal.Stop(cont)
	}
	j, code, err := startJob(r.command, jobEnv(os.Environ(), r.key, lock))
	if err != nil {
		r.errorf("%v", err)
		return code, false, false
	}
	// The job is told when the validity is down to --grace: warn fires
	// then at the earliest; a renewal in between sets it again.
	warn := time.NewTimer(lock.Validity() - r.grace)
	defer warn.Stop()
	var kill, note <-chan time.Time
	// pass sends sig to the job, then SIGCONT, as a shell's kill does: a
	// process of the job stopped while redlock runs (the terminal's
	// SIGTTIN, as it reads from the terminal outside the foreground
	// process group; a SIGSTOP sent to it) gets sig only once continued,
	// and redlock, waiting for it, would hold the lock until someone
	// continued it (TestSignalReachesAStoppedJob). redlock itself never
	// leaves the job stopped while it runs (see stops below).
	pass := func(sig os.Signal) {
		j.signal(sig)
		j.cont()
	}
	term := func(format string, args ...any) {
		r.errorf(format+"; sending the job SIGTERM, SIGKILL in %v", append(args, r.grace)...)
		termed = true
		pass(terminate)
		kill = time.After(r.grace)
	}
	lost, exited := work.Done(), j.exited
	for {
		select {
		case s := <-r.sigs:
			pass(s)
		case <-stops:
			j.stop()
			suspendSelf(cont)
			// The job stays stopped until it is told, if it must be: it
			// does not run on while another holder may.
			if v := lock.Validity(); !termed && v <= r.grace {
				term("lock %q: only %v of its validity left after redlock was stopped", r.key, v.Round(time.Millisecond))
			}
			j.cont()
		case <-warn.C:
			if v := lock.Validity(); v > r.grace {
				warn.Reset(v - r.grace)
			} else if !termed {
				term("lock %q: not renewed in time, only %v of its validity left", r.key, v.Round(time.Millisecond))
			}
		case <-lost:
			lost = nil
			if termed {
				r.errorf("lock %q lost (%v)", r.key, context.Cause(work))
			} else {
				term("lock %q lost while the job ran (%v)", r.key, context.Cause(work))
			}
		case <-kill:
			// Again every 100ms: a process forked meanwhile dies too.
			r.errorf("the job did not exit within --grace %v; sending SIGKILL", r.grace)
			j.signal(killSignal)
			t := time.NewTicker(100 * time.Millisecond)
			defer t.Stop()
			for {
				select {
				case <-j.done:
					return r.ended(j), true, termed
				case <-t.C:
					j.signal(killSignal)
				}
			}
		case <-exited:
			exited = nil
			note = time.After(noteAfter)
		case <-note:
			if n := j.left(); n > 0 {
				r.errorf("the command exited (status %d); the lock stays held until every process it started has ended (%d left)", j.status, n)
			}
		case <-j.done:
			return r.ended(j), true, termed
		}
	}
}

// ended reports a job whose processes could not be followed to their end
// and returns the status to exit with.
func (r *runner) ended(j *job) int {
	if j.err != nil {
		r.errorf("%v", j.err)
		return exitFailure
	}
	return j.status
}
