//go:build unix

package main

import (
	"os"
	"syscall"
)

// forwarded are the signals redlock passes on to the command.
var forwarded = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP}

var terminate, killSignal os.Signal = syscall.SIGTERM, syscall.SIGKILL

// sysProcAttr puts the command in its own process group, so that a signal
// reaches the whole job (a shell script's children too) and a terminal's
// Ctrl-C reaches it once, through redlock, not twice.
func sysProcAttr() *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{Setpgid: true}
	pdeathsig(a)
	return a
}

// signalGroup sends sig to p's process group.
func signalGroup(p *os.Process, sig os.Signal) error {
	s, ok := sig.(syscall.Signal)
	if !ok {
		return p.Signal(sig)
	}
	if err := syscall.Kill(-p.Pid, s); err != nil {
		if err == syscall.ESRCH {
			return os.ErrProcessDone
		}
		return err
	}
	return nil
}

// exitStatus is the command's status as a shell reports it: 128+S when
// signal S killed it.
func exitStatus(ps *os.ProcessState) int {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

func signum(s os.Signal) int {
	if n, ok := s.(syscall.Signal); ok {
		return int(n)
	}
	return 0
}
