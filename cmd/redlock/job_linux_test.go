package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// These tests follow the job's processes through /proc, which only Linux
// has; they also read it on their own, apart from redlock's code.

// marker returns a name unique to the test. The job's shells get it as $0
// (or as its prefix), so that every long-lived process of the job can be
// found by its command line, wherever it was reparented to.
func marker(t *testing.T) string {
	t.Helper()
	m := fmt.Sprintf("redlock-test-%d-%s", os.Getpid(), strings.NewReplacer("/", "-", " ", "-").Replace(t.Name()))
	t.Cleanup(func() {
		// Whatever a failed test left behind.
		for _, pid := range marked(m) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	return m
}

// marked returns the live processes that are a shell whose arguments
// include one starting with m. redlock and its guard carry the job's
// arguments too, but are not "sh".
func marked(m string) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil || len(b) == 0 { // gone, or a zombie
			continue
		}
		argv := strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")
		if filepath.Base(argv[0]) != "sh" {
			continue
		}
		for _, a := range argv[1:] {
			if strings.HasPrefix(a, m) {
				pids = append(pids, pid)
				break
			}
		}
	}
	return pids
}

// waitGone waits until no process of the marker is left.
func waitGone(t *testing.T, m string) {
	t.Helper()
	waitFor(t, nil, "the job's processes ended", func() bool { return len(marked(m)) == 0 })
}

// exitedPid reports whether pid has exited (gone, or a zombie).
func exitedPid(pid int) bool {
	p, ok := readProcess(pid)
	return !ok || !p.live()
}

// waitExited waits until pid has exited.
func waitExited(t *testing.T, pid int) {
	t.Helper()
	waitFor(t, nil, fmt.Sprintf("pid %d exited", pid), func() bool { return exitedPid(pid) })
}

// readPid reads a pid the job wrote to path, waiting for the file.
func readPid(t *testing.T, p *proc, path string) int {
	t.Helper()
	var b []byte
	waitFor(t, p, filepath.Base(path)+" written", func() bool {
		b, _ = os.ReadFile(path)
		return bytes.HasSuffix(b, []byte("\n"))
	})
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("%s: %q", path, b)
	}
	return pid
}

// childrenOf returns the pids whose parent is pid.
func childrenOf(pid int) []int {
	var kids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, ok := readProcess(p); ok && st.ppid == pid {
			kids = append(kids, p)
		}
	}
	return kids
}

// A background process keeps the lock held after COMMAND itself exited;
// the lock is released, and COMMAND's status reported, once it ends too.
func TestLockHeldUntilTheLastProcessOfTheJob(t *testing.T) {
	t.Parallel()
	masters, clients := cluster(t, 3)
	dir := t.TempDir()
	m := marker(t)
	flags := lockFlags(masters, "bg")
	// sh writes its pid, starts a worker in the background and exits 3 at
	// once; the worker runs until told to stop.
	script := `echo $$ > "$1/leader"
sh -c 'while [ ! -e "$1/stop" ]; do sleep 0.02; done; touch "$1/worked"' "$0-worker" "$1" &
exit 3`
	a := start(t, nil, args(flags, "--", "sh", "-c", script, m, dir)...)
	waitExited(t, readPid(t, a, filepath.Join(dir, "leader")))

	// COMMAND is gone, its worker is not: the lock is still held.
	other := filepath.Join(dir, "other")
	if code, _, stderr := runRedlock(t, nil, args(flags, "--", "touch", other)...); code != exitNotObtained || exists(other) {
		t.Errorf("contender while the worker runs: exit %d, ran %v; want %d without running; stderr:\n%s", code, exists(other), exitNotObtained, stderr)
	}
	// redlock says why it still holds the lock.
	waitFor(t, a, "redlock said it holds the lock for the worker", func() bool {
		// How many are left depends on when the worker's loop forks.
		return strings.Contains(a.stderr.String(), "the command exited (status 3); the lock stays held until every process it started has ended (")
	})

	touch(t, filepath.Join(dir, "stop"))
	if code := a.wait(t); code != 3 {
		t.Errorf("exit %d, want 3 (COMMAND's status); stderr:\n%s", code, a.stderr.String())
	}
	if !exists(filepath.Join(dir, "worked")) {
		t.Error("the worker did not finish its work")
	}
	if left := marked(m); len(left) > 0 {
		t.Errorf("redlock exited while %v still ran", left)
	}
	assertFree(t, clients, "bg")
	if code, _, stderr := runRedlock(t, nil, args(flags, "--", "touch", other)...); code != 0 || !exists(other) {
		t.Errorf("run after the job: exit %d, ran %v; stderr:\n%s", code, exists(other), stderr)
	}
}

