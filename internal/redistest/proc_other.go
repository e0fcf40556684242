//go:build !linux && !windows

package redistest

import (
	"syscall"
	"time"
)

// sysProcAttr has no Pdeathsig outside Linux: a test binary that dies without
// Close leaves its servers running there.
func sysProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{} }

// waitStopped cannot observe the process state portably; a short sleep lets the signal land.
func waitStopped(pid int, stop bool) error {
	time.Sleep(10 * time.Millisecond)
	return nil
}
