//go:build unix

package main

import (
	"os"
	"syscall"
)

// forwarded are the signals redlock passes on to the job.
var forwarded = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP}

// stopSignals stop redlock and its job together (a terminal's Ctrl-Z, a
// background read or write); contSignal continues them.
var (
	stopSignals           = []os.Signal{syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU}
	contSignal  os.Signal = syscall.SIGCONT
)

var terminate, killSignal os.Signal = syscall.SIGTERM, syscall.SIGKILL

// suspendSelf stops redlock with SIGSTOP and returns once it has been
// continued: when cont, which must get SIGCONT, receives it.
func suspendSelf(cont <-chan os.Signal) {
	for len(cont) > 0 {
		<-cont
	}
	if syscall.Kill(os.Getpid(), syscall.SIGSTOP) != nil {
		return
	}
	<-cont
}

// exitStatus is a status as a shell reports it: 128+S when signal S
// killed the process.
func exitStatus(ws syscall.WaitStatus) int {
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}

func signum(s os.Signal) int {
	if n, ok := s.(syscall.Signal); ok {
		return int(n)
	}
	return 0
}