// The ways a process of the job may leave: started in the background in
// the job's process group, in a session of its own (setsid), or as a
// daemon (setsid, then a fork whose parent exits). $0 is the marker, $1 a
// directory; each writes $1/ready once its long-lived shell runs, whose
// body is $2 (quoted for sh -c '...').
var escapes = []struct {
	name   string
	launch string
}{
	{"group", `sh -c "$2" "$0-worker" "$1" &`},
	{"session", `setsid sh -c "$2" "$0-worker" "$1" &`},
	{"daemon", `setsid sh -c 'sh -c "$2" "$0" "$1" & exit 0' "$0-worker" "$1" "$2" &`},
}

// stubborn ignores SIGTERM and runs until killed.
const stubborn = `trap "" TERM; touch "$1/ready"; while :; do sleep 0.05; done`

// jobScript starts a worker with escape's launch line, waits for it, then
// runs until signalled or $1/stop exists; the job's shell itself dies of
// a SIGTERM.
func jobScript(launch string) string {
	return launch + `
while [ ! -e "$1/ready" ]; do sleep 0.01; done
touch "$1/started"
while [ ! -e "$1/stop" ]; do sleep 0.05; done`
}

// startEscaped runs under redlock, with lockFlags(masters, key) and extra
// flags, a job whose COMMAND starts a worker with launch, running body,
// and returns redlock once both run, the job's marker and its directory.
func startEscaped(t *testing.T, masters, key string, extra []string, launch, body string) (a *proc, m, dir string) {
	t.Helper()
	dir = t.TempDir()
	m = marker(t)
	// redlock in a process group of its own, as a shell runs a job.
	a = startAs(t, &syscall.SysProcAttr{Setpgid: true}, nil, args(append(lockFlags(masters, key), extra...), "--", "sh", "-c", jobScript(launch), m, dir, body)...)
	waitFile(t, a, filepath.Join(dir, "started"))
	return a, m, dir
}

// noneLeft checks that no process of the job outlived redlock: redlock
// waits for every process it signals.
func noneLeft(t *testing.T, m string) {
	t.Helper()
	if left := marked(m); len(left) > 0 {
		t.Errorf("processes %v of the job outlived redlock", left)
	}
}

// When the lock is lost, every process of the job gets SIGTERM and, after
// --grace, SIGKILL: also those that ignore SIGTERM and outlive COMMAND,
// wherever they went.
func TestLostLockKillsTheWholeJob(t *testing.T) {
	t.Parallel()
	for _, esc := range escapes {
		t.Run(esc.name, func(t *testing.T) {
			t.Parallel()
			masters, clients := cluster(t, 3)
			a, m, _ := startEscaped(t, masters, "lost", []string{"--grace", "300ms"}, esc.launch, stubborn)
			intrude(t, clients, "lost")
			if code := a.wait(t); code != exitLost {
				t.Errorf("exit %d, want %d; stderr:\n%s", code, exitLost, a.stderr.String())
			}
			noneLeft(t, m)
		})
	}
}

