package redistest

import (
	"os"
	"syscall"
)

// redis-server does not run on Windows; this file only lets the package (and
// the tests that import it, which then skip) compile there.

var stopSignal, contSignal os.Signal // nil: Stop and Cont return an error

func processGone(pid int) bool { return false }

func sysProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{} }

func waitStopped(pid int, stop bool) error { return nil }
