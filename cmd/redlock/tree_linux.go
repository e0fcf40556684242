package main

import (
	"bytes"
	"os"
	"strconv"
	"syscall"
	"time"
)

// The job's processes are found through /proc: every process below the
// guard, which is a subreaper, so that a process whose parent exits stays
// below it (see job_linux.go).

// A process as /proc/PID/stat shows it.
type process struct {
	pid, ppid, pgid int
	state           byte // R, S, D, T (stopped), Z (zombie), ...
}

func (p process) live() bool { return p.state != 'Z' && p.state != 'X' }

// readProcess reads /proc/PID/stat; ok is false once pid is gone.
func readProcess(pid int) (process, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return process{}, false
	}
	// "pid (comm) S ppid pgrp ...": comm may hold anything, up to the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return process{}, false
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 3 || len(f[0]) != 1 {
		return process{}, false
	}
	ppid, err1 := strconv.Atoi(string(f[1]))
	pgid, err2 := strconv.Atoi(string(f[2]))
	if err1 != nil || err2 != nil {
		return process{}, false
	}
	return process{pid: pid, ppid: ppid, pgid: pgid, state: f[0][0]}, true
}

// descendants returns the processes below root (zombies too), parents
// before their children. A process forked while the scan runs may be
// missing: callers that must not miss one scan again.
func descendants(root int) []process {
	below, _ := scan(root)
	return below
}

// scan returns descendants(root) and the process groups that hold a
// process not below root (root itself, any process outside the job), so
// that a group absent from it holds processes of the job alone.
func scan(root int) (below []process, foreign map[int]bool) {
	d, err := os.Open("/proc")
	if err != nil {
		return nil, nil
	}
	names, _ := d.Readdirnames(-1)
	d.Close()
	var all []process
	children := map[int][]process{}
	for _, name := range names {
		pid, err := strconv.Atoi(name)
		if err != nil {
			continue
		}
		if p, ok := readProcess(pid); ok {
			all = append(all, p)
			children[p.ppid] = append(children[p.ppid], p)
		}
	}
	in := map[int]bool{}
	for queue := []int{root}; len(queue) > 0; queue = queue[1:] {
		for _, c := range children[queue[0]] {
			below = append(below, c)
			in[c.pid] = true
			queue = append(queue, c.pid)
		}
	}
	foreign = map[int]bool{}
	for _, p := range all {
		if !in[p.pid] {
			foreign[p.pgid] = true
		}
	}
	return below, foreign
}

// signalTree sends sig to every live process below root, and returns how
// many live processes it found. The rules:
//
//   - A process group that holds processes of the job alone (COMMAND's,
//     a worker's that called setsid, a daemon's) gets sig with one
//     kill(-pgid): the kernel reaches every member, also one being forked.
//     A process found in the group afterwards gets no second signal: it
//     got this one, or was forked after it, as with kill -SIG -PGID. So a
//     process the job starts in answer to sig in the group that got it (a
//     trap's command, a reload's helper) does not get it, whichever groups
//     the job's processes are in (TestProcessStartedInAnswerToASignalDoesNotGetIt).
//     One that leaves that group at once (setsid) is found in a group not
//     signalled yet and gets sig: it cannot be told from a process that
//     left before the kill (the last rule).
//   - A process in a group with processes outside the job gets sig by
//     its pid, so that no process outside the job gets it.
//   - It scans again until a scan finds no process it has not seen (at
//     most a few times: a job that forks without end is left to the next
//     call), so that a process forked during a scan is not missed
//     (TestSignalReachesTheWholeJob, TestForkingJobIsKilled).
//   - A process found in a group it has left by the next scan (setsid,
//     setpgid: a daemon starting) may have left it before the group's
//     kill: it gets sig again in its new group, or by its pid when that
//     group got it already. A signal lost is a job redlock waits for in
//     vain; one twice, only for a process that caught it and left its
//     group in between (TestSignalReachesAProcessThatLeftItsGroupAfterTheScan).
//
// A pid or a pgid is signalled right after the scan that found it below
// root; pids are reused only after the kernel has gone through all the
// others, and a pgid not before its group is empty, so the signal cannot
// reach a process that replaced it in between.
func signalTree(root int, sig syscall.Signal) int {
	return signalScanned(func() ([]process, map[int]bool) { return scan(root) }, sig)
}

// signalScanned is signalTree with the scan of the job's processes given.
func signalScanned(scan func() (below []process, foreign map[int]bool), sig syscall.Signal) int {
	// via is the group each process seen got sig through, 0 for its pid.
	via := map[int]int{}
	groups := map[int]bool{} // signalled with kill(-pgid)
	for range 5 {
		fresh := 0
		below, foreign := scan()
		for _, p := range below {
			if !p.live() {
				continue
			}
			g, seen := via[p.pid]
			if seen && (g == 0 || g == p.pgid) {
				continue
			}
			fresh++
			switch {
			case !seen && groups[p.pgid]:
				via[p.pid] = p.pgid
			case !groups[p.pgid] && p.pgid > 0 && !foreign[p.pgid]:
				groups[p.pgid] = true
				via[p.pid] = p.pgid
				_ = syscall.Kill(-p.pgid, sig)
			default:
				via[p.pid] = 0
				_ = syscall.Kill(p.pid, sig)
			}
		}
		if fresh == 0 {
			break
		}
	}
	return len(via)
}

// stopTree stops every process below root with SIGSTOP and returns once
// the scans find each one stopped or with the SIGSTOP pending (a process
// in an uninterruptible sleep, such as a shell whose vfork child was
// stopped before its exec, stops as it wakes), or after a second.
func stopTree(root int) {
	deadline := time.Now().Add(time.Second)
	for {
		signalTree(root, syscall.SIGSTOP)
		stopped := true
		for _, p := range descendants(root) {
			if p.live() && p.state != 'T' && p.state != 't' && !stopPending(p.pid) {
				stopped = false
				break
			}
		}
		if stopped || time.Now().After(deadline) {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// stopPending reports whether a SIGSTOP waits to be delivered to pid.
func stopPending(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return false
	}
	for _, line := range bytes.Split(b, []byte("\n")) {
		name, mask, ok := bytes.Cut(line, []byte(":"))
		if !ok || (string(name) != "SigPnd" && string(name) != "ShdPnd") {
			continue
		}
		if m, err := strconv.ParseUint(string(bytes.TrimSpace(mask)), 16, 64); err == nil && m&(1<<(syscall.SIGSTOP-1)) != 0 {
			return true
		}
	}
	return false
}

// killTree kills every process below root, reaping the children of this
// process as they die, until this process has no child left (ECHILD). It
// is for a process whose only children are the job's: the guard, or
// redlock once its guard is gone. It scans again every 5ms at first, then
// less often, up to every 500ms: a process it may not signal (one of
// another user's, under sudo) ends only in its own time.
func killTree(root int) {
	for wait := 5 * time.Millisecond; ; wait = min(2*wait, 500*time.Millisecond) {
		signalTree(root, syscall.SIGKILL)
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if err == syscall.ECHILD {
				return
			}
			if pid <= 0 || err != nil {
				break
			}
		}
		time.Sleep(wait)
	}
}

// setSubreaper makes this process the reaper of its orphaned descendants
// (PR_SET_CHILD_SUBREAPER, Linux 3.4): a process of the job whose parent
// exits is reparented to it rather than to init, so it stays below it.
func setSubreaper() error {
	const prSetChildSubreaper = 36
	if _, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0); e != 0 {
		return e
	}
	return nil
}