// When redlock itself is killed with SIGKILL, the whole job dies with it.
func TestKilledRedlockTakesTheJobWithIt(t *testing.T) {
	t.Parallel()
	for _, esc := range escapes {
		t.Run(esc.name, func(t *testing.T) {
			t.Parallel()
			masters, _ := cluster(t, 1)
			a, m, _ := startEscaped(t, masters, "killed", nil, esc.launch, stubborn)
			if n := len(marked(m)); n < 2 {
				t.Fatalf("found %d processes of the job, want COMMAND and its worker", n)
			}
			signalProc(t, a, syscall.SIGKILL)
			a.wait(t)
			waitGone(t, m)
		})
	}
}

// A signal sent to redlock reaches every process of the job, also those
// in another process group or session.
func TestSignalReachesTheWholeJob(t *testing.T) {
	t.Parallel()
	for _, esc := range escapes {
		t.Run(esc.name, func(t *testing.T) {
			t.Parallel()
			masters, clients := cluster(t, 1)
			// The worker exits 0 on SIGHUP and says so; COMMAND dies of it.
			// The trap's touch, started in answer to the SIGHUP, does not
			// get it (TestProcessStartedInAnswerToASignalDoesNotGetIt).
			worker := `trap 'touch "$1/hup"; exit 0' HUP; touch "$1/ready"; while :; do sleep 0.05; done`
			a, m, dir := startEscaped(t, masters, "sig", nil, esc.launch, worker)
			signalProc(t, a, syscall.SIGHUP)
			if code := a.wait(t); code != 128+int(syscall.SIGHUP) {
				t.Errorf("exit %d, want %d; stderr:\n%s", code, 128+int(syscall.SIGHUP), a.stderr.String())
			}
			if !exists(filepath.Join(dir, "hup")) {
				t.Error("the worker did not get the SIGHUP")
			}
			noneLeft(t, m)
			assertFree(t, clients, "sig")
		})
	}
}

// A process the job starts in answer to a signal does not get that
// signal: redlock signals each of the job's process groups once, as kill
// -SIG -PGID does, also that of a worker in a session of its own or of a
// daemon. Here each worker's HUP trap runs a helper at once and reports
// its status: 0 when it ran to its end, 129 when the SIGHUP killed it.
// Several workers, so that redlock is still signalling the job when the
// first helpers start.
func TestProcessStartedInAnswerToASignalDoesNotGetIt(t *testing.T) {
	t.Parallel()
	const workers = 4
	// wait returns as soon as the trapped SIGHUP arrives.
	worker := `trap 'sleep 0.2 & wait $!; echo $? > "$1/helper-$$"; exit 0' HUP
touch "$1/ready-$$"
while :; do sleep 0.05 & wait $!; done`
	for _, esc := range escapes {
		t.Run(esc.name, func(t *testing.T) {
			t.Parallel()
			masters, clients := cluster(t, 1)
			dir := t.TempDir()
			m := marker(t)
			script := strings.Repeat(esc.launch+"\n", workers) +
				`while [ "$(ls "$1" | grep -c '^ready-')" -lt ` + strconv.Itoa(workers) + ` ]; do sleep 0.01; done
touch "$1/started"
while :; do sleep 0.05; done`
			a := startAs(t, &syscall.SysProcAttr{Setpgid: true}, nil, args(lockFlags(masters, "answer"), "--", "sh", "-c", script, m, dir, worker)...)
			waitFile(t, a, filepath.Join(dir, "started"))
			signalProc(t, a, syscall.SIGHUP)
			if code := a.wait(t); code != 128+int(syscall.SIGHUP) {
				t.Errorf("exit %d, want %d; stderr:\n%s", code, 128+int(syscall.SIGHUP), a.stderr.String())
			}
			helpers, _ := filepath.Glob(filepath.Join(dir, "helper-*"))
			if len(helpers) != workers {
				t.Errorf("%d workers ran their HUP trap, want %d", len(helpers), workers)
			}
			for _, h := range helpers {
				if st := strings.TrimSpace(readFile(t, h)); st != "0" {
					t.Errorf("a helper started in answer to SIGHUP exited %s, want 0: redlock signalled it too", st)
				}
			}
			noneLeft(t, m)
			assertFree(t, clients, "answer")
		})
	}
}

