package main

import (
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
)

// A process found in a process group of the job that leaves it (setsid,
// setpgid) before the group gets the signal still gets it: the scan that
// follows finds it in another group. Here the first scan is stale: it
// shows the process still in the group it has left.
func TestSignalReachesAProcessThatLeftItsGroupAfterTheScan(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	run := func(attr *syscall.SysProcAttr, script string) *exec.Cmd {
		t.Helper()
		c := exec.Command("sh", "-c", script, "sh", dir)
		c.SysProcAttr = attr
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = c.Process.Kill()
			_ = c.Wait()
		})
		return c
	}
	// The group the process left, which gets the signal.
	left := run(&syscall.SysProcAttr{Setpgid: true}, `exec sleep 60`)
	// The process, in a session of its own.
	moved := run(&syscall.SysProcAttr{Setsid: true}, `trap 'touch "$1/got"; exit 0' TERM; touch "$1/ready"; while :; do sleep 0.05; done`)
	waitFile(t, nil, filepath.Join(dir, "ready"))

	scans := 0
	scan := func() ([]process, map[int]bool) {
		scans++
		var below []process
		for _, c := range []*exec.Cmd{left, moved} {
			if p, ok := readProcess(c.Process.Pid); ok {
				if scans == 1 && c == moved {
					p.pgid = left.Process.Pid
				}
				below = append(below, p)
			}
		}
		return below, nil
	}
	signalScanned(scan, syscall.SIGTERM)
	waitFor(t, nil, "the process that left its group got SIGTERM", func() bool { return exists(filepath.Join(dir, "got")) })
}
