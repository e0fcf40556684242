package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// On Linux, COMMAND runs below a guard: a second redlock process
// (redlock re-executed with guardArg) that is COMMAND's parent and a
// subreaper (PR_SET_CHILD_SUBREAPER), so that every process the job starts
// stays below it, also one whose parent exited or that left COMMAND's
// process group or session (setsid, a daemon's double fork). The job is
// every process below the guard.
//
//	redlock ── guard (own process group, subreaper) ── COMMAND (own process group) ── ...
//
// The guard reaps them all, tells redlock COMMAND's status, and exits once
// no process of the job is left: redlock holds the lock until then. redlock
// signals the job itself, through /proc (signalTree). The guard keeps the
// read end of a pipe whose write end only redlock holds: when redlock dies,
// even of SIGKILL, the guard reads EOF and kills every process of the job.
// If the guard dies, COMMAND dies of its parent-death signal, and the
// job's other processes are reparented to redlock, itself a subreaper,
// which kills them.

// guardArg, as redlock's first argument, makes it the guard.
const guardArg = "_guard"

// The guard's end of its pipes to redlock.
const (
	guardLifeline = 3 // read: EOF when redlock is gone
	guardReport   = 4 // write: "start PID", "fail STATUS MESSAGE", "exit WAITSTATUS"
)

// A job is COMMAND with every process it starts.
type job struct {
	guard    *exec.Cmd
	lifeline *os.File // the write end; closed once the guard has exited

	// mu pins the guard's pid while the job is signalled: follow reaps
	// the guard only after setting gone, so that a pid freed and reused
	// meanwhile is never taken for the guard.
	mu   sync.Mutex
	gone bool

	exited chan struct{} // closed when COMMAND has exited; status is then set
	status int           // COMMAND's status, 128+S when signal S killed it
	done   chan struct{} // closed when no process of the job is left
	err    error         // set before done: the guard failed, the job was killed
}

// startJob starts command below a guard with env as its environment. On
// failure it returns the exit status redlock reports.
func startJob(command, env []string) (*job, int, error) {
	if err := setSubreaper(); err != nil {
		return nil, exitFailure, fmt.Errorf("cannot follow the command's processes (PR_SET_CHILD_SUBREAPER): %v", err)
	}
	lifeR, lifeW, err := os.Pipe()
	if err != nil {
		return nil, exitFailure, err
	}
	repR, repW, err := os.Pipe()
	if err != nil {
		lifeR.Close()
		lifeW.Close()
		return nil, exitFailure, err
	}
	// /proc/self/exe: the very binary that runs, also if replaced on disk.
	g := exec.Command("/proc/self/exe", append([]string{guardArg, "--"}, command...)...)
	g.Args[0] = os.Args[0]
	g.Env = env
	g.Stdin, g.Stdout, g.Stderr = os.Stdin, os.Stdout, os.Stderr
	g.ExtraFiles = []*os.File{lifeR, repW} // guardLifeline, guardReport
	// Out of redlock's process group, so that a signal to that group (a
	// terminal's Ctrl-C, kill -KILL -PGID) does not reach the guard: the
	// guard outlives redlock to kill the job.
	g.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = g.Start()
	lifeR.Close()
	repW.Close()
	if err != nil {
		lifeW.Close()
		repR.Close()
		return nil, exitFailure, fmt.Errorf("starting the guard process: %v", err)
	}
	j := &job{guard: g, lifeline: lifeW, exited: make(chan struct{}), done: make(chan struct{})}
	rd := bufio.NewReader(repR)
	line, _ := rd.ReadString('\n')
	word, rest, _ := strings.Cut(strings.TrimSuffix(line, "\n"), " ")
	switch word {
	case "start":
		if pid, err := strconv.Atoi(rest); err == nil && pid > 0 {
			go j.follow(rd, repR)
			return j, 0, nil
		}
	case "fail":
		// COMMAND could not be started: the guard has nothing to wait for.
		code, msg, _ := strings.Cut(rest, " ")
		status, err := strconv.Atoi(code)
		repR.Close()
		_ = g.Wait()
		lifeW.Close()
		if err != nil {
			status = exitCannotExec
		}
		return nil, status, errors.New(msg)
	}
	repR.Close()
	werr := g.Wait()
	lifeW.Close()
	return nil, exitFailure, fmt.Errorf("the guard process failed to start the command (%v)", werr)
}