// A job stopped while redlock runs, by other means than redlock's own
// Ctrl-Z (here the SIGTTIN a terminal sends a process that reads from it
// outside the foreground process group), still ends on a signal sent to
// redlock: redlock continues it after passing the signal on, rather than
// wait, the lock held, for someone to continue it.
func TestSignalReachesAStoppedJob(t *testing.T) {
	t.Parallel()
	masters, clients := cluster(t, 1)
	dir := t.TempDir()
	leader := filepath.Join(dir, "leader")
	a := start(t, nil, args(lockFlags(masters, "stopped"), "--", "sh", "-c", `echo $$ > "$1"; kill -TTIN $$; touch "$1.continued"; exec sleep 60`, "sh", leader)...)
	pid := readPid(t, a, leader)
	waitState(t, true, pid)
	signalProc(t, a, syscall.SIGINT)
	if code := a.wait(t); code != 128+int(syscall.SIGINT) {
		t.Errorf("exit %d, want %d; stderr:\n%s", code, 128+int(syscall.SIGINT), a.stderr.String())
	}
	if exists(leader + ".continued") {
		t.Error("the job ran on past the signal")
	}
	assertFree(t, clients, "stopped")
}

// waitState waits until every pid is (stopped true) or is not (false)
// stopped: in the stopped state, or in D with a SIGSTOP waiting (a shell
// whose vfork child stopped before its exec stops once it wakes).
func waitState(t *testing.T, stopped bool, pids ...int) {
	t.Helper()
	waitFor(t, nil, fmt.Sprintf("%v stopped=%v", pids, stopped), func() bool {
		for _, pid := range pids {
			st, ok := readProcess(pid)
			if !ok {
				t.Fatalf("pid %d is gone", pid)
			}
			if (st.state == 'T' || st.state == 'D' && stopPending(pid)) != stopped {
				return false
			}
		}
		return true
	})
}

// ctrlZJob counts its loops in $1/n and, on SIGTERM, writes the count it
// had reached to $1/termed; a worker in a session of its own loops too.
const ctrlZJob = `n=0
trap 'echo $n > "$1/termed"; exit 0' TERM
echo $$ > "$1/leader"
setsid sh -c 'echo $$ > "$1/worker"; touch "$1/ready"; while [ ! -e "$1/stop" ]; do sleep 0.02; done' "$0-worker" "$1" &
while [ ! -e "$1/ready" ]; do sleep 0.01; done
touch "$1/started"
while [ ! -e "$1/stop" ]; do n=$((n+1)); echo $n > "$1/n"; sleep 0.02; done`

// startCtrlZ runs ctrlZJob under redlock in a process group of its own,
// as a shell runs a job, so that SIGTSTP stops it; it returns redlock and
// the pids of the job's two shells.
func startCtrlZ(t *testing.T, flags []string, dir string) (*proc, []int) {
	t.Helper()
	m := marker(t)
	a := startAs(t, &syscall.SysProcAttr{Setpgid: true}, nil, args(flags, "--", "sh", "-c", ctrlZJob, m, dir)...)
	waitFile(t, a, filepath.Join(dir, "started"))
	return a, []int{readPid(t, a, filepath.Join(dir, "leader")), readPid(t, a, filepath.Join(dir, "worker"))}
}

