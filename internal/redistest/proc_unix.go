//go:build unix

package redistest

import (
	"errors"
	"os"
	"syscall"
)

var stopSignal, contSignal os.Signal = syscall.SIGSTOP, syscall.SIGCONT

// processGone reports whether no process has this pid.
func processGone(pid int) bool { return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) }