// follow reads the guard's reports until it exits, then closes done.
func (j *job) follow(rd *bufio.Reader, f *os.File) {
	defer close(j.done)
	for {
		line, err := rd.ReadString('\n')
		if err != nil {
			break
		}
		if ws, ok := strings.CutPrefix(strings.TrimSuffix(line, "\n"), "exit "); ok {
			n, err := strconv.ParseUint(ws, 10, 32)
			if err == nil && !isClosed(j.exited) {
				j.status = exitStatus(syscall.WaitStatus(n))
				close(j.exited)
			}
		}
	}
	f.Close()
	// EOF: the guard has exited, and stays a zombie until Wait.
	j.mu.Lock()
	j.gone = true
	j.mu.Unlock()
	werr := j.guard.Wait()
	if werr != nil || !isClosed(j.exited) {
		// The guard died (killed, out of memory): COMMAND died of its
		// parent-death signal and its other processes are ours now. Kill
		// them: the job is not followed any more.
		killTree(os.Getpid())
		j.err = fmt.Errorf("the guard process that followed the command's processes ended (%v); every process of the job was killed", werr)
	}
	j.lifeline.Close()
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// below runs f with the guard's pid while the guard is not reaped; once
// it is, the job has no process left and f does not run.
func (j *job) below(f func(root int)) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if !j.gone {
		f(j.guard.Process.Pid)
	}
}

// signal sends sig to every process of the job.
func (j *job) signal(sig os.Signal) {
	if s, ok := sig.(syscall.Signal); ok {
		j.below(func(root int) { signalTree(root, s) })
	}
}

// stop stops every process of the job; cont continues them.
func (j *job) stop() { j.below(func(root int) { stopTree(root) }) }
func (j *job) cont() { j.signal(syscall.SIGCONT) }

// left returns how many processes of the job are alive.
func (j *job) left() int {
	n := 0
	j.below(func(root int) {
		for _, p := range descendants(root) {
			if p.live() {
				n++
			}
		}
	})
	return n
}

// guardMain is the guard: it runs command and follows its processes (see
// the top of this file), and returns its own exit status.
func guardMain(args []string) int {
	for _, fd := range []int{guardLifeline, guardReport} {
		var st syscall.Stat_t
		if syscall.Fstat(fd, &st) != nil || st.Mode&syscall.S_IFMT != syscall.S_IFIFO {
			// Not started by redlock.
			fmt.Fprintf(os.Stderr, "redlock: unknown command %q\nRun 'redlock --help' for usage.\n", guardArg)
			return exitUsage
		}
		syscall.CloseOnExec(fd) // the job must not hold them
	}
	lifeline := os.NewFile(guardLifeline, "lifeline")
	report := os.NewFile(guardReport, "report")
	if len(args) < 2 || args[0] != "--" {
		fmt.Fprintf(report, "fail %d the guard process got no command\n", exitFailure)
		return exitUsage
	}
	command := args[1:]
	// Signals meant for redlock (pkill redlock, a terminal's) do not end
	// the guard: redlock passes them on to the job. Caught rather than
	// ignored, so that COMMAND does not inherit them ignored.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT,
		syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU, syscall.SIGUSR1, syscall.SIGUSR2)
	if err := setSubreaper(); err != nil {
		fmt.Fprintf(report, "fail %d cannot follow the command's processes (PR_SET_CHILD_SUBREAPER): %s\n", exitFailure, oneLine(err.Error()))
		return exitFailure
	}
	cmd := exec.Command(command[0], command[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	// Its own process group, so that a signal reaches a shell script's
	// children too and a terminal's Ctrl-C reaches it once, through
	// redlock; and killed if the guard dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		code := exitCannotExec
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
			code = exitNotFound
		}
		fmt.Fprintf(report, "fail %d %s\n", code, oneLine(err.Error()))
		return 0
	}
	leader := cmd.Process.Pid
	fmt.Fprintf(report, "start %d\n", leader)

	reaped := make(chan struct{})
	go func() {
		defer close(reaped)
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, 0, nil)
			if err == syscall.EINTR {
				continue
			}
			if err != nil { // ECHILD: no process of the job is left
				return
			}
			if pid == leader {
				fmt.Fprintf(report, "exit %d\n", uint32(ws))
			}
		}
	}()
	gone := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, lifeline)
		close(gone)
	}()
	select {
	case <-reaped:
	case <-gone:
		// redlock is gone: so is the lock's renewal.
		killTree(os.Getpid())
		<-reaped
	}
	return 0
}

// oneLine keeps a message on one line of the guard's report.
func oneLine(s string) string { return strings.ReplaceAll(s, "\n", " ") }