// Ctrl-Z (SIGTSTP) stops the whole job with redlock, and SIGCONT to
// redlock continues both. Stopped for less than the lock's validity, the
// job then runs on to its end under the lock.
func TestCtrlZStopsAndContinuesTheJob(t *testing.T) {
	t.Parallel()
	masters, clients := cluster(t, 1)
	dir := t.TempDir()
	// A TTL long enough that the stop below ends well within it.
	a, pids := startCtrlZ(t, []string{"run", "--masters", masters, "--key", "z", "--ttl", "20s", "--node-timeout", "300ms"}, dir)
	for _, sig := range []syscall.Signal{syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU} {
		signalProc(t, a, sig)
		waitState(t, true, append(pids, a.cmd.Process.Pid)...)
		signalProc(t, a, syscall.SIGCONT)
		waitState(t, false, append(pids, a.cmd.Process.Pid)...)
	}
	// The job runs on: its count goes up again.
	n := readFile(t, filepath.Join(dir, "n"))
	waitFor(t, a, "the job ran on after SIGCONT", func() bool { return readFile(t, filepath.Join(dir, "n")) != n })
	touch(t, filepath.Join(dir, "stop"))
	if code := a.wait(t); code != 0 {
		t.Errorf("exit %d, want 0; stderr:\n%s", code, a.stderr.String())
	}
	if exists(filepath.Join(dir, "termed")) {
		t.Error("the job got SIGTERM")
	}
	assertFree(t, clients, "z")
}

// Ctrl-Z while the job starts, before its command runs, stops the job
// with redlock all the same: redlock is never stopped while its job runs
// on without renewals. SIGCONT then continues both.
func TestCtrlZWhileTheJobStartsStopsTheJob(t *testing.T) {
	t.Parallel()
	masters, clients := cluster(t, 1)
	dir := t.TempDir()
	m := marker(t)
	script := `while [ ! -e "$1/stop" ]; do sleep 0.02; done`
	// A TTL long enough that the stop below ends well within it.
	a := startAs(t, &syscall.SysProcAttr{Setpgid: true}, nil, "run", "--masters", masters, "--key", "z", "--ttl", "20s", "--node-timeout", "300ms", "--", "sh", "-c", script, m, dir)
	// The guard's fork is the first thing of the job: its command starts
	// after the guard, a Go program, has run.
	redlockPid := a.cmd.Process.Pid
	waitFor(t, a, "the guard started", func() bool { return len(childrenOf(redlockPid)) > 0 })
	signalProc(t, a, syscall.SIGTSTP)
	guard := guardOf(t, a)
	// The guard's children are read again at every look: a process seen
	// while the job starts may be gone by the next look; those that stay
	// must stop.
	var job []int
	waitFor(t, a, "the command started and stopped", func() bool {
		job = childrenOf(guard)
		if len(job) == 0 {
			return false
		}
		for _, pid := range append(job, redlockPid) {
			st, ok := readProcess(pid)
			if !ok || !(st.state == 'T' || st.state == 'D' && stopPending(pid)) {
				return false
			}
		}
		return true
	})
	signalProc(t, a, syscall.SIGCONT)
	waitState(t, false, append(job, redlockPid)...)
	touch(t, filepath.Join(dir, "stop"))
	if code := a.wait(t); code != 0 {
		t.Errorf("exit %d, want 0; stderr:\n%s", code, a.stderr.String())
	}
	assertFree(t, clients, "z")
}

// Stopped past the lock's validity, the job does not run while another
// holder may: it stays stopped while its key expires and another run takes
// the lock, and once continued it gets SIGTERM before it runs on, and
// redlock exits 76.
func TestCtrlZPastTheValidity(t *testing.T) {
	t.Parallel()
	masters, clients := cluster(t, 1)
	dir := t.TempDir()
	a, pids := startCtrlZ(t, lockFlags(masters, "z"), dir)
	signalProc(t, a, syscall.SIGTSTP)
	waitState(t, true, append(pids, a.cmd.Process.Pid)...)
	n0, err := strconv.Atoi(strings.TrimSpace(readFile(t, filepath.Join(dir, "n"))))
	if err != nil {
		t.Fatal(err)
	}

	// The key expires while redlock is stopped: no renewal. Another run
	// takes the lock and runs while the job stays stopped.
	waitExpired(t, clients[0], "z")
	other := filepath.Join(dir, "other")
	if code, _, stderr := runRedlock(t, nil, args(lockFlags(masters, "z"), "--", "touch", other)...); code != 0 || !exists(other) {
		t.Errorf("run while the first is stopped: exit %d, ran %v; stderr:\n%s", code, exists(other), stderr)
	}
	waitState(t, true, append(pids, a.cmd.Process.Pid)...)

	signalProc(t, a, syscall.SIGCONT)
	if code := a.wait(t); code != exitLost {
		t.Errorf("exit %d, want %d; stderr:\n%s", code, exitLost, a.stderr.String())
	}
	// The default --grace, a third of the TTL.
	if !strings.Contains(a.stderr.String(), "SIGKILL in "+(testTTL/3).String()) {
		t.Errorf("stderr does not give the default --grace of %v:\n%s", testTTL/3, a.stderr.String())
	}
	termed := strings.TrimSpace(readFile(t, filepath.Join(dir, "termed")))
	// The SIGTERM was waiting when the job resumed: it ran at most the
	// loop it was stopped in.
	if n1, err := strconv.Atoi(termed); err != nil || n1 > n0+1 {
		t.Errorf("the job's count was %d when stopped and %q when it got SIGTERM: it ran on before being told", n0, termed)
	}
}

