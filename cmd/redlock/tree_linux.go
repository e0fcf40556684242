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
	d, err := os.Open("/proc")
	if err != nil {
		return nil
	}
	names, _ := d.Readdirnames(-1)
	d.Close()
	children := map[int][]process{}
	for _, name := range names {
		pid, err := strconv.Atoi(name)
		if err != nil {
			continue
		}
		if p, ok := readProcess(pid); ok {
			children[p.ppid] = append(children[p.ppid], p)
		}
	}
	var out []process
	for queue := []int{root}; len(queue) > 0; queue = queue[1:] {
		for _, c := range children[queue[0]] {
			out = append(out, c)
			queue = append(queue, c.pid)
		}
	}
	return out
}

// signalTree sends sig to every live process below root: to the process
// group pgid with one kill(2) when a process below root is in it (the
// kernel then reaches every member, also one being forked), and to each
// process outside that group by its pid. It scans again until a scan
// finds no process it has not signalled (at most a few times: a job that
// forks without end outside its group is left to the next call), so that a
// process forked during a scan is not missed. It returns how many live
// processes it found. pgid <= 0 means no group.
//
// A pid is signalled right after the scan that found it below root; pids
// are reused only after the kernel has gone through all the others, so
// the signal cannot reach a process that replaced it in between.
func signalTree(root, pgid int, sig syscall.Signal) int {
	seen := map[int]bool{}
	group := false
	for range 5 {
		fresh := 0
		for _, p := range descendants(root) {
			if !p.live() || seen[p.pid] {
				continue
			}
			seen[p.pid] = true
			fresh++
			switch {
			case pgid > 0 && p.pgid == pgid:
				// A member forked after the group's kill gets no second
				// signal: its parent got this one, as with kill -SIG -PGID.
				if !group {
					group = true
					_ = syscall.Kill(-pgid, sig)
				}
			default:
				_ = syscall.Kill(p.pid, sig)
			}
		}
		if fresh == 0 {
			break
		}
	}
	return len(seen)
}

// stopTree stops every process below root with SIGSTOP and returns once
// the scans find each one stopped or with the SIGSTOP pending (a process
// in an uninterruptible sleep, such as a shell whose vfork child was
// stopped before its exec, stops as it wakes), or after a second.
func stopTree(root, pgid int) {
	deadline := time.Now().Add(time.Second)
	for {
		signalTree(root, pgid, syscall.SIGSTOP)
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
func killTree(root, pgid int) {
	for wait := 5 * time.Millisecond; ; wait = min(2*wait, 500*time.Millisecond) {
		signalTree(root, pgid, syscall.SIGKILL)
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
