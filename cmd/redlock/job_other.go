//go:build !linux

package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
)

// Outside Linux, the job is COMMAND's process group as far as signals go,
// and COMMAND alone as far as waiting goes: a process it leaves behind is
// not waited for, and one that leaves the group is not signalled.
type job struct {
	cmd    *exec.Cmd
	exited chan struct{} // closed when COMMAND has exited; status is then set
	status int
	done   chan struct{} // closed with exited
	err    error
}

func startJob(command, env []string) (*job, int, error) {
	cmd := exec.Command(command[0], command[1:]...)
	cmd.Env = env
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = groupAttr()
	if err := cmd.Start(); err != nil {
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
			return nil, exitNotFound, err
		}
		return nil, exitCannotExec, err
	}
	j := &job{cmd: cmd, exited: make(chan struct{}), done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		j.status = processStatus(cmd.ProcessState)
		close(j.exited)
		close(j.done)
	}()
	return j, 0, nil
}

func (j *job) signal(sig os.Signal) { _ = signalGroup(j.cmd.Process, sig) }

func (j *job) stop() {
	if len(stopSignals) > 0 {
		_ = signalGroup(j.cmd.Process, stopSignal)
	}
}

func (j *job) cont() {
	if len(stopSignals) > 0 {
		_ = signalGroup(j.cmd.Process, contSignal)
	}
}

func (j *job) left() int { return 0 }

func guardMain([]string) int {
	fmt.Fprintf(os.Stderr, "redlock: unknown command %q\nRun 'redlock --help' for usage.\n", guardArg)
	return exitUsage
}

const guardArg = "_guard"