// forkLoop forks without end: 40 workers that ignore SIGTERM, half of
// them in sessions of their own, blocked on a FIFO no one writes to, then
// short-lived shells, in and out of its group, about a hundred a second
// (more would load a shared machine); it ignores SIGTERM too.
const forkLoop = `trap "" TERM
mkfifo "$1/fifo"
i=0
while :; do
	if [ $i -lt 40 ]; then
		sh -c 'trap "" TERM; read x < "$1/fifo"' "$0-worker" "$1" &
		setsid sh -c 'trap "" TERM; read x < "$1/fifo"' "$0-worker" "$1" &
		i=$((i+2))
		[ $i -ge 40 ] && touch "$1/started"
	else
		sh -c 'exit 0' "$0-short" &
		setsid sh -c 'exit 0' "$0-short" &
		sleep 0.01
	fi
done`

// A job that keeps forking, in and out of its process group, and ignores
// SIGTERM is still killed to its last process: after a lost lock, and
// when redlock is killed.
func TestForkingJobIsKilled(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"lost", "killed"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			masters, clients := cluster(t, 1)
			dir := t.TempDir()
			m := marker(t)
			a := start(t, nil, args(lockFlags(masters, "fork"), "--grace", "300ms", "--", "sh", "-c", forkLoop, m, dir)...)
			waitFile(t, a, filepath.Join(dir, "started"))
			if how == "lost" {
				intrude(t, clients, "fork")
				if code := a.wait(t); code != exitLost {
					t.Errorf("exit %d, want %d; stderr:\n%s", code, exitLost, a.stderr.String())
				}
				noneLeft(t, m)
				return
			}
			signalProc(t, a, syscall.SIGKILL)
			a.wait(t)
			waitGone(t, m)
		})
	}
}

// guardOf returns redlock's guard: its only child.
func guardOf(t *testing.T, p *proc) int {
	t.Helper()
	kids := childrenOf(p.cmd.Process.Pid)
	if len(kids) != 1 {
		t.Fatalf("redlock has children %v, want its guard alone", kids)
	}
	return kids[0]
}

