package main

import "syscall"

// pdeathsig kills the command if redlock dies without terminating it (a
// SIGKILL, an OOM kill): the lock would expire under a running command.
func pdeathsig(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }
