package redistest

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"time"
)

// sysProcAttr makes the kernel SIGKILL redis-server when the thread that started
// it exits, which for a Go program means the process (this package never locks
// the starting goroutine to its thread, so the thread lives as long as the process).
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// waitStopped polls /proc until pid is stopped (stop) or no longer stopped, so a
// command sent right after Stop cannot slip in before the signal lands.
func waitStopped(pid int, stop bool) error {
	path := "/proc/" + strconv.Itoa(pid) + "/stat"
	deadline := time.Now().Add(2 * time.Second)
	for {
		data, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("redistest: %w", err)
		}
		// "pid (comm) S ...": the state follows the last ')'.
		if i := bytes.LastIndexByte(data, ')'); i >= 0 && i+2 < len(data) {
			if stopped := data[i+2] == 'T'; stopped == stop {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redistest: pid %d: state did not change after signal (stop=%v)", pid, stop)
		}
		time.Sleep(time.Millisecond)
	}
}