// If the guard dies, redlock kills what is left of the job, says so and
// exits 125; the lock is released, as no process of the job is left.
func TestKilledGuard(t *testing.T) {
	t.Parallel()
	for _, esc := range escapes {
		t.Run(esc.name, func(t *testing.T) {
			t.Parallel()
			masters, clients := cluster(t, 1)
			a, m, _ := startEscaped(t, masters, "guard", nil, esc.launch, stubborn)
			if err := syscall.Kill(guardOf(t, a), syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			if code := a.wait(t); code != exitFailure {
				t.Errorf("exit %d, want %d; stderr:\n%s", code, exitFailure, a.stderr.String())
			}
			if !strings.Contains(a.stderr.String(), "guard") {
				t.Errorf("stderr does not say the guard died:\n%s", a.stderr.String())
			}
			noneLeft(t, m)
			assertFree(t, clients, "guard")
		})
	}
}

// signalsPending reports whether a signal sent to pid waits to be
// delivered.
func signalsPending(pid int) bool {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	for _, line := range strings.Split(string(b), "\n") {
		if mask, ok := strings.CutPrefix(line, "ShdPnd:"); ok {
			return strings.Trim(mask, "\t 0") != ""
		}
	}
	return false
}

// The guard outlives what is meant for redlock: signals by name (pkill
// redlock), and a SIGKILL to redlock's process group, which the guard is
// not in; then it kills the job.
func TestGuardOutlivesSignalsForRedlock(t *testing.T) {
	t.Parallel()
	masters, _ := cluster(t, 1)
	// A worker that ends when the job does.
	worker := `touch "$1/ready"; while [ ! -e "$1/stop" ]; do sleep 0.05; done`
	a, m, dir := startEscaped(t, masters, "guard", nil, escapes[1].launch, worker)
	guard := guardOf(t, a)
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGTSTP} {
		if err := syscall.Kill(guard, sig); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, a, "the guard took its signals", func() bool { return !signalsPending(guard) })
	// The guard still follows the job: its end is COMMAND's status.
	touch(t, filepath.Join(dir, "stop"))
	if code := a.wait(t); code != 0 {
		t.Errorf("exit %d, want 0; stderr:\n%s", code, a.stderr.String())
	}
	noneLeft(t, m)

	// A SIGKILL to redlock's whole process group.
	a, m, _ = startEscaped(t, masters, "guard", nil, escapes[1].launch, stubborn)
	if err := syscall.Kill(-a.cmd.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	a.wait(t)
	waitGone(t, m)
}

// redlock killed after COMMAND exited, while a worker it left holds the
// lock, or while redlock and the job are stopped: the job dies with it.
func TestKilledRedlockAfterCommandExitedOrWhileStopped(t *testing.T) {
	t.Parallel()
	t.Run("exited", func(t *testing.T) {
		t.Parallel()
		masters, _ := cluster(t, 1)
		dir := t.TempDir()
		m := marker(t)
		script := `echo $$ > "$1/leader"
sh -c 'touch "$1/ready"; while :; do sleep 0.05; done' "$0-worker" "$1" &
while [ ! -e "$1/ready" ]; do sleep 0.01; done
exit 0`
		a := start(t, nil, args(lockFlags(masters, "k"), "--", "sh", "-c", script, m, dir)...)
		waitExited(t, readPid(t, a, filepath.Join(dir, "leader")))
		if !a.running() || len(marked(m)) != 1 {
			t.Fatalf("want redlock and the worker running; redlock running %v, job %v", a.running(), marked(m))
		}
		signalProc(t, a, syscall.SIGKILL)
		a.wait(t)
		waitGone(t, m)
	})
	t.Run("stopped", func(t *testing.T) {
		t.Parallel()
		masters, _ := cluster(t, 1)
		dir := t.TempDir()
		a, pids := startCtrlZ(t, lockFlags(masters, "k"), dir)
		signalProc(t, a, syscall.SIGTSTP)
		waitState(t, true, append(pids, a.cmd.Process.Pid)...)
		signalProc(t, a, syscall.SIGKILL)
		a.wait(t)
		for _, pid := range pids {
			waitExited(t, pid)
		}
	})
}

// The guard's name, typed as a command, is an unknown command: the guard
// runs only with the pipes redlock gives it.
func TestGuardIsNotACommand(t *testing.T) {
	t.Parallel()
	ran := filepath.Join(t.TempDir(), "ran")
	code, _, stderr := runRedlock(t, nil, guardArg, "--", "touch", ran)
	if code != exitUsage || exists(ran) || !strings.Contains(stderr, "unknown command") {
		t.Errorf("exit %d, ran %v; want %d, not run, unknown command; stderr:\n%s", code, exists(ran), exitUsage, stderr)
	}
}
